package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/web/webtest"
)

// relayTap stands where a relay's network is: every WebSocket of the
// relay URL (the daemon's and the browser's) passes through it to the
// server's relay, and it keeps every message, so a test can show the relay
// never saw plaintext. It can also alter or replay the next data envelope
// on its way to a client.
type relayTap struct {
	ln       net.Listener
	target   atomic.Value // the server's origin
	mu       sync.Mutex
	recorded [][]byte
	tamper   atomic.Value // "", "flip", "dup" or "hello2": applied once
	// swap, when set, replaces the relay JWT of the next client upgrade.
	swap atomic.Value
}

func startRelayTap(t *testing.T) *relayTap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &relayTap{ln: ln}
	p.tamper.Store("")
	p.swap.Store("")
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

func (p *relayTap) URL() string { return "http://" + p.ln.Addr().String() }

func (p *relayTap) record(b []byte) {
	p.mu.Lock()
	p.recorded = append(p.recorded, append([]byte(nil), b...))
	p.mu.Unlock()
}

func (p *relayTap) all() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.recorded...)
}

func (p *relayTap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target, _ := p.target.Load().(string)
	var offered []string
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, s := range strings.Split(v, ",") {
			offered = append(offered, strings.TrimSpace(s))
		}
	}
	if tok, _ := p.swap.Load().(string); tok != "" && r.URL.Query().Get("role") == "client" && p.swap.CompareAndSwap(tok, "") {
		for i, o := range offered {
			if strings.HasPrefix(o, "reeve.jwt.") {
				offered[i] = "reeve.jwt." + tok
			}
		}
	}
	hdr := http.Header{}
	if a := r.Header.Get("Authorization"); a != "" {
		hdr.Set("Authorization", a)
	}
	ctx := context.Background()
	up, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(target, "http")+r.URL.RequestURI(), &websocket.DialOptions{Subprotocols: offered, HTTPHeader: hdr})
	if err != nil {
		st := http.StatusBadGateway
		if resp != nil {
			st = resp.StatusCode
		}
		http.Error(w, err.Error(), st)
		return
	}
	var protos []string
	if sp := up.Subprotocol(); sp != "" {
		protos = []string{sp}
	}
	down, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: protos, InsecureSkipVerify: true})
	if err != nil {
		up.CloseNow()
		return
	}
	up.SetReadLimit(1 << 20)
	down.SetReadLimit(1 << 20)
	toClient := r.URL.Query().Get("role") == "client"
	go p.pump(up, down, toClient)
	p.pump(down, up, false)
}

func (p *relayTap) pump(from, to *websocket.Conn, toClient bool) {
	ctx := context.Background()
	for {
		typ, b, err := from.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				to.Close(ce.Code, ce.Reason)
			} else {
				to.CloseNow()
			}
			return
		}
		p.record(b)
		copies := [][]byte{b}
		if toClient && bytes.Contains(b, []byte(`"t":"data"`)) {
			copies = p.alter(b)
		}
		for _, c := range copies {
			if err := to.Write(ctx, typ, c); err != nil {
				from.CloseNow()
				return
			}
		}
	}
}

// alter applies the pending tamper mode to a sealed data frame (not a
// handshake message) on its way to a client.
func (p *relayTap) alter(b []byte) [][]byte {
	mode, _ := p.tamper.Load().(string)
	if mode == "" {
		return [][]byte{b}
	}
	var env map[string]any
	if json.Unmarshal(b, &env) != nil {
		return [][]byte{b}
	}
	s, _ := env["p"].(string)
	payload, err := base64.StdEncoding.DecodeString(s)
	want := byte(3)
	if mode == "hello2" {
		want = 2
	}
	if err != nil || len(payload) < 30 || payload[0] != want || !p.tamper.CompareAndSwap(mode, "") {
		return [][]byte{b}
	}
	if mode == "dup" {
		return [][]byte{b, b}
	}
	payload[len(payload)-1] ^= 0x40
	env["p"] = base64.StdEncoding.EncodeToString(payload)
	out, _ := json.Marshal(env)
	return [][]byte{out}
}

// waitJS polls a JavaScript predicate in the page.
func waitJS(t *testing.T, ctx context.Context, what, expr string, timeout time.Duration) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(sctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout))); err != nil {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		html, _ := chromedp.Run(hctx, chromedp.OuterHTML(chromedp.CSS("main")))
		t.Fatalf("waiting for %s: %v\npage: %s", what, err, html)
	}
}

func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	return webtest.Read(t, ctx, chromedp.Evaluate[T](expr))
}

// contiguousJS is true when the log's rows are seq 1..N with no gap or
// duplicate, N being the last seq the page handled.
const contiguousJS = `(() => { const ev = window.reeve && window.reeve.log ? window.reeve.log.events : []; return ev.length > 0 && ev.every((e, i) => e.seq === i + 1); })()`

// A person steers a real Claude Code session on a paired machine from the
// browser: signs in from the printed link, sees the machine online, launches
// a session, allows one Bash request and denies another, sends a prompt,
// reloads and resumes without gaps, and survives a tampered and a replayed
// frame; the relay saw none of the prompts.
func TestSteerFromTheBrowser(t *testing.T) {
	ctx := webtest.Browser(t)
	bg, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	tap := startRelayTap(t)
	data := filepath.Join(t.TempDir(), "server")
	addr := freePort(t)
	// Relay and access tokens live 30 s: the pages refresh them on their
	// live channels all along, and a token kept from the start has long
	// expired when it is replayed below.
	srv1, _ := startReady(t, nil, "(API ", "server", "--listen", addr, "--data-dir", data, "--relay-url", tap.URL(), "--relay-token-ttl", "30s")
	serverURL := "http://" + addr
	tap.target.Store(serverURL)
	user := operatorClient(t, data, serverURL, "owner@example.com")
	wss, err := user.ListWorkspaces(bg)
	if err != nil || len(wss) == 0 {
		t.Fatalf("workspaces: %v %v", wss, err)
	}
	ws := wss[0].ID
	var early sdk.RelayTokenResponse
	if _, err := user.Do(bg, http.MethodPost, "/api/workspaces/"+ws+"/relay-token", map[string]any{}, &early); err != nil {
		t.Fatal(err)
	}

	const (
		secret1 = "MARKER-first-prompt-7f3a"
		secret2 = "MARKER-second-prompt-91bc"
		said    = "MARKER-agent-answer-5d2e"
	)
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "Running the first command.", Calls: []agenttest.ToolCall{agenttest.Bash("echo from-the-browser > allowed.txt")}},
		{Text: "Now the second.", Calls: []agenttest.ToolCall{agenttest.Bash("touch denied.txt")}},
		{Text: "First turn done."},
		{Text: said},
		{Text: "One more.", Calls: []agenttest.ToolCall{agenttest.Bash("touch third.txt")}},
		{Text: "Fine."},
	}})
	h := claudeHome(t, srv)
	work := t.TempDir()
	h.must("add", work)
	creds := pairToServer(t, bg, h, user, serverURL, ws)

	// Sign in from the link the operator printed.
	link := reeveOut(t, "server", "login-link", "--data-dir", data, "--email", "owner@example.com", "--app-url", serverURL)
	webtest.Steps(t, ctx, "open the printed login link",
		chromedp.Navigate(link),
		chromedp.WaitVisible(webtest.CSS("#signin")),
		chromedp.Click(webtest.CSS("#signin")),
		chromedp.WaitVisible(webtest.CSS(".workspace")),
	)
	machineSel := `.machine[data-install="` + creds.InstallID + `"]`
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		webtest.Steps(t, ctx, "reload home", chromedp.Reload(), chromedp.WaitVisible(webtest.CSS(".workspace")))
		if evalJS[bool](t, ctx, `document.querySelector('`+machineSel+`')?.dataset.online === "true"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the machine is not shown online: %s", webtest.Read(t, ctx, chromedp.OuterHTML(chromedp.CSS("main"))))
		}
	}
	webtest.Screenshot(t, ctx, "home", 1280)
	webtest.Screenshot(t, ctx, "home", 390)

	// The machine page: its anchor, a live connection, launch.
	webtest.Steps(t, ctx, "open the machine",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Click(webtest.CSS(machineSel+" a")),
		chromedp.WaitVisible(webtest.CSS("#launch")),
	)
	waitJS(t, ctx, "the machine's channel", `document.querySelector("#conn").dataset.state === "connected"`, 60*time.Second)
	if fp := webtest.Text(t, ctx, "#fingerprint"); fp != strings.TrimSpace(h.must("pair", "anchor").stdout) {
		t.Fatalf("machine page shows anchor %q", fp)
	}
	webtest.Screenshot(t, ctx, "machine", 1280)
	webtest.Screenshot(t, ctx, "machine", 390)
	webtest.Steps(t, ctx, "launch a Claude Code session",
		chromedp.EmulateViewport(1280, 900),
		chromedp.SendKeys(webtest.CSS("#launch-dir"), work),
		chromedp.SendKeys(webtest.CSS("#launch-agent"), "claude"),
		chromedp.SendKeys(webtest.CSS("#launch-prompt"), "please run the commands "+secret1),
		chromedp.Click(webtest.CSS("#launch-go")),
		chromedp.WaitVisible(webtest.CSS("#log")),
	)
	sessionURL := webtest.Location(t, ctx)

	// The first Bash request: allow it, and see it run.
	waitJS(t, ctx, "the first permission request", `!!document.querySelector(".perm .allow")`, 120*time.Second)
	if cmd := webtest.Text(t, ctx, ".perm pre"); !strings.Contains(cmd, "allowed.txt") {
		t.Fatalf("first request shows %q", cmd)
	}
	webtest.Screenshot(t, ctx, "session-pending", 1280)
	webtest.Screenshot(t, ctx, "session-pending", 390)
	webtest.Steps(t, ctx, "allow", chromedp.EmulateViewport(1280, 900), chromedp.Click(webtest.CSS(".perm .allow")))
	waitJS(t, ctx, "the allow on the record", `[...document.querySelectorAll(".k-permission-decision")].some(e => e.textContent.includes("allowed by human"))`, 120*time.Second)

	// Claude Code may ask again for the command it was allowed (its own
	// permission prompt after the hook's answer): allow those too, until
	// the second command is asked about; then deny it with a reason.
	const askedJS = `[...document.querySelectorAll(".perm pre")].map(e => e.textContent).join("\n")`
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		asked := evalJS[string](t, ctx, askedJS)
		if strings.Contains(asked, "denied.txt") {
			break
		}
		if strings.Contains(asked, "allowed.txt") {
			webtest.Steps(t, ctx, "allow again", chromedp.Click(webtest.CSS(".perm .allow")))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no request for the second command: %s", webtest.Read(t, ctx, chromedp.OuterHTML(chromedp.CSS("main"))))
		}
	}
	webtest.Steps(t, ctx, "deny with a reason",
		chromedp.SendKeys(webtest.CSS(".perm .reason"), "not this one"),
		chromedp.Click(webtest.CSS(".perm .deny")),
	)
	waitJS(t, ctx, "the turn to end", `[...document.querySelectorAll(".k-agent-message")].some(e => e.textContent.includes("First turn done."))`, 120*time.Second)
	if b, err := os.ReadFile(filepath.Join(work, "allowed.txt")); err != nil || !strings.Contains(string(b), "from-the-browser") {
		t.Fatalf("the allowed command did not run: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(work, "denied.txt")); err == nil {
		t.Fatal("the denied command ran")
	}
	if sent := toolResultsSent(t, srv); !strings.Contains(sent, "not this one") {
		t.Fatalf("the agent was not told the reason: %s", sent)
	}

	// A prompt from the page starts the next turn.
	waitJS(t, ctx, "the session to be idle", `!document.querySelector("#pending:not([hidden])") && /idle|completed/.test(document.querySelector("#status").textContent)`, 60*time.Second)
	webtest.Steps(t, ctx, "send a prompt",
		chromedp.SendKeys(webtest.CSS("#prompt"), "and now "+secret2),
		chromedp.Click(webtest.CSS("#send")),
	)
	waitJS(t, ctx, "the answer to the prompt", `[...document.querySelectorAll(".k-agent-message")].some(e => e.textContent.includes("`+said+`"))`, 120*time.Second)
	waitJS(t, ctx, "no gap in the log", contiguousJS, 10*time.Second)
	webtest.Screenshot(t, ctx, "session", 1280)
	webtest.Screenshot(t, ctx, "session", 390)

	// Reload: the whole log again, with no gap and no duplicate.
	last := evalJS[float64](t, ctx, `window.reeve.log.events.length`)
	webtest.Steps(t, ctx, "reload", chromedp.EmulateViewport(1280, 900), chromedp.Navigate(sessionURL), chromedp.WaitVisible(webtest.CSS("#log")))
	waitJS(t, ctx, "the log after reload", `window.reeve && window.reeve.log.events.length >= `+jsNum(last)+` && `+contiguousJS, 60*time.Second)

	// A tampered frame and a replayed frame: a clear message, a new
	// channel, and the log goes on without a gap.
	for _, c := range []struct{ mode, says string }{{"flip", "failed its integrity check"}, {"dup", "arrived out of order or twice"}} {
		tap.tamper.Store(c.mode)
		evalJS[any](t, ctx, `window.reeve.remote.request("list", {scope: "ALL"}).catch(() => null), true`)
		waitJS(t, ctx, "the "+c.mode+" message", `document.querySelector("#app-error").textContent.includes("`+c.says+`")`, 30*time.Second)
		waitJS(t, ctx, "a new channel after "+c.mode, `document.querySelector("#conn").dataset.state === "connected"`, 60*time.Second)
	}
	waitJS(t, ctx, "no gap after the new channels", contiguousJS, 10*time.Second)

	// Someone in the middle of the handshake (an answer that does not
	// open with the anchor): the page refuses the machine for good and
	// says why.
	tap.tamper.Store("hello2")
	webtest.Steps(t, ctx, "reload with a forged handshake", chromedp.Navigate(sessionURL), chromedp.WaitVisible(webtest.CSS("#log")))
	waitJS(t, ctx, "the anchor refusal", `document.querySelector("#conn").dataset.state === "failed" && document.querySelector("#app-error").textContent.includes("did not prove it holds its trust anchor")`, 60*time.Second)
	if n := evalJS[float64](t, ctx, `window.reeve.log.events.length`); n != 0 {
		t.Fatalf("the page showed %v events from a machine that failed the handshake", n)
	}

	// A relay token of another workspace (and one with a forged
	// signature) is refused by the relay; the page says so, fetches a
	// fresh token and carries on.
	other := &sdk.Client{BaseURL: serverURL, Token: strings.TrimSpace(reeveOut(t, "server", "token", "create", "--data-dir", data, "--user", "stranger@example.com"))}
	ows, err := other.ListWorkspaces(bg)
	if err != nil || len(ows) != 1 || ows[0].ID == ws {
		t.Fatalf("stranger's workspaces: %v %v", ows, err)
	}
	var otherTok sdk.RelayTokenResponse
	if _, err := other.Do(bg, http.MethodPost, "/api/workspaces/"+ows[0].ID+"/relay-token", map[string]any{}, &otherTok); err != nil {
		t.Fatal(err)
	}
	// The early token has a 30 s lifetime; on a quick run the steps
	// above take less, so wait for it to lapse rather than assume it has.
	if d := time.Until(early.Data.ExpiresAt); d > -time.Second {
		t.Logf("waiting %s for the early relay token to expire", (d + time.Second).Round(time.Millisecond))
		time.Sleep(d + time.Second)
	}
	// Another workspace's, a forged signature, an expired one.
	for _, bad := range []string{otherTok.Data.Token, otherTok.Data.Token[:len(otherTok.Data.Token)-4] + "AAAA", early.Data.Token} {
		tap.swap.Store(bad)
		webtest.Steps(t, ctx, "reload with a bad relay token", chromedp.Navigate(sessionURL), chromedp.WaitVisible(webtest.CSS("#log")))
		waitJS(t, ctx, "the relay's refusal", `document.querySelector("#app-error").textContent.includes("the relay refused the connection")`, 60*time.Second)
		waitJS(t, ctx, "a connection with a fresh token", `document.querySelector("#conn").dataset.state === "connected" && `+contiguousJS, 60*time.Second)
	}

	// Two pages on the session: a permission request shows on both (with
	// an in-page notification), and deciding it on one clears it on both.
	// (A second browser: a background tab of a headless browser is
	// throttled.)
	tab2 := webtest.Browser(t)
	link2 := reeveOut(t, "server", "login-link", "--data-dir", data, "--email", "owner@example.com", "--app-url", serverURL)
	webtest.Steps(t, tab2, "a second page on the session",
		chromedp.Navigate(link2+"&next="+url.QueryEscape(strings.TrimPrefix(sessionURL, serverURL))),
		chromedp.Click(webtest.CSS("#signin")),
		chromedp.WaitVisible(webtest.CSS("#log")),
	)
	waitJS(t, tab2, "the second page's channel", `document.querySelector("#conn").dataset.state === "connected" && `+contiguousJS, 60*time.Second)
	webtest.Steps(t, ctx, "ask for one more command",
		chromedp.SendKeys(webtest.CSS("#prompt"), "one more"),
		chromedp.Click(webtest.CSS("#send")),
	)
	for _, c := range []context.Context{ctx, tab2} {
		waitJS(t, c, "the request on both pages", `!!document.querySelector(".perm .allow") && !!document.querySelector("#notify .notice-item")`, 120*time.Second)
	}
	webtest.Steps(t, tab2, "deny on the second page", chromedp.Click(webtest.CSS(".perm .deny")))
	for _, c := range []context.Context{ctx, tab2} {
		waitJS(t, c, "the request cleared on both pages", `!document.querySelector(".perm") && !document.querySelector("#notify .notice-item")`, 60*time.Second)
	}

	// The page stays open across a restart of the server (and its relay):
	// it says it lost the connection, and carries on when the server is
	// back, with no gap.
	srv1.cmd.Process.Signal(os.Interrupt)
	srv1.cmd.Wait()
	waitJS(t, ctx, "the lost connection on the page", `document.querySelector("#conn").dataset.state !== "connected" && document.querySelector("#app-error").textContent.length > 0`, 60*time.Second)
	lost := webtest.Text(t, ctx, "#app-error")
	startReady(t, nil, "(API ", "server", "--listen", addr, "--data-dir", data, "--relay-url", tap.URL(), "--relay-token-ttl", "30s")
	waitJS(t, ctx, "the page back after the restart", `document.querySelector("#conn").dataset.state === "connected" && `+contiguousJS, 120*time.Second)
	t.Logf("during the restart the page said: %s", lost)

	// The relay saw ciphertext only.
	rec := tap.all()
	if len(rec) < 20 {
		t.Fatalf("the tap recorded only %d messages", len(rec))
	}
	for _, m := range rec {
		for _, s := range []string{secret1, secret2, said, "allowed.txt", "not this one"} {
			if bytes.Contains(m, []byte(s)) || bytes.Contains(m, []byte(base64.StdEncoding.EncodeToString([]byte(s))[:12])) {
				t.Fatalf("the relay saw %q in %s", s, m)
			}
		}
	}
}

func jsNum(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}
