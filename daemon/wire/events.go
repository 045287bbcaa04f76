package wire

import (
	"encoding/base64"
	"encoding/json"
	"time"
)

// Kinds of session-update events. The data of each kind is the payload type
// named beside it; all fields are stable and additive.
const (
	KindUserPrompt     = "user-prompt"     // UserPrompt
	KindAgentMessage   = "agent-message"   // AgentMessage
	KindToolCall       = "tool-call"       // ToolCall
	KindToolResult     = "tool-result"     // ToolResult
	KindTerminalOutput = "terminal-output" // TerminalOutput
	KindUsage          = "usage"           // Usage
	KindStatus         = "status"          // Status
	KindError          = "error"           // Error
	KindCheckpoint     = "checkpoint"      // reserved for worktree checkpoints
	KindOutputLost     = "output-lost"     // OutputLost
)

// UserPrompt is a prompt given to the agent.
type UserPrompt struct {
	Text string `json:"text"`
}

// AgentMessage is text the agent addressed to the user.
type AgentMessage struct {
	Text string `json:"text"`
}

// ToolCall is the agent asking to use a tool.
type ToolCall struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
}

// ToolResult is what a tool call produced.
type ToolResult struct {
	ID       string `json:"id"`
	Output   string `json:"output"`
	IsError  bool   `json:"is_error"`
	ExitCode *int   `json:"exit_code,omitempty"`
	// Evidence is the file (in the session's private state directory)
	// that keeps the tool's full output when Output is only the preview
	// the model was shown; EvidenceBytes is its size.
	Evidence      string `json:"evidence,omitempty"`
	EvidenceBytes int64  `json:"evidence_bytes,omitempty"`
}

// TerminalOutput is raw terminal bytes from an agent's PTY. Text holds them
// when they are valid UTF-8 (chunks never split a character); otherwise
// Base64 holds them exactly.
type TerminalOutput struct {
	Text   string `json:"text,omitempty"`
	Base64 string `json:"base64,omitempty"`
}

// Bytes is the terminal bytes the event carries, whichever field holds
// them.
func (t TerminalOutput) Bytes() ([]byte, error) {
	if t.Base64 != "" {
		return base64.StdEncoding.DecodeString(t.Base64)
	}
	return []byte(t.Text), nil
}

// Usage is token use (and cost, where the agent reports one) of one turn.
type Usage struct {
	Model            string   `json:"model,omitempty"`
	InputTokens      int64    `json:"input_tokens"`
	OutputTokens     int64    `json:"output_tokens"`
	CacheReadTokens  int64    `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64    `json:"cache_write_tokens,omitempty"`
	CostUSD          *float64 `json:"cost_usd,omitempty"`
}

// Status is a change of the session's status.
type Status struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// OutputLost marks where events of a session could not be recorded (the
// disk was full): it stands in the log in their place, written once writes
// succeed again.
type OutputLost struct {
	// Events counts the events lost, by kind in Kinds; 0 when only the
	// daemon's restart says that some were (it cannot know how many).
	Events int            `json:"events"`
	Kinds  map[string]int `json:"kinds,omitempty"`
	// From and To bound when they were lost.
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Reason string    `json:"reason"`
}

// Error is a problem the agent or the daemon reported during the session.
type Error struct {
	Message string `json:"message"`
}
