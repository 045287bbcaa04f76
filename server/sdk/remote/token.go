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
// expires.
func WorkspaceToken(c *sdk.Client, workspace string) TokenSource {
	var mu sync.Mutex
	var cur sdk.RelayToken
	return func(ctx context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if cur.Token != "" && time.Until(cur.ExpiresAt) > 30*time.Second {
			return cur.Token, nil
		}
		var r sdk.RelayTokenResponse
		if _, err := c.Do(ctx, http.MethodPost, "/api/workspaces/"+url.PathEscape(workspace)+"/relay-token", map[string]any{}, &r); err != nil {
			return "", err
		}
		cur = r.Data
		return cur.Token, nil
	}
}

// StaticToken is a TokenSource that always returns tok.
func StaticToken(tok string) TokenSource {
	return func(context.Context) (string, error) { return tok, nil }
}
