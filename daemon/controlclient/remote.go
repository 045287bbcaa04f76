package controlclient

import (
	"context"
	"net/http"

	"reeve.dev/reeve/daemon/wire"
)

// RemoteStatus calls GET /api/remote: the relay link and remote-control
// lock of a paired daemon (404 when it runs no relay link).
func (c *Client) RemoteStatus(ctx context.Context) (wire.RemoteStatus, error) {
	var s wire.RemoteStatus
	return s, c.do(ctx, http.MethodGet, "/api/remote", nil, &s)
}

// UnlockRemote calls POST /api/remote/unlock: remote clients may control
// the daemon for ttlSeconds (0 is the default; clamped to 300..3600).
func (c *Client) UnlockRemote(ctx context.Context, ttlSeconds int) (wire.RemoteStatus, error) {
	var s wire.RemoteStatus
	return s, c.do(ctx, http.MethodPost, "/api/remote/unlock", wire.UnlockRequest{TTLSeconds: ttlSeconds}, &s)
}
