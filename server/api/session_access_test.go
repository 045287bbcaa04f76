package api_test

import (
	"context"
	"strings"
	"testing"

	"reeve.dev/reeve/server/api"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

var sessionRank = map[string]int{"": 0, "viewer": 1, "commenter": 2, "steerer": 3, "approver": 4, "owner": 5}

func fillSession(path, ws, sess string) string {
	path = strings.ReplaceAll(path, "{workspace}", ws)
	path = strings.ReplaceAll(path, "{agentSession}", sess)
	for _, p := range []string{"{aclEntry}", "{accessRequestId}"} {
		path = strings.ReplaceAll(path, p, "01ARZ3NDEKTSV4RRFFQ69G5FAV")
	}
	return path
}

// Every session route, under each spelling, for each kind of caller of a
// private session: the five session roles (granted through the ACL, one
// of them through a team), the workspace owner and an admin, a member
// with no grant, and a user of another workspace.
func TestSessionRouteMatrix(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	wsOwner := s.NewUser("owner@example.com")
	ws := wsOwner.Workspace
	admin := s.AddMember(ws, "admin@example.com", sdk.RoleAdmin)
	sessOwner := s.AddMember(ws, "author@example.com", sdk.RoleMember)
	nobody := s.AddMember(ws, "nobody@example.com", sdk.RoleMember)
	stranger := s.NewUser("stranger@example.com")
	base := "/api/resources/" + ws + "/sessions"
	made := expect(t, do(t, s, "POST", base, sessOwner.Token, `{"title":"secret work","source_kind":"cli","visibility_scope":"private"}`), 201, "create")
	sid := dataOf(made)["id"].(string)

	// Grants: viewer..approver to users; steerer through a team.
	users := map[string]servertest.User{}
	for _, role := range []string{"viewer", "commenter", "approver"} {
		u := s.AddMember(ws, role+"@example.com", sdk.RoleMember)
		users[role] = u
		expect(t, do(t, s, "POST", base+"/"+sid+"/access", sessOwner.Token, map[string]any{"subject_type": "user", "subject_id": u.ID, "role": role}), 201, "grant "+role)
	}
	steerer := s.AddMember(ws, "steerer@example.com", sdk.RoleMember)
	users["steerer"] = steerer
	team := expect(t, do(t, s, "POST", "/api/share-groups", wsOwner.Token, `{"name":"platform"}`, api.WorkspaceHeader, ws), 201, "team")
	teamID, teamSeq := dataOf(team)["id"].(string), int64(dataOf(team)["seq"].(float64))
	expect(t, do(t, s, "POST", "/api/share-groups/"+teamID+"/members", nobody.Token, map[string]any{"user_id": steerer.ID}, api.WorkspaceHeader, ws), 403, "member adds to a team")
	expect(t, do(t, s, "POST", "/api/share-groups/"+teamID+"/members", wsOwner.Token, map[string]any{"user_id": steerer.ID}, api.WorkspaceHeader, ws), 201, "add to team")
	expect(t, do(t, s, "POST", base+"/"+sid+"/access", sessOwner.Token, map[string]any{"subject_type": "team", "subject_id": teamSeq, "role": "steerer"}), 201, "grant team")
	expect(t, do(t, s, "POST", base+"/"+sid+"/access", sessOwner.Token, map[string]any{"subject_type": "share_group", "subject_id": 999999, "role": "viewer"}), 404, "unknown group")
	users["owner"] = sessOwner

	type caller struct {
		name  string
		token string
		role  string // effective session role; "-" for outside the workspace
	}
	callers := []caller{{"workspace owner", wsOwner.Token, "owner"}, {"admin", admin.Token, "owner"}, {"no grant", nobody.Token, ""}, {"other workspace", stranger.Token, "-"}}
	for _, r := range []string{"viewer", "commenter", "steerer", "approver", "owner"} {
		callers = append(callers, caller{r, users[r].Token, r})
	}
	checked := 0
	for _, r := range api.Routes() {
		need, isSession := api.SessionRoleNeeded(r)
		if !isSession || r.Auth != api.AuthUser {
			continue
		}
		// Writes that change the ACL are checked below, so the matrix
		// does not change who is who.
		if r.Method == "POST" && strings.HasSuffix(r.Path, "/access") || r.Method == "DELETE" {
			continue
		}
		path := fillSession(r.Path, ws, sid)
		for _, c := range callers {
			a := do(t, s, r.Method, path, c.token, "{}", api.WorkspaceHeader, ws)
			switch {
			case c.role == "-" || sessionRank[c.role] < sessionRank[need]:
				if a.Status != 403 {
					t.Errorf("%s %s as %s (needs %q): %d, want 403: %s", r.Method, r.Path, c.name, need, a.Status, a.Body)
				}
			default:
				if a.Status == 403 || a.Status == 401 || a.Status >= 500 {
					t.Errorf("%s %s as %s (needs %q): %d: %s", r.Method, r.Path, c.name, need, a.Status, a.Body)
				}
			}
			checked++
		}
	}
	if checked < 9*50 {
		t.Fatalf("only %d calls checked", checked)
	}

	// Only an owner grants, and never above their own role; a plain
	// member cannot grant themself anything.
	grantSelf := func(u servertest.User, role string) answer {
		return do(t, s, "POST", base+"/"+sid+"/access", u.Token, map[string]any{"subject_type": "user", "subject_id": u.ID, "role": role})
	}
	expect(t, grantSelf(nobody, "owner"), 403, "a member grants themself owner")
	expect(t, grantSelf(users["approver"], "owner"), 403, "an approver grants")
	expect(t, do(t, s, "DELETE", base+"/"+sid+"/access/01ARZ3NDEKTSV4RRFFQ69G5FAV", users["approver"].Token, nil), 403, "an approver revokes")

	// The list shows the private session only to those with access.
	for _, c := range callers[:3] {
		l := expect(t, do(t, s, "GET", base, c.token, nil), 200, "list as "+c.name)
		n := len(l.JSON["data"].([]any))
		if (c.role == "") != (n == 0) {
			t.Errorf("list as %s: %d sessions", c.name, n)
		}
	}
	for _, spelling := range []string{"/api/sessions", base} {
		l := expect(t, do(t, s, "GET", spelling, users["viewer"].Token, nil, api.WorkspaceHeader, ws), 200, "list as viewer")
		if len(l.JSON["data"].([]any)) != 1 {
			t.Errorf("viewer lists %s: %s", spelling, l.Body)
		}
	}
}

// An access request: the requester cannot decide it; a viewer cannot; an
// approver can, and approval puts the granted role in the ACL at once.
func TestAccessRequestGrantsTheRole(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("owner@example.com")
	ws := owner.Workspace
	author := s.AddMember(ws, "author@example.com", sdk.RoleMember)
	asker := s.AddMember(ws, "asker@example.com", sdk.RoleMember)
	viewer := s.AddMember(ws, "viewer@example.com", sdk.RoleMember)
	approver := s.AddMember(ws, "approver@example.com", sdk.RoleMember)
	base := "/api/resources/" + ws + "/sessions"
	sid := dataOf(expect(t, do(t, s, "POST", base, author.Token, `{"title":"t","source_kind":"cli","visibility_scope":"private"}`), 201, "create"))["id"].(string)
	for u, role := range map[*servertest.User]string{&viewer: "viewer", &approver: "approver"} {
		expect(t, do(t, s, "POST", base+"/"+sid+"/access", author.Token, map[string]any{"subject_type": "user", "subject_id": u.ID, "role": role}), 201, "grant")
	}
	expect(t, do(t, s, "GET", base+"/"+sid, asker.Token, nil), 403, "read before")
	req := expect(t, do(t, s, "POST", base+"/"+sid+"/access-requests", asker.Token, `{"requested_role":"commenter","reason":"review"}`), 201, "ask")
	rid := dataOf(req)["id"].(string)
	decide := func(u servertest.User, body string) answer {
		return do(t, s, "POST", base+"/"+sid+"/access-requests/"+rid+"/decision", u.Token, body)
	}
	expect(t, decide(asker, `{"decision":"approve"}`), 403, "requester decides")
	expect(t, decide(viewer, `{"decision":"approve"}`), 403, "viewer decides")
	expect(t, decide(approver, `{"decision":"approve","role":"owner"}`), 403, "approver grants above themself")
	expect(t, decide(approver, `{"decision":"approve"}`), 200, "approver decides")
	expect(t, decide(author, `{"decision":"deny"}`), 409, "decide twice")
	expect(t, do(t, s, "GET", base+"/"+sid, asker.Token, nil), 200, "read after approval")
	expect(t, do(t, s, "POST", base+"/"+sid+"/collaboration-events", asker.Token, `{"event_kind":"comment_created"}`), 201, "comment as commenter")
	expect(t, do(t, s, "POST", base+"/"+sid+"/run-attempts", asker.Token, `{}`), 403, "steer as commenter")
	got, err := owner.Client.GetRecord(context.Background(), base+"/"+sid)
	if err != nil {
		t.Fatal(err)
	}
	acl, _ := got.Attributes["acl"].(map[string]any)
	if e, _ := acl["user:"+itoa(asker.ID)].(map[string]any); e["role"] != "commenter" {
		t.Fatalf("acl %v", acl)
	}
}

func TestVisibilityScopes(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("owner@example.com")
	ws := owner.Workspace
	author := s.AddMember(ws, "author@example.com", sdk.RoleMember)
	mate := s.AddMember(ws, "mate@example.com", sdk.RoleMember)
	other := s.AddMember(ws, "other@example.com", sdk.RoleMember)
	team := expect(t, do(t, s, "POST", "/api/share-groups", owner.Token, `{"name":"core"}`, api.WorkspaceHeader, ws), 201, "team")
	teamID := dataOf(team)["id"].(string)
	expect(t, do(t, s, "POST", "/api/share-groups/"+teamID+"/members", owner.Token, map[string]any{"user_id": mate.ID}, api.WorkspaceHeader, ws), 201, "join")
	base := "/api/resources/" + ws + "/sessions"
	mk := func(body string) string {
		return dataOf(expect(t, do(t, s, "POST", base, author.Token, body), 201, body))["id"].(string)
	}
	open := mk(`{"title":"a","source_kind":"cli"}`)
	teamOnly := mk(`{"title":"b","source_kind":"cli","visibility_scope":"team","primary_owning_team_id":"` + teamID + `"}`)
	expect(t, do(t, s, "POST", base, author.Token, `{"title":"c","source_kind":"cli","visibility_scope":"team","primary_owning_team_id":"nope"}`), 422, "unknown team")

	expect(t, do(t, s, "GET", base+"/"+open, other.Token, nil), 200, "workspace session read by a member")
	expect(t, do(t, s, "POST", base+"/"+open+"/collaboration-events", other.Token, `{"event_kind":"comment_created"}`), 403, "a viewer comments")
	expect(t, do(t, s, "GET", base+"/"+teamOnly, mate.Token, nil), 200, "team session read by the team")
	expect(t, do(t, s, "GET", base+"/"+teamOnly, other.Token, nil), 403, "team session read outside the team")
	// The list (read through the access index) agrees with the gate.
	listed := func(u servertest.User) map[string]bool {
		t.Helper()
		l := expect(t, do(t, s, "GET", base, u.Token, nil), 200, "list")
		out := map[string]bool{}
		for _, d := range l.JSON["data"].([]any) {
			out[d.(map[string]any)["id"].(string)] = true
		}
		return out
	}
	private := mk(`{"title":"d","source_kind":"cli","visibility_scope":"private"}`)
	if l := listed(mate); !l[open] || !l[teamOnly] || l[private] {
		t.Fatalf("team mate lists %v", l)
	}
	if l := listed(other); !l[open] || l[teamOnly] || l[private] {
		t.Fatalf("other member lists %v", l)
	}
	if l := listed(author); !l[open] || !l[teamOnly] || !l[private] {
		t.Fatalf("author lists %v", l)
	}
	// A grant to the team on the private session lists it for the team;
	// revoking it unlists it.
	teamSeq := int64(dataOf(team)["seq"].(float64))
	g := expect(t, do(t, s, "POST", base+"/"+private+"/access", author.Token, map[string]any{"subject_type": "team", "subject_id": teamSeq, "role": "viewer"}), 201, "grant team")
	if l := listed(mate); !l[private] {
		t.Fatalf("team grant not listed: %v", l)
	}
	expect(t, do(t, s, "DELETE", base+"/"+private+"/access/"+dataOf(g)["id"].(string), author.Token, nil), 200, "revoke team")
	if l := listed(mate); l[private] {
		t.Fatalf("revoked team grant still listed: %v", l)
	}
	// Leaving the team ends the access.
	expect(t, do(t, s, "DELETE", "/api/share-groups/"+teamID+"/members/"+itoa(mate.ID), owner.Token, nil, api.WorkspaceHeader, ws), 200, "leave")
	expect(t, do(t, s, "GET", base+"/"+teamOnly, mate.Token, nil), 403, "after leaving the team")
	if l := listed(mate); l[teamOnly] || !l[open] {
		t.Fatalf("after leaving the team the list shows %v", l)
	}
}
