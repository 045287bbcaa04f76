// Package accesstoken signs and verifies access tokens (design 10, spec
// 5): who a remote client is and what it may do on one daemon. The control plane issues one with each client
// relay JWT (RelayToken.AccessToken), signed EdDSA with its current
// signing key (the keys of /api/.well-known/jwks.json); the daemon
// verifies it with the keys it learned when it was paired and decides
// every request of the channel with it. The relay never sees it: it
// travels in the client's hello, inside the end-to-end channel.
package accesstoken

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"reeve.dev/reeve/server/sdk"
)

// Audience is the aud of an access token.
const Audience = "reeve-daemon"

// Issuer is the iss of an access token.
const Issuer = "reeve-control-plane"

// Claims are the claims of an access token.
type Claims struct {
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
func (c *Claims) SessionRole(sessionID string) string {
	if r, ok := c.Sessions[sessionID]; ok {
		return r
	}
	return c.DefaultSessionRole
}

// ErrRefused marks an access token that does not verify.
var ErrRefused = errors.New("access token refused")

// SigningInput is the unsigned head of an access token (header and
// claims) signed by key kid; the token is the input, a dot and the
// base64url signature over it.
func SigningInput(kid string, c Claims) (string, error) {
	c.Audience = jwt.ClaimStrings{Audience}
	c.Issuer = Issuer
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
	t.Header["kid"] = kid
	return t.SigningString()
}

// Verify checks an access token against keys (a JWKS the
// caller trusts), its audience, issuer and lifetime at now, and that it is
// for workspace and runtimeTarget. Every failure wraps ErrRefused and
// says why.
func Verify(token string, keys sdk.JWKS, workspace, runtimeTarget string, now time.Time) (*Claims, error) {
	if token == "" {
		return nil, fmt.Errorf("%w: no access token was presented (get one with the relay token: POST /api/workspaces/{workspace}/relay-token with runtime_target_id)", ErrRefused)
	}
	var c Claims
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
		jwt.WithAudience(Audience),
		jwt.WithIssuer(Issuer),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	if err != nil {
		switch {
		case errors.Is(err, jwt.ErrTokenExpired):
			return nil, fmt.Errorf("%w: the access token has expired; get a new one and reconnect", ErrRefused)
		case errors.Is(err, jwt.ErrTokenSignatureInvalid):
			return nil, fmt.Errorf("%w: the signature does not verify (a forged or altered token)", ErrRefused)
		}
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if c.WorkspaceID != workspace {
		return nil, fmt.Errorf("%w: the token is for workspace %q, not this daemon's %q", ErrRefused, c.WorkspaceID, workspace)
	}
	if c.RuntimeTargetID != runtimeTarget {
		return nil, fmt.Errorf("%w: the token is for machine %q, not this one (%q)", ErrRefused, c.RuntimeTargetID, runtimeTarget)
	}
	if c.Subject == "" {
		return nil, fmt.Errorf("%w: the token names no user", ErrRefused)
	}
	return &c, nil
}
