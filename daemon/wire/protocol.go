package wire

import (
	"encoding/json"
	"time"
)

// ProtocolVersion is the version of the /ws control protocol. Changes are
// additive: new frame types and new fields, never a changed meaning.
const ProtocolVersion = 1

// Frame types of the control protocol.
const (
	TypeHello = "hello"
	TypeAck   = "ack"

	// Requests (client to daemon). Each gets exactly one ack.
	TypeLaunch      = "launch"
	TypeKill        = "kill"
	TypePrompt      = "prompt"
	TypeSubscribe   = "subscribe"
	TypeUnsubscribe = "unsubscribe"
	TypeList        = "list"

	// Events (daemon to client).
	TypeSessionStarted = "session-started"
	TypeSessionUpdate  = "session-update"
	// TypeSessionUpdates carries several consecutive events of one
	// subscription; sent only to a subscription that asked for batches.
	TypeSessionUpdates    = "session-updates"
	TypeSessionEnded      = "session-ended"
	TypeDiscoveredSession = "discovered-session"
	// TypeDaemonStopping is the last frame of every connection when the
	// daemon shuts down: the connection closes next, and will not come back
	// by itself.
	TypeDaemonStopping = "daemon-stopping"
)

// Error codes carried by a failed ack.
const (
	CodeBadFrame       = "bad_frame"      // not JSON, not an object, or a field of the wrong type
	CodeUnknownType    = "unknown_type"   // a type this daemon does not know
	CodeHelloRequired  = "hello_required" // a request before the hello
	CodeUnknownAgent   = "unknown_agent"  // no such agent; the message lists the available ones
	CodeAgentMissing   = "agent_unavailable"
	CodeBusy           = "busy"          // the session is running a turn
	CodeNotRunning     = "not_running"   // kill of a session that is not running
	CodeNotResumable   = "not_resumable" // prompt to an ended session of an agent that cannot resume
	CodeLaunchFailed   = "launch_failed" // the agent could not be started
	CodeShuttingDown   = "shutting_down" // the daemon is stopping
	CodeAlreadyWatched = "already_subscribed"
	CodeNotSubscribed  = "not_subscribed" // unsubscribe from a session this connection does not follow
	CodeAckInternal    = "internal"       // the daemon failed; the message says how
	// CodeForbidden refuses a remote client's request: its access token,
	// its session role or the project's .reeve/access.yaml does not allow
	// it; the message says which and why.
	CodeForbidden = "forbidden"
)

// Request is a frame a client sends; the daemon answers each with exactly
// one ack. SetHeader stamps the frame's type and the client's id, so a
// client can send any request without knowing its type by name.
type Request interface {
	SetHeader(id string)
}

// Envelope is the part every frame shares; read it first to dispatch.
type Envelope struct {
	Type string `json:"type"`
	ID   string `json:"id,omitempty"`
}

// Hello is the first frame in each direction.
type Hello struct {
	Type            string `json:"type"` // "hello"
	ProtocolVersion int    `json:"protocol_version"`
	Version         string `json:"version"` // software version
	DaemonID        string `json:"daemon_id,omitempty"`
	// AccessToken is a remote client's access token (server/sdk
	// AccessClaims), sent in its hello on a relayed channel; the daemon
	// decides each request of the channel with it. A later hello on the
	// same channel replaces it (a refreshed token).
	AccessToken string `json:"access_token,omitempty"`
}

// Ack answers one request.
type Ack struct {
	Type   string          `json:"type"` // "ack"
	ID     string          `json:"id"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *AckError       `json:"error,omitempty"`
}

// AckError says why a request failed. It is also the error a client
// returns for a refused request.
type AckError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *AckError) Error() string { return e.Message }

// LaunchRequest starts a session. Directory is a registered directory's id
// or absolute path.
type LaunchRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	Directory string `json:"directory"`
	Prompt    string `json:"prompt"`
	Agent     string `json:"agent,omitempty"` // "" picks the default agent
	Model     string `json:"model,omitempty"`
	// Mode is the operator mode, detect or bypass; "" is the configured
	// default, detect unless the user chose bypass.
	Mode string `json:"mode,omitempty"`
}

// SetHeader implements Request.
func (r *LaunchRequest) SetHeader(id string) { r.Type, r.ID = TypeLaunch, id }

// KillRequest stops a running session.
type KillRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
}

// SetHeader implements Request.
func (r *KillRequest) SetHeader(id string) { r.Type, r.ID = TypeKill, id }

// PromptRequest gives a session a further prompt.
type PromptRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	Text      string `json:"text"`
}

// SetHeader implements Request.
func (r *PromptRequest) SetHeader(id string) { r.Type, r.ID = TypePrompt, id }

// SubscribeRequest streams a session's events with seq > AfterSeq: the
// stored ones first, then live ones, with no gap and no duplicate, then a
// session-ended frame once the session has ended.
type SubscribeRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	AfterSeq  int64  `json:"after_seq"`
	// Batch asks for session-updates frames: when several events are ready
	// at once (a replay, a follower that fell behind), the daemon sends them
	// in one frame of at most MaxBatchBytes instead of one frame each. A
	// daemon older than the field ignores it and sends session-update
	// frames only, so a client that asks must read both.
	Batch bool `json:"batch,omitempty"`
}

// SetHeader implements Request.
func (r *SubscribeRequest) SetHeader(id string) { r.Type, r.ID = TypeSubscribe, id }

// UnsubscribeRequest stops a subscription.
type UnsubscribeRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
}

// SetHeader implements Request.
func (r *UnsubscribeRequest) SetHeader(id string) { r.Type, r.ID = TypeUnsubscribe, id }

// List scopes.
const (
	ScopeAll        = "ALL"
	ScopeActive     = "ACTIVE"
	ScopeDiscovered = "DISCOVERED"
)

// ListRequest lists sessions. Discovered sessions (started outside reeve)
// arrive as discovered-session frames before the ack.
type ListRequest struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	Scope       string `json:"scope,omitempty"` // default ALL
	DirectoryID string `json:"directory_id,omitempty"`
	Agent       string `json:"agent,omitempty"`
}

// SetHeader implements Request.
func (r *ListRequest) SetHeader(id string) { r.Type, r.ID = TypeList, id }

// ListResult is the result of a list ack.
type ListResult struct {
	Sessions   []SessionInfo `json:"sessions"`
	Discovered int           `json:"discovered"`
}

// SessionInfo describes a session.
type SessionInfo struct {
	ID           string    `json:"id"`
	DirectoryID  string    `json:"directory_id"`
	Directory    string    `json:"directory"`
	Workdir      string    `json:"workdir"`
	Agent        string    `json:"agent"`
	Model        string    `json:"model,omitempty"`
	Prompt       string    `json:"prompt"`
	Status       string    `json:"status"`
	StatusReason string    `json:"status_reason,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	EndedAt      time.Time `json:"ended_at,omitzero"`
	LastSeq      int64     `json:"last_seq"`
}

// SessionStarted announces a new session to every connected client.
type SessionStarted struct {
	Type    string      `json:"type"`
	Session SessionInfo `json:"session"`
}

// SessionUpdate is one event of a session's log.
type SessionUpdate struct {
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	Seq       int64           `json:"seq"`
	TS        time.Time       `json:"ts"`
	Kind      string          `json:"kind"`
	Data      json.RawMessage `json:"data"`
}

// MaxBatchBytes bounds a session-updates frame, so that it still fits a
// relay envelope (64 KiB) once sealed and encoded for the end-to-end
// channel. An event whose frame alone is larger travels as a
// session-update frame, as it always has.
const MaxBatchBytes = 32 << 10

// SessionUpdates is several consecutive events of one subscription, in seq
// order. Each element of Updates is a complete session-update frame, exactly
// as it would have been sent alone, so a client handles (or passes on) each
// the same way.
type SessionUpdates struct {
	Type      string            `json:"type"` // "session-updates"
	SessionID string            `json:"session_id"`
	Updates   []json.RawMessage `json:"updates"`
}

// SessionEnded closes a subscription: every event before the end has been
// sent.
type SessionEnded struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Status    string `json:"status"`
	Reason    string `json:"reason,omitempty"`
	LastSeq   int64  `json:"last_seq"`
}

// DiscoveredSession is a session an agent ran outside reeve, found in the
// agent's own transcripts.
type DiscoveredSession struct {
	Type    string         `json:"type"`
	Session DiscoveredInfo `json:"session"`
}

// DiscoveredInfo describes a discovered session.
type DiscoveredInfo struct {
	Agent     string    `json:"agent"`
	ID        string    `json:"id"` // the agent's own session id
	Directory string    `json:"directory"`
	Title     string    `json:"title,omitempty"`
	Path      string    `json:"path"` // the transcript
	StartedAt time.Time `json:"started_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// Manifest is what `session manifest` prints: where a session ran, with
// what, and under which governance. Workflow and approval fields stay empty
// until workflows and the hook bridge exist.
type Manifest struct {
	SessionID      string `json:"session_id"`
	Provider       string `json:"provider"`
	Model          string `json:"model"`
	Agent          string `json:"agent"`
	AgentVersion   string `json:"agent_version"`
	AgentPath      string `json:"agent_path,omitempty"`
	AgentSessionID string `json:"agent_session_id,omitempty"`
	Directory      string `json:"directory"`
	// PolicyFile is the project policy that governed the session when it
	// started; while the session lives, that file's absence denies.
	PolicyFile     string     `json:"policy_file,omitempty"`
	Workdir        string     `json:"workdir"`
	Worktree       string     `json:"worktree,omitempty"`
	Guarded        bool       `json:"guarded"`
	PermissionMode string     `json:"permission_mode"`
	GuardNote      string     `json:"guard_note,omitempty"`
	Workflow       *string    `json:"workflow"`
	Approvals      []Approval `json:"approvals"`
	Turns          int        `json:"turns"`
	Resumable      bool       `json:"resumable"`
	// ResumeToken continues the agent's own session in the next turn.
	ResumeToken string `json:"resume_token,omitempty"`
	// PolicyHash is the hash of the project policy in force when the
	// session started (PolicyInForce.Hash, "" for a session older than
	// the hash); CurrentPolicyHash is the latest one the daemon saw while
	// the session lived, set when it changed since.
	PolicyHash        string `json:"policy_hash,omitempty"`
	CurrentPolicyHash string `json:"current_policy_hash,omitempty"`
	// CommandLine is the latest turn's Launch.Argv.
	CommandLine []string `json:"command_line,omitempty"`
	// WorktreeManifest (worktree.go): isolation, branch, base commit and
	// branch; its fields are flattened into the manifest's JSON.
	WorktreeManifest
}

// Approval is one permission decision recorded for a session.
type Approval struct {
	RequestID string    `json:"request_id"`
	Tool      string    `json:"tool"`
	Decision  string    `json:"decision"`
	DecidedBy string    `json:"decided_by"`
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at"`
	ToolUseID string    `json:"tool_use_id,omitempty"`
	Channel   string    `json:"channel,omitempty"`
	Command   string    `json:"command,omitempty"` // the command line decided, for shell tools
	Paths     []string  `json:"paths,omitempty"`   // the files decided, for writes, edits and patches
}

// EventPage is the body of GET /api/sessions/{id}/events.
type EventPage struct {
	Events []SessionUpdate `json:"events"`
}

// DaemonStopping tells a client that the daemon is shutting down; the
// connection closes after it.
type DaemonStopping struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
}
