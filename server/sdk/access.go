package sdk

import (
	"context"
	"net/http"
)

// The access token a remote client presents to a daemon is signed and
// verified in server/sdk/accesstoken (it needs a JWT library, and this
// package is a leaf); the session roles it names are REST vocabulary and
// live here.

// Session roles an access token names, in increasing power (spec 3.2).
const (
	SessionNone      = "none"
	SessionViewer    = "viewer"
	SessionCommenter = "commenter"
	SessionSteerer   = "steerer"
	SessionApprover  = "approver"
	SessionOwner     = "owner"
)

// SessionRank orders session roles; 0 for none or an unknown role.
func SessionRank(role string) int {
	switch role {
	case SessionViewer:
		return 1
	case SessionCommenter:
		return 2
	case SessionSteerer:
		return 3
	case SessionApprover:
		return 4
	case SessionOwner:
		return 5
	}
	return 0
}

// JWKSPath is where the control plane publishes its signing keys.
const JWKSPath = "/api/.well-known/jwks.json"

// JWKS reads the control plane's signing keys.
func (c *Client) JWKS(ctx context.Context) (JWKS, error) {
	var k JWKS
	_, err := c.Do(ctx, http.MethodGet, JWKSPath, nil, &k)
	return k, err
}
