package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
)

// claudeHome starts a daemon whose Claude Code talks to srv.
func claudeHome(t *testing.T, srv *agenttest.AnthropicServer) *daemonHome {
	t.Helper()
	exe := agenttest.Claude(t)
	h := newHome(t)
	h.env = append(agenttest.ClaudeEnv(srv.URL, t.TempDir()), "REEVE_CLAUDE_PATH="+exe)
	h.start()
	return h
}

// toolResultsSent collects what Claude Code told the model about its tool
// calls.
func toolResultsSent(t *testing.T, srv *agenttest.AnthropicServer) string {
	t.Helper()
	var all []string
	for _, r := range srv.MainRequests() {
		trs, err := agenttest.ToolResults(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trs {
			all = append(all, tr.Content)
		}
	}
	return strings.Join(all, "\n")
}

func (h *daemonHome) pending() []wire.PermissionRequest {
	h.t.Helper()
	var l wire.PermissionList
	if err := json.Unmarshal([]byte(h.must("permit", "ls", "--json").stdout), &l); err != nil {
		h.t.Fatal(err)
	}
	return l.Pending
}

func decisions(evs []wire.SessionUpdate) []wire.PermissionDecision {
	var out []wire.PermissionDecision
	for _, e := range evs {
		if e.Kind == wire.KindPermissionDecision {
			var d wire.PermissionDecision
			json.Unmarshal(e.Data, &d)
			out = append(out, d)
		}
	}
	return out
}

func TestPolicyDecidesBeforeModeAndHuman(t *testing.T) {
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "first", Calls: []agenttest.ToolCall{agenttest.Bash("touch denied.txt")}},
		{Text: "second", Calls: []agenttest.ToolCall{agenttest.Bash("touch allowed.txt")}},
		{Text: "done"},
	}})
	h := claudeHome(t, srv)
	work := t.TempDir()
	os.MkdirAll(filepath.Join(work, ".reeve"), 0o755)
	os.WriteFile(filepath.Join(work, ".reeve", "policy.yaml"), []byte(`version: 1
deny:
  - name: no-denied-files
    tools: [Bash]
    commands: ["touch denied*"]
    reason: denied files are off limits here
allow:
  - name: allowed-files
    tools: [Bash]
    commands: ["touch allowed*"]
`), 0o644)
	// Detect mode (the default): without the policy a human would be asked.
	r := h.must("run", work, "--agent", "claude", "--prompt", "make files", "--wait", "--timeout", "120", "--json")
	si := h.sessionInfo(r.stdout)
	if _, err := os.Stat(filepath.Join(work, "denied.txt")); err == nil {
		t.Fatal("the policy deny did not block the tool")
	}
	if _, err := os.Stat(filepath.Join(work, "allowed.txt")); err != nil {
		t.Fatal("the policy allow did not let the tool run")
	}
	if sent := toolResultsSent(t, srv); !strings.Contains(sent, "denied files are off limits here") {
		t.Fatalf("the agent was not told why: %s", sent)
	}
	ds := decisions(h.logEvents(si.ID))
	if len(ds) != 2 || ds[0].Decision != "deny" || ds[0].DecidedBy != "policy:no-denied-files" ||
		ds[1].Decision != "allow" || ds[1].DecidedBy != "policy:allowed-files" || ds[0].At.IsZero() {
		t.Fatalf("decisions on the record: %+v", ds)
	}
	m := h.manifest(si.ID)
	if !m.Guarded || m.PermissionMode != "detect" || len(m.Approvals) != 2 {
		t.Fatalf("manifest: %+v", m)
	}
	if len(h.pending()) != 0 {
		t.Fatal("a human was asked although the policy decided")
	}
	// A broken policy denies everything rather than letting tools through.
	os.WriteFile(filepath.Join(work, ".reeve", "policy.yaml"), []byte("version: 1\ndeny: [{tools: 5}]\n"), 0o644)
	os.Remove(filepath.Join(work, "allowed.txt"))
	r = h.run("run", work, "--agent", "claude", "--prompt", "again", "--wait", "--timeout", "120", "--json")
	if _, err := os.Stat(filepath.Join(work, "allowed.txt")); err == nil {
		t.Fatal("a broken policy let a tool run")
	}
	if ds := decisions(h.logEvents(h.sessionInfo(r.stdout).ID)); len(ds) == 0 || ds[0].DecidedBy != "policy:invalid-policy" {
		t.Fatalf("broken policy decisions: %+v", ds)
	}
}

// In detect mode the hook waits for a human; a decision from another
// process (the command line) or a respond-permission frame releases it.
func TestDetectModeWaitsForHuman(t *testing.T) {
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "asking", Calls: []agenttest.ToolCall{agenttest.Bash("touch by-human.txt")}},
		{Text: "done"},
	}})
	h := claudeHome(t, srv)

	// Allowed from the command line.
	work := t.TempDir()
	sid := strings.TrimSpace(h.must("run", work, "--agent", "claude", "--prompt", "make it").stdout)
	var req wire.PermissionRequest
	waitFor(t, "a pending request", 60*time.Second, func() bool {
		p := h.pending()
		if len(p) == 1 {
			req = p[0]
		}
		return len(p) == 1
	})
	if req.SessionID != sid || req.Tool != "Bash" || !strings.Contains(string(req.Input), "by-human.txt") {
		t.Fatalf("request: %+v", req)
	}
	if st := h.sessionInfoOf(sid); st.Status != "waiting-permission" {
		t.Fatalf("status while waiting: %s", st.Status)
	}
	if _, err := os.Stat(filepath.Join(work, "by-human.txt")); err == nil {
		t.Fatal("the tool ran before anyone decided")
	}
	// A hook call from another agent session is refused, and does not
	// disturb the waiting request.
	if out := h.hook(sid, `{"session_id":"someone-else","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}`); !strings.Contains(out, `"deny"`) || !strings.Contains(out, "belongs to agent session") {
		t.Fatalf("mismatched session hook: %s", out)
	}
	h.must("permit", "allow", req.ID, "--reason", "looks fine")
	if r := h.run("wait", sid, "--timeout", "60"); r.code != 0 {
		t.Fatalf("wait: %d %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(work, "by-human.txt")); err != nil {
		t.Fatal("the human's allow did not let the tool run")
	}
	if r := h.run("permit", "deny", req.ID); r.code != 5 || !strings.Contains(r.stderr, "already been decided") {
		t.Fatalf("second decision: exit %d %q", r.code, r.stderr)
	}
	if r := h.run("permit", "allow", "NOPE"); r.code != 4 {
		t.Fatalf("unknown request: exit %d %q", r.code, r.stderr)
	}
	ds := decisions(h.logEvents(sid))
	if len(ds) != 1 || ds[0].DecidedBy != "human" || ds[0].Reason != "looks fine" || ds[0].RequestID != req.ID {
		t.Fatalf("decision on the record: %+v", ds)
	}

	// Denied through the protocol, by a follower who saw the request frame.
	work2 := t.TempDir()
	sid2 := strings.TrimSpace(h.must("run", work2, "--agent", "claude", "--prompt", "make it").stdout)
	c, _, err := controlclient.FromHome(home.Dir(h.dir), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	k, err := c.Dial(ctx, controlclient.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	sub, err := k.Subscribe(ctx, sid2, 0)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range sub.Updates() {
		}
	}()
	var asked wire.HookPermissionRequest
	var resolved wire.HookPermissionResolved
	for resolved.Type == "" {
		select {
		case f := <-k.Events():
			switch f.Type {
			case wire.TypeHookPermissionRequest:
				json.Unmarshal(f.Raw, &asked)
				if _, err := k.RespondPermission(ctx, wire.RespondPermissionRequest{RequestID: asked.Request.ID, Decision: "deny", Reason: "not today"}); err != nil {
					t.Fatal(err)
				}
			case wire.TypeHookPermissionResolved:
				json.Unmarshal(f.Raw, &resolved)
			}
		case <-ctx.Done():
			t.Fatal("no permission frames")
		}
	}
	if resolved.Decision.RequestID != asked.Request.ID || resolved.Decision.Decision != "deny" {
		t.Fatalf("resolved frame: %+v", resolved)
	}
	h.run("wait", sid2, "--timeout", "60")
	if _, err := os.Stat(filepath.Join(work2, "by-human.txt")); err == nil {
		t.Fatal("the deny did not block the tool")
	}
	if sent := toolResultsSent(t, srv); !strings.Contains(sent, "not today") {
		t.Fatalf("the agent was not told the human's reason: %s", sent)
	}
}

// A decision "for the rest of this session" answers the next asks itself.
func TestRememberedDecisionSuppressesAsks(t *testing.T) {
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "one", Calls: []agenttest.ToolCall{agenttest.Bash("touch one.txt")}},
		{Text: "two", Calls: []agenttest.ToolCall{agenttest.Bash("touch two.txt")}},
		{Text: "done"},
	}})
	h := claudeHome(t, srv)
	work := t.TempDir()
	sid := strings.TrimSpace(h.must("run", work, "--agent", "claude", "--prompt", "make two").stdout)
	waitFor(t, "a pending request", 60*time.Second, func() bool { return len(h.pending()) == 1 })
	h.must("permit", "allow", h.pending()[0].ID, "--remember")
	if r := h.run("wait", sid, "--timeout", "60"); r.code != 0 {
		t.Fatalf("wait: %d %s", r.code, r.stderr)
	}
	for _, f := range []string{"one.txt", "two.txt"} {
		if _, err := os.Stat(filepath.Join(work, f)); err != nil {
			t.Errorf("%s missing", f)
		}
	}
	ds := decisions(h.logEvents(sid))
	if len(ds) != 2 || ds[0].DecidedBy != "human" || !ds[0].Remember || ds[1].DecidedBy != "session-rule" {
		t.Fatalf("decisions: %+v", ds)
	}
	// Operator mode: read, set, refuse nonsense.
	if out := strings.TrimSpace(h.must("agent", "mode", sid).stdout); out != "detect" {
		t.Fatalf("mode: %q", out)
	}
	if out := strings.TrimSpace(h.must("agent", "mode", sid, "bypass").stdout); out != "bypass" {
		t.Fatalf("set mode: %q", out)
	}
	if r := h.run("agent", "mode", sid, "maybe"); r.code != 2 {
		t.Fatalf("bad mode: exit %d", r.code)
	}
	if r := h.run("run", work, "--agent", "claude", "--mode", "yolo", "--prompt", "x"); r.code != 2 {
		t.Fatalf("bad launch mode: exit %d %q", r.code, r.stderr)
	}
}

// The hook fails closed: no daemon, bad input or an ended session all deny,
// promptly, with a reason.
func TestHookFailsClosed(t *testing.T) {
	h := newHome(t)
	input := `{"session_id":"a","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}`
	began := time.Now()
	if out := h.hook("01NOSESSION", input); !strings.Contains(out, `"permissionDecision":"deny"`) || !strings.Contains(out, "not running") {
		t.Fatalf("no daemon: %s", out)
	}
	if time.Since(began) > 20*time.Second {
		t.Fatal("the hook took too long to deny without a daemon")
	}
	h.start()
	for name, in := range map[string]string{"not json": "not json", "no event": `{"tool_name":"Bash"}`} {
		if out := h.hook("01NOSESSION", in); !strings.Contains(out, `"deny"`) || !strings.Contains(out, "hook input") {
			t.Errorf("%s: %s", name, out)
		}
	}
	if out := h.hook("01NOSESSION", input); !strings.Contains(out, `"deny"`) || !strings.Contains(out, "no session") {
		t.Fatalf("unknown session: %s", out)
	}
	// Events that decide nothing print nothing, even when they fail.
	if out := h.hookEvent("Stop", "01NOSESSION", `{"session_id":"a","hook_event_name":"Stop"}`); out != "" {
		t.Fatalf("Stop printed %q", out)
	}
}

// hook runs `reeve hook PreToolUse` as an agent would, returning stdout.
func (h *daemonHome) hook(sid, stdin string) string { return h.hookEvent("PreToolUse", sid, stdin) }

func (h *daemonHome) hookEvent(event, sid, stdin string) string {
	h.t.Helper()
	cmd := exec.Command(reeveBin, "hook", event, "--home", h.dir, "--session", sid, "--timeout", "30")
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		h.t.Fatalf("hook exited with %v", err)
	}
	return string(out)
}

func (h *daemonHome) sessionInfoOf(sid string) wire.SessionInfo {
	h.t.Helper()
	r := h.must("ls", "--json")
	var ls struct{ Sessions []wire.SessionInfo }
	json.Unmarshal([]byte(r.stdout), &ls)
	for _, s := range ls.Sessions {
		if s.ID == sid {
			return s
		}
	}
	h.t.Fatalf("no session %s", sid)
	return wire.SessionInfo{}
}

// Codex's exec mode never asks for approval itself; its PreToolUse hook is
// where reeve decides, and a human's deny really blocks the command.
func TestCodexCommandsWaitForHuman(t *testing.T) {
	exe := agenttest.Codex(t)
	srv := agenttest.NewOpenAIServer(t, agenttest.OpenAIOptions{Turns: []agenttest.Turn{
		{Text: "running it", Calls: []agenttest.ToolCall{agenttest.ExecCommand("touch by-codex.txt")}},
		{Text: "done"},
	}})
	codexHome := agenttest.CodexHome(t, agenttest.CodexHomeOptions{BaseURL: srv.URL})
	h := newHome(t)
	h.env = append(agenttest.CodexEnv(codexHome, t.TempDir()), "REEVE_CODEX_PATH="+exe)
	h.start()
	for _, decision := range []string{"deny", "allow"} {
		work := t.TempDir()
		sid := strings.TrimSpace(h.must("run", work, "--agent", "codex", "--prompt", "make it").stdout)
		var req wire.PermissionRequest
		waitFor(t, "a pending request", 60*time.Second, func() bool {
			p := h.pending()
			if len(p) == 1 {
				req = p[0]
			}
			return len(p) == 1
		})
		if req.SessionID != sid || !strings.Contains(string(req.Input), "by-codex.txt") {
			t.Fatalf("request: %+v", req)
		}
		h.must("permit", decision, req.ID, "--reason", "reviewed: "+decision)
		if r := h.run("wait", sid, "--timeout", "60"); r.code != 0 {
			t.Fatalf("wait: %d %s", r.code, r.stderr)
		}
		_, err := os.Stat(filepath.Join(work, "by-codex.txt"))
		if ran := err == nil; ran != (decision == "allow") {
			t.Fatalf("%s: the command ran=%v", decision, ran)
		}
		if m := h.manifest(sid); !m.Guarded || len(m.Approvals) != 1 || m.Approvals[0].Decision != decision {
			t.Fatalf("%s: manifest %+v", decision, m)
		}
	}
	// The model heard why its command was blocked.
	told := false
	for _, r := range srv.MainRequests() {
		items, err := agenttest.ResponsesInput(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			told = told || (it.Type == "function_call_output" && strings.Contains(string(it.Output), "reviewed: deny"))
		}
	}
	if !told {
		t.Fatal("the deny reason did not reach the model")
	}
}
