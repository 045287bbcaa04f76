package sdk

import (
	"context"
	"encoding/json"
	"time"
)

// Daemon session sync: a paired daemon publishes its sessions and their
// events (POST /api/runtime/agent-sessions/sync, with its issue token).

// MaxSyncEvents is the most events one sync request may carry (422 above).
const MaxSyncEvents = 500

// Upload modes: what of a session's events leaves the machine.
const (
	UploadFull     = "full"     // events as logged
	UploadRedacted = "redacted" // secret-looking values masked (the default)
	UploadMetadata = "metadata" // seq, kind and time only; no payloads
)

// SyncSession is the daemon's view of one session.
type SyncSession struct {
	ID             string     `json:"id"` // the daemon's session id
	DirectoryName  string     `json:"directory_name,omitempty"`
	Agent          string     `json:"agent"`
	Model          string     `json:"model,omitempty"`
	Status         string     `json:"status"`
	Turns          int        `json:"turns"`
	WorktreeBranch string     `json:"worktree_branch,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	EndedAt        *time.Time `json:"ended_at,omitempty"`
	// Governance, when the daemon knows it: the hash of the policy in
	// force when the session started, the latest one when the policy
	// changed while it lived, the mode and whether the agent runs guarded.
	PolicyHash        string `json:"policy_hash,omitempty"`
	CurrentPolicyHash string `json:"current_policy_hash,omitempty"`
	Mode              string `json:"mode,omitempty"`
	Guarded           bool   `json:"guarded,omitempty"`
	// The adapter receipt: the agent CLI's version, the command line the
	// daemon ran its latest turn with (secrets and the prompt masked), and
	// digests of the files that evidence the run.
	AgentVersion  string         `json:"agent_version,omitempty"`
	CommandLine   []string       `json:"command_line,omitempty"`
	EvidenceFiles []EvidenceFile `json:"evidence_files,omitempty"`
	// Access is the project's .reeve/access.yaml, from the checkout the
	// session runs in, when it has one: the control plane caps every
	// member's role on the session with it, as the daemon does. Absent,
	// nothing is capped.
	Access *ProjectAccess `json:"access,omitempty"`
}

// EvidenceFile is one file that evidences a session, by digest: its role
// (policy, manifest, agent binary), its path on the daemon's machine and
// its SHA-256.
type EvidenceFile struct {
	Role   string `json:"role"`
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// SyncEvent is one event of the daemon's per-session log.
type SyncEvent struct {
	Seq  int64           `json:"seq"`
	Kind string          `json:"kind"`
	TS   time.Time       `json:"ts"`
	Data json.RawMessage `json:"data,omitempty"`
}

// SyncRequest publishes a session and the next events of its log, in seq
// order, starting at most one past what the server acknowledged.
type SyncRequest struct {
	Session    SyncSession `json:"session"`
	UploadMode string      `json:"upload_mode,omitempty"` // default redacted
	Events     []SyncEvent `json:"events"`
}

// SyncResult acknowledges a sync: AckedSeq is the last event the control
// plane holds, so the daemon resumes after it.
type SyncResult struct {
	SessionID string `json:"session_id"` // the control plane's record id
	AckedSeq  int64  `json:"acked_seq"`
	Stored    int    `json:"stored"`    // events stored by this request
	Duplicate int    `json:"duplicate"` // events it already had
}

// SyncResponse wraps SyncResult.
type SyncResponse struct {
	Data SyncResult `json:"data"`
}

// CodeSyncGap is the 409 code of a batch that does not start right after
// the acknowledged seq; the answer carries data.acked_seq.
const CodeSyncGap = "sync_gap"

// SyncSession publishes a session and events with an issue token.
func (c *Client) SyncSession(ctx context.Context, req SyncRequest) (SyncResult, error) {
	var out SyncResponse
	_, err := c.Do(ctx, "POST", "/api/runtime/agent-sessions/sync", req, &out)
	return out.Data, err
}
