package remote

import (
	"encoding/json"
	"time"
)

// The frames of the daemon's control protocol that this client sends and
// reads. The protocol is defined by the daemon (daemon/wire, docs/protocol.md);
// the server side never imports daemon code, so the few shapes used here are
// restated, and a test in cmd/reeve checks that their JSON field names match
// daemon/wire's.

// ProtocolVersion is the control protocol version this client speaks.
const ProtocolVersion = 1

// Frame types.
const (
	TypeHello             = "hello"
	TypeAck               = "ack"
	TypeLaunch            = "launch"
	TypeKill              = "kill"
	TypePrompt            = "prompt"
	TypeSubscribe         = "subscribe"
	TypeUnsubscribe       = "unsubscribe"
	TypeList              = "list"
	TypeRespondPermission = "respond-permission"
	TypeSessionStarted    = "session-started"
	TypeSessionUpdate     = "session-update"
	TypeSessionEnded      = "session-ended"
)

// Hello is the first frame in each direction.
type Hello struct {
	Type            string `json:"type"`
	ProtocolVersion int    `json:"protocol_version"`
	Version         string `json:"version"`
	DaemonID        string `json:"daemon_id,omitempty"`
}

// Ack answers one request.
type Ack struct {
	Type   string          `json:"type"`
	ID     string          `json:"id"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *AckError       `json:"error,omitempty"`
}

// AckError is a request the daemon refused, with its protocol error code.
type AckError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *AckError) Error() string { return e.Code + ": " + e.Message }

// LaunchRequest starts a session in a directory (a registered directory's
// id or an absolute path on the daemon's machine).
type LaunchRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	Directory string `json:"directory"`
	Prompt    string `json:"prompt"`
	Agent     string `json:"agent,omitempty"`
	Model     string `json:"model,omitempty"`
	Mode      string `json:"mode,omitempty"`
}

// KillRequest stops a running session.
type KillRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
}

// PromptRequest gives a session a further prompt.
type PromptRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	Text      string `json:"text"`
}

// SubscribeRequest streams a session's events with seq > AfterSeq.
type SubscribeRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	AfterSeq  int64  `json:"after_seq"`
}

// UnsubscribeRequest stops a subscription.
type UnsubscribeRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
}

// ListRequest lists sessions; Scope is ALL (default), ACTIVE or DISCOVERED.
type ListRequest struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	Scope       string `json:"scope,omitempty"`
	DirectoryID string `json:"directory_id,omitempty"`
	Agent       string `json:"agent,omitempty"`
}

// ListResult is the result of a list.
type ListResult struct {
	Sessions   []SessionInfo `json:"sessions"`
	Discovered int           `json:"discovered"`
}

// RespondPermissionRequest decides a pending permission request.
type RespondPermissionRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	RequestID string `json:"request_id"`
	Decision  string `json:"decision"` // allow or deny
	Reason    string `json:"reason,omitempty"`
	Remember  bool   `json:"remember,omitempty"`
}

// PermissionDecision is the result of respond-permission.
type PermissionDecision struct {
	RequestID string    `json:"request_id,omitempty"`
	SessionID string    `json:"session_id,omitempty"`
	Tool      string    `json:"tool,omitempty"`
	Decision  string    `json:"decision"`
	DecidedBy string    `json:"decided_by"`
	Reason    string    `json:"reason,omitempty"`
	Remember  bool      `json:"remember,omitempty"`
	At        time.Time `json:"at"`
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

// SessionUpdate is one event of a session's log.
type SessionUpdate struct {
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	Seq       int64           `json:"seq"`
	TS        time.Time       `json:"ts"`
	Kind      string          `json:"kind"`
	Data      json.RawMessage `json:"data"`
}

// SessionEnded closes a subscription: every event before it was sent.
type SessionEnded struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Status    string `json:"status"`
	Reason    string `json:"reason,omitempty"`
	LastSeq   int64  `json:"last_seq"`
}

// envelope is the part every frame shares.
type envelope struct {
	Type      string `json:"type"`
	ID        string `json:"id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
}
