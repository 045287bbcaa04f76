package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/web/webtest"
)

// An owner manages the team from the pages: invites someone (and gets
// the single-use link), shares a session with a member, sees a member's
// access request and approves it; the audit page shows the decisions and
// the log. Each page is photographed at desktop and phone widths.
func TestTeamAndAuditPagesInChromium(t *testing.T) {
	ctx := browser(t)
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("owner@example.com")
	bob := s.AddMember(owner.Workspace, "bob@example.com", "member")
	carol := s.AddMember(owner.Workspace, "carol@example.com", "member")
	bg := context.Background()
	rec, err := owner.Client.CreateRecord(bg, "/api/resources/"+owner.Workspace+"/sessions", map[string]any{"title": "fix the flaky test", "source_kind": "daemon"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := carol.Client.Do(bg, http.MethodPost, "/api/resources/"+owner.Workspace+"/sessions/"+rec.ID+"/access-requests", map[string]any{"requested_role": "approver", "reason": "on call"}, nil); err != nil {
		t.Fatalf("carol asks for access: %v", err)
	}

	link, err := s.Host.IssueLoginLink(bg, owner.Email)
	if err != nil {
		t.Fatal(err)
	}
	team := s.URL + "/w/" + owner.Workspace + "/team"
	steps(t, ctx, "sign in and open the team page",
		chromedp.Navigate(link+"&next="+strings.ReplaceAll(team[len(s.URL):], "/", "%2F")),
		chromedp.Click(css("#signin")),
		chromedp.WaitVisible(css("#members")),
	)
	if m := text(t, ctx, "#members"); !strings.Contains(m, "bob@example.com") || !strings.Contains(m, "owner@example.com") {
		t.Fatalf("members: %q", m)
	}
	steps(t, ctx, "invite",
		chromedp.SendKeys(css("#invite-email"), "dana@example.com"),
		chromedp.Click(css("#invite-go")),
		chromedp.WaitVisible(css("#invite-link")),
	)
	if l := text(t, ctx, "#invite-link"); !strings.Contains(l, "/invite?token=") || !strings.Contains(text(t, ctx, "#invitations"), "dana@example.com") {
		t.Fatalf("invite link %q", l)
	}
	// The form's answer was a redirect: the browser is at the team page's
	// own address, and reloading it invites nobody again and shows the
	// single-use link no more.
	if loc := location(t, ctx); loc != team {
		t.Fatalf("after inviting the browser is at %s", loc)
	}
	steps(t, ctx, "reload after inviting",
		chromedp.Reload(),
		chromedp.WaitVisible(css("#invitations")),
	)
	if n := read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#invite-link, #notice").length`)); n != 0 {
		t.Fatal("the reloaded page shows the invitation's notice again")
	}
	if invs, err := owner.Client.ListInvitations(bg, owner.Workspace); err != nil || len(invs) != 1 {
		t.Fatalf("invitations after a reload: %d %v", len(invs), err)
	}
	steps(t, ctx, "share the session with bob as viewer",
		chromedp.SetValue(css("#share-user"), strconv.FormatInt(bob.ID, 10)),
		chromedp.Click(css("#share button")),
		chromedp.WaitVisible(css("#acl li")),
	)
	if a := text(t, ctx, "#acl"); !strings.Contains(a, "bob@example.com") || !strings.Contains(a, "viewer") {
		t.Fatalf("acl: %q", a)
	}
	steps(t, ctx, "reload after sharing",
		chromedp.Reload(),
		chromedp.WaitVisible(css("#acl li")),
	)
	if n := auditCount(t, owner, "session.access.grant"); n != 1 {
		t.Fatalf("%d grants audited after one share and a reload", n)
	}
	if got, err := bob.Client.GetRecord(bg, "/api/resources/"+owner.Workspace+"/sessions/"+rec.ID); err != nil || got.ID != rec.ID {
		t.Fatalf("bob cannot read the shared session: %v", err)
	}
	if r := text(t, ctx, "#access-requests"); !strings.Contains(r, "fix the flaky test") {
		t.Fatalf("access requests: %q", r)
	}
	webtest.Screenshot(t, ctx, "team", 1280)
	webtest.Screenshot(t, ctx, "team", 390)
	steps(t, ctx, "approve carol's request",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Click(css("#access-requests button[value=approve]")),
		// The page before had a notice too: wait for the next page.
		chromedp.WaitNotPresent(css("#access-requests")),
		chromedp.WaitVisible(css("#notice")),
	)
	if a := text(t, ctx, "#acl"); !strings.Contains(a, "carol@example.com") || !strings.Contains(a, "approver") {
		got, err := owner.Client.GetRecord(bg, "/api/resources/"+owner.Workspace+"/sessions/"+rec.ID)
		t.Fatalf("acl after approval: %q (notice %q); record %+v %v", a, text(t, ctx, "#notice"), got.Attributes["acl"], err)
	}
	steps(t, ctx, "open the audit page",
		chromedp.Navigate(s.URL+"/w/"+owner.Workspace+"/audit"),
		chromedp.WaitVisible(css("#audit")),
	)
	if a := text(t, ctx, "#audit"); !strings.Contains(a, "session.access_request.approve") || !strings.Contains(a, "session.access.grant") {
		t.Fatalf("audit: %q", a)
	}
	webtest.Screenshot(t, ctx, "audit", 1280)
	webtest.Screenshot(t, ctx, "audit", 390)

	// A member who is not an admin sees no invitation form, and a forged
	// invite is refused by the API.
	bl, _ := s.Host.IssueLoginLink(bg, bob.Email)
	signInAs(t, ctx, bl, team, "#members")
	if n := read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#invite").length`)); n != 0 {
		t.Fatal("a member sees the invitation form")
	}
}

// The relay-token route only answers the page's own script: a signed-in
// same-origin POST with the CSRF header.
func TestRelayTokenNeedsTheSessionAndCSRF(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("owner@example.com")
	f := newFront(t, s)
	c := browserClient(t)
	signIn(t, s, f, c, u.Email)
	page, body := get(t, c, f.URL+"/")
	if page.StatusCode != 200 {
		t.Fatalf("home: %d", page.StatusCode)
	}
	csp := page.Header.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "default-src 'none'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Fatalf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(body, "<script>") || strings.Contains(csp, "unsafe") {
		t.Fatal("inline script or unsafe CSP")
	}
	csrf := metaCSRF(t, body)
	post := func(hdr map[string]string, b string, jar bool) (int, string) {
		return scriptCall(t, c, jar, http.MethodPost, f.URL+"/app/relay-token", hdr, strings.NewReader(b))
	}
	ok := `{"workspace":"` + u.Workspace + `"}`
	if st, b := post(map[string]string{"X-Reeve-CSRF": csrf}, ok, true); st != 200 || !strings.Contains(b, `"token":"ey`) {
		t.Fatalf("own page: %d %s", st, b)
	}
	for _, bad := range []struct {
		what string
		hdr  map[string]string
		body string
		jar  bool
		want int
	}{
		{"no CSRF header", nil, ok, true, 403},
		{"wrong CSRF", map[string]string{"X-Reeve-CSRF": "nope"}, ok, true, 403},
		{"another origin", map[string]string{"X-Reeve-CSRF": csrf, "Origin": "https://evil.example"}, ok, true, 403},
		{"no session", map[string]string{"X-Reeve-CSRF": csrf}, ok, false, 401},
		{"another workspace", map[string]string{"X-Reeve-CSRF": csrf}, `{"workspace":"01NOTMINE0000000000000000"}`, true, 403},
		{"no workspace", map[string]string{"X-Reeve-CSRF": csrf}, `{}`, true, 422},
	} {
		if st, b := post(bad.hdr, bad.body, bad.jar); st != bad.want || strings.Contains(b, `"token"`) {
			t.Fatalf("%s: %d %s", bad.what, st, b)
		}
	}
}

func metaCSRF(t *testing.T, body string) string {
	t.Helper()
	i := strings.Index(body, `name="reeve-csrf" content="`)
	if i < 0 {
		t.Fatalf("no CSRF meta tag in %s", body)
	}
	rest := body[i+len(`name="reeve-csrf" content="`):]
	return rest[:strings.Index(rest, `"`)]
}

// The notifier's list of machines needs the session and the CSRF header,
// and names only the person's workspaces' paired machines.
func TestMachinesListNeedsTheSessionAndCSRF(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("owner@example.com")
	stranger := s.NewUser("stranger@example.com")
	// Each pairs a machine, so the list has one to name and one to leave out.
	pair := func(who servertest.User, name string) {
		key, _ := newAnchor(t)
		m, err := s.Client("").MintPairingCode(context.Background(), sdk.PairingMachineRequest{Name: name, AnchorPublicKey: key})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := who.Client.ApprovePairingCode(context.Background(), m.Code, sdk.PairingDecisionRequest{Workspace: who.Workspace}); err != nil {
			t.Fatal(err)
		}
	}
	pair(u, "own-box")
	pair(stranger, "their-box")
	f := newFront(t, s)
	c := browserClient(t)
	signIn(t, s, f, c, u.Email)
	_, body := get(t, c, f.URL+"/")
	csrf := metaCSRF(t, body)
	fetch := func(hdr map[string]string, jar bool) (int, string) {
		return scriptCall(t, c, jar, http.MethodGet, f.URL+"/app/machines", hdr, nil)
	}
	st, b := fetch(map[string]string{"X-Reeve-CSRF": csrf}, true)
	var got struct {
		Machines []map[string]any `json:"machines"`
	}
	if st != 200 || json.Unmarshal([]byte(b), &got) != nil || len(got.Machines) != 1 {
		t.Fatalf("own page: %d %s", st, b)
	}
	if m := got.Machines[0]; m["workspace"] != u.Workspace || m["name"] != "own-box" || m["anchor"] == "" {
		t.Fatalf("not the person's own paired machine: %v", m)
	}
	for what, bad := range map[string]struct {
		hdr  map[string]string
		jar  bool
		want int
	}{
		"no CSRF header": {nil, true, 403},
		"wrong CSRF":     {map[string]string{"X-Reeve-CSRF": "nope"}, true, 403},
		"no session":     {map[string]string{"X-Reeve-CSRF": csrf}, false, 401},
		"another origin": {map[string]string{"X-Reeve-CSRF": csrf, "Origin": "http://evil.example"}, true, 403},
	} {
		if st, b := fetch(bad.hdr, bad.jar); st != bad.want || strings.Contains(b, `"machines"`) {
			t.Fatalf("%s: %d %s", what, st, b)
		}
	}
}

// scriptCall sends what a page's script sends to one of the site's JSON
// endpoints, with the signed-in cookie jar c or (jar false) without it,
// and returns the status and body.
func scriptCall(t *testing.T, c *http.Client, jar bool, method, url string, hdr map[string]string, body io.Reader) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, body)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if !jar {
		c = &http.Client{}
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}
