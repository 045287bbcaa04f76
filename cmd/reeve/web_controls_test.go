package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/web/webtest"
)

// dialogs answers a page's confirm() and prompt() dialogs in the order the
// test queued its answers (none queued: dismiss), and keeps what they
// asked.
type dialogs struct {
	mu      sync.Mutex
	answers []dialogAnswer
	asked   []string
}

type dialogAnswer struct {
	accept bool
	text   string
}

func answerDialogs(ctx context.Context) *dialogs {
	d := &dialogs{}
	opening := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range opening {
			if err != nil {
				return
			}
			d.mu.Lock()
			a := dialogAnswer{}
			if len(d.answers) > 0 {
				a, d.answers = d.answers[0], d.answers[1:]
			}
			d.asked = append(d.asked, ev.Message)
			d.mu.Unlock()
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: a.accept, PromptText: a.text})
		}
	}()
	return d
}

func (d *dialogs) queue(a ...dialogAnswer) {
	d.mu.Lock()
	d.answers = append(d.answers, a...)
	d.mu.Unlock()
}

func (d *dialogs) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.asked)
}

// signIn opens a fresh browser signed in as email, on next.
func signIn(t *testing.T, data, serverURL, email, next string) context.Context {
	t.Helper()
	ctx := webtest.Browser(t)
	link := reeveOut(t, "server", "login-link", "--data-dir", data, "--email", email, "--app-url", serverURL)
	webtest.Steps(t, ctx, "sign in as "+email,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(link+"&next="+next),
		chromedp.WaitVisible(webtest.CSS("#signin")),
		chromedp.Click(webtest.CSS("#signin")),
		chromedp.WaitVisible(webtest.CSS("main")),
	)
	return ctx
}

// launchInPage launches a session from the machine page open in ctx and
// returns the session page's URL and the session's id once the page
// shows its log.
func launchInPage(t *testing.T, ctx context.Context, dir, agent, prompt string) (string, string) {
	t.Helper()
	webtest.Steps(t, ctx, "launch a "+agent+" session in "+dir,
		chromedp.SendKeys(webtest.CSS("#launch-dir"), dir),
		chromedp.SendKeys(webtest.CSS("#launch-agent"), agent),
		chromedp.SendKeys(webtest.CSS("#launch-prompt"), prompt),
		chromedp.Click(webtest.CSS("#launch-go")),
		chromedp.WaitVisible(webtest.CSS("#log")),
	)
	u := webtest.Location(t, ctx)
	return u, u[strings.LastIndex(u, "/")+1:]
}

// The controls of the session page do what they say on the daemon: the
// worktree's diff, roll back, squash-merge and retry, each behind a
// confirmation that, cancelled, changes nothing; the mode switch; Stop.
// The permission requests of a real Claude Code session reach, as
// notifications, every page of the people who may decide them (a team
// page included) and no one else's, and a decision clears them on all. A
// viewer's Allow is refused by the daemon and the page says why; access
// tokens expire every 20 seconds and the pages refresh them on their live
// channels, so a role given or taken away on the control plane counts on
// the daemon at the next refresh. A member's machine page lists only the
// sessions they may view.
func TestSessionControlsAndNotificationsInTheBrowser(t *testing.T) {
	owner := webtest.Browser(t) // started first: it installs Chromium when missing
	bg, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	data, serverURL, admin, ws := ownedServer(t, "owner@example.com", "--relay-token-ttl", "20s")
	member := operatorClient(t, data, serverURL, "viewer@example.com")
	inv, err := admin.CreateInvitation(bg, ws, sdk.InvitationCreateRequest{Email: "viewer@example.com", Role: sdk.RoleMember})
	if err != nil {
		t.Fatal(err)
	}
	acc, err := member.AcceptInvitation(bg, inv.Token)
	if err != nil {
		t.Fatal(err)
	}

	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "Touching one.", Calls: []agenttest.ToolCall{agenttest.Bash("touch one.txt")}},
		{Text: "Touching two.", Calls: []agenttest.ToolCall{agenttest.Bash("touch two.txt")}},
		{Text: "Done."},
	}})
	h := claudeHome(t, srv)
	// A project whose .reeve/access.yaml lets only the owner in, and a
	// plain directory anyone of the workspace may view.
	repo := devRepo(t)
	os.MkdirAll(filepath.Join(repo, ".reeve"), 0o755)
	os.WriteFile(filepath.Join(repo, ".reeve", "access.yaml"), []byte("version: 1\ndefault_role: none\nmembers:\n  - user: owner@example.com\n    role: admin\n"), 0o644)
	gitIn(t, repo, "add", "-A")
	gitIn(t, repo, "commit", "-q", "-m", "access rules")
	work := t.TempDir()
	h.must("add", repo)
	h.must("add", work)
	creds := pairToServer(t, bg, h, admin, serverURL, ws)
	machineURL := "/w/" + ws + "/m/" + creds.InstallID

	// ---- the worktree, as the owner ----
	answers := answerDialogs(owner)
	link := reeveOut(t, "server", "login-link", "--data-dir", data, "--email", "owner@example.com", "--app-url", serverURL)
	webtest.Steps(t, owner, "the owner signs in on the machine page",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(link+"&next="+machineURL),
		chromedp.Click(webtest.CSS("#signin")),
		chromedp.WaitVisible(webtest.CSS("#launch")),
	)
	waitJS(t, owner, "the machine's channel", `document.querySelector("#conn").dataset.state === "connected"`, 60*time.Second)
	_, sid := launchInPage(t, owner, repo, "shell", "echo one > a.txt; echo new > b.txt")
	idle := `/completed|idle/.test(document.querySelector("#status").textContent)`
	waitJS(t, owner, "the first turn", idle, 60*time.Second)
	webtest.Steps(t, owner, "a second turn", chromedp.SendKeys(webtest.CSS("#prompt"), "echo two > a.txt"), chromedp.Click(webtest.CSS("#send")))
	var cps []wire.Checkpoint
	waitFor(t, "two checkpoints", 60*time.Second, func() bool {
		cps = checkpointsOf(t, h.logEvents(sid))
		return len(cps) == 2
	})
	waitJS(t, owner, "the second turn's end", idle+` && [...document.querySelectorAll(".k-checkpoint")].length === 2`, 60*time.Second)
	wt := h.manifest(sid).Worktree
	readWT := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(wt, name))
		return string(b)
	}

	// The diff.
	webtest.Steps(t, owner, "show the diff", chromedp.Click(webtest.CSS("#wt-diff")))
	waitJS(t, owner, "the diff", `!!document.querySelector("#wt-out pre.diff") && document.querySelector("#wt-out pre.diff").textContent.includes("+two")`, 30*time.Second)
	webtest.Screenshot(t, owner, "session-diff", 1280)
	webtest.Screenshot(t, owner, "session-diff", 390)

	// Roll back to the first checkpoint: cancelled, nothing moves; then
	// confirmed, the worktree is the first checkpoint's.
	row := `.checkpoints li[data-sha="` + cps[0].SHA + `"]`
	webtest.Steps(t, owner, "list the checkpoints", chromedp.EmulateViewport(1280, 900), chromedp.Click(webtest.CSS("#wt-summary")), chromedp.WaitVisible(webtest.CSS(row)))
	webtest.Screenshot(t, owner, "session-checkpoints", 390)
	webtest.Steps(t, owner, "roll back, then cancel", chromedp.EmulateViewport(1280, 900), chromedp.Click(webtest.CSS(row+" .rollback")))
	waitFor(t, "the rollback's confirmation", 10*time.Second, func() bool { return answers.count() == 1 })
	time.Sleep(time.Second)
	if got := gitIn(t, repo, "rev-parse", "reeve/"+sid); got != cps[1].SHA || readWT("a.txt") != "two\n" {
		t.Fatalf("a cancelled rollback moved the branch to %s (a.txt %q)", got, readWT("a.txt"))
	}
	answers.queue(dialogAnswer{accept: true})
	webtest.Steps(t, owner, "roll back, confirmed", chromedp.Click(webtest.CSS(row+" .rollback")))
	waitJS(t, owner, "the rollback's result", `document.querySelector("#wt-out").textContent.includes("Rolled back to `+cps[0].SHA[:10]+`")`, 30*time.Second)
	if readWT("a.txt") != "one\n" || gitIn(t, wt, "rev-parse", "HEAD^{tree}") != gitIn(t, repo, "rev-parse", cps[0].SHA+"^{tree}") {
		t.Fatalf("after the rollback: a.txt %q, the worktree's tree is not the first checkpoint's", readWT("a.txt"))
	}

	// Squash-merge: cancelled, main stays; confirmed with a message, main
	// gains one commit with it.
	mainBefore := gitIn(t, repo, "rev-parse", "main")
	webtest.Steps(t, owner, "squash, then cancel", chromedp.Click(webtest.CSS("#wt-squash")))
	waitFor(t, "the squash's question", 10*time.Second, func() bool { return answers.count() == 3 })
	time.Sleep(time.Second)
	if gitIn(t, repo, "rev-parse", "main") != mainBefore {
		t.Fatal("a cancelled squash moved main")
	}
	answers.queue(dialogAnswer{accept: true, text: "Squashed from the browser"})
	webtest.Steps(t, owner, "squash, confirmed", chromedp.Click(webtest.CSS("#wt-squash")))
	waitJS(t, owner, "the squash's result", `document.querySelector("#wt-out").textContent.includes("Merged as")`, 30*time.Second)
	if subj := gitIn(t, repo, "log", "-1", "--format=%s", "main"); subj != "Squashed from the browser" || gitIn(t, repo, "rev-parse", "main^") != mainBefore {
		t.Fatalf("main after the squash: %q", subj)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, "b.txt")); string(b) != "new\n" {
		t.Fatalf("b.txt on main: %q", b)
	}

	// Mode: bypass cancelled stays detect (and the select says so);
	// confirmed, the daemon's mode is bypass.
	switchMode := func(what string) {
		t.Helper()
		t.Log(what)
		evalJS[any](t, owner, `(() => { const m = document.querySelector("#mode"); m.value = "bypass"; m.dispatchEvent(new Event("change")); return true; })()`)
	}
	switchMode("switch to bypass, then cancel")
	waitFor(t, "the mode's confirmation", 10*time.Second, func() bool { return answers.count() == 5 })
	waitJS(t, owner, "the select back on detect", `document.querySelector("#mode").value === "detect"`, 10*time.Second)
	if m := strings.TrimSpace(h.must("agent", "mode", sid).stdout); m != "detect" {
		t.Fatalf("a cancelled switch left mode %q", m)
	}
	answers.queue(dialogAnswer{accept: true})
	switchMode("switch to bypass, confirmed")
	waitFor(t, "bypass on the daemon", 30*time.Second, func() bool { return strings.TrimSpace(h.must("agent", "mode", sid).stdout) == "bypass" })

	// Retry from the first checkpoint: a new session on a new branch.
	webtest.Steps(t, owner, "list the checkpoints again", chromedp.Click(webtest.CSS("#wt-summary")), chromedp.WaitVisible(webtest.CSS(row)))
	answers.queue(dialogAnswer{accept: true})
	webtest.Steps(t, owner, "retry from the first checkpoint", chromedp.Click(webtest.CSS(row+" .retry")))
	var retryURL string
	waitFor(t, "the retried session's page", 30*time.Second, func() bool {
		lctx, cancel := context.WithTimeout(owner, 5*time.Second)
		defer cancel()
		loc, err := chromedp.Run(lctx, chromedp.Location())
		retryURL = loc
		return err == nil && strings.Contains(loc, "/s/") && !strings.HasSuffix(loc, "/"+sid)
	})
	webtest.Steps(t, owner, "the retried session's log", chromedp.WaitVisible(webtest.CSS("#log")))
	nid := retryURL[strings.LastIndex(retryURL, "/")+1:]
	if m := h.manifest(nid); m.RetryOf == nil || m.RetryOf.SessionID != sid || m.RetryOf.SHA != cps[0].SHA {
		t.Fatalf("the retry's manifest: %+v", m)
	}
	if n := answers.count(); n != 7 {
		t.Fatalf("%d dialogs asked: %q", n, answers.asked)
	}

	// ---- a Claude Code session in the open directory ----
	webtest.Steps(t, owner, "back to the machine", chromedp.Navigate(serverURL+machineURL), chromedp.WaitVisible(webtest.CSS("#launch")))
	waitJS(t, owner, "the machine's channel", `document.querySelector("#conn").dataset.state === "connected"`, 60*time.Second)
	claudeURL, cid := launchInPage(t, owner, work, "claude", "touch two files")
	waitJS(t, owner, "the first request on the owner's session page", `!!document.querySelector(".perm .allow")`, 120*time.Second)
	pid := h.pending()[0].ID

	// The owner's second browser, on the team page, is notified; the
	// member (a viewer of the session) on the home page is not.
	team := signIn(t, data, serverURL, "owner@example.com", "/w/"+ws+"/team")
	viewer := signIn(t, data, serverURL, "viewer@example.com", "/")
	notified := `!!document.querySelector('#notify .notice-item[data-request="` + pid + `"]')`
	waitJS(t, team, "the notification on the team page", notified, 60*time.Second)
	if !strings.Contains(webtest.Text(t, team, "#notify .notice-item"), "Bash wants permission") {
		t.Fatalf("the notification says %q", webtest.Text(t, team, "#notify .notice-item"))
	}
	webtest.Screenshot(t, team, "team-notified", 1280)
	webtest.Screenshot(t, team, "team-notified", 390)
	waitJS(t, viewer, "the member's page connected to the machine", `!!window.reeveNotices && [...window.reeveNotices.watched.values()].some(r => r.connects > 0)`, 60*time.Second)
	time.Sleep(2 * time.Second)
	if evalJS[bool](t, viewer, `!!document.querySelector("#notify .notice-item")`) {
		t.Fatal("a viewer was notified of a request they may not decide")
	}
	webtest.Screenshot(t, viewer, "home-member", 1280)
	webtest.Screenshot(t, viewer, "home-member", 390)

	// The member's machine page lists the Claude session, not the
	// project's sessions (its access.yaml lets only the owner in).
	webtest.Steps(t, viewer, "the member opens the machine", chromedp.Navigate(serverURL+machineURL), chromedp.WaitVisible(webtest.CSS("#launch")))
	waitJS(t, viewer, "the member's session list", `!!document.querySelector('#sessions li[data-session="`+cid+`"]')`, 60*time.Second)
	if evalJS[bool](t, viewer, `!!document.querySelector('#sessions li[data-session="`+sid+`"]') || !!document.querySelector('#sessions li[data-session="`+nid+`"]')`) {
		t.Fatal("the member's list shows sessions of a project that does not let them in")
	}
	waitJS(t, owner, "the owner's request card", `!!document.querySelector(".perm .allow")`, 10*time.Second)
	webtest.Steps(t, owner, "the owner's machine list", chromedp.Navigate(serverURL+machineURL), chromedp.WaitVisible(webtest.CSS("#launch")))
	waitJS(t, owner, "the owner's session list", `!!document.querySelector('#sessions li[data-session="`+sid+`"]') && !!document.querySelector('#sessions li[data-session="`+cid+`"]')`, 60*time.Second)
	webtest.Screenshot(t, owner, "machine-owner", 1280)
	webtest.Screenshot(t, owner, "machine-owner", 390)
	webtest.Steps(t, owner, "the owner back on the Claude session", chromedp.EmulateViewport(1280, 900), chromedp.Navigate(claudeURL), chromedp.WaitVisible(webtest.CSS("#log")))
	waitJS(t, owner, "the owner's request card again", `!!document.querySelector('.perm[data-request="`+pid+`"] .allow')`, 60*time.Second)

	// The member's Allow is refused by the daemon, and the page says so.
	webtest.Steps(t, viewer, "the member opens the session", chromedp.Navigate(claudeURL), chromedp.WaitVisible(webtest.CSS("#log")))
	waitJS(t, viewer, "the request on the member's page", `!!document.querySelector('.perm[data-request="`+pid+`"] .allow')`, 60*time.Second)
	// The page tells a viewer beforehand, and notifies only those who may
	// decide; the Allow button is there all the same, for the daemon to
	// refuse.
	waitJS(t, viewer, "the note on the member's card", `!document.querySelector(".perm .may-not").hidden && document.querySelector(".perm .may-not").textContent.includes("You are viewer")`, 10*time.Second)
	if evalJS[bool](t, viewer, `!!document.querySelector("#notify .notice-item")`) {
		t.Fatal("the member's session page notifies them of a request they may not decide")
	}
	webtest.Steps(t, viewer, "the member allows", chromedp.Click(webtest.CSS(".perm .allow")))
	waitJS(t, viewer, "the refusal on the member's page", `document.querySelector(".perm .decide-error").textContent.includes("approver")`, 30*time.Second)
	refusal := webtest.Text(t, viewer, ".perm .decide-error")
	if !strings.Contains(refusal, "refused this decision") || !strings.Contains(refusal, "you are viewer") {
		t.Fatalf("the refusal says %q", refusal)
	}
	webtest.Screenshot(t, viewer, "session-refused", 1280)
	webtest.Screenshot(t, viewer, "session-refused", 390)
	if ps := h.pending(); len(ps) != 1 || ps[0].ID != pid {
		t.Fatalf("a refused allow decided the request: %+v", ps)
	}

	// The owner makes the member an approver of the session on the control
	// plane; at the member's page's next refresh of its access token the
	// daemon takes their Allow, and the notifications clear everywhere.
	var rec string
	waitFor(t, "the session's record on the control plane", 90*time.Second, func() bool {
		var l sdk.RecordCollectionResponse
		if _, err := admin.Do(bg, http.MethodGet, "/api/resources/"+ws+"/sessions", nil, &l); err != nil {
			return false
		}
		for _, r := range l.Data {
			if r.Attributes["daemon_session_id"] == cid {
				rec = r.ID
				return true
			}
		}
		return false
	})
	var grant struct {
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if _, err := admin.Do(bg, http.MethodPost, "/api/resources/"+ws+"/sessions/"+rec+"/access", map[string]any{"subject_type": "user", "subject_id": acc.UserID, "role": sdk.SessionApprover}, &grant); err != nil || grant.Data.ID == "" {
		t.Fatalf("grant: %v %+v", err, grant)
	}
	before := evalJS[float64](t, viewer, `window.reeve.remote.refreshes`)
	waitJS(t, viewer, "a refresh of the member's access token", `window.reeve.remote.refreshes > `+jsNum(before)+` && document.querySelector("#conn").dataset.state === "connected"`, 40*time.Second)
	waitJS(t, team, "the notification still there", notified, 5*time.Second)
	waitJS(t, viewer, "the note gone from the member's card", `document.querySelector(".perm .may-not").hidden`, 5*time.Second)
	webtest.Steps(t, viewer, "the member allows again", chromedp.Click(webtest.CSS(".perm .allow")))
	for name, c := range map[string]context.Context{"member's session page": viewer, "owner's session page": owner, "team page": team} {
		waitJS(t, c, "the request cleared on the "+name, `!document.querySelector('.perm[data-request="`+pid+`"]') && !document.querySelector('#notify .notice-item[data-request="`+pid+`"]')`, 60*time.Second)
	}
	waitFor(t, "the allowed command to run", 120*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(work, "one.txt"))
		return err == nil
	})

	// The grant taken away: at the next refresh the member is a viewer
	// again, and their Allow of the second request is refused.
	waitJS(t, viewer, "the second request on the member's page", `!!document.querySelector(".perm .allow")`, 120*time.Second)
	if _, err := admin.Do(bg, http.MethodDelete, "/api/resources/"+ws+"/sessions/"+rec+"/access/"+grant.Data.ID, nil, nil); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	before = evalJS[float64](t, viewer, `window.reeve.remote.refreshes`)
	waitJS(t, viewer, "another refresh of the member's access token", `window.reeve.remote.refreshes > `+jsNum(before), 40*time.Second)
	webtest.Steps(t, viewer, "the member allows the second request", chromedp.Click(webtest.CSS(".perm .allow")))
	waitJS(t, viewer, "the second refusal", `document.querySelector(".perm .decide-error").textContent.includes("you are viewer")`, 30*time.Second)
	if len(h.pending()) != 1 {
		t.Fatal("the revoked member decided a request")
	}

	// Stop: cancelled, the session goes on; confirmed, the daemon kills it
	// and the page shows it.
	waitJS(t, owner, "the owner's channel", `document.querySelector("#conn").dataset.state === "connected"`, 60*time.Second)
	n := answers.count()
	webtest.Steps(t, owner, "stop, then cancel", chromedp.Click(webtest.CSS("#stop")))
	waitFor(t, "the stop's confirmation", 10*time.Second, func() bool { return answers.count() == n+1 })
	time.Sleep(time.Second)
	if st := h.sessionInfoOf(cid).Status; st == "killed" {
		t.Fatal("a cancelled stop killed the session")
	}
	answers.queue(dialogAnswer{accept: true})
	webtest.Steps(t, owner, "stop, confirmed", chromedp.Click(webtest.CSS("#stop")))
	waitFor(t, "the session killed on the daemon", 60*time.Second, func() bool { return h.sessionInfoOf(cid).Status == "killed" })
	waitJS(t, owner, "the page showing it stopped", `document.querySelector("#status").textContent.includes("killed")`, 60*time.Second)
	for name, c := range map[string]context.Context{"owner": owner, "team": team} {
		waitJS(t, c, "no notification left on the "+name+" page", `!document.querySelector("#notify .notice-item")`, 60*time.Second)
	}
	webtest.Screenshot(t, owner, "session-stopped", 1280)
	webtest.Screenshot(t, owner, "session-stopped", 390)
	if _, err := os.Stat(filepath.Join(work, "two.txt")); err == nil {
		t.Fatal("the undecided command ran")
	}

	// The member removed from the workspace: at their page's next refresh
	// the server refuses them a token, and the page stops, saying why.
	if _, err := admin.Do(bg, http.MethodDelete, "/api/workspaces/"+ws+"/members/"+strconv.FormatInt(acc.UserID, 10), nil, nil); err != nil {
		t.Fatalf("remove the member: %v", err)
	}
	waitJS(t, viewer, "the member's page stopped", `document.querySelector("#conn").dataset.state === "failed" && document.querySelector("#app-error").textContent.includes("may not reach machines of this workspace")`, 60*time.Second)

	// A page that stops refreshing its access token: when the token
	// expires the daemon closes the channel, the page says why and
	// reconnects with a fresh token.
	evalJS[any](t, owner, `(() => {
		window.__said = [];
		const e = document.querySelector("#app-error");
		new MutationObserver(() => { if (e.textContent) window.__said.push(e.textContent); }).observe(e, { childList: true, characterData: true, subtree: true });
		const r = window.reeve.remote;
		r.refreshAccess = async () => {};
		return true;
	})()`)
	connects := evalJS[float64](t, owner, `window.reeve.remote.connects`)
	waitJS(t, owner, "the expiry's message", `window.__said.some(s => s.includes("the access token expired"))`, 45*time.Second)
	waitJS(t, owner, "a new channel after the expiry", `window.reeve.remote.connects > `+jsNum(connects)+` && document.querySelector("#conn").dataset.state === "connected"`, 30*time.Second)
	t.Logf("on expiry the page said: %s", evalJS[string](t, owner, `window.__said.find(s => s.includes("expired"))`))
}
