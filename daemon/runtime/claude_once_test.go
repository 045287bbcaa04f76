package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/agents/claude"
	"reeve.dev/reeve/daemon/runtime"
	"reeve.dev/reeve/daemon/runtime/runtimetest"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/hookbridge"
	"reeve.dev/reeve/hookbridge/hookprog"
	"reeve.dev/reeve/hookbridge/policy"
)

// hookSocketEnv names the socket through which this test binary, run as
// an agent's hook program, hands a hook call to the test's session
// manager: a stand-in for `reeve hook` and the daemon's control socket.
const hookSocketEnv = "REEVE_RUNTIME_TEST_HOOK_SOCKET"

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "hook" && os.Getenv(hookSocketEnv) != "" {
		os.Exit(forwardHook(os.Getenv(hookSocketEnv), os.Args[2], os.Args[3:]))
	}
	os.Exit(m.Run())
}

// forwardHook is the hook program: the call goes to the test over the
// socket, and its answer comes out as the hook's output.
func forwardHook(socket, event string, args []string) int {
	session := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--session" {
			session = args[i+1]
		}
	}
	payload, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "read hook input:", err)
		return 1
	}
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	resp, err := c.Post("http://hook/?"+url.Values{"event": {event}, "session": {session}}.Encode(), "application/json", bytes.NewReader(payload))
	if err != nil {
		fmt.Fprintln(os.Stderr, "forward hook:", err)
		return 1
	}
	defer resp.Body.Close()
	io.Copy(os.Stdout, resp.Body)
	return 0
}

// serveHooks answers forwarded hook calls with mgr, as the daemon and
// `reeve hook` do.
func serveHooks(t *testing.T, mgr func() *runtime.Manager) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payload, _ := io.ReadAll(r.Body)
		event := r.URL.Query().Get("event")
		ans, err := mgr().Hook(r.Context(), r.URL.Query().Get("session"), payload)
		if !hookbridge.Decides(event) {
			return
		}
		if err != nil {
			ans = wire.HookAnswer{Decision: hookbridge.Deny, Reason: err.Error()}
		}
		w.Write(hookbridge.DecisionOutput(event, ans.Decision, ans.Reason))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return socket
}

// Through the real Claude Code, each tool use is decided once and
// recorded once, whichever way it is decided: the PreToolUse hook decides
// it, and Claude Code's in-band can_use_tool request for the same call
// gets that decision instead of asking the gate (a policy, the mode, a
// human) again.
func TestClaudeToolUseIsDecidedOnce(t *testing.T) {
	exe := agenttest.Claude(t)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	prog, err := hookprog.InstallFrom(t.TempDir(), bin)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "working", Calls: []agenttest.ToolCall{
			agenttest.Bash("touch by-policy.txt"),
			agenttest.Bash("touch by-human.txt"),
			{Name: "Read", Input: map[string]any{"file_path": filepath.Join(work, "by-policy.txt")}},
		}},
		{Text: "done"},
	}})
	var mu sync.Mutex
	asked := map[string]int{} // policy evaluations by tool input
	var f *fixture
	socket := serveHooks(t, func() *runtime.Manager { return f.mgr })
	f = newFixture(t, func(o *runtime.ManagerOptions) {
		o.HookProgram = prog
		o.HookTimeout = 60 * time.Second
		o.Env = append(agenttest.ClaudeEnv(srv.URL, t.TempDir()), hookSocketEnv+"="+socket)
		o.Agents = &runtimetest.Registry{Adapters: []agents.Adapter{claude.New(claude.Options{Getenv: func(k string) string {
			if k == claude.EnvPath {
				return exe
			}
			return ""
		}})}}
		o.Policy = func(_ policy.Source, req policy.Request) hookbridge.PolicyVerdict {
			mu.Lock()
			asked[string(req.Input)]++
			mu.Unlock()
			if req.Tool == "Bash" && strings.Contains(string(req.Input), "by-policy") || req.Tool == "Read" {
				return hookbridge.PolicyVerdict{Action: hookbridge.PolicyAllow, Rule: "allowed"}
			}
			return hookbridge.PolicyVerdict{}
		}
	})
	f.dir.Path = work
	d, _, err := f.st.AddDirectory(f.ctx, work)
	if err != nil {
		t.Fatal(err)
	}
	si, err := f.mgr.Launch(f.ctx, wire.LaunchRequest{Directory: d.ID, Agent: claude.ID, Prompt: "go", Mode: hookbridge.ModeDetect})
	if err != nil {
		t.Fatal(err)
	}
	// The human allows the one tool use the policy leaves to them.
	var req wire.PermissionRequest
	waitFor(t, "the request for a human", func() bool {
		p := f.mgr.Pending(si.ID)
		if len(p) == 1 {
			req = p[0]
		}
		return len(p) == 1
	})
	if _, err := f.mgr.RespondPermission(f.ctx, wire.RespondPermissionRequest{RequestID: req.ID, Decision: hookbridge.Allow, Reason: "fine"}); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(si.ID, store.StatusCompleted)
	// Its hooks (SessionStart first) and output follow the turn's launch.
	checkLaunchFirst(t, f.events(si.ID), 1)

	for _, name := range []string{"by-policy.txt", "by-human.txt"} {
		if _, err := os.Stat(filepath.Join(work, name)); err != nil {
			t.Errorf("%s was not made: the test proves nothing", name)
		}
	}
	byCall := map[string][]wire.PermissionDecision{}
	for _, raw := range eventsOf(f, si.ID, wire.KindPermissionDecision) {
		var d wire.PermissionDecision
		json.Unmarshal(raw, &d)
		byCall[d.ToolUseID] = append(byCall[d.ToolUseID], d)
	}
	calls := eventsOf(f, si.ID, wire.KindToolCall)
	if len(calls) != 3 || len(byCall) != 3 {
		t.Fatalf("%d tool calls, decisions for %d: %+v", len(calls), len(byCall), byCall)
	}
	for id, ds := range byCall {
		if len(ds) != 1 || ds[0].Decision != hookbridge.Allow || ds[0].Channel != "PreToolUse" {
			t.Errorf("call %s decided %d times: %+v", id, len(ds), ds)
		}
	}
	if n := len(eventsOf(f, si.ID, wire.KindPermissionRequest)); n != 1 {
		t.Errorf("%d requests for a human, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for in, n := range asked {
		if n != 1 {
			t.Errorf("the policy was asked %d times about %s", n, in)
		}
	}
}
