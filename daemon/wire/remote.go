package wire

import "time"

// Remote control through the relay (profile relay): the link's state and
// the machine-local lock that keeps remote clients out until it is opened.

// Relay link states.
const (
	RelayNotPaired  = "not-paired"
	RelayConnecting = "connecting"
	RelayConnected  = "connected"
	RelayBackoff    = "backoff" // waiting before the next attempt; LastError says why
	RelayStopped    = "stopped"
)

// Unlock TTL bounds and default, in seconds (spec 8: auto-unlock lifetime).
const (
	UnlockTTLMin     = 300
	UnlockTTLMax     = 3600
	UnlockTTLDefault = 1800
)

// ClampUnlockTTL applies the bounds: 0 is the default, others are clamped
// into 300..3600.
func ClampUnlockTTL(seconds int) int {
	switch {
	case seconds == 0:
		return UnlockTTLDefault
	case seconds < UnlockTTLMin:
		return UnlockTTLMin
	case seconds > UnlockTTLMax:
		return UnlockTTLMax
	}
	return seconds
}

// RemoteStatus is the relay link and remote-control lock as GET /health
// (field relay) and the /api/remote routes report them.
type RemoteStatus struct {
	Link        string    `json:"link"` // one of the Relay* states
	LastError   string    `json:"last_error,omitempty"`
	Since       time.Time `json:"since,omitzero"` // when Link last changed
	RelayURL    string    `json:"relay_url,omitempty"`
	WorkspaceID string    `json:"workspace_id,omitempty"`
	InstallID   string    `json:"install_id,omitempty"`
	// TokenExpiresAt is when the relay JWT in hand expires.
	TokenExpiresAt time.Time `json:"token_expires_at,omitzero"`
	Channels       int       `json:"channels"` // remote clients connected now
	// Locked is true while a new remote client would be refused.
	Locked bool `json:"locked"`
	// UnlockedUntil is the end of the unlock given on the machine.
	UnlockedUntil        time.Time `json:"unlocked_until,omitzero"`
	AutoUnlock           bool      `json:"auto_unlock"`
	AutoUnlockTTLSeconds int       `json:"auto_unlock_ttl_seconds,omitempty"`
}

// UnlockRequest is the body of POST /api/remote/unlock.
type UnlockRequest struct {
	// TTLSeconds is how long the unlock lasts: 0 is the default (1800),
	// others are clamped to 300..3600.
	TTLSeconds int `json:"ttl_seconds,omitempty"`
}
