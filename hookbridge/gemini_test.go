package hookbridge

import (
	"encoding/json"
	"testing"
)

// Gemini CLI's BeforeTool is decided like PreToolUse and answered in
// Gemini's own format; anything but an explicit allow denies.
func TestGeminiHookFormat(t *testing.T) {
	in, err := ParseInput([]byte(`{"session_id":"g","hook_event_name":"BeforeTool","tool_name":"run_shell_command","tool_input":{"command":"ls"}}`))
	if err != nil || in.HookEventName != "PreToolUse" || in.ToolName != "run_shell_command" {
		t.Fatalf("parse: %+v %v", in, err)
	}
	if _, err := ParseInput([]byte(`{"hook_event_name":"BeforeTool"}`)); err == nil {
		t.Fatal("a BeforeTool naming no tool was accepted")
	}
	if !Decides("BeforeTool") || !Decides("PreToolUse") || Decides("AfterTool") {
		t.Fatal("Decides")
	}
	for _, c := range []struct{ decision, want string }{{Allow, "allow"}, {Deny, "deny"}, {"", "deny"}, {"ask", "deny"}} {
		var out struct{ Decision, Reason string }
		if err := json.Unmarshal(DecisionOutput("BeforeTool", c.decision, "why"), &out); err != nil || out.Decision != c.want || out.Reason != "why" {
			t.Errorf("%q: %+v %v", c.decision, out, err)
		}
	}
	var claude struct {
		HookSpecificOutput struct{ PermissionDecision string }
	}
	json.Unmarshal(DecisionOutput("PreToolUse", Allow, ""), &claude)
	if claude.HookSpecificOutput.PermissionDecision != "allow" {
		t.Fatalf("PreToolUse format: %+v", claude)
	}
}
