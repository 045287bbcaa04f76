package hookbridge

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Input is what an agent's hook receives on stdin. Claude Code and Codex
// send the same shape (Codex adopted Claude Code's hook format).
type Input struct {
	SessionID      string          `json:"session_id"`
	TranscriptPath string          `json:"transcript_path,omitempty"`
	Cwd            string          `json:"cwd,omitempty"`
	HookEventName  string          `json:"hook_event_name"`
	ToolName       string          `json:"tool_name,omitempty"`
	ToolInput      json.RawMessage `json:"tool_input,omitempty"`
	ToolUseID      string          `json:"tool_use_id,omitempty"`
	Prompt         string          `json:"prompt,omitempty"`
}

// ParseInput reads a hook's stdin. It must be one JSON object naming its
// event; a PreToolUse must name its tool.
func ParseInput(b []byte) (Input, error) {
	var in Input
	if err := json.Unmarshal(b, &in); err != nil {
		return in, fmt.Errorf("hook input is not a JSON object: %w", err)
	}
	if in.HookEventName == "" {
		return in, errors.New("hook input names no hook_event_name")
	}
	// Gemini CLI names its events apart; the daemon sees one vocabulary.
	if ev, ok := geminiEvents[in.HookEventName]; ok {
		in.HookEventName = ev
	}
	if in.HookEventName == "PreToolUse" && in.ToolName == "" {
		return in, errors.New("PreToolUse hook input names no tool_name")
	}
	return in, nil
}

// geminiEvents maps Gemini CLI hook events onto Claude Code's names.
var geminiEvents = map[string]string{"BeforeTool": "PreToolUse", "AfterTool": "PostToolUse", "BeforeAgent": "UserPromptSubmit", "AfterAgent": "Stop"}

// Decides reports whether a hook event (as the agent names it) waits for a
// decision: PreToolUse, or Gemini CLI's BeforeTool.
func Decides(event string) bool { return event == "PreToolUse" || event == "BeforeTool" }

// DecisionOutput is the answer to a deciding hook event in the format of
// the agent that names its event so: Gemini CLI's BeforeTool reads a
// top-level decision, Claude Code and Codex read PreToolUseOutput.
func DecisionOutput(event, decision, reason string) []byte {
	if event != "BeforeTool" {
		return PreToolUseOutput(decision, reason)
	}
	if decision != Allow {
		decision = Deny
	}
	b, _ := json.Marshal(struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason,omitempty"`
	}{decision, reason})
	return append(b, '\n')
}

// PreToolUseOutput is a PreToolUse hook's answer in the format Claude Code
// and Codex read from its stdout.
func PreToolUseOutput(decision, reason string) []byte {
	type specific struct {
		HookEventName            string `json:"hookEventName"`
		PermissionDecision       string `json:"permissionDecision"`
		PermissionDecisionReason string `json:"permissionDecisionReason,omitempty"`
	}
	if decision != Allow {
		decision = Deny // anything but an explicit allow is a deny
	}
	b, _ := json.Marshal(map[string]specific{"hookSpecificOutput": {
		HookEventName: "PreToolUse", PermissionDecision: decision, PermissionDecisionReason: reason,
	}})
	return append(b, '\n')
}

// PermissionRequestOutput is a PermissionRequest hook's answer in Claude
// Code's format. reeve answers only to deny (when it cannot be reached):
// otherwise the request goes on to the in-band channel, where the gate
// decides it.
func PermissionRequestOutput(reason string) []byte {
	type decision struct {
		Behavior string `json:"behavior"`
		Message  string `json:"message,omitempty"`
	}
	type specific struct {
		HookEventName string   `json:"hookEventName"`
		Decision      decision `json:"decision"`
	}
	b, _ := json.Marshal(map[string]specific{"hookSpecificOutput": {
		HookEventName: "PermissionRequest", Decision: decision{Behavior: Deny, Message: reason},
	}})
	return append(b, '\n')
}
