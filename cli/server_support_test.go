package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/server/sdk"
)

// `reeve server support grant|revoke|list` against a running server's
// data directory: the role takes effect on the running server at once.
func TestServerSupportGrantRevoke(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	run := func(args ...string) (int, string, string) {
		env, out, errb := testEnv()
		code := Execute(context.Background(), env, args)
		return code, out.String(), errb.String()
	}
	code, out, _ := run("server", "token", "create", "--data-dir", dir, "--user", "owner@example.com")
	if code != ExitOK {
		t.Fatalf("token: exit %d", code)
	}
	owner := strings.TrimSpace(out)
	code, out, _ = run("server", "token", "create", "--data-dir", dir, "--user", "op@support.example")
	if code != ExitOK {
		t.Fatalf("token: exit %d", code)
	}
	op := strings.TrimSpace(out)
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
	ws, err := (&sdk.Client{BaseURL: url, Token: owner}).ListWorkspaces(ctx)
	if err != nil || len(ws) != 1 {
		t.Fatalf("workspaces %v %v", ws, err)
	}
	request := func() int {
		req, _ := http.NewRequest("POST", url+"/api/support/workspaces/"+ws[0].ID+"/access-requests", strings.NewReader(`{"reason":"ticket","requested_scopes":["operational_status"]}`))
		req.Header.Set("Authorization", "Bearer "+op)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := request(); c != 403 {
		t.Fatalf("request before grant: %d", c)
	}
	if code, _, errs := run("server", "support", "grant", "--data-dir", dir, "op@support.example"); code != ExitOK || !strings.Contains(errs, "is now a support operator") {
		t.Fatalf("grant: exit %d %s", code, errs)
	}
	if code, _, errs := run("server", "support", "grant", "--data-dir", dir, "op@support.example"); code != ExitOK || !strings.Contains(errs, "already") {
		t.Fatalf("grant again: exit %d %s", code, errs)
	}
	code, out, _ = run("server", "support", "list", "--data-dir", dir, "--json")
	var l ServerSupportOperators
	if code != ExitOK || json.Unmarshal([]byte(out), &l) != nil || len(l.Operators) != 1 || l.Operators[0].Email != "op@support.example" {
		t.Fatalf("list: exit %d %s", code, out)
	}
	if c := request(); c != 201 {
		t.Fatalf("request after grant: %d", c)
	}
	if code, _, _ := run("server", "support", "revoke", "--data-dir", dir, "op@support.example"); code != ExitOK {
		t.Fatalf("revoke: exit %d", code)
	}
	if c := request(); c != 403 {
		t.Fatalf("request after revoke: %d", c)
	}
	if code, _, _ := run("server", "support", "revoke", "--data-dir", dir, "op@support.example"); code != ExitNotFound {
		t.Fatalf("revoke a non-operator: exit %d, want %d", code, ExitNotFound)
	}
	if code, _, _ := run("server", "support", "grant", "--data-dir", dir, "not-an-email"); code != ExitUsage {
		t.Fatalf("grant a non-email: exit %d, want %d", code, ExitUsage)
	}
}
