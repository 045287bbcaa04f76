package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/server/sdk"
)

// `reeve server keys rotate` on the data directory of a running server:
// the server signs with the new key at once, publishes both, and a bundle
// signed before the rotation still verifies against what it publishes.
func TestServerKeysRotate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	run := func(args ...string) (int, string, string) {
		env, out, errb := testEnv()
		code := Execute(context.Background(), env, args)
		return code, out.String(), errb.String()
	}
	// No master key yet: nothing to list, and nothing is created.
	if code, _, _ := run("server", "keys", "list", "--data-dir", dir); code == ExitOK {
		t.Fatal("keys list on an empty data directory succeeded")
	}
	code, out, _ := run("server", "token", "create", "--data-dir", dir, "--user", "ops@example.com")
	if code != ExitOK {
		t.Fatalf("token: exit %d", code)
	}
	ops := strings.TrimSpace(out)
	senv, _, _ := testEnv()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, &serverOptions{env: senv, listen: "127.0.0.1:0", dataDir: dir, ready: func(u string) { ready <- u }})
	}()
	url := <-ready
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}()
	c := &sdk.Client{BaseURL: url, Token: ops}
	ws, err := c.ListWorkspaces(ctx)
	if err != nil || len(ws) != 1 {
		t.Fatalf("workspaces %v %v", ws, err)
	}
	sess, err := c.CreateRecord(ctx, "/api/resources/"+ws[0].ID+"/sessions", map[string]any{"title": "t", "source_kind": "cli"})
	if err != nil {
		t.Fatal(err)
	}
	export := func() []byte {
		req, _ := http.NewRequest("GET", url+"/api/resources/"+ws[0].ID+"/sessions/"+sess.ID+"/receipt-export", nil)
		req.Header.Set("Authorization", "Bearer "+ops)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("export: %d %s", resp.StatusCode, b)
		}
		return b
	}
	kidOf := func(b []byte) string {
		var e struct {
			Data struct {
				Kid string `json:"kid"`
			} `json:"data"`
		}
		json.Unmarshal(b, &e)
		return e.Data.Kid
	}
	before := export()
	oldFile := filepath.Join(t.TempDir(), "before.json")
	os.WriteFile(oldFile, before, 0o600)

	var keys ServerEvidenceKeys
	code, out, _ = run("server", "keys", "list", "--data-dir", dir, "--json")
	if code != ExitOK || json.Unmarshal([]byte(out), &keys) != nil || len(keys.Keys) != 1 || keys.Keys[0].Kid != kidOf(before) || keys.Keys[0].Status != "current" {
		t.Fatalf("list: exit %d %s (bundle kid %s)", code, out, kidOf(before))
	}
	code, out, _ = run("server", "keys", "rotate", "--data-dir", dir, "--json")
	if code != ExitOK || json.Unmarshal([]byte(out), &keys) != nil || len(keys.Keys) != 2 || keys.Keys[0].Kid != keys.Rotated || keys.Keys[1].Kid != kidOf(before) || keys.Keys[1].Status != "retired" {
		t.Fatalf("rotate: exit %d %s", code, out)
	}
	// The running server took the new key from the database.
	if k := kidOf(export()); k != keys.Rotated {
		t.Fatalf("signed after rotation with %s, want %s", k, keys.Rotated)
	}
	jwks, err := fetchKeys(ctx, url)
	if err != nil || len(jwks.Keys) != 2 || jwks.Keys[0].Kid != keys.Rotated {
		t.Fatalf("jwks %v %v", jwks, err)
	}
	if code, _, errb := run("evidence", "verify", oldFile, "--server", url); code != ExitOK {
		t.Fatalf("the bundle signed before the rotation no longer verifies: exit %d %s", code, errb)
	}
}
