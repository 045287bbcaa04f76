package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// signIn signs a browser in as email through the login form.
func signIn(t *testing.T, s *servertest.Server, f *pagesFront, c *http.Client, email string) {
	t.Helper()
	_, body := get(t, c, f.URL+"/login")
	link, err := s.Host.IssueLoginLink(context.Background(), email)
	if err != nil {
		t.Fatal(err)
	}
	if r, b := post(t, c, f.URL+"/login", url.Values{"action": {"code"}, "code": {link}, "csrf": {csrfOf(t, body)}}, f.URL); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d %s", r.StatusCode, b)
	}
}

func TestInvitePageAcceptsOnlyForTheInvitedEmail(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("owner@example.com")
	s.NewUser("invitee@example.com")
	s.NewUser("someone@example.com")
	f := newFront(t, s)
	inv, err := owner.Client.CreateInvitation(context.Background(), owner.Workspace, sdk.InvitationCreateRequest{Email: "invitee@example.com", Role: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(inv.AcceptURL)
	pageURL := f.URL + u.RequestURI()

	// Signed out: to sign in and back.
	if r, _ := get(t, browserClient(t), pageURL); r.StatusCode != http.StatusSeeOther || !strings.HasPrefix(r.Header.Get("Location"), "/login?next=") {
		t.Fatalf("signed out: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	// Someone else: refused, nothing changes.
	other := browserClient(t)
	signIn(t, s, f, other, "someone@example.com")
	_, page := get(t, other, pageURL)
	form := url.Values{"csrf": {csrfOf(t, page)}, "token": {inv.Token}}
	if loc, b := submit(t, other, f.URL+"/invite", form, f.URL); loc != "/invite?token="+url.QueryEscape(form.Get("token")) || !strings.Contains(b, "another email") {
		t.Fatalf("accept as someone else: %s %s", loc, b)
	}
	// A forged form from another origin: refused.
	c := browserClient(t)
	signIn(t, s, f, c, "invitee@example.com")
	_, page = get(t, c, pageURL)
	form = url.Values{"csrf": {csrfOf(t, page)}, "token": {inv.Token}}
	if r, _ := post(t, c, f.URL+"/invite", form, "https://evil.example"); r.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin accept: %d", r.StatusCode)
	}
	if loc, b := submit(t, c, f.URL+"/invite", form, f.URL); loc != "/" || !strings.Contains(b, `id="notice"`) || !strings.Contains(b, "as admin") {
		t.Fatalf("accept: %s %s", loc, b)
	}
	if _, b := submit(t, c, f.URL+"/invite", form, f.URL); !strings.Contains(b, "already a member") {
		t.Fatalf("accept twice: %s", b)
	}
}
