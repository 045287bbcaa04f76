package codex

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/wire"
)

// decider is an in-band decision function that records what it was asked.
type decider struct {
	mu    sync.Mutex
	asked []agents.ToolUse
	deny  func(agents.ToolUse) bool
}

func (d *decider) decide(_ context.Context, u agents.ToolUse) agents.Verdict {
	d.mu.Lock()
	d.asked = append(d.asked, u)
	d.mu.Unlock()
	if d.deny != nil && d.deny(u) {
		return agents.Verdict{Reason: "not that", DecidedBy: "policy:test"}
	}
	return agents.Verdict{Allow: true, DecidedBy: "policy:test"}
}

func (d *decider) uses() []agents.ToolUse {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]agents.ToolUse(nil), d.asked...)
}

// A governed Codex turn through app-server against the real Codex: every
// command and patch is asked in-band, with the call id the events carry
// (so each decision links to its tool-call and tool-result); a call
// reeve declines does not run; the PreToolUse hook stays a second layer
// whose block is on the record too; a call Codex rejects by itself
// leaves a decision by the agent; the whole output of a command is kept;
// the hook-trust notice is no error.
func TestCodexGovernedThroughAppServer(t *testing.T) {
	exe := agenttest.Codex(t)
	srv := agenttest.NewOpenAIServer(t, agenttest.OpenAIOptions{Turns: []agenttest.Turn{
		{Text: "trying", Calls: []agenttest.ToolCall{
			agenttest.ExecCommand("touch denied.txt"),
			agenttest.ExecCommand("touch ok.txt"),
			agenttest.ExecCommand("touch hookdenied.txt"),
			agenttest.ApplyPatch("*** Begin Patch\n*** Add File: patched.txt\n+hi\n*** End Patch\n"),
			agenttest.ApplyPatch("*** Begin Patch\n*** Add File: .env\n+SECRET=1\n*** End Patch\n"),
			{Name: "apply_patch", Input: map[string]any{"input": "not a freeform call"}},
			agenttest.ExecCommand("seq 1 200000"),
		}},
		{Text: "done"},
	}})
	home := agenttest.CodexHome(t, agenttest.CodexHomeOptions{BaseURL: srv.URL})
	dir, state := t.TempDir(), t.TempDir()
	hookLog := filepath.Join(t.TempDir(), "hook.log")
	script := filepath.Join(t.TempDir(), "hook.sh")
	os.WriteFile(script, []byte(`#!/bin/sh
in=$(cat)
echo "$in" >> `+hookLog+`
case "$in" in
*hookdenied.txt*) echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"the hook says no"}}' ;;
esac
`), 0o755)
	d := &decider{deny: func(u agents.ToolUse) bool {
		return strings.Contains(string(u.Input), "denied.txt") || strings.Contains(string(u.Input), ".env")
	}}
	turn := agents.Turn{Prompt: "go", Dir: dir, StateDir: state, Env: agenttest.CodexEnv(home, t.TempDir()),
		Hook: &agents.Hook{Command: func(ev string) string { return script }, Timeout: 60 * time.Second, Decide: d.decide}}
	rec, res := runTurn(t, adapterFor(exe), turn)
	if res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	for _, f := range []string{"denied.txt", "hookdenied.txt", ".env"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s was written though denied", f)
		}
	}
	for _, f := range []string{"ok.txt", "patched.txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s was not written: %v", f, err)
		}
	}
	for _, e := range rec.Of(wire.KindError) {
		if strings.Contains(e.(wire.Error).Message, "hook") {
			t.Errorf("the hook-trust notice is an error event: %+v", e)
		}
	}

	calls := map[string]wire.ToolCall{}
	for _, c := range rec.Of(wire.KindToolCall) {
		calls[c.(wire.ToolCall).ID] = c.(wire.ToolCall)
	}
	results := map[string]wire.ToolResult{}
	for _, r := range rec.Of(wire.KindToolResult) {
		results[r.(wire.ToolResult).ID] = r.(wire.ToolResult)
	}
	// Each in-band request names the call it decides, which the events
	// name too; the command as the hook sees it, the patch by its files.
	asked := map[string]agents.ToolUse{}
	for _, u := range d.uses() {
		asked[string(u.Input)] = u
		if _, ok := calls[u.ToolUseID]; !ok || u.ToolUseID == "" {
			t.Errorf("decided %+v has no tool-call event", u)
		}
		if _, ok := results[u.ToolUseID]; !ok {
			t.Errorf("decided %+v has no tool-result event", u)
		}
		if u.AgentSessionID != res.AgentSessionID || !strings.HasPrefix(u.Channel, "item/") {
			t.Errorf("use %+v", u)
		}
	}
	for _, want := range []string{`{"command":"touch denied.txt"}`, `{"command":"touch ok.txt"}`, `{"command":"seq 1 200000"}`} {
		u, ok := asked[want]
		if !ok || u.Tool != "Bash" || u.Cwd != dir {
			t.Errorf("no in-band request %s: %+v", want, d.uses())
		}
	}
	patches := 0
	for in, u := range asked {
		if u.Tool == "apply_patch" {
			patches++
			if !strings.Contains(in, filepath.Join(dir, "patched.txt")) && !strings.Contains(in, filepath.Join(dir, ".env")) {
				t.Errorf("patch request %s", in)
			}
		}
		if strings.Contains(in, "hookdenied") {
			t.Errorf("the call the hook blocked was asked in-band: %+v", u)
		}
	}
	if patches != 2 {
		t.Errorf("%d patch requests, want 2: %+v", patches, d.uses())
	}
	if r := results[asked[`{"command":"touch denied.txt"}`].ToolUseID]; !r.IsError {
		t.Errorf("denied result %+v", r)
	}

	// The call the hook blocked is on the record under the id its hook saw.
	var hookID string
	b, _ := os.ReadFile(hookLog)
	for _, l := range strings.Split(string(b), "\n") {
		var in struct {
			Event     string `json:"hook_event_name"`
			ToolUseID string `json:"tool_use_id"`
		}
		if json.Unmarshal([]byte(l), &in) == nil && in.Event == "PreToolUse" && strings.Contains(l, "hookdenied.txt") {
			hookID = in.ToolUseID
		}
	}
	if r, ok := results[hookID]; hookID == "" || !ok || !r.IsError || !strings.Contains(r.Output, "the hook says no") {
		t.Errorf("the blocked call %q is not on the record: %+v", hookID, r)
	}
	// Codex rejected the malformed apply_patch by itself: the agent's
	// decision, linked by its call id.
	var agentDecisions []wire.PermissionDecision
	for _, e := range rec.Of(wire.KindPermissionDecision) {
		agentDecisions = append(agentDecisions, e.(wire.PermissionDecision))
	}
	if len(agentDecisions) != 1 || agentDecisions[0].DecidedBy != "agent" || agentDecisions[0].ToolUseID == "" ||
		agentDecisions[0].ToolUseID == hookID || calls[agentDecisions[0].ToolUseID].Name != "apply_patch" {
		t.Errorf("agent decisions %+v", agentDecisions)
	}
	// The whole output of seq is kept: in the event, or in the evidence
	// file the event names when Codex cut what it reported.
	seq := results[asked[`{"command":"seq 1 200000"}`].ToolUseID]
	full := seq.Output
	if seq.Evidence != "" {
		b, err := os.ReadFile(seq.Evidence)
		if err != nil || int64(len(b)) != seq.EvidenceBytes {
			t.Fatalf("evidence %s: %v (%d bytes, event says %d)", seq.Evidence, err, len(b), seq.EvidenceBytes)
		}
		full = string(b)
	}
	if !strings.HasPrefix(full, "1\n2\n") || !strings.HasSuffix(strings.TrimSpace(full), "\n200000") {
		t.Errorf("seq output kept is %d bytes, not the whole output (evidence %q)", len(full), seq.Evidence)
	}
	t.Logf("seq: %d bytes in the event, evidence %q (%d bytes)", len(seq.Output), seq.Evidence, seq.EvidenceBytes)
}

// An approval reeve never answers never runs: the turn is killed while
// its decision is pending, and the command does not run, then or later.
func TestCodexUnansweredApprovalNeverRuns(t *testing.T) {
	exe := agenttest.Codex(t)
	srv := agenttest.NewOpenAIServer(t, agenttest.OpenAIOptions{Turns: []agenttest.Turn{
		{Text: "trying", Calls: []agenttest.ToolCall{agenttest.ExecCommand("touch never.txt")}},
		{Text: "done"},
	}})
	home := agenttest.CodexHome(t, agenttest.CodexHomeOptions{BaseURL: srv.URL})
	dir := t.TempDir()
	asked := make(chan agents.ToolUse, 1)
	block := func(ctx context.Context, u agents.ToolUse) agents.Verdict {
		asked <- u
		<-ctx.Done()
		return agents.Verdict{Allow: true} // too late: the channel withdrew it
	}
	var rec recorder
	p, err := adapterFor(exe).StartTurn(testContext(t), agents.Turn{Prompt: "go", Dir: dir, StateDir: t.TempDir(),
		Env:  agenttest.CodexEnv(home, t.TempDir()),
		Hook: &agents.Hook{Command: func(string) string { return "true" }, Timeout: time.Minute, Decide: block}}, rec.Emit)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
	case <-time.After(90 * time.Second):
		p.Kill()
		t.Fatal("codex never asked")
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if res := waitTurn(t, p, 30*time.Second); res.Err == nil {
		t.Fatalf("a killed turn succeeded: %+v", res)
	}
	time.Sleep(2 * time.Second)
	if _, err := os.Stat(filepath.Join(dir, "never.txt")); err == nil {
		t.Fatal("the unanswered command ran")
	}
}
