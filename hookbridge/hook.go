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
	if in.HookEventName == "PreToolUse" && in.ToolName == "" {
		return in, errors.New("PreToolUse hook input names no tool_name")
	}
	return in, nil
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
