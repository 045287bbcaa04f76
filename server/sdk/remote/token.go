package remote

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"time"

	"reeve.dev/reeve/server/sdk"
)

// WorkspaceToken is a TokenSource that asks the control plane for a client
// relay JWT (POST /api/workspaces/{workspace}/relay-token) with the user's
// token or personal API token in c, and reuses it until shortly before it
// expires. The same answer carries the access token for the daemon being
// dialled (runtime_target_id), which the client presents in its hello.
func WorkspaceToken(c *sdk.Client, workspace string) TokenSource {
	var mu sync.Mutex
	type heldToken struct {
		sdk.RelayToken
		life time.Duration
	}
	cur := map[string]heldToken{}
	return func(ctx context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		target, _ := ctx.Value(targetKey{}).(string)
		t := cur[target]
		h, _ := ctx.Value(accessKey{}).(*accessHeld)
		// A token is reused for new connections while it has more than
		// 30 seconds (or, for short-lived tokens, a third of its life)
		// left; an access refresh always gets a new one.
		if t.Token == "" || (h != nil && h.fresh) || time.Until(t.ExpiresAt) <= min(30*time.Second, t.life/3) {
			body := map[string]any{}
			if target != "" {
				body["runtime_target_id"] = target
			}
			var r sdk.RelayTokenResponse
			if _, err := c.Do(ctx, http.MethodPost, "/api/workspaces/"+url.PathEscape(workspace)+"/relay-token", body, &r); err != nil {
				return "", err
			}
			t = heldToken{RelayToken: r.Data, life: time.Until(r.Data.ExpiresAt)}
			cur[target] = t
		}
		if h != nil {
			h.token = t.AccessToken
		}
		return t.Token, nil
	}
}

// The connection tells a TokenSource which daemon it dials (targetKey),
// and a TokenSource that also has the access token hands it back
// (accessKey).
type (
	targetKey  struct{}
	accessKey  struct{}
	accessHeld struct {
		token string
		fresh bool // a refresh: do not reuse a cached token
	}
)

// StaticToken is a TokenSource that always returns tok.
func StaticToken(tok string) TokenSource {
	return func(context.Context) (string, error) { return tok, nil }
}
