package wire

import (
	"encoding/json"
	"time"
)

// Frame types of the hook bridge.
const (
	TypeRespondPermission      = "respond-permission"       // request: decide a pending permission request
	TypeSetMode                = "set-mode"                 // request: set a session's operator mode
	TypeHookPermissionRequest  = "hook-permission-request"  // event: a tool use waits for a human
	TypeHookPermissionResolved = "hook-permission-resolved" // event: a permission request was decided
	KindHookEvent              = "hook-event"               // session-update kind: an agent's hook call
	KindPermissionRequest      = "permission-request"       // session-update kind: a request was filed
	KindPermissionDecision     = "permission-decision"      // session-update kind: a tool use was decided
	KindMode                   = "mode"                     // session-update kind: the operator mode changed
	CodeUnknownRequest         = "unknown_request"          // no such permission request
	CodeAlreadyDecided         = "already_decided"          // the first decision won
	CodeSessionMismatch        = "session_mismatch"         // a hook's agent session is not the session's
	CodeInvalidMode            = "invalid_mode"             // a mode other than detect or bypass
	DefaultHookTimeoutSeconds  = 600                        // how long a permission request waits for a human
)

// PermissionRequest is a tool use waiting for a human.
type PermissionRequest struct {
	ID        string          `json:"id"`
	SessionID string          `json:"session_id"`
	Agent     string          `json:"agent"`
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Reason    string          `json:"reason,omitempty"` // why a human is asked
	CreatedAt time.Time       `json:"created_at"`
}

// PermissionDecision is how a tool use was decided, by whom and why.
type PermissionDecision struct {
	RequestID string    `json:"request_id,omitempty"`
	SessionID string    `json:"session_id,omitempty"`
	Tool      string    `json:"tool,omitempty"`
	Decision  string    `json:"decision"`   // allow or deny
	DecidedBy string    `json:"decided_by"` // policy:<rule>, session-rule, mode:bypass, human, timeout, daemon
	Reason    string    `json:"reason,omitempty"`
	Remember  bool      `json:"remember,omitempty"` // holds for the rest of the session
	At        time.Time `json:"at"`
	// ToolUseID is the agent's id of the call, which links the decision
	// to its tool-call and tool-result events.
	ToolUseID string `json:"tool_use_id,omitempty"`
	// Channel is how the agent asked: "PreToolUse" (its hook),
	// "can_use_tool" (Claude Code in-band), or, with decided_by "agent",
	// the agent that refused the call by itself.
	Channel string `json:"channel,omitempty"`
	// Command and Paths name what was decided: the command line of a
	// shell tool, the files a write or a patch touches.
	Command string   `json:"command,omitempty"`
	Paths   []string `json:"paths,omitempty"`
}

// RespondPermissionRequest decides a pending permission request.
type RespondPermissionRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	RequestID string `json:"request_id"`
	Decision  string `json:"decision"` // allow or deny
	Reason    string `json:"reason,omitempty"`
	// Remember makes the decision hold for this tool for the rest of the
	// session.
	Remember bool `json:"remember,omitempty"`
}

// SetHeader implements Request.
func (r *RespondPermissionRequest) SetHeader(id string) { r.Type, r.ID = TypeRespondPermission, id }

// SetModeRequest sets a session's operator mode.
type SetModeRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	Mode      string `json:"mode"` // detect or bypass
}

// SetHeader implements Request.
func (r *SetModeRequest) SetHeader(id string) { r.Type, r.ID = TypeSetMode, id }

// HookPermissionRequest announces a pending request to the session's
// followers.
type HookPermissionRequest struct {
	Type    string            `json:"type"`
	Request PermissionRequest `json:"request"`
}

// HookPermissionResolved announces a decision to the session's followers.
type HookPermissionResolved struct {
	Type     string             `json:"type"`
	Decision PermissionDecision `json:"decision"`
}

// HookEvent is the data of a hook-event session update: one call of an
// agent's hook.
type HookEvent struct {
	Event     string          `json:"event"` // the agent's name for it: PreToolUse, Stop, ...
	Tool      string          `json:"tool,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

// ModeChange is the data of a mode session update.
type ModeChange struct {
	Mode string `json:"mode"`
	By   string `json:"by"`
}

// HookAnswer is the daemon's answer to a hook call: for PreToolUse, the
// decision the hook prints in the agent's format.
type HookAnswer struct {
	Decision  string `json:"decision,omitempty"` // allow or deny; empty for events that decide nothing
	Reason    string `json:"reason,omitempty"`
	DecidedBy string `json:"decided_by,omitempty"`
}

// PermissionList is the body of GET /api/permissions.
type PermissionList struct {
	Pending []PermissionRequest `json:"pending"`
}
