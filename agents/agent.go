// Package agents defines how reeve drives a coding agent: an Adapter turns
// one turn of a session (a prompt, a model, a directory) into a process and a
// stream of typed events, and says how the next turn resumes it.
package agents

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Event is one typed event of a turn. Kind is a session-update kind from
// daemon/wire (wire.KindAgentMessage, ...); Data is the matching payload
// type from daemon/wire (wire.AgentMessage, ...).
type Event struct {
	Kind string
	Data any
}

// Emit receives a turn's events in order, from one goroutine at a time. It
// may block (the session persists each event before it returns), which
// paces the reading of the agent's output.
type Emit func(Event)

// Turn is one prompt given to an agent.
type Turn struct {
	SessionID string // reeve's session id
	Prompt    string
	Model     string   // "" lets the agent choose
	Dir       string   // the directory the agent works in
	StateDir  string   // a private (0700) directory of this session for settings files and evidence
	Env       []string // the agent process's environment
	// Resume is the agent's own token from the previous turn's TurnResult;
	// empty on the first turn.
	Resume string
	// Hook, when set, governs the turn: the adapter installs the agent's
	// own hooks so that each tool use is decided through reeve, and runs
	// the agent in its normal permission mode. Without it a structured
	// agent runs with its own permission bypass, unguarded. Terminal
	// programs have no hooks and ignore it.
	Hook *Hook
	// Context is extra context for the agent (the context vault's working
	// set, markdown), given through the agent's own mechanism: Claude Code
	// an appended system prompt, Codex developer instructions. "" is none.
	Context string
}

// Hook is how an agent reaches reeve's hook bridge.
type Hook struct {
	// Command returns the shell command line that handles the agent's
	// hook event (named as the agent names it: PreToolUse, Stop, ...).
	Command func(event string) string
	// Timeout is how long the agent must let a PreToolUse hook run. It is
	// longer than reeve's own decision timeout: an agent that kills a slow
	// hook may let the tool run (Codex does), so reeve must answer first.
	Timeout time.Duration
	// Decide answers a permission request the agent makes in-band, on its
	// own control channel (Claude Code's can_use_tool), through the same
	// gate as the hooks. It blocks until decided and never allows unless
	// reeve's gate did; ctx ends when the request is withdrawn. Adapters
	// of agents with such a channel use it for every tool use, and the
	// hooks stay as a second layer.
	Decide func(ctx context.Context, u ToolUse) Verdict
}

// ToolUse is a tool use an agent asks permission for in-band.
type ToolUse struct {
	ToolUseID      string          // the agent's id of the call, which links it to its events
	Tool           string          // the agent's tool name (Bash, Read, ...)
	Input          json.RawMessage // the tool's input as the agent will run it
	Cwd            string          // the directory it runs in, when the agent says
	AgentSessionID string          // the agent's own session id, when known
	Channel        string          // how it asked, e.g. "can_use_tool"
}

// Verdict is reeve's answer to a ToolUse. Anything but Allow is a deny.
type Verdict struct {
	Allow     bool
	Reason    string // told to the agent (and so the model) on a deny
	DecidedBy string // policy:<rule>, human, mode:bypass, ...
}

// Process is a running turn.
type Process interface {
	// Wait blocks until the process has ended and every event it produced
	// has been emitted.
	Wait() TurnResult
	// Kill ends the process and its children. Wait still returns after it.
	Kill() error
	// Input writes to the agent's terminal, for PTY agents; structured
	// agents return ErrNoInput.
	Input(p []byte) error
}

// TurnResult is how a turn ended.
type TurnResult struct {
	ExitCode int
	// Err is set when the process could not run properly (crashed at
	// start, ended by a signal, reported a failed turn).
	Err error
	// Resume is the token that continues this session in the next turn; ""
	// when the agent cannot resume.
	Resume string
	// AgentSessionID is the agent's own id for the session (Claude Code's
	// session_id, Codex's thread_id), for the manifest and discovery.
	AgentSessionID string
}

// Info describes an adapter on this machine.
type Info struct {
	ID         string `json:"id"`
	Installed  bool   `json:"installed"`
	Path       string `json:"path,omitempty"`
	Version    string `json:"version,omitempty"`
	Provider   string `json:"provider,omitempty"` // who serves its model, e.g. "anthropic", "openai"; "" for terminal programs
	Structured bool   `json:"structured"`         // yields tool calls, results and usage, not just terminal output
	Resumable  bool   `json:"resumable"`          // a further prompt can continue an ended session
	Problem    string `json:"problem,omitempty"`  // why it is not usable, when it is not
	// Governance says what reeve decides in a governed turn of this agent
	// when it is less than every tool use (which tools reach its hooks,
	// what else confines it); "" for a structured agent whose every tool
	// use passes its hooks.
	Governance string `json:"governance,omitempty"`
}

// Adapter drives one kind of agent.
type Adapter interface {
	ID() string
	// Describe finds the agent's executable and version. It must be cheap
	// enough to call when listing agents.
	Describe(ctx context.Context) Info
	// StartTurn starts the agent for one turn. Events go to emit until the
	// Process's Wait returns.
	StartTurn(ctx context.Context, t Turn, emit Emit) (Process, error)
}

// ErrNoInput is returned by Process.Input for agents without a terminal.
var ErrNoInput = errors.New("this agent takes no terminal input")
