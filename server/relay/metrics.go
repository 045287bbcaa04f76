package relay

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
)

// Metrics is a snapshot of a relay's counters.
type Metrics struct {
	InstanceID string `json:"instance_id"`
	// Current connections and channels.
	DaemonConns    int64 `json:"daemon_conns"`
	ClientConns    int64 `json:"client_conns"`
	Channels       int64 `json:"channels"`
	RemoteChannels int64 `json:"remote_channels_opened"`
	// Admission.
	Admitted uint64 `json:"admitted"`
	Refused  uint64 `json:"refused"`
	// Frames read from and written to peers.
	FramesIn  uint64 `json:"frames_in"`
	FramesOut uint64 `json:"frames_out"`
	// Disconnections the relay decided.
	SlowDisconnects   uint64 `json:"slow_disconnects"`
	Replaced          uint64 `json:"replaced"`
	Revoked           uint64 `json:"revoked"`
	KeepaliveTimeouts uint64 `json:"keepalive_timeouts"`
	BadEnvelopes      uint64 `json:"bad_envelopes"`
	// TooLarge counts payloads over relaywire.MaxPayload (their channel
	// ended).
	TooLarge uint64 `json:"too_large"`
	// BufferedBytes is what the relay holds for its peers and the bus now.
	BufferedBytes int64  `json:"buffered_bytes"`
	NoDaemon      uint64 `json:"no_daemon"`
	// The bus between instances.
	BusOut     uint64 `json:"bus_out"`
	BusIn      uint64 `json:"bus_in"`
	BusDropped uint64 `json:"bus_dropped"`
}

type counters struct {
	daemons, clients, channels, remoteChannels               atomic.Int64
	admitted, refused, framesIn, framesOut                   atomic.Uint64
	slow, replaced, revoked, keepaliveTimeouts, badEnvelopes atomic.Uint64
	noDaemon, busOut, busIn, busDropped, tooLarge            atomic.Uint64
}

// Metrics returns the current counters.
func (r *Relay) Metrics() Metrics {
	m := &r.m
	return Metrics{
		InstanceID:  r.opts.InstanceID,
		DaemonConns: m.daemons.Load(), ClientConns: m.clients.Load(), Channels: m.channels.Load(), RemoteChannels: m.remoteChannels.Load(),
		Admitted: m.admitted.Load(), Refused: m.refused.Load(), FramesIn: m.framesIn.Load(), FramesOut: m.framesOut.Load(),
		SlowDisconnects: m.slow.Load(), Replaced: m.replaced.Load(), Revoked: m.revoked.Load(),
		KeepaliveTimeouts: m.keepaliveTimeouts.Load(), BadEnvelopes: m.badEnvelopes.Load(), NoDaemon: m.noDaemon.Load(),
		TooLarge: m.tooLarge.Load(), BufferedBytes: r.buffered.Load(),
		BusOut: m.busOut.Load(), BusIn: m.busIn.Load(), BusDropped: m.busDropped.Load(),
	}
}

// MetricsHandler serves Metrics as JSON (for `reeve relay`'s /metrics).
func (r *Relay) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(r.Metrics())
	})
}
