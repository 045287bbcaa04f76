package control

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/hookbridge/policy"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// The daemon and the control plane give every user the same role on a
// synced session whose checkout has a .reeve/access.yaml: for each file of
// the table (users by email, by team, unlisted with default_role none,
// viewer or unset, an invalid file, no file) and each user (workspace
// owner, admin, members with and without ACL grants), the REST gate's
// role equals the daemon's (roleIn, over the claims of the access token
// the same server issues), and both equal the table's expectation.
func TestProjectAccessSameOnDaemonAndControlPlane(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	ctx := context.Background()
	owner := s.NewUser("owner@example.com")
	ws := owner.Workspace
	users := map[string]servertest.User{
		"owner": owner,
		"admin": s.AddMember(ws, "admin@example.com", sdk.RoleAdmin),
		"alice": s.AddMember(ws, "alice@example.com", sdk.RoleMember),
		"bob":   s.AddMember(ws, "bob@example.com", sdk.RoleMember),
		"carol": s.AddMember(ws, "carol@example.com", sdk.RoleMember),
	}
	// Share groups are workspace routes named by a header.
	groups := &sdk.Client{BaseURL: owner.Client.BaseURL, Token: owner.Token, HTTP: &http.Client{Transport: withHeader{"X-Reeve-Workspace", ws}}}
	group := func(name string, members ...string) {
		var g sdk.RecordResponse
		if _, err := groups.Do(ctx, "POST", "/api/share-groups", map[string]any{"name": name}, &g); err != nil {
			t.Fatal(err)
		}
		for _, m := range members {
			if _, err := groups.Do(ctx, "POST", "/api/share-groups/"+g.Data.ID+"/members", map[string]any{"user_id": users[m].ID}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	group("platform", "bob")
	in, err := owner.Client.CreateInstall(ctx, ws, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	base := "/api/resources/" + ws + "/sessions"
	cases := []struct {
		name, file string // file "" is no file
		want       map[string]string
	}{
		{"default none, by email and team", "version: 1\ndefault_role: none\nmembers:\n  - user: Alice@Example.com\n    role: operator\n  - team: platform\n    role: approver\n",
			map[string]string{"owner": "none", "admin": "none", "alice": "steerer", "bob": "approver", "carol": "none"}},
		{"default viewer", "version: 1\ndefault_role: viewer\nmembers:\n  - user: alice@example.com\n    role: admin\n  - user: owner@example.com\n    role: approver\n",
			map[string]string{"owner": "approver", "admin": "viewer", "alice": "owner", "bob": "viewer", "carol": "viewer"}},
		{"default unset", "version: 1\nmembers:\n  - team: platform\n    role: admin\n  - user: admin@example.com\n    role: operator\n",
			map[string]string{"owner": "viewer", "admin": "steerer", "alice": "viewer", "bob": "owner", "carol": "viewer"}},
		{"listed twice, highest wins", "version: 1\ndefault_role: none\nmembers:\n  - user: bob@example.com\n    role: viewer\n  - team: platform\n    role: operator\n",
			map[string]string{"owner": "none", "admin": "none", "alice": "none", "bob": "steerer", "carol": "none"}},
		{"invalid", "version: 1\ndefault_role: everyone\nmembers:\n  - user: alice@example.com\n    role: admin\n",
			map[string]string{"owner": "none", "admin": "none", "alice": "none", "bob": "none", "carol": "none"}},
		{"no file", "",
			map[string]string{"owner": "owner", "admin": "owner", "alice": "owner", "bob": "owner", "carol": "viewer"}},
	}
	now := time.Now().UTC()
	for i, tc := range cases {
		dir := t.TempDir()
		if tc.file != "" {
			os.MkdirAll(filepath.Join(dir, ".reeve"), 0o755)
			if err := os.WriteFile(filepath.Join(dir, ".reeve", "access.yaml"), []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		daemonSID := "01ARZ3NDEKTSV4RRFFQ69G5FA" + string(rune('0'+i))
		publish := func(a *sdk.ProjectAccess) string {
			res, err := s.Client(in.IssueToken).SyncSession(ctx, sdk.SyncRequest{
				Session: sdk.SyncSession{ID: daemonSID, Agent: "claude", Status: "running", CreatedAt: now, UpdatedAt: now, Access: a}, Events: []sdk.SyncEvent{}})
			if err != nil {
				t.Fatal(err)
			}
			return res.SessionID
		}
		// Grants first (the owner's own role may be capped after), then
		// the file as the daemon's session sync reads it.
		rid := publish(nil)
		for _, u := range []string{"alice", "bob"} {
			if _, err := owner.Client.Do(ctx, "POST", base+"/"+rid+"/access", map[string]any{"subject_type": "user", "subject_id": users[u].ID, "role": "owner"}, nil); err != nil {
				t.Fatal(err)
			}
		}
		publish(policy.LoadProjectAccess(dir))
		for name, u := range users {
			claims := u.AccessClaims(t, ctx, ws, in.ID)
			daemon, _ := roleIn(claims, daemonSID, dir, nil)
			if daemon == "" {
				daemon = sdk.SessionNone
			}
			rest := restRole(t, u.Client, base+"/"+rid)
			if daemon != rest || rest != tc.want[name] {
				t.Errorf("%s: %s is %q through REST and %q on the daemon; want %q", tc.name, name, rest, daemon, tc.want[name])
			}
		}
	}
}

// restRole is a user's role on a session as the REST gate decides it:
// revoking an unknown grant needs owner, and a refusal names the role.
func restRole(t *testing.T, c *sdk.Client, session string) string {
	t.Helper()
	_, err := c.Do(context.Background(), "DELETE", session+"/access/01ARZ3NDEKTSV4RRFFQ69G5FAV", nil, nil)
	ae, ok := err.(*sdk.APIError)
	if !ok || ae.Status != 403 {
		return sdk.SessionOwner // through the owner's gate (to a 404: no such grant)
	}
	if strings.Contains(ae.Body.Message, "you have no access") {
		return sdk.SessionNone
	}
	_, role, ok := strings.Cut(ae.Body.Message, "you are ")
	if !ok {
		t.Fatalf("unexpected refusal: %v", err)
	}
	return strings.Fields(role)[0]
}

type withHeader struct{ name, value string }

func (h withHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(r)
}
