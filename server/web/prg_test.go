package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/web"
)

// auditCount counts a workspace's audit entries with this action.
func auditCount(t *testing.T, u servertest.User, action string) int {
	t.Helper()
	var out struct {
		Data []struct {
			Action string `json:"action"`
		} `json:"data"`
	}
	if _, err := u.Client.Do(context.Background(), http.MethodGet, "/api/workspaces/"+u.Workspace+"/audit?limit=500", nil, &out); err != nil {
		t.Fatalf("audit: %v", err)
	}
	n := 0
	for _, e := range out.Data {
		if e.Action == action {
			n++
		}
	}
	return n
}

// flashOf is the flash cookie a form's answer set, if any.
func flashOf(r *http.Response) *http.Cookie {
	for _, c := range r.Cookies() {
		if c.Name == "reeve_flash" && c.MaxAge > 0 {
			return c
		}
	}
	return nil
}

// Every team form answers 303 to the team page; its outcome is shown on
// that page once, an error with the typed value to correct, and a reload
// of the page changes nothing.
func TestTeamFormsRedirectWithAFlashShownOnce(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("owner@example.com")
	s.AddMember(owner.Workspace, "bob@example.com", "member")
	f := newFront(t, s)
	c := browserClient(t)
	signIn(t, s, f, c, owner.Email)
	team := f.URL + "/w/" + owner.Workspace + "/team"
	_, body := get(t, c, team)
	csrf := csrfOf(t, body)

	loc, body := submit(t, c, team, url.Values{"csrf": {csrf}, "action": {"invite"}, "email": {"dana@example.com"}, "role": {"member"}}, f.URL)
	if loc != "/w/"+owner.Workspace+"/team" || !strings.Contains(body, `id="invite-link"`) || !strings.Contains(body, "Invitation created for dana@example.com") {
		t.Fatalf("invite answered %s with %s", loc, body)
	}
	// The page again (a reload): no second invitation, no notice.
	r, body := get(t, c, team)
	if r.StatusCode != http.StatusOK || strings.Contains(body, `id="notice"`) || strings.Contains(body, `id="invite-link"`) {
		t.Fatalf("reloaded team page: %d %s", r.StatusCode, body)
	}
	if invs, err := owner.Client.ListInvitations(context.Background(), owner.Workspace); err != nil || len(invs) != 1 {
		t.Fatalf("invitations after a reload: %d %v", len(invs), err)
	}

	// A refused invitation says why on the page, with the address typed
	// still in the form, once.
	loc, body = submit(t, c, team, url.Values{"csrf": {csrf}, "action": {"invite"}, "email": {"erin@example.com"}, "role": {"emperor"}}, f.URL)
	if loc != "/w/"+owner.Workspace+"/team" || !strings.Contains(body, `id="error"`) || !strings.Contains(body, "Refused") || !strings.Contains(body, `value="erin@example.com"`) {
		t.Fatalf("refused invite answered %s with %s", loc, body)
	}
	if _, body = get(t, c, team); strings.Contains(body, `id="error"`) || strings.Contains(body, "erin@example.com") {
		t.Fatalf("the error was shown twice: %s", body)
	}
	if _, body = submit(t, c, team, url.Values{"csrf": {csrf}, "action": {"nonsense"}}, f.URL); !strings.Contains(body, "Unknown action") {
		t.Fatalf("unknown action: %s", body)
	}
}

// A flash is shown only to the browser it was sealed for: a made-up
// cookie, one taken from another person's browser, and message text in
// the address all show nothing.
func TestForgedFlashIsNotShown(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("owner@example.com")
	bob := s.AddMember(owner.Workspace, "bob@example.com", "member")
	f := newFront(t, s)
	team := f.URL + "/w/" + owner.Workspace + "/team"
	front, _ := url.Parse(f.URL)

	oc := browserClient(t)
	signIn(t, s, f, oc, owner.Email)
	// Made up: garbage, and a well-formed but unsealed value.
	for _, v := range []string{"hello", "eyJwIjoiL3cvIiwibiI6IkhhY2tlZCJ9", strings.Repeat("A", 80)} {
		oc.Jar.SetCookies(front, []*http.Cookie{{Name: "reeve_flash", Value: v, Path: "/"}})
		if r, body := get(t, oc, team); r.StatusCode != http.StatusOK || strings.Contains(body, `id="notice"`) || strings.Contains(body, `id="error"`) {
			t.Fatalf("made-up flash %q: %d %s", v, r.StatusCode, body)
		}
	}

	// Bob's own flash, genuine for bob, carried to the owner's browser.
	bc := browserClient(t)
	signIn(t, s, f, bc, bob.Email)
	_, body := get(t, bc, team)
	r, _ := post(t, bc, team, url.Values{"csrf": {csrfOf(t, body)}, "action": {"invite"}, "email": {"mallory@example.com"}, "role": {"owner"}}, f.URL)
	stolen := flashOf(r)
	if r.StatusCode != http.StatusSeeOther || stolen == nil {
		t.Fatalf("bob's refused invite: %d, flash %v", r.StatusCode, stolen)
	}
	oc.Jar.SetCookies(front, []*http.Cookie{{Name: "reeve_flash", Value: stolen.Value, Path: "/"}})
	if _, body := get(t, oc, team); strings.Contains(body, "Refused") || strings.Contains(body, "mallory@example.com") {
		t.Fatalf("the owner was shown bob's flash: %s", body)
	}
	// Bob himself sees it, once.
	if _, body := get(t, bc, team); !strings.Contains(body, "Refused") {
		t.Fatalf("bob's own flash: %s", body)
	}

	// Text in the address is not a message any more.
	anon := browserClient(t)
	if _, body := get(t, anon, f.URL+"/login?notice=Your+account+is+locked.+Call+555-0100"); strings.Contains(body, "locked") {
		t.Fatalf("the sign-in page shows text from its address: %s", body)
	}
	// Signing out still says so, from a flash.
	_, body = get(t, oc, team)
	if _, body = submit(t, oc, f.URL+"/logout", url.Values{"csrf": {csrfOf(t, body)}}, f.URL); !strings.Contains(body, "You are signed out.") {
		t.Fatalf("after sign-out: %s", body)
	}
}

// The insights forms go back to the list they were sent from (its filter,
// nothing else from the address), and reloading it runs nothing again.
func TestInsightsFormsRedirectToTheFilteredList(t *testing.T) {
	s, owner, _ := insightsWorld(t)
	f := newFront(t, s)
	c := browserClient(t)
	signIn(t, s, f, c, owner.Email)
	list := f.URL + "/w/" + owner.Workspace + "/insights"
	_, body := get(t, c, list)
	csrf := csrfOf(t, body)
	loc, body := submit(t, c, list+"?status=open&evil=%0d%0a", url.Values{"csrf": {csrf}, "action": {"detect"}}, f.URL)
	if loc != "/w/"+owner.Workspace+"/insights?status=open" || !strings.Contains(body, "Detection ran: 2 new") {
		t.Fatalf("detect answered %s with %s", loc, body)
	}
	if _, body = get(t, c, f.URL+loc); strings.Contains(body, "Detection ran") {
		t.Fatalf("the notice was shown twice: %s", body)
	}
	if n := auditCount(t, owner, "insights.detect"); n != 1 {
		t.Fatalf("%d detection runs audited after one press and a reload", n)
	}
}

// A flash waits only for the page it names, and not long: another page
// leaves it alone, and once its minute is over (by the server's clock)
// it is not shown. An outcome too long for a cookie is clipped, not lost.
func TestFlashKeepsToItsPageAndExpires(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("owner@example.com")
	u, _ := url.Parse(s.URL)
	var mu sync.Mutex
	now := time.Now()
	h, err := web.New(web.Options{API: httputil.NewSingleHostReverseProxy(u), Now: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}})
	if err != nil {
		t.Fatal(err)
	}
	f := &pagesFront{Server: httptest.NewServer(h)}
	t.Cleanup(f.Close)
	c := browserClient(t)
	signIn(t, s, f, c, owner.Email)
	team := f.URL + "/w/" + owner.Workspace + "/team"
	_, body := get(t, c, team)
	csrf := csrfOf(t, body)
	refused := url.Values{"csrf": {csrf}, "action": {"invite"}, "email": {"erin@example.com"}, "role": {"emperor"}}

	if r, _ := post(t, c, team, refused, f.URL); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("refused invite: %d", r.StatusCode)
	}
	if _, body := get(t, c, f.URL+"/w/"+owner.Workspace+"/insights"); strings.Contains(body, `id="error"`) {
		t.Fatalf("the insights page showed the team page's flash: %s", body)
	}
	if _, body := get(t, c, team); !strings.Contains(body, "Refused") {
		t.Fatalf("the team page lost its flash to another page: %s", body)
	}

	if r, _ := post(t, c, team, refused, f.URL); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("refused invite: %d", r.StatusCode)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	if _, body := get(t, c, team); strings.Contains(body, `id="error"`) {
		t.Fatalf("an expired flash was shown: %s", body)
	}

	huge := url.Values{"csrf": {csrf}, "action": {"request-access"}, "session": {strings.Repeat("s", 3000)}, "role": {"viewer"}, "reason": {strings.Repeat("why ", 2000)}}
	r, _ := post(t, c, team, huge, f.URL)
	if fl := flashOf(r); fl == nil || len(fl.Name)+len(fl.Value) > 4000 {
		t.Fatalf("the flash of a long refusal does not fit a cookie: %v", fl)
	}
	if _, body := get(t, c, team); !strings.Contains(body, `id="error"`) {
		t.Fatalf("a long refusal was lost: %s", body)
	}
}

// The sign-in forms answer 303 to the sign-in page too, keeping where to
// go after; a refusal shows once, with the address typed refilled.
func TestSignInFormsRedirectWithAFlash(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	f := newFront(t, s)
	c := browserClient(t)
	_, body := get(t, c, f.URL+"/login?next=%2Fpair")
	tok := csrfOf(t, body)
	loc, body := submit(t, c, f.URL+"/login", url.Values{"csrf": {tok}, "action": {"request"}, "email": {"nobody"}, "next": {"/pair"}}, f.URL)
	if loc != "/login?next=%2Fpair" || !strings.Contains(body, "Enter the email address") || !strings.Contains(body, `value="nobody"`) || !strings.Contains(body, `name="next" value="/pair"`) {
		t.Fatalf("refused link request answered %s with %s", loc, body)
	}
	if _, body = get(t, c, f.URL+loc); strings.Contains(body, `id="error"`) || strings.Contains(body, `value="nobody"`) {
		t.Fatalf("the refusal was shown twice: %s", body)
	}
}
