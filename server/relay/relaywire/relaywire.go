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
