package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store/storetest"
	"reeve.dev/reeve/server/webhooks"
)

// The outbound receiver of these tests is an independent implementation:
// a node program verifying every delivery with the standardwebhooks
// package from the npm registry, installed once into the repository's
// .cache like the pinned agent CLIs.
const standardWebhooksVersion = "1.1.1"

func repoRoot(t testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}

// installStandardWebhooks returns the node_modules folder holding the
// package, installing it on first use (into a temporary folder renamed
// into place, so a concurrent or interrupted install never leaves a
// half-written one).
func installStandardWebhooks(t testing.TB) string {
	t.Helper()
	node, npm := lookPath("node"), lookPath("npm")
	if node == "" || npm == "" {
		if os.Getenv("REEVE_REQUIRE_AGENTS") == "1" {
			t.Fatal("node and npm are required for the outbound webhook receiver")
		}
		t.Skip("node or npm not found: the standardwebhooks receiver cannot run")
	}
	cache := filepath.Join(repoRoot(t), ".cache", "npm")
	final := filepath.Join(cache, "standardwebhooks@"+standardWebhooksVersion)
	mods := filepath.Join(final, "node_modules")
	if _, err := os.Stat(filepath.Join(mods, "standardwebhooks", "package.json")); err == nil {
		return mods
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(cache, ".standardwebhooks-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", tmp, "--no-audit", "--no-fund", "--no-save", "--no-package-lock", "--ignore-scripts", "--loglevel=error",
		"standardwebhooks@"+standardWebhooksVersion)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install standardwebhooks: %v: %s", err, out)
	}
	os.Chmod(tmp, 0o755)
	if err := os.Rename(tmp, final); err != nil {
		if _, err2 := os.Stat(filepath.Join(mods, "standardwebhooks", "package.json")); err2 != nil {
			t.Fatalf("install standardwebhooks: %v", err)
		}
	}
	return mods
}

func lookPath(name string) string {
	p, _ := exec.LookPath(name)
	return p
}

const receiverJS = `
const http = require("http");
const fs = require("fs");
const { Webhook } = require("standardwebhooks");
const failFirst = Number(process.env.FAIL_FIRST || "0");
const seen = {};
const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString("utf8");
    const secrets = fs.readFileSync(process.env.SECRET_FILE, "utf8").split("\n").filter(Boolean);
    const results = secrets.map((s) => {
      try { new Webhook(s).verify(body, req.headers); return "ok"; } catch (e) { return String(e.message || e); }
    });
    const id = req.headers["webhook-id"] || "";
    seen[id] = (seen[id] || 0) + 1;
    let type = "";
    try { type = JSON.parse(body).type; } catch (e) {}
    const fail = seen[id] <= failFirst;
    console.log(JSON.stringify({ id, n: seen[id], type, results, at: Date.now(), answered: fail ? 500 : 200 }));
    res.writeHead(fail ? 500 : 200, { "content-type": "text/plain" });
    res.end(fail ? "not yet" : "ok");
  });
});
server.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ port: server.address().port })));
`

type received struct {
	ID       string   `json:"id"`
	N        int      `json:"n"`
	Type     string   `json:"type"`
	Results  []string `json:"results"`
	At       int64    `json:"at"`
	Answered int      `json:"answered"`
}

type receiver struct {
	URL        string
	secretFile string
	mu         sync.Mutex
	got        []received
	arrived    chan struct{}
}

// startReceiver runs the node receiver; it answers 500 to the first
// failFirst attempts of each message id, then 200.
func startReceiver(t *testing.T, failFirst int) *receiver {
	t.Helper()
	mods := installStandardWebhooks(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "receiver.js")
	if err := os.WriteFile(script, []byte(receiverJS), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &receiver{secretFile: filepath.Join(dir, "secrets"), arrived: make(chan struct{}, 1000)}
	if err := os.WriteFile(r.secretFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", script)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods, "SECRET_FILE="+r.secretFile, fmt.Sprintf("FAIL_FIRST=%d", failFirst))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatal("the receiver did not start")
	}
	var hello struct{ Port int }
	if err := json.Unmarshal(sc.Bytes(), &hello); err != nil || hello.Port == 0 {
		t.Fatalf("receiver said %q", sc.Text())
	}
	r.URL = fmt.Sprintf("http://127.0.0.1:%d/hooks", hello.Port)
	go func() {
		for sc.Scan() {
			var g received
			if json.Unmarshal(sc.Bytes(), &g) == nil {
				r.mu.Lock()
				r.got = append(r.got, g)
				r.mu.Unlock()
				r.arrived <- struct{}{}
			}
		}
	}()
	return r
}

func (r *receiver) setSecrets(t *testing.T, secrets ...string) {
	t.Helper()
	if err := os.WriteFile(r.secretFile, []byte(strings.Join(secrets, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// wait returns the requests received once cond holds, failing after a
// generous timeout (the machine is shared and slow).
func (r *receiver) wait(t *testing.T, what string, cond func([]received) bool) []received {
	t.Helper()
	deadline := time.After(90 * time.Second)
	for {
		r.mu.Lock()
		got := append([]received(nil), r.got...)
		r.mu.Unlock()
		if cond(got) {
			return got
		}
		select {
		case <-r.arrived:
		case <-deadline:
			t.Fatalf("%s: timed out; received %+v", what, got)
		}
	}
}

func ofType(got []received, typ string) []received {
	var out []received
	for _, g := range got {
		if g.Type == typ {
			out = append(out, g)
		}
	}
	return out
}

func fastRetries() webhooks.Options {
	return webhooks.Options{Targets: webhooks.TargetPolicy{AllowPrivate: true}, Poll: 50 * time.Millisecond,
		Schedule: webhooks.Schedule{Base: 400 * time.Millisecond, Factor: 2, MaxAttempts: 6, Jitter: 0.1}}
}

func createOutbound(t *testing.T, s *servertest.Server, u servertest.User, url string, events ...string) map[string]any {
	t.Helper()
	a := expect(t, do(t, s, "POST", "/api/integration-webhooks", u.Token, map[string]any{"url": url, "events": events}, "X-Reeve-Workspace", u.Workspace), 201, "create outbound endpoint")
	return dataOf(a)
}

// A paired machine is announced to a receiver that fails three times: four
// signed attempts, each verified by the standardwebhooks package, with
// growing delays, then delivered; deliveries shows all four.
func TestOutboundRetriesUntilDelivered(t *testing.T) {
	rcv := startReceiver(t, 3)
	s := servertest.Start(t, servertest.Options{Webhooks: fastRetries()})
	u := s.NewUser("owner@example.com")
	ep := createOutbound(t, s, u, rcv.URL, "install.paired", "install.detached")
	rcv.setSecrets(t, ep["secret"].(string))

	start := time.Now()
	inst := expect(t, do(t, s, "POST", "/api/workspaces/"+u.Workspace+"/installs", u.Token, map[string]any{"name": "build-box"}), 201, "register a machine")
	if time.Since(start) > 30*time.Second {
		t.Fatal("the request waited for the delivery")
	}
	got := rcv.wait(t, "four attempts", func(g []received) bool { return len(ofType(g, "install.paired")) >= 4 })
	paired := ofType(got, "install.paired")
	for i, g := range paired {
		if len(g.Results) != 1 || g.Results[0] != "ok" {
			t.Fatalf("attempt %d did not verify with standardwebhooks: %v", i+1, g.Results)
		}
		if g.ID != paired[0].ID || g.N != i+1 {
			t.Fatalf("attempt %d: id %s n %d", i+1, g.ID, g.N)
		}
	}
	d1, d2, d3 := paired[1].At-paired[0].At, paired[2].At-paired[1].At, paired[3].At-paired[2].At
	if !(d1 < d2 && d2 < d3) || d1 < 300 {
		t.Fatalf("delays between attempts do not grow: %d, %d, %d ms", d1, d2, d3)
	}
	t.Logf("delays between attempts: %d, %d, %d ms", d1, d2, d3)
	if paired[3].Answered != 200 {
		t.Fatalf("fourth attempt answered %d", paired[3].Answered)
	}

	dl := waitDeliveries(t, s, u, ep["id"].(string), 4)
	list := dl.JSON["data"].([]any)
	if len(list) != 4 {
		t.Fatalf("deliveries: %s", dl.Body)
	}
	for i, it := range list {
		d := it.(map[string]any)
		wantStatus, wantOutcome := float64(500), "retry"
		if i == 3 {
			wantStatus, wantOutcome = 200, "delivered"
		}
		if d["attempt"] != float64(i+1) || d["status_code"] != wantStatus || d["outcome"] != wantOutcome || d["latency_ms"] == nil {
			t.Fatalf("delivery %d: %v", i, d)
		}
	}
	if msgs := dl.JSON["messages"].([]any); msgs[0].(map[string]any)["state"] != "delivered" {
		t.Fatalf("message state: %v", msgs[0])
	}

	// Detaching the machine is an event too; rotation signs with both
	// secrets, so a receiver that knows only the new one verifies.
	rot := expect(t, do(t, s, "POST", "/api/integration-webhooks/"+ep["id"].(string)+"/rotate-secret", u.Token, map[string]any{}, "X-Reeve-Workspace", u.Workspace), 200, "rotate")
	newSecret := dataOf(rot)["secret"].(string)
	rcv.setSecrets(t, newSecret, ep["secret"].(string))
	expect(t, do(t, s, "DELETE", "/api/workspaces/"+u.Workspace+"/installs/"+dataOf(inst)["id"].(string), u.Token, nil), 204, "detach")
	got = rcv.wait(t, "detach delivered", func(g []received) bool {
		d := ofType(g, "install.detached")
		return len(d) > 0 && d[len(d)-1].Answered == 200
	})
	for _, g := range ofType(got, "install.detached") {
		if g.Results[0] != "ok" || g.Results[1] != "ok" {
			t.Fatalf("during the grace period both secrets must verify: %v", g.Results)
		}
	}
}

// A server stopped between attempts delivers after it starts again: the
// outbox is in the database, not in memory.
func TestOutboundSurvivesRestart(t *testing.T) {
	rcv := startReceiver(t, 3)
	o := fastRetries()
	o.Schedule.Base = 1500 * time.Millisecond
	s := servertest.Start(t, servertest.Options{Webhooks: o})
	u := s.NewUser("owner@example.com")
	ep := createOutbound(t, s, u, rcv.URL, "webhook.ping")
	rcv.setSecrets(t, ep["secret"].(string))
	expect(t, do(t, s, "POST", "/api/integration-webhooks/"+ep["id"].(string)+"/test-delivery", u.Token, map[string]any{}, "X-Reeve-Workspace", u.Workspace), 201, "test delivery")
	rcv.wait(t, "two attempts", func(g []received) bool { return len(ofType(g, "webhook.ping")) >= 2 })
	s.Stop()
	s2 := servertest.Start(t, servertest.Options{DataDir: s.DataDir, Webhooks: o})
	got := rcv.wait(t, "delivered after restart", func(g []received) bool {
		p := ofType(g, "webhook.ping")
		return len(p) >= 4 && p[len(p)-1].Answered == 200
	})
	p := ofType(got, "webhook.ping")
	if len(p) != 4 || p[0].ID != p[3].ID || p[3].Results[0] != "ok" {
		t.Fatalf("after restart: %+v", p)
	}
	dl := waitDeliveries(t, s2, u, ep["id"].(string), 4)
	if list := dl.JSON["data"].([]any); len(list) != 4 || list[3].(map[string]any)["outcome"] != "delivered" {
		t.Fatalf("deliveries after restart: %s", dl.Body)
	}
}

// Endpoint URLs: only http(s), never the server itself, private targets
// only with the setting.
func TestOutboundTargets(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("owner@example.com")
	for _, bad := range []string{"ftp://example.com/x", "file:///etc/passwd", "gopher://example.com", "http://127.0.0.1:9/x", "http://10.1.2.3/x", "http://[::1]:9/x",
		"http://169.254.169.254/latest/meta-data", "http://localhost:9/", s.URL + "/api/health", "http://user:pw@example.com/", "not a url"} {
		a := do(t, s, "POST", "/api/integration-webhooks", u.Token, map[string]any{"url": bad, "events": []string{"*"}}, "X-Reeve-Workspace", u.Workspace)
		expect(t, a, 422, "endpoint "+bad)
	}
	expect(t, do(t, s, "POST", "/api/integration-webhooks", u.Token, map[string]any{"url": "https://example.com/hook", "events": []string{"session.exploded"}}, "X-Reeve-Workspace", u.Workspace), 422, "unknown event kind")
	member := s.AddMember(u.Workspace, "m@example.com", "member")
	expect(t, do(t, s, "POST", "/api/integration-webhooks", member.Token, map[string]any{"url": "https://example.com/hook", "events": []string{"*"}}, "X-Reeve-Workspace", u.Workspace), 403, "member creates an endpoint")

	// With private targets allowed, the server itself is still refused.
	p := servertest.Start(t, servertest.Options{Webhooks: webhooks.Options{Targets: webhooks.TargetPolicy{AllowPrivate: true}}})
	pu := p.NewUser("owner@example.com")
	expect(t, do(t, p, "POST", "/api/integration-webhooks", pu.Token, map[string]any{"url": p.URL + "/api/health", "events": []string{"*"}}, "X-Reeve-Workspace", pu.Workspace), 422, "the server itself")
	expect(t, do(t, p, "POST", "/api/integration-webhooks", pu.Token, map[string]any{"url": "http://127.0.0.1:9/x", "events": []string{"*"}}, "X-Reeve-Workspace", pu.Workspace), 201, "loopback allowed by the setting")
}

// waitDeliveries reads an endpoint's deliveries until n attempts are
// recorded (the receiver answers before the dispatcher writes).
func waitDeliveries(t *testing.T, s *servertest.Server, u servertest.User, endpoint string, n int) answer {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		dl := expect(t, do(t, s, "GET", "/api/integration-webhooks/"+endpoint+"/deliveries", u.Token, nil, "X-Reeve-Workspace", u.Workspace), 200, "deliveries")
		if list, _ := dl.JSON["data"].([]any); len(list) >= n || time.Now().After(deadline) {
			return dl
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The changes the outbound kinds name reach a subscribed receiver, each
// verified by standardwebhooks: a machine paired, a session synced from it
// (started, a permission requested and decided, ended) and a workflow
// run's state changes.
func TestOutboundEventsFromChanges(t *testing.T) {
	rcv := startReceiver(t, 0)
	s := servertest.Start(t, servertest.Options{Webhooks: fastRetries()})
	u := s.NewUser("owner@example.com")
	ep := createOutbound(t, s, u, rcv.URL, "*")
	rcv.setSecrets(t, ep["secret"].(string))
	inst := dataOf(expect(t, do(t, s, "POST", "/api/workspaces/"+u.Workspace+"/installs", u.Token, map[string]any{"name": "m1"}), 201, "install"))
	daemon := inst["issue_token"].(string)
	now := time.Now().UTC()
	sess := map[string]any{"id": "s-1", "agent": "claude", "status": "running", "turns": 1, "created_at": now, "updated_at": now}
	events := []map[string]any{
		{"seq": 1, "kind": "agent-message", "ts": now, "data": map[string]any{"text": "hi"}},
		{"seq": 2, "kind": "permission-request", "ts": now, "data": map[string]any{"tool": "Bash"}},
		{"seq": 3, "kind": "permission-decision", "ts": now, "data": map[string]any{"decision": "allow"}},
	}
	expect(t, do(t, s, "POST", "/api/runtime/agent-sessions/sync", daemon, map[string]any{"session": sess, "events": events}), 200, "sync")
	sess["status"], sess["ended_at"] = "exited", now
	expect(t, do(t, s, "POST", "/api/runtime/agent-sessions/sync", daemon, map[string]any{"session": sess, "events": []any{}}), 200, "sync end")
	expect(t, do(t, s, "POST", "/api/runtime/agent-sessions/sync", daemon, map[string]any{"session": sess, "events": []any{}}), 200, "sync again")
	expect(t, do(t, s, "POST", "/api/managed-executors", u.Token, map[string]any{"name": "ci"}, "X-Reeve-Workspace", u.Workspace), 201, "executor")
	run := dataOf(expect(t, do(t, s, "POST", "/api/workflow-runs", u.Token, map[string]any{"agent": "claude", "prompt": "p"}, "X-Reeve-Workspace", u.Workspace), 201, "run"))
	expect(t, do(t, s, "POST", "/api/workflow-runs/"+run["id"].(string)+"/cancel", u.Token, map[string]any{}, "X-Reeve-Workspace", u.Workspace), 200, "cancel")

	want := map[string]int{"install.paired": 1, "session.started": 1, "permission.requested": 1, "permission.decided": 1, "session.ended": 1, "workflow_run.state_changed": 2}
	got := rcv.wait(t, "every kind", func(g []received) bool {
		for k, n := range want {
			if len(ofType(g, k)) < n {
				return false
			}
		}
		return true
	})
	for _, g := range got {
		if g.Results[0] != "ok" {
			t.Fatalf("%s did not verify: %v", g.Type, g.Results)
		}
	}
	if n := len(ofType(got, "session.ended")); n != 1 {
		t.Fatalf("session.ended delivered %d times", n)
	}
	if n := len(ofType(got, "session.started")); n != 1 {
		t.Fatalf("session.started delivered %d times", n)
	}
}

// Two replicas on one PostgreSQL database share the outbox: every message
// is delivered, each exactly once, though both dispatchers poll it.
func TestOutboundTwoReplicas(t *testing.T) {
	storetest.Available(t)
	rcv := startReceiver(t, 1)
	o := fastRetries()
	o.Schedule.Base = 200 * time.Millisecond
	opts := servertest.Options{DatabaseURL: storetest.PostgresURL(t), DataDir: filepath.Join(t.TempDir(), "data"), Webhooks: o}
	a := servertest.Start(t, opts)
	b := servertest.Start(t, opts)
	u := a.NewUser("owner@example.com")
	ep := createOutbound(t, a, u, rcv.URL, "webhook.ping")
	rcv.setSecrets(t, ep["secret"].(string))
	const n = 20
	for i := 0; i < n; i++ {
		srv := a
		if i%2 == 1 {
			srv = b
		}
		expect(t, do(t, srv, "POST", "/api/integration-webhooks/"+ep["id"].(string)+"/test-delivery", u.Token, map[string]any{}, "X-Reeve-Workspace", u.Workspace), 201, "test delivery")
	}
	got := rcv.wait(t, "every message delivered", func(g []received) bool {
		ok := map[string]bool{}
		for _, r := range g {
			if r.Answered == 200 {
				ok[r.ID] = true
			}
		}
		return len(ok) == n
	})
	delivered := map[string]int{}
	for _, r := range got {
		if r.Results[0] != "ok" {
			t.Fatalf("did not verify: %v", r.Results)
		}
		if r.Answered == 200 {
			delivered[r.ID]++
		}
	}
	for id, c := range delivered {
		if c != 1 {
			t.Fatalf("message %s delivered %d times", id, c)
		}
	}
}
