package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/web/webtest"
)

// insightsWorld is a workspace whose records trip two detection rules: a
// paired laptop synced a session run in bypass mode (unguarded_session),
// and a second machine was last seen nine days ago (install_stale). The
// server's own detector is off, so only the page's button raises them.
func insightsWorld(t *testing.T) (*servertest.Server, servertest.User, servertest.User) {
	t.Helper()
	s := servertest.Start(t, servertest.Options{InsightInterval: -1})
	owner := s.NewUser("owner@example.com")
	bob := s.AddMember(owner.Workspace, "bob@example.com", "member")
	ctx := context.Background()
	install := func(name string) (string, string) {
		var out struct {
			Data struct {
				ID         string `json:"id"`
				IssueToken string `json:"issue_token"`
			} `json:"data"`
		}
		if _, err := owner.Client.Do(ctx, http.MethodPost, "/api/workspaces/"+owner.Workspace+"/installs", map[string]any{"name": name}, &out); err != nil {
			t.Fatalf("install %s: %v", name, err)
		}
		return out.Data.ID, out.Data.IssueToken
	}
	_, daemon := install("laptop")
	now := time.Now().UTC()
	sess := map[string]any{"id": "s-bypass", "agent": "claude", "status": "exited", "turns": 1, "created_at": now, "updated_at": now, "guarded": false, "mode": "bypass"}
	if _, err := s.Client(daemon).Do(ctx, http.MethodPost, "/api/runtime/agent-sessions/sync", map[string]any{"session": sess, "events": []any{}}, nil); err != nil {
		t.Fatalf("sync: %v", err)
	}
	old, _ := install("old-box")
	if err := s.Store().TouchInstall(ctx, old, now.Add(-9*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	return s, owner, bob
}

// insightStatus reads an insight's status through the API, by rule.
func insightStatus(t *testing.T, u servertest.User, rule string) (string, string) {
	t.Helper()
	var out sdk.InsightCollectionResponse
	if _, err := u.Client.Do(context.Background(), http.MethodGet, "/api/resources/"+u.Workspace+"/insights?rule="+rule, nil, &out); err != nil || len(out.Data) != 1 {
		t.Fatalf("insights of %s: %v %+v", rule, err, out.Data)
	}
	return out.Data[0].ID, out.Data[0].Status
}

// An owner runs detection from the insights page, accepts the stale
// machine's insight, converts it into a review packet and approves the
// packet, and dismisses the other insight with a reason; the summary
// follows. A member sees the list and the summary without a button, and
// the same form forged by the member is refused by the route.
func TestInsightsPageInChromium(t *testing.T) {
	ctx := browser(t)
	s, owner, bob := insightsWorld(t)
	bg := context.Background()
	page := s.URL + "/w/" + owner.Workspace + "/insights"
	link, err := s.Host.IssueLoginLink(bg, owner.Email)
	if err != nil {
		t.Fatal(err)
	}
	steps(t, ctx, "sign in and open the insights page from the home page",
		chromedp.Navigate(link),
		chromedp.Click(css("#signin")),
		chromedp.WaitVisible(css(".workspace")),
		chromedp.Click(css(`.workspace a[href$="/insights"]`)),
		chromedp.WaitVisible(css("#detect-go")),
	)
	if n := read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#insights .insight").length`)); n != 0 {
		t.Fatalf("insights before detection: %d", n)
	}
	steps(t, ctx, "run detection",
		chromedp.Click(css("#detect-go")),
		chromedp.WaitVisible(css("#notice")),
	)
	if n := text(t, ctx, "#notice"); !strings.Contains(n, "2 new") {
		t.Fatalf("notice after detect: %q", n)
	}
	// Answered with a redirect: at the page's own address, a reload runs
	// no second detection and shows the notice no more.
	if loc := location(t, ctx); loc != page {
		t.Fatalf("after detection the browser is at %s", loc)
	}
	steps(t, ctx, "reload after detection",
		chromedp.Reload(),
		chromedp.WaitVisible(css("#insights .insight")),
	)
	if n := read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#notice").length`)); n != 0 {
		t.Fatal("the reloaded page shows the detection notice again")
	}
	if n := auditCount(t, owner, "insights.detect"); n != 1 {
		t.Fatalf("%d detection runs audited after one press and a reload", n)
	}
	stale := `#insights .insight[data-rule="install_stale"]`
	unguarded := `#insights .insight[data-rule="unguarded_session"]`
	if c := text(t, ctx, stale); !strings.Contains(c, "old-box") || !strings.Contains(c, "open") {
		t.Fatalf("stale install card: %q", c)
	}
	// Evidence names the machines and the session, linked to their pages.
	if h := attr(t, ctx, stale+` .ev-install a`, "href"); !strings.HasPrefix(h, "/w/"+owner.Workspace+"/m/") || text(t, ctx, stale+` .ev-install a`) != "old-box" {
		t.Fatalf("stale machine link %q %q", h, text(t, ctx, stale+` .ev-install a`))
	}
	if h := attr(t, ctx, unguarded+` .ev-session a`, "href"); !strings.HasSuffix(h, "/s/s-bypass") || text(t, ctx, unguarded+` .ev-install a`) != "laptop" {
		t.Fatalf("unguarded session link %q, machine %q", h, text(t, ctx, unguarded+` .ev-install a`))
	}
	if c := text(t, ctx, "#summary"); !strings.Contains(c, "2 insights") || !strings.Contains(c, "2 open") {
		t.Fatalf("summary: %q", c)
	}
	webtest.Screenshot(t, ctx, "insights", 1280)
	webtest.Screenshot(t, ctx, "insights", 390)

	steps(t, ctx, "accept the stale machine's insight",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Click(css(stale+` button[value=accepted]`)),
		chromedp.WaitVisible(css(stale+`[data-status=accepted]`)),
	)
	staleID, st := insightStatus(t, owner, sdk.RuleInstallStale)
	if st != sdk.InsightAccepted {
		t.Fatalf("after accept the API says %s", st)
	}
	steps(t, ctx, "convert it",
		chromedp.Click(css(stale+` button[value=convert]`)),
		chromedp.WaitVisible(css(stale+`[data-status=converted]`)),
		chromedp.WaitVisible(css(`#packets .packet[data-status=pending]`)),
	)
	if _, st := insightStatus(t, owner, sdk.RuleInstallStale); st != sdk.InsightConverted {
		t.Fatalf("after convert the API says %s", st)
	}
	if n := read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('`+stale+` button').length`)); n != 0 {
		t.Fatalf("a converted insight still offers %d buttons", n)
	}
	steps(t, ctx, "approve the packet",
		chromedp.SendKeys(css(`#packets .packet input[name=reason]`), "retire the box"),
		chromedp.Click(css(`#packets .packet button[value=approve]`)),
		chromedp.WaitVisible(css(`#packets .packet[data-status=approved]`)),
	)
	if c := text(t, ctx, "#packets"); !strings.Contains(c, "retire the box") || !strings.Contains(c, "approved by owner@example.com") {
		t.Fatalf("packet: %q", c)
	}
	steps(t, ctx, "dismiss the unguarded-session insight with a reason",
		chromedp.SendKeys(css(unguarded+` input[name=reason]`), "a sandbox laptop"),
		chromedp.Click(css(unguarded+` button[value=dismissed]`)),
		chromedp.WaitVisible(css(unguarded+`[data-status=dismissed]`)),
	)
	if c := text(t, ctx, unguarded); !strings.Contains(c, "a sandbox laptop") || !strings.Contains(c, "dismissed by owner@example.com") {
		t.Fatalf("dismissed card: %q", c)
	}
	if c := text(t, ctx, "#summary"); !strings.Contains(c, "1 converted") || !strings.Contains(c, "1 dismissed") || !strings.Contains(c, "0 open") || !strings.Contains(c, "1 approved") {
		t.Fatalf("summary after the decisions: %q", c)
	}
	steps(t, ctx, "filter to dismissed",
		chromedp.SetValue(css("#filter-status"), "dismissed"),
		chromedp.Click(css("#filter button")),
		// The converted insight is not dismissed: gone once the filtered
		// page is in.
		chromedp.WaitNotPresent(css(stale)),
	)
	if n := read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#insights .insight").length`)); n != 1 || !strings.Contains(location(t, ctx), "status=dismissed") {
		t.Fatalf("filtered list: %d insights at %s", n, location(t, ctx))
	}
	webtest.Screenshot(t, ctx, "insights-decided", 1280)
	webtest.Screenshot(t, ctx, "insights-decided", 390)

	// Bob, a member, reads the page; no button changes anything.
	bl, _ := s.Host.IssueLoginLink(bg, bob.Email)
	signInAs(t, ctx, bl, page, "#insights")
	if n := read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#detect, #insights form, #packets form").length`)); n != 0 {
		t.Fatalf("a member sees %d forms that change insights", n)
	}
	if c := text(t, ctx, "#insights"); !strings.Contains(c, "old-box") {
		t.Fatalf("the member's list: %q", c)
	}
	if n := read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#ledger").length`)); n != 0 {
		t.Fatal("a member sees the ledger")
	}

	// The hidden button is not the guard: bob's forged forms, with his
	// own valid CSRF token, are refused by the routes.
	f := newFront(t, s)
	c := browserClient(t)
	signIn(t, s, f, c, bob.Email)
	_, body := get(t, c, f.URL+"/w/"+owner.Workspace+"/insights")
	csrf := csrfOf(t, body)
	ungID, _ := insightStatus(t, owner, sdk.RuleUnguardedSession)
	for what, form := range map[string]url.Values{
		"reopen":  {"action": {"status"}, "insight": {ungID}, "status": {"open"}},
		"convert": {"action": {"convert"}, "insight": {staleID}},
		"detect":  {"action": {"detect"}},
	} {
		form.Set("csrf", csrf)
		if _, b := submit(t, c, f.URL+"/w/"+owner.Workspace+"/insights", form, f.URL); !strings.Contains(b, "Refused") {
			t.Fatalf("bob's forged %s: %s", what, b)
		}
	}
	if _, st := insightStatus(t, owner, sdk.RuleUnguardedSession); st != sdk.InsightDismissed {
		t.Fatalf("bob's refused reopen changed the insight to %s", st)
	}
	// And the owner's own form without the CSRF token is refused before
	// it reaches the route.
	oc := browserClient(t)
	signIn(t, s, f, oc, owner.Email)
	if r, _ := post(t, oc, f.URL+"/w/"+owner.Workspace+"/insights", url.Values{"action": {"status"}, "insight": {ungID}, "status": {"open"}}, f.URL); r.StatusCode != http.StatusForbidden {
		t.Fatalf("a form without the CSRF token: %d", r.StatusCode)
	}
	if _, st := insightStatus(t, owner, sdk.RuleUnguardedSession); st != sdk.InsightDismissed {
		t.Fatalf("a form without the CSRF token changed the insight to %s", st)
	}
}
