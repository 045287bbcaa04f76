package codex

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/wire"
)

// A governed Codex turn against the real Codex: the hook-trust warning
// Codex prints because reeve passes --dangerously-bypass-hook-trust is
// not an error event, and a call its hook refused is not lost (break 7):
// the hook's decision carries the call id, which the events name too.
func TestCodexGovernedEventsAreLossless(t *testing.T) {
	exe := agenttest.Codex(t)
	srv := agenttest.NewOpenAIServer(t, agenttest.OpenAIOptions{Turns: []agenttest.Turn{
		{Text: "trying", Calls: []agenttest.ToolCall{
			agenttest.ExecCommand("touch denied.txt"),
			agenttest.ExecCommand("touch ok.txt"),
			{Name: "exec_command", Input: map[string]any{"cmd": "touch escalated.txt", "sandbox_permissions": "require_escalated", "justification": "need it"}},
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
*denied.txt*) echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"not that file"}}' ;;
esac
`), 0o755)
	turn := agents.Turn{Prompt: "go", Dir: dir, StateDir: state, Env: agenttest.CodexEnv(home, t.TempDir()),
		Hook: &agents.Hook{Command: func(ev string) string { return script }, Timeout: 60 * time.Second}}
	rec, res := runTurn(t, adapterFor(exe), turn)
	if res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	for _, e := range rec.Events() {
		t.Logf("%s %+v", e.Kind, e.Data)
	}
	for _, e := range rec.Of(wire.KindError) {
		if strings.Contains(e.(wire.Error).Message, "hook") {
			t.Errorf("the hook-trust notice is an error event: %+v", e)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "denied.txt")); err == nil {
		t.Fatal("the denied command ran")
	}
	// The blocked call is on the record under the id its hook saw, with
	// what the model was told; the hook decided it, so no agent decision.
	var hookID string
	b, _ := os.ReadFile(hookLog)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `"PreToolUse"`) && strings.Contains(l, "denied.txt") {
			var in struct {
				ToolUseID string `json:"tool_use_id"`
			}
			json.Unmarshal([]byte(l), &in)
			hookID = in.ToolUseID
		}
	}
	found := false
	for _, c := range rec.Of(wire.KindToolCall) {
		found = found || (c.(wire.ToolCall).ID == hookID && strings.Contains(string(c.(wire.ToolCall).Input), "denied.txt"))
	}
	blocked := false
	for _, r := range rec.Of(wire.KindToolResult) {
		r := r.(wire.ToolResult)
		blocked = blocked || (r.ID == hookID && r.IsError && strings.Contains(r.Output, "not that file"))
	}
	if hookID == "" || !found || !blocked {
		t.Fatalf("the blocked call %q is not on the record: %+v", hookID, rec.Events())
	}
	// Codex refused the escalation by itself: on the record as the
	// agent's decision, linked by the call id.
	ds := rec.Of(wire.KindPermissionDecision)
	if len(ds) != 1 {
		t.Fatalf("agent decisions %+v", ds)
	}
	d := ds[0].(wire.PermissionDecision)
	if d.DecidedBy != "agent" || d.Decision != "deny" || d.ToolUseID == "" || d.ToolUseID == hookID || d.Reason == "" {
		t.Fatalf("agent decision %+v", d)
	}
	if _, err := os.Stat(filepath.Join(dir, "escalated.txt")); err == nil {
		t.Fatal("the escalated command ran")
	}

}
