package api

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/accesstoken"
	"reeve.dev/reeve/server/store"
)

// accessToken issues a client's access token for one machine (sdk
// AccessClaims): the user, their workspace role and teams, and their role
// on each session of that machine the control plane knows, computed by
// the same sessionRole the session routes use. It is signed with the
// current key of /api/.well-known/jwks.json, which the daemon learned at
// pairing, and expires with the relay JWT it comes with.
func (s *Server) accessToken(c *call, target string, exp time.Time) (string, error) {
	if c.p.Kind != auth.KindUser {
		return "", forbidden("only a user gets an access token for a machine")
	}
	if s.opts.Evidence == nil {
		return "", errors.New("access tokens need the server's signing keys (evidence signer), which are not configured")
	}
	if _, err := s.st.Install(c.ctx(), c.ws.ID, target); errors.Is(err, store.ErrNotFound) {
		return "", notFound("no install %q in this workspace", target)
	} else if err != nil {
		return "", err
	}
	claims := accesstoken.Claims{WorkspaceID: c.ws.ID, RuntimeTargetID: target, WorkspaceRole: c.role, Sessions: map[string]string{}}
	// The same email and teams the session routes cap a role with
	// (roleOf), so that the daemon applies access.yaml to the same names.
	id, err := s.identity(c)
	if err != nil {
		return "", err
	}
	claims.Email, claims.Teams = id.email, id.teams
	if c.role == sdk.RoleOwner || c.role == sdk.RoleAdmin {
		claims.DefaultSessionRole = sdk.SessionOwner // owners and admins own every session
	} else {
		claims.DefaultSessionRole = sdk.SessionViewer // a new session is visible to the workspace
		// Every session of the machine, those the caller cannot see too
		// (named "none"), so that the default never opens a private one.
		groups := map[string]bool{}
		for after := int64(0); ; {
			recs, err := s.st.Records(c.ctx(), c.ws.ID, "sessions", store.ListOptions{After: after, Limit: 500})
			if err != nil {
				return "", err
			}
			for _, r := range recs {
				after = r.Seq
				var a struct {
					Install string `json:"install_id"`
					Daemon  string `json:"daemon_session_id"`
				}
				if json.Unmarshal(r.Attributes, &a) != nil || a.Install != target || a.Daemon == "" {
					continue
				}
				role, err := s.sessionRole(c, r, groups)
				if err != nil {
					return "", err
				}
				if role == "" {
					role = sdk.SessionNone
				}
				claims.Sessions[a.Daemon] = role
			}
			if len(recs) < 500 {
				break
			}
		}
	}
	now := c.now()
	claims.Subject = "user:" + strconv.FormatInt(c.p.UserID, 10)
	claims.IssuedAt = jwt.NewNumericDate(now)
	claims.NotBefore = jwt.NewNumericDate(now.Add(-30 * time.Second))
	claims.ExpiresAt = jwt.NewNumericDate(exp)
	// Sign with the current key; a rotation between reading the key id and
	// signing shows as another key id, and is tried again.
	for range 3 {
		keys, err := s.opts.Evidence.JWKS(c.ctx())
		if err != nil {
			return "", err
		}
		if len(keys.Keys) == 0 {
			return "", errors.New("no signing key")
		}
		input, err := accesstoken.SigningInput(keys.Keys[0].Kid, claims)
		if err != nil {
			return "", err
		}
		sig, err := s.opts.Evidence.Sign(c.ctx(), []byte(input))
		if err != nil {
			return "", err
		}
		if sig.KeyID != keys.Keys[0].Kid {
			continue
		}
		return input + "." + sig.Signature, nil
	}
	return "", errors.New("the signing key changed while signing the access token; try again")
}
