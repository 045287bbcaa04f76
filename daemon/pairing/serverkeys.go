package pairing

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/internal/atomicfile"
	"reeve.dev/reeve/server/sdk"
)

// The control plane's signing keys, learned when the daemon pairs: the
// daemon verifies remote clients' access tokens with them (design 10). They
// are public keys, kept next to the relay credentials.

// ServerKeysFile is where a home keeps the control plane's keys.
func ServerKeysFile(dir home.Dir) string { return filepath.Join(string(dir), "server-keys.json") }

// ServerKeys are the keys and where they came from.
type ServerKeys struct {
	ServerURL string    `json:"server_url"`
	LearnedAt time.Time `json:"learned_at"`
	Keys      sdk.JWKS  `json:"jwks"`
}

// ReadServerKeys reads the keys pairing kept; an error wrapping
// fs.ErrNotExist when there are none.
func ReadServerKeys(dir home.Dir) (ServerKeys, error) {
	var k ServerKeys
	b, err := os.ReadFile(ServerKeysFile(dir))
	if err != nil {
		return k, err
	}
	if err := json.Unmarshal(b, &k); err != nil {
		return k, fmt.Errorf("read %s: %w", ServerKeysFile(dir), err)
	}
	return k, nil
}

// LearnServerKeys reads the control plane's keys at serverURL and keeps
// them in the home.
func LearnServerKeys(ctx context.Context, dir home.Dir, serverURL string, hc *http.Client) (ServerKeys, error) {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	keys, err := (&sdk.Client{BaseURL: serverURL, HTTP: hc}).JWKS(ctx)
	if err != nil {
		return ServerKeys{}, fmt.Errorf("learn the control plane's signing keys: %w", err)
	}
	k := ServerKeys{ServerURL: serverURL, LearnedAt: time.Now().UTC(), Keys: keys}
	b, err := json.MarshalIndent(k, "", "  ")
	if err != nil {
		return k, err
	}
	if err := atomicfile.WriteFile(ServerKeysFile(dir), append(b, '\n'), atomicfile.PrivateFile); err != nil {
		return k, fmt.Errorf("keep the control plane's signing keys: %w", err)
	}
	return k, nil
}
