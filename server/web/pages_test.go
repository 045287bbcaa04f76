package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/web"
)

// pagesFront serves the pages in front of a real server's API, recording
// login-link requests instead of printing them.
type pagesFront struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string
}

func newFront(t *testing.T, s *servertest.Server) *pagesFront {
	t.Helper()
	u, _ := url.Parse(s.URL)
	f := &pagesFront{}
	h, err := web.New(web.Options{
		API: httputil.NewSingleHostReverseProxy(u),
		RequestLoginLink: func(_ context.Context, email string) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.requests = append(f.requests, email)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.Server = httptest.NewServer(h)
	t.Cleanup(f.Close)
	return f
}

// browserClient keeps cookies and does not follow redirects, like a person
// watching each step.
func browserClient(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values, origin string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// submit posts a form as its page does and follows the answer, which for
// every form is 303 See Other to a page's GET address: it returns that
// address and the page there.
func submit(t *testing.T, c *http.Client, u string, form url.Values, origin string) (string, string) {
	t.Helper()
	r, b := post(t, c, u, form, origin)
	if r.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST %s answered %d, not 303: %s", u, r.StatusCode, b)
	}
	loc := r.Header.Get("Location")
	base, _ := url.Parse(u)
	next, err := base.Parse(loc)
	if err != nil {
		t.Fatalf("POST %s redirected to %q: %v", u, loc, err)
	}
	_, body := get(t, c, next.String())
	return loc, body
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, body string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no csrf field in %s", body)
	}
	return m[1]
}

func TestLoginAndPairFormsRefuseForgery(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("owner@example.com")
	f := newFront(t, s)
	c := browserClient(t)

	// Security headers on every page.
	resp, body := get(t, c, f.URL+"/login")
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers: %v", resp.Header)
	}
	loginCSRF := csrfOf(t, body)

	// Login forms: a missing token or a foreign origin is refused.
	if r, _ := post(t, c, f.URL+"/login", url.Values{"action": {"request"}, "email": {"owner@example.com"}}, ""); r.StatusCode != http.StatusForbidden {
		t.Fatalf("login request without csrf: %d", r.StatusCode)
	}
	if r, _ := post(t, c, f.URL+"/login", url.Values{"action": {"request"}, "email": {"owner@example.com"}, "csrf": {loginCSRF}}, "https://evil.example"); r.StatusCode != http.StatusForbidden {
		t.Fatalf("login request from another origin: %d", r.StatusCode)
	}
	// Requesting a link says the same whether or not the account exists.
	_, known := submit(t, c, f.URL+"/login", url.Values{"action": {"request"}, "email": {"owner@example.com"}, "csrf": {loginCSRF}}, f.URL)
	_, unknown := submit(t, c, f.URL+"/login", url.Values{"action": {"request"}, "email": {"nobody@example.com"}, "csrf": {loginCSRF}}, f.URL)
	if !strings.Contains(known, "operator") || strings.ReplaceAll(known, "owner@example.com", "X") != strings.ReplaceAll(unknown, "nobody@example.com", "X") {
		t.Fatalf("link request answers differ:\n%s\n---\n%s", known, unknown)
	}
	if len(f.requests) != 2 {
		t.Fatalf("login link requests %v", f.requests)
	}
	// A bad code is refused on the page.
	if loc, b := submit(t, c, f.URL+"/login", url.Values{"action": {"code"}, "code": {"rvl_nope"}, "csrf": {loginCSRF}}, f.URL); loc != "/login" || !strings.Contains(b, "unknown, already used or expired") {
		t.Fatalf("bad code: %s %s", loc, b)
	}

	// Sign in; next must stay on this site.
	link, err := s.Host.IssueLoginLink(context.Background(), u.Email)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := post(t, c, f.URL+"/login", url.Values{"action": {"code"}, "code": {link}, "csrf": {loginCSRF}, "next": {"//evil.example/x"}}, f.URL)
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/" {
		t.Fatalf("sign in with a foreign next: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	var session *http.Cookie
	for _, ck := range r.Cookies() {
		if ck.Name == web.SessionCookie {
			session = ck
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteLaxMode || !strings.HasPrefix(session.Value, "rvs_") {
		t.Fatalf("session cookie %+v", session)
	}

	// The pair form needs the session's CSRF token and this origin.
	key, _ := newAnchor(t)
	m, err := s.Client("").MintPairingCode(context.Background(), sdk.PairingMachineRequest{Name: "box", AnchorPublicKey: key})
	if err != nil {
		t.Fatal(err)
	}
	_, page := get(t, c, f.URL+"/pair?code="+m.Code)
	token := csrfOf(t, page)
	approve := url.Values{"code": {m.Code}, "action": {"approve"}, "workspace": {u.Workspace}}
	if r, _ := post(t, c, f.URL+"/pair", approve, f.URL); r.StatusCode != http.StatusForbidden {
		t.Fatalf("approve without csrf: %d", r.StatusCode)
	}
	approve.Set("csrf", loginCSRF)
	if r, _ := post(t, c, f.URL+"/pair", approve, f.URL); r.StatusCode != http.StatusForbidden {
		t.Fatalf("approve with the pre-login token: %d", r.StatusCode)
	}
	approve.Set("csrf", token)
	if r, _ := post(t, c, f.URL+"/pair", approve, "http://evil.example"); r.StatusCode != http.StatusForbidden {
		t.Fatalf("approve from another origin: %d", r.StatusCode)
	}
	if st, _ := s.Client("").PairingStatus(context.Background(), m.Code, m.StatusToken); st.State != sdk.PairingPending {
		t.Fatalf("a refused form changed the code: %+v", st)
	}
	if loc, b := submit(t, c, f.URL+"/pair", approve, f.URL); loc != "/pair?code="+m.Code || !strings.Contains(b, `data-state="approved"`) {
		t.Fatalf("approve: %s %s", loc, b)
	}
	// A second decision on the same code is reported, not applied.
	approve.Set("action", "deny")
	if _, b := submit(t, c, f.URL+"/pair", approve, f.URL); !strings.Contains(b, "cannot be used now") || !strings.Contains(b, "already approved") {
		t.Fatalf("deny after approval: %s", b)
	}

	// Without a session the pair page redirects to sign in and back.
	anon := browserClient(t)
	r, _ = get(t, anon, f.URL+"/pair?code="+m.Code)
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "/login?next="+url.QueryEscape("/pair?code="+m.Code) {
		t.Fatalf("signed-out pair page: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	// A revoked session is treated as none.
	if err := s.Client(session.Value).Logout(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, _ := get(t, c, f.URL+"/pair"); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoked session: %d", r.StatusCode)
	}
}
