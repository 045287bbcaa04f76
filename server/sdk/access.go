package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Access tokens (design 10, spec 5): who a remote client is and what it
// may do on one daemon. The control plane issues one with each client
// relay JWT (RelayToken.AccessToken), signed EdDSA with its current
// signing key (the keys of /api/.well-known/jwks.json); the daemon
// verifies it with the keys it learned when it was paired and decides
// every request of the channel with it. The relay never sees it: it
// travels in the client's hello, inside the end-to-end channel.

// AccessAudience is the aud of an access token.
const AccessAudience = "reeve-daemon"

// AccessIssuer is the iss of an access token.
const AccessIssuer = "reeve-control-plane"

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

// AccessClaims are the claims of an access token.
type AccessClaims struct {
	// WorkspaceID and RuntimeTargetID bind the token to one daemon (the
	// install id) of one workspace.
	WorkspaceID     string `json:"wid"`
	RuntimeTargetID string `json:"rtid"`
	// WorkspaceRole is the user's role in the workspace (member, admin,
	// owner).
	WorkspaceRole string `json:"wrole"`
	// Email is the user's email, and Teams the share groups (teams) they
	// belong to, which .reeve/access.yaml may name.
	Email string   `json:"email,omitempty"`
	Teams []string `json:"teams,omitempty"`
	// Sessions is the user's role on each session of the daemon the
	// control plane knows (by the daemon's session id), from the
	// session's owner, visibility and ACL; "none" where they have no
	// access. DefaultSessionRole is the role on a session the control
	// plane has not heard of yet (owner for workspace owners and
	// admins, viewer for members: new sessions are visible to the
	// workspace).
	Sessions           map[string]string `json:"sroles,omitempty"`
	DefaultSessionRole string            `json:"srole"`
	jwt.RegisteredClaims
}

// SessionRole is the token's role on a session of its daemon.
func (c *AccessClaims) SessionRole(sessionID string) string {
	if r, ok := c.Sessions[sessionID]; ok {
		return r
	}
	return c.DefaultSessionRole
}

// ErrAccessToken marks an access token that does not verify.
var ErrAccessToken = errors.New("access token refused")

// AccessSigningInput is the unsigned head of an access token (header and
// claims) signed by key kid; the token is the input, a dot and the
// base64url signature over it.
func AccessSigningInput(kid string, c AccessClaims) (string, error) {
	c.Audience = jwt.ClaimStrings{AccessAudience}
	c.Issuer = AccessIssuer
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
	t.Header["kid"] = kid
	return t.SigningString()
}

// VerifyAccessToken checks an access token against keys (a JWKS the
// caller trusts), its audience, issuer and lifetime at now, and that it is
// for workspace and runtimeTarget. Every failure wraps ErrAccessToken and
// says why.
func VerifyAccessToken(token string, keys JWKS, workspace, runtimeTarget string, now time.Time) (*AccessClaims, error) {
	if token == "" {
		return nil, fmt.Errorf("%w: no access token was presented (get one with the relay token: POST /api/workspaces/{workspace}/relay-token with runtime_target_id)", ErrAccessToken)
	}
	var c AccessClaims
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		for _, k := range keys.Keys {
			if k.Kid == kid && kid != "" {
				return k.PublicKey()
			}
		}
		return nil, fmt.Errorf("it is signed by key %q, which this daemon never learned from its control plane (pair again if the server's keys were rotated)", kid)
	},
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithAudience(AccessAudience),
		jwt.WithIssuer(AccessIssuer),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	if err != nil {
		switch {
		case errors.Is(err, jwt.ErrTokenExpired):
			return nil, fmt.Errorf("%w: the access token has expired; get a new one and reconnect", ErrAccessToken)
		case errors.Is(err, jwt.ErrTokenSignatureInvalid):
			return nil, fmt.Errorf("%w: the signature does not verify (a forged or altered token)", ErrAccessToken)
		}
		return nil, fmt.Errorf("%w: %v", ErrAccessToken, err)
	}
	if c.WorkspaceID != workspace {
		return nil, fmt.Errorf("%w: the token is for workspace %q, not this daemon's %q", ErrAccessToken, c.WorkspaceID, workspace)
	}
	if c.RuntimeTargetID != runtimeTarget {
		return nil, fmt.Errorf("%w: the token is for machine %q, not this one (%q)", ErrAccessToken, c.RuntimeTargetID, runtimeTarget)
	}
	if c.Subject == "" {
		return nil, fmt.Errorf("%w: the token names no user", ErrAccessToken)
	}
	return &c, nil
}

// JWKSPath is where the control plane publishes its signing keys.
const JWKSPath = "/api/.well-known/jwks.json"

// JWKS reads the control plane's signing keys.
func (c *Client) JWKS(ctx context.Context) (JWKS, error) {
	var k JWKS
	_, err := c.Do(ctx, http.MethodGet, JWKSPath, nil, &k)
	return k, err
}
