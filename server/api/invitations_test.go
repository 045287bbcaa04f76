package api_test

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/server/api"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/store/storetest"
)

// loneUser is a signed-in user who belongs to no workspace.
func loneUser(t *testing.T, s *servertest.Server, email string) servertest.User {
	t.Helper()
	ctx := context.Background()
	u, _, err := s.Store().EnsureUser(ctx, email)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := api.MintUserToken(ctx, s.Store(), u.ID, store.TokenPersonal, "test", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return servertest.User{Email: email, ID: u.ID, Token: tok, Client: s.Client(tok)}
}

func invite(t *testing.T, s *servertest.Server, token, ws, email, role string) answer {
	t.Helper()
	return do(t, s, "POST", "/api/workspaces/"+ws+"/invitations", token, map[string]any{"email": email, "role": role})
}

func tokenOf(t *testing.T, a answer) string {
	t.Helper()
	tok, _ := a.JSON["token"].(string)
	if !strings.HasPrefix(tok, "rvi_") {
		t.Fatalf("no token in %s", a.Body)
	}
	link, _ := a.JSON["accept_url"].(string)
	u, err := url.Parse(link)
	if err != nil || u.Query().Get("token") != tok {
		t.Fatalf("accept_url %q does not carry the token", link)
	}
	return tok
}

func accept(t *testing.T, s *servertest.Server, userToken, inviteToken string) answer {
	t.Helper()
	return do(t, s, "POST", "/api/invitations/accept", userToken, map[string]any{"token": inviteToken})
}

// The whole life of a member: invited, accepted, acting, removed, locked out
// at once, every step in the audit log.
func TestInviteAcceptActRemove(t *testing.T) {
	s := servertest.Start(t, servertest.Options{CacheTTL: time.Hour})
	owner := s.NewUser("owner@example.com")
	ws := owner.Workspace
	inv := expect(t, invite(t, s, owner.Token, ws, "New.Person@example.com", "member"), 201, "invite")
	tok := tokenOf(t, inv)
	if d := dataOf(inv); d["state"] != "pending" || d["role"] != "member" || d["token_hash"] != nil {
		t.Fatalf("invitation %v", d)
	}
	list := expect(t, do(t, s, "GET", "/api/resources/"+ws+"/invitations", owner.Token, nil), 200, "list invitations")
	if strings.Contains(string(list.Body), tok) || strings.Contains(string(list.Body), "token_hash") {
		t.Fatalf("the list shows the token: %s", list.Body)
	}

	newbie := loneUser(t, s, "new.person@example.com")
	// Before accepting, the invitee is not a member.
	expect(t, do(t, s, "GET", "/api/workspaces/"+ws, newbie.Token, nil), 403, "read before accept")
	acc := expect(t, accept(t, s, newbie.Token, tok), 200, "accept")
	if d := dataOf(acc); d["workspace_id"] != ws || d["role"] != "member" {
		t.Fatalf("accepted %v", d)
	}
	// Single use: the same link again, by anyone, is gone.
	expect(t, accept(t, s, newbie.Token, tok), 409, "accept twice (already a member)")
	other := loneUser(t, s, "other@example.com")
	if a := accept(t, s, other.Token, tok); a.Status != 410 || a.errCode() != sdk.CodeInvitationUsed {
		t.Fatalf("reused link: %d %s", a.Status, a.Body)
	}

	// The member acts: creates a session.
	expect(t, do(t, s, "POST", "/api/resources/"+ws+"/sessions", newbie.Token, map[string]any{"title": "t", "source_kind": "manual"}), 201, "member creates a session")
	members, err := owner.Client.ListMembers(context.Background(), ws)
	if err != nil || len(members) != 2 {
		t.Fatalf("members %v %v", members, err)
	}

	// Role change, then removal: the token stops working on the workspace
	// at once, even with an hour of credential cache.
	expect(t, do(t, s, "PATCH", "/api/workspaces/"+ws+"/members/"+itoa(newbie.ID), owner.Token, map[string]any{"role": "admin"}), 200, "promote")
	expect(t, do(t, s, "GET", "/api/workspaces/"+ws+"/invitations", newbie.Token, nil), 200, "admin lists invitations")
	expect(t, do(t, s, "DELETE", "/api/workspaces/"+ws+"/members/"+itoa(newbie.ID), owner.Token, nil), 200, "remove")
	expect(t, do(t, s, "GET", "/api/workspaces/"+ws, newbie.Token, nil), 403, "read after removal")
	expect(t, do(t, s, "GET", "/api/resources/"+ws+"/sessions", newbie.Token, nil), 403, "list sessions after removal")
	expect(t, do(t, s, "GET", "/api/sessions", newbie.Token, nil, api.WorkspaceHeader, ws), 403, "caller-scoped route after removal")

	audit := expect(t, do(t, s, "GET", "/api/workspaces/"+ws+"/audit?limit=100", owner.Token, nil), 200, "audit")
	for _, action := range []string{"invitation.create", "invitation.accept", "member.add", "member.role", "member.remove"} {
		if !strings.Contains(string(audit.Body), `"action":"`+action+`"`) {
			t.Errorf("audit lacks %s: %s", action, audit.Body)
		}
	}
}

func TestInvitationBadInput(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("owner@example.com")
	ws := owner.Workspace
	admin := s.AddMember(ws, "admin@example.com", sdk.RoleAdmin)
	member := s.AddMember(ws, "member@example.com", sdk.RoleMember)
	invitee := loneUser(t, s, "invitee@example.com")

	expect(t, invite(t, s, owner.Token, ws, "invitee@example.com", "superuser"), 422, "role outside the enum")
	expect(t, invite(t, s, owner.Token, ws, "not-an-email", "member"), 422, "bad email")
	expect(t, do(t, s, "POST", "/api/workspaces/"+ws+"/invitations", owner.Token, map[string]any{"email": "invitee@example.com", "role": "member", "secret": "x"}), 422, "unknown field")
	expect(t, invite(t, s, member.Token, ws, "invitee@example.com", "member"), 403, "a member invites")
	expect(t, invite(t, s, admin.Token, ws, "invitee@example.com", "owner"), 403, "an admin invites an owner")
	expect(t, invite(t, s, owner.Token, ws, "member@example.com", "member"), 409, "invite a member")

	tok := tokenOf(t, expect(t, invite(t, s, admin.Token, ws, "invitee@example.com", "member"), 201, "invite"))
	// Forged: a wrong secret, a wrong invitation id, garbage.
	wsID, rest, _ := strings.Cut(strings.TrimPrefix(tok, "rvi_"), ".")
	invID, secret, _ := strings.Cut(rest, ".")
	forged := []string{
		"rvi_" + wsID + "." + invID + "." + strings.Repeat("A", len(secret)),
		"rvi_" + wsID + ".01ARZ3NDEKTSV4RRFFQ69G5FAV." + secret,
		"rvi_" + otherULID(owner.Workspace) + "." + invID + "." + secret,
		"garbage", "",
	}
	for _, f := range forged {
		a := accept(t, s, invitee.Token, f)
		if a.Status != 404 && a.Status != 422 {
			t.Fatalf("forged %q: %d %s", f, a.Status, a.Body)
		}
	}
	// Accepting as another email: 403, and the link still works for its owner.
	if a := accept(t, s, member.Token, tok); a.Status != 409 {
		t.Fatalf("a member accepting: %d %s", a.Status, a.Body)
	}
	stranger := loneUser(t, s, "stranger@example.com")
	expect(t, accept(t, s, stranger.Token, tok), 403, "accept as another email")
	if _, err := s.Store().Role(context.Background(), ws, stranger.ID); err == nil {
		t.Fatal("the stranger became a member")
	}
	// Revoked: gone.
	invs, err := owner.Client.ListInvitations(context.Background(), ws)
	if err != nil || len(invs) != 1 || invs[0].State != "pending" {
		t.Fatalf("invitations %v %v", invs, err)
	}
	expect(t, do(t, s, "DELETE", "/api/workspaces/"+ws+"/invitations/"+invs[0].ID, member.Token, nil), 403, "member revokes")
	expect(t, do(t, s, "DELETE", "/api/workspaces/"+ws+"/invitations/"+invs[0].ID, admin.Token, nil), 200, "revoke")
	expect(t, do(t, s, "DELETE", "/api/workspaces/"+ws+"/invitations/"+invs[0].ID, admin.Token, nil), 409, "revoke twice")
	if a := accept(t, s, invitee.Token, tok); a.Status != 410 {
		t.Fatalf("revoked link: %d %s", a.Status, a.Body)
	}
	// Expired: created an hour in the past with a one-minute life.
	old, err := api.CreateInvitation(context.Background(), s.Store(), api.InvitationOptions{WorkspaceID: ws, Email: "invitee@example.com", Role: "member", TTL: time.Minute, InvitedBy: "operator", Now: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if a := accept(t, s, invitee.Token, old.Token); a.Status != 410 || a.errCode() != sdk.CodeExpired {
		t.Fatalf("expired link: %d %s", a.Status, a.Body)
	}
	if _, err := s.Store().Role(context.Background(), ws, invitee.ID); err == nil {
		t.Fatal("the invitee became a member through a dead link")
	}
}

// Many accepts of one link race (50, on SQLite, and on PostgreSQL across
// two replicas): exactly one wins, and it leaves exactly one membership,
// one accept and one member.add in the audit log.
func TestInvitationAcceptRace(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		s := servertest.Start(t, servertest.Options{})
		acceptRace(t, s, s)
	})
	t.Run("postgres", func(t *testing.T) {
		url, dir := storetest.PostgresURL(t), t.TempDir()
		a := servertest.Start(t, servertest.Options{DatabaseURL: url, DataDir: dir})
		b := servertest.Start(t, servertest.Options{DatabaseURL: url, DataDir: dir})
		acceptRace(t, a, b)
	})
}

func acceptRace(t *testing.T, a, b *servertest.Server) {
	owner := a.NewUser("owner@example.com")
	tok := tokenOf(t, expect(t, invite(t, a, owner.Token, owner.Workspace, "racer@example.com", "admin"), 201, "invite"))
	racer := loneUser(t, a, "racer@example.com")
	var wg sync.WaitGroup
	results := make([]int, 50)
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			results[i] = accept(t, s, racer.Token, tok).Status
		}(i)
	}
	wg.Wait()
	won := 0
	for _, st := range results {
		switch st {
		case 200:
			won++
		case 409, 410:
		default:
			t.Fatalf("status %d: %v", st, results)
		}
	}
	if won != 1 {
		t.Fatalf("%d accepts won: %v", won, results)
	}
	ctx := context.Background()
	if role, err := a.Store().Role(ctx, owner.Workspace, racer.ID); err != nil || role != "admin" {
		t.Fatalf("role %q %v", role, err)
	}
	if ms, err := a.Store().Members(ctx, owner.Workspace); err != nil || len(ms) != 2 {
		t.Fatalf("members %v %v", ms, err)
	}
	entries, err := a.Store().Audit(ctx, owner.Workspace, store.ListOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range entries {
		count[e.Action]++
	}
	if count["invitation.accept"] != 1 || count["member.add"] != 1 {
		t.Fatalf("audit %v", count)
	}
}

// otherULID changes the last character of a ULID (to one it is not).
func otherULID(id string) string {
	if strings.HasSuffix(id, "X") {
		return id[:25] + "Y"
	}
	return id[:25] + "X"
}
