package api_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

func TestPlaceholderRoundTrip(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("rt@example.com")
	other := s.NewUser("other@example.com")
	ctx := context.Background()
	// Review packets became typed; share groups are still records of the engine.
	rec, err := u.Client.CreateRecord(ctx, "/api/share-groups", map[string]any{"title": "first", "tags": map[string]any{"a": 1, "b": 2}})
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID == "" || rec.WorkspaceID != u.Workspace || rec.Collection != "share-groups" {
		t.Fatalf("created %+v", rec)
	}
	list, err := u.Client.ListRecords(ctx, "/api/share-groups")
	if err != nil || len(list) != 1 || list[0].ID != rec.ID {
		t.Fatalf("list %+v %v", list, err)
	}
	got, err := u.Client.GetRecord(ctx, "/api/share-groups/"+rec.ID)
	if err != nil || got.Attributes["title"] != "first" {
		t.Fatalf("get %+v %v", got, err)
	}
	// Scoped to the caller's workspace: another user sees nothing.
	if l, err := other.Client.ListRecords(ctx, "/api/share-groups"); err != nil || len(l) != 0 {
		t.Fatalf("other workspace sees %+v %v", l, err)
	}
	if _, err := other.Client.GetRecord(ctx, "/api/share-groups/"+rec.ID); !sdk.IsCode(err, sdk.CodeNotFound) {
		t.Fatalf("other workspace get: %v", err)
	}
	// A singleton is replaced by PUT and read back by GET, per workspace.
	expect(t, do(t, s, "PUT", "/api/onboarding/current", u.Token, `{"step":"intro"}`), 200, "singleton put")
	a := expect(t, do(t, s, "GET", "/api/onboarding/current", u.Token, nil), 200, "singleton get")
	if dataOf(a)["attributes"].(map[string]any)["step"] != "intro" {
		t.Fatalf("singleton: %s", a.Body)
	}
	// An action under a record of the engine is an audited action record.
	srv, _ := u.Client.CreateRecord(ctx, "/api/mcp/servers", map[string]any{"name": "docs"})
	a = expect(t, do(t, s, "POST", "/api/mcp/servers/"+srv.ID+"/policies", u.Token, `{"ref":"main"}`), 200, "action")
	if at := dataOf(a)["attributes"].(map[string]any); at["action"] != "policies" || at["target"] != "mcp/servers/"+srv.ID {
		t.Fatalf("action record %s", a.Body)
	}
	expect(t, do(t, s, "POST", "/api/mcp/servers/01ARZ3NDEKTSV4RRFFQ69G5FAV/policies", u.Token, `{}`), 404, "action on a missing parent")
	audit := expect(t, do(t, s, "GET", "/api/workspaces/"+u.Workspace+"/audit", u.Token, nil), 200, "audit")
	if !strings.Contains(string(audit.Body), `"action.policies"`) {
		t.Fatalf("audit lacks the action: %s", audit.Body)
	}
	// DELETE answers the deleted record; then it is gone.
	expect(t, do(t, s, "DELETE", "/api/provider-keys/x", u.Token, nil), 404, "delete missing")
	pk, err := u.Client.CreateRecord(ctx, "/api/provider-keys", map[string]any{"provider": "other", "mode": "managed_pass_through"})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, do(t, s, "DELETE", "/api/provider-keys/"+pk.ID, u.Token, nil), 200, "delete")
	expect(t, do(t, s, "DELETE", "/api/provider-keys/"+pk.ID, u.Token, nil), 404, "delete twice")
	// The alias reaches the same collection.
	ins := expect(t, do(t, s, "POST", "/api/workspaces/"+u.Workspace+"/sync-sources", u.Token, `{"url":"git"}`), 201, "create via workspaces")
	id := dataOf(ins)["id"].(string)
	expect(t, do(t, s, "GET", "/api/resources/"+u.Workspace+"/sync-sources/"+id, u.Token, nil), 200, "read via resources alias")
}

func TestDataSurvivesRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := servertest.Start(t, servertest.Options{DataDir: dir})
	u := s.NewUser("keep@example.com")
	ctx := context.Background()
	rec, err := u.Client.CreateRecord(ctx, "/api/share-groups", map[string]any{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	name := "renamed"
	if _, err := u.Client.UpdateWorkspace(ctx, u.Workspace, sdk.WorkspaceUpdateRequest{Name: &name}); err != nil {
		t.Fatal(err)
	}
	s.Stop()

	s2 := servertest.Start(t, servertest.Options{DataDir: dir})
	c := s2.Client(u.Token)
	got, err := c.GetRecord(ctx, "/api/share-groups/"+rec.ID)
	if err != nil || got.Attributes["n"] == nil {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	ws, err := c.GetWorkspace(ctx, u.Workspace)
	if err != nil || ws.Name != "renamed" {
		t.Fatalf("workspace after restart: %+v %v", ws, err)
	}
	// The relay signing key survives too: a token from before verifies.
}

func TestTokenPlaintextNeverReappears(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("secret@example.com")
	ctx := context.Background()
	created, err := u.Client.CreateAPIToken(ctx, sdk.APITokenCreateRequest{Name: "ci"})
	if err != nil || !strings.HasPrefix(created.Token, "rvp_") {
		t.Fatalf("create token: %+v %v", created, err)
	}
	in, err := u.Client.CreateInstall(ctx, u.Workspace, "box")
	if err != nil || in.IssueToken == "" {
		t.Fatal(err)
	}
	pk := expect(t, do(t, s, "POST", "/api/resources/"+u.Workspace+"/provider-keys", u.Token, `{"provider":"provider_a","mode":"managed_byok","secret":"sk-very-secret-value"}`), 201, "provider key")
	secrets := []string{created.Token, in.IssueToken, u.Token, "sk-very-secret-value"}
	if strings.Contains(string(pk.Body), "sk-very-secret-value") {
		t.Fatalf("provider key secret echoed: %s", pk.Body)
	}
	c2 := s.Client(created.Token)
	for _, p := range []string{"/api/me/api-tokens", "/api/workspaces", "/api/workspaces/" + u.Workspace, "/api/workspaces/" + u.Workspace + "/audit",
		"/api/workspaces/" + u.Workspace + "/audit/export", "/api/workspaces/" + u.Workspace + "/installs", "/api/resources/" + u.Workspace + "/provider-keys"} {
		a := expect(t, do(t, s, "GET", p, created.Token, nil), 200, p)
		for _, sec := range secrets {
			if strings.Contains(string(a.Body), sec) {
				t.Fatalf("%s leaks a secret", p)
			}
		}
	}
	toks, err := c2.ListAPITokens(ctx)
	if err != nil || len(toks) < 2 {
		t.Fatalf("list tokens %+v %v", toks, err)
	}
	// Nor is any plaintext in the database file (only hashes are stored).
	s.Stop()
	matches, _ := filepath.Glob(filepath.Join(s.DataDir, "*"))
	for _, f := range matches {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, sec := range secrets {
			if bytes.Contains(b, []byte(sec)) {
				t.Fatalf("%s holds a plaintext secret", filepath.Base(f))
			}
		}
	}
}

func TestTokensRevokeAndLogout(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("rev@example.com")
	ctx := context.Background()
	tok, err := u.Client.CreateAPIToken(ctx, sdk.APITokenCreateRequest{Name: "temp"})
	if err != nil {
		t.Fatal(err)
	}
	c := s.Client(tok.Token)
	if _, err := c.ListWorkspaces(ctx); err != nil {
		t.Fatal(err)
	}
	if err := u.Client.RevokeAPIToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListWorkspaces(ctx); !sdk.IsCode(err, sdk.CodeUnauthenticated) {
		t.Fatalf("revoked token still works: %v", err)
	}
	if err := u.Client.RevokeAPIToken(ctx, tok.ID); !sdk.IsCode(err, sdk.CodeNotFound) {
		t.Fatalf("revoke twice: %v", err)
	}
	// Another user's token id is not found either.
	v := s.NewUser("v2@example.com")
	vt, _ := v.Client.CreateAPIToken(ctx, sdk.APITokenCreateRequest{Name: "v"})
	if err := u.Client.RevokeAPIToken(ctx, vt.ID); !sdk.IsCode(err, sdk.CodeNotFound) {
		t.Fatalf("revoking someone else's token: %v", err)
	}
	// Logout revokes the presented token.
	lt, _ := u.Client.CreateAPIToken(ctx, sdk.APITokenCreateRequest{Name: "session-like"})
	lc := s.Client(lt.Token)
	if err := lc.Logout(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.ListWorkspaces(ctx); !sdk.IsCode(err, sdk.CodeUnauthenticated) {
		t.Fatalf("token after logout: %v", err)
	}
	// Discovery and login start are public.
	d, err := s.Client("").Discover(ctx)
	if err != nil || d.AppURL != s.URL || d.RelayURL != s.URL {
		t.Fatalf("discovery %+v %v", d, err)
	}
	expect(t, do(t, s, "GET", "/api/auth/login", "", nil), 200, "login start")
	// A GET of the callback never spends a code: it goes to the sign-in
	// page. Codes are spent by POST.
	// (The client follows the 303 to the page, which offers a button.)
	if a := expect(t, do(t, s, "GET", "/api/auth/callback?code=rvl_nope", "", nil), 200, "callback GET"); !strings.Contains(string(a.Body), `id="signin"`) || !strings.Contains(string(a.Body), "rvl_nope") {
		t.Fatalf("callback GET did not lead to the sign-in page: %s", a.Body)
	}
	expect(t, do(t, s, "POST", "/api/auth/callback", "", map[string]any{"code": "rvl_nope"}), 401, "bad login code")
	expect(t, do(t, s, "POST", "/api/auth/callback", "", map[string]any{}), 422, "no login code")
}

func TestWorkspacesAndRoles(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	ctx := context.Background()
	o := s.NewUser("owner@example.com")
	admin := s.AddMember(o.Workspace, "admin@example.com", sdk.RoleAdmin)
	m := s.AddMember(o.Workspace, "member@example.com", sdk.RoleMember)
	ws, err := o.Client.CreateWorkspace(ctx, sdk.WorkspaceCreateRequest{Name: "Team B"})
	if err != nil || len(ws.ID) != 26 || ws.Role != sdk.RoleOwner {
		t.Fatalf("create: %+v %v", ws, err)
	}
	list, _ := o.Client.ListWorkspaces(ctx)
	if len(list) != 2 {
		t.Fatalf("list %+v", list)
	}
	got, err := m.Client.GetWorkspace(ctx, o.Workspace)
	if err != nil || got.Role != sdk.RoleMember || len(got.Members) != 3 {
		t.Fatalf("member get %+v %v", got, err)
	}
	name := "x"
	if _, err := m.Client.UpdateWorkspace(ctx, o.Workspace, sdk.WorkspaceUpdateRequest{Name: &name}); !sdk.IsCode(err, sdk.CodeForbidden) {
		t.Fatalf("member update: %v", err)
	}
	days := 90
	up, err := admin.Client.UpdateWorkspace(ctx, o.Workspace, sdk.WorkspaceUpdateRequest{AuditRetentionDays: &days})
	if err != nil || up.AuditRetentionDays == nil || *up.AuditRetentionDays != 90 {
		t.Fatalf("admin update %+v %v", up, err)
	}
	// Nullable fields clear with null.
	a := expect(t, do(t, s, "PATCH", "/api/workspaces/"+o.Workspace, admin.Token, `{"audit_retention_days":null,"description":"d"}`), 200, "clear")
	if dataOf(a)["audit_retention_days"] != nil || dataOf(a)["description"] != "d" {
		t.Fatalf("clear: %s", a.Body)
	}
	// Roles: an admin cannot make owners; the last owner cannot leave.
	expect(t, do(t, s, "PATCH", "/api/workspaces/"+o.Workspace+"/members/"+itoa(m.ID), admin.Token, `{"role":"owner"}`), 403, "admin makes owner")
	expect(t, do(t, s, "PATCH", "/api/workspaces/"+o.Workspace+"/members/"+itoa(m.ID), admin.Token, `{"role":"admin"}`), 200, "admin promotes")
	if g, _ := m.Client.GetWorkspace(ctx, o.Workspace); g.Role != sdk.RoleAdmin {
		t.Fatalf("promotion not visible: %+v", g.Role)
	}
	expect(t, do(t, s, "DELETE", "/api/workspaces/"+o.Workspace+"/members/"+itoa(o.ID), o.Token, nil), 409, "last owner leaves")
	expect(t, do(t, s, "DELETE", "/api/workspaces/"+o.Workspace, admin.Token, nil), 403, "admin deletes workspace")
	expect(t, do(t, s, "DELETE", "/api/workspaces/"+ws.ID, o.Token, nil), 204, "owner deletes workspace")
	expect(t, do(t, s, "GET", "/api/workspaces/"+ws.ID, o.Token, nil), 404, "deleted workspace")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
