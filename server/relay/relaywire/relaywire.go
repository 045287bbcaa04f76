// Package relaywire defines the relay's envelope: the one JSON object each
// relay WebSocket message carries, in either direction, and the roles of
// relay connections. It is a leaf package (standard library only), so the
// relay server, the daemon's relay link and remote clients share one
// definition without the daemon or a client linking the relay server.
package relaywire

// Envelope is one WebSocket text message on the relay, in either direction.
//
// A daemon connection (role workspace-daemon) carries many channels, one per
// connected client: the relay sends it "open" when a client for its runtime
// target connects, "data" with that client's payloads and "close" when the
// client leaves; the daemon sends "data" and "close" naming the channel.
//
// A client connection (role client) is one channel: it sends and receives
// "data" without a channel id (the relay assigns it), and receives "close"
// when the daemon closes the channel or "error" when the relay cannot route
// (no daemon for that runtime target, the daemon went away).
type Envelope struct {
	Type    string `json:"t"`                // open, data, close, error
	Channel string `json:"ch,omitempty"`     // set on a daemon's connection
	Payload string `json:"p,omitempty"`      // base64 of the opaque, sealed payload
	Reason  string `json:"reason,omitempty"` // for close and error
}

// Envelope types.
const (
	TypeOpen  = "open"
	TypeData  = "data"
	TypeClose = "close"
	TypeError = "error"
)

// Roles of relay connections (the role query parameter and the JWT claim).
const (
	RoleDaemon = "workspace-daemon"
	RoleClient = "client"
)

// Size limits, one definition for the relay and both of its ends.
//
// MaxEnvelope is the largest relay message, in bytes, in either direction:
// the read limit of the relay, of the daemon's link and of clients. The
// relay never forwards a larger one (it builds its frames within it), so a
// message that one end would refuse never reaches it; the ends keep under
// it by sending big protocol messages (diffs, transcripts) as several
// end-to-end frames of at most e2e.MaxFrame bytes each.
//
// A client whose message is larger, or whose payload does not fit
// MaxPayload, loses its own channel (close code 1009); the daemon's
// connection and the other channels are not touched. A daemon payload over
// MaxPayload ends the channel it names, not the daemon's connection.
const (
	MaxEnvelope = 64 << 10
	// MaxPayload bounds p as it travels (the JSON string, quotes
	// included): MaxEnvelope less room for the other fields.
	MaxPayload = MaxEnvelope - 512
	// MaxReason bounds the reason of close and error envelopes; the relay
	// cuts longer ones before forwarding them.
	MaxReason = 256
	// MaxChannelID bounds a channel id.
	MaxChannelID = 64
)

// CutReason shortens a close or error reason to MaxReason bytes, on a rune
// boundary.
func CutReason(s string) string {
	if len(s) <= MaxReason {
		return s
	}
	i := MaxReason
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i]
}
