package api_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/server/api"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store/storetest"
)

// A synced daemon session carries its project's .reeve/access.yaml, and
// every session route, the list under both spellings and the access token
// a daemon checks cap each caller's role with it — the workspace's owners
// and admins too, as the daemon does.
func TestProjectAccessCapsSyncedSessions(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		projectAccessCaps(t, servertest.Start(t, servertest.Options{}))
	})
	t.Run("postgres", func(t *testing.T) {
		url, dir := storetest.PostgresURL(t), t.TempDir()
		projectAccessCaps(t, servertest.Start(t, servertest.Options{DatabaseURL: url, DataDir: dir}))
	})
}

// roleProbe is the caller's effective role on a session as the session
// gate sees it: revoking an unknown ACL entry needs owner, and the gate's
// refusal names the role the caller has.
func roleProbe(t *testing.T, s *servertest.Server, token, base, rid string) string {
	t.Helper()
	a := do(t, s, "DELETE", base+"/"+rid+"/access/01ARZ3NDEKTSV4RRFFQ69G5FAV", token, nil)
	if a.Status != 403 {
		return "owner"
	}
	e, _ := a.JSON["error"].(map[string]any)
	msg, _ := e["message"].(string)
	if strings.Contains(msg, "you have no access") {
		return ""
	}
	_, role, ok := strings.Cut(msg, "you are ")
	if !ok {
		t.Fatalf("unexpected refusal: %s", a.Body)
	}
	return strings.Fields(role)[0]
}

func projectAccessCaps(t *testing.T, s *servertest.Server) {
	ctx := context.Background()
	owner := s.NewUser("owner@example.com")
	ws := owner.Workspace
	admin := s.AddMember(ws, "admin@example.com", sdk.RoleAdmin)
	alice := s.AddMember(ws, "alice@example.com", sdk.RoleMember)
	bob := s.AddMember(ws, "bob@example.com", sdk.RoleMember)
	carol := s.AddMember(ws, "carol@example.com", sdk.RoleMember)
	team := expect(t, do(t, s, "POST", "/api/share-groups", owner.Token, `{"name":"platform"}`, api.WorkspaceHeader, ws), 201, "team")
	expect(t, do(t, s, "POST", "/api/share-groups/"+dataOf(team)["id"].(string)+"/members", owner.Token, map[string]any{"user_id": bob.ID}, api.WorkspaceHeader, ws), 201, "join")
	in, err := owner.Client.CreateInstall(ctx, ws, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	const daemonSID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	now := time.Now().UTC()
	sync := func(access *sdk.ProjectAccess) string {
		t.Helper()
		res, err := s.Client(in.IssueToken).SyncSession(ctx, sdk.SyncRequest{
			Session: sdk.SyncSession{ID: daemonSID, Agent: "claude", Status: "running", CreatedAt: now, UpdatedAt: now, Access: access},
			Events:  []sdk.SyncEvent{{Seq: 1, Kind: "agent.output", TS: now}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.SessionID
	}
	file := &sdk.ProjectAccess{DefaultRole: sdk.ProjectNone, Members: []sdk.ProjectAccessMember{
		{User: "OWNER@example.com", Role: sdk.ProjectAdmin},
		{User: "admin@example.com", Role: sdk.ProjectApprover},
		{User: "alice@example.com", Role: sdk.ProjectViewer},
		{Team: "platform", Role: sdk.ProjectOperator},
	}}
	rid := sync(file)
	base := "/api/resources/" + ws + "/sessions"
	// bob's own grant is steerer, which the file (operator) lets stand.
	expect(t, do(t, s, "POST", base+"/"+rid+"/access", owner.Token, map[string]any{"subject_type": "user", "subject_id": bob.ID, "role": "approver"}), 201, "grant bob")
	// A session made through REST carries no file: nothing capped.
	open := dataOf(expect(t, do(t, s, "POST", base, owner.Token, `{"title":"plain","source_kind":"cli"}`), 201, "plain"))["id"].(string)

	users := map[string]servertest.User{"owner": owner, "admin": admin, "alice": alice, "bob": bob, "carol": carol}
	check := func(what string, want map[string]string) {
		t.Helper()
		for name, role := range want {
			u := users[name]
			if got := roleProbe(t, s, u.Token, base, rid); got != role {
				t.Errorf("%s: %s's role %q, want %q", what, name, got, role)
			}
			if got := roleProbe(t, s, u.Token, base, open); got == "" {
				t.Errorf("%s: %s lost the plain session", what, name)
			}
			readable := role != ""
			for _, p := range []string{"", "/events", "/receipt-export", "/trace-export", "/compute-evidence", "/support-debug", "/governance"} {
				paths := []string{base + "/" + rid + p}
				if p == "" || p == "/events" || p == "/compute-evidence" || p == "/governance" {
					paths = append(paths, "/api/sessions/"+rid+p) // the 4.5 twins
				}
				for _, path := range paths {
					a := do(t, s, "GET", path, u.Token, nil, api.WorkspaceHeader, ws)
					if (a.Status == 200) != readable || (!readable && a.Status != 403) {
						t.Errorf("%s: GET %s as %s: %d, want readable=%v", what, path, name, a.Status, readable)
					}
				}
			}
			for _, spelling := range []string{base, "/api/sessions"} {
				l := expect(t, do(t, s, "GET", spelling, u.Token, nil, api.WorkspaceHeader, ws), 200, "list")
				seen := false
				for _, d := range l.JSON["data"].([]any) {
					seen = seen || d.(map[string]any)["id"] == rid
				}
				if seen != readable {
					t.Errorf("%s: %s lists the session at %s: %v, want %v", what, name, spelling, seen, readable)
				}
			}
			// The access token a daemon would check says the same.
			claims := u.AccessClaims(t, ctx, ws, in.ID)
			if got, want := file0(claims.SessionRole(daemonSID)), role; name != "owner" && name != "admin" && got != want {
				t.Errorf("%s: %s's access token names %q, want %q", what, name, got, want)
			}
		}
	}
	check("file, default none", map[string]string{"owner": "owner", "admin": "approver", "alice": "viewer", "bob": "steerer", "carol": ""})

	// Bad input changes nothing: a role outside the enum, an unknown
	// field (nothing hides in the rule), a wrong type.
	stamp := now.Format(time.RFC3339Nano)
	for _, bad := range []string{
		`{"members":[{"user":"carol@example.com","role":"root"}]}`,
		`{"members":[{"user":"carol@example.com","role":"viewer","note":"x"}]}`,
		`{"default_role":"everyone"}`,
		`"viewer"`,
	} {
		body := `{"session":{"id":"` + daemonSID + `","agent":"claude","status":"running","created_at":"` + stamp + `","updated_at":"` + stamp + `","access":` + bad + `},"events":[]}`
		expect(t, do(t, s, "POST", "/api/runtime/agent-sessions/sync", in.IssueToken, body), 422, "sync with access "+bad)
	}
	if got := roleProbe(t, s, carol.Token, base, rid); got != "" {
		t.Fatalf("after refused syncs carol is %q", got)
	}

	// A review packet is no way around it: linking the session needs a
	// role on it, and a reader of the packet without one gets only its id.
	rp := "/api/resources/" + ws + "/review-packets"
	packet := dataOf(expect(t, do(t, s, "POST", rp, admin.Token, map[string]any{"title": "t", "evidence": []map[string]any{{"kind": "session", "id": rid}}}), 201, "admin links the session"))
	exported := func(u servertest.User) string {
		p, _ := dataOf(expect(t, do(t, s, "GET", rp+"/"+packet["id"].(string)+"/export", u.Token, nil), 200, "export"))["payload"].(string)
		b, err := base64.RawURLEncoding.DecodeString(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if e := exported(carol); !strings.Contains(e, "withheld") || strings.Contains(e, "daemon_session_id") {
		t.Fatalf("carol's export shows the session: %s", e)
	}
	if e := exported(alice); strings.Contains(e, "withheld") || !strings.Contains(e, "daemon_session_id") {
		t.Fatalf("alice's export hides the session: %s", e)
	}
	admin2 := s.AddMember(ws, "admin2@example.com", sdk.RoleAdmin) // unlisted: none
	expect(t, do(t, s, "POST", rp, admin2.Token, map[string]any{"title": "t", "evidence": []map[string]any{{"kind": "session", "id": rid}}}), 403, "capped admin links the session")

	// The file changes on the machine; the next sync changes the answer.
	file = &sdk.ProjectAccess{Members: []sdk.ProjectAccessMember{{User: "alice@example.com", Role: sdk.ProjectAdmin}}}
	sync(file)
	check("file, default unset", map[string]string{"owner": "viewer", "admin": "viewer", "alice": "viewer", "bob": "viewer", "carol": "viewer"})

	file = &sdk.ProjectAccess{Invalid: ".reeve/access.yaml is not valid"}
	sync(file)
	check("invalid file", map[string]string{"owner": "", "admin": "", "alice": "", "bob": "", "carol": ""})

	file = nil
	sync(nil)
	check("no file", map[string]string{"owner": "owner", "admin": "owner", "alice": "viewer", "bob": "approver", "carol": "viewer"})
}

// file0 reads an access token's "none" as the REST gate's "".
func file0(role string) string {
	if role == sdk.SessionNone {
		return ""
	}
	return role
}

// BenchmarkProjectAccessList is a member's list of 100 synced sessions
// that each carry a 20-member access.yaml rule (capped by it, per
// session) beside the baseline, the same list of sessions without one,
// in the same run.
func BenchmarkProjectAccessList(b *testing.B) {
	s := servertest.Start(b, servertest.Options{})
	ctx := context.Background()
	now := time.Now().UTC()
	rule := &sdk.ProjectAccess{DefaultRole: sdk.ProjectNone}
	for j := 0; j < 20; j++ {
		rule.Members = append(rule.Members, sdk.ProjectAccessMember{User: "u" + itoa(int64(j)) + "@example.com", Role: sdk.ProjectViewer})
	}
	rule.Members = append(rule.Members, sdk.ProjectAccessMember{Team: "platform", Role: sdk.ProjectViewer})
	for _, c := range []struct {
		name string
		rule *sdk.ProjectAccess
	}{{"no-rule-baseline", nil}, {"rule-capped", rule}} {
		owner := s.NewUser(c.name + "@example.com")
		member := s.AddMember(owner.Workspace, "m-"+c.name+"@example.com", sdk.RoleMember)
		team := do(b, s, "POST", "/api/share-groups", owner.Token, `{"name":"platform"}`, api.WorkspaceHeader, owner.Workspace)
		if team.Status != 201 {
			b.Fatalf("team: %d %s", team.Status, team.Body)
		}
		do(b, s, "POST", "/api/share-groups/"+dataOf(team)["id"].(string)+"/members", owner.Token, map[string]any{"user_id": member.ID}, api.WorkspaceHeader, owner.Workspace)
		in, err := owner.Client.CreateInstall(ctx, owner.Workspace, "m")
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			if _, err := s.Client(in.IssueToken).SyncSession(ctx, sdk.SyncRequest{Session: sdk.SyncSession{ID: "01ARZ3NDEKTSV4RRFFQ69G5" + fmt.Sprintf("%03d", i), Agent: "claude", Status: "running", CreatedAt: now, UpdatedAt: now, Access: c.rule}, Events: []sdk.SyncEvent{}}); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				a := do(b, s, "GET", "/api/resources/"+owner.Workspace+"/sessions?limit=100", member.Token, nil)
				if n := len(a.JSON["data"].([]any)); a.Status != 200 || n != 100 {
					b.Fatalf("%d: %d sessions", a.Status, n)
				}
			}
		})
	}
}
