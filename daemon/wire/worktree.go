package wire

import "time"

// Worktree requests of the control protocol. rollback, branch-retry and
// squash-merge are the spec's; the others are reads and the explicit
// removal the command line needs.
const (
	TypeRollback        = "rollback"
	TypeBranchRetry     = "branch-retry"
	TypeSquashMerge     = "squash-merge"
	TypeWorktreeList    = "worktree-list"
	TypeWorktreeDiff    = "worktree-diff"
	TypeWorktreeSummary = "worktree-summary"
	TypeWorktreeRemove  = "worktree-remove"
)

// Error codes of the worktree requests.
const (
	CodeNoWorktree        = "no_worktree"        // the session ran in place, without a worktree
	CodeWorktreeRemoved   = "worktree_removed"   // the session's worktree directory was removed
	CodeUnknownCheckpoint = "unknown_checkpoint" // a SHA that is not a checkpoint of the session
	CodeDirtyBase         = "dirty_base"         // the base checkout has uncommitted changes
	CodeMergeConflict     = "merge_conflict"     // the session's change conflicts with the base branch
	CodeNothingToMerge    = "nothing_to_merge"   // the base branch already has the session's change
	CodeNoBaseBranch      = "no_base_branch"     // the session started from a detached HEAD, or its base branch is gone
)

// KindWorktree is a session-update kind: a worktree operation (rollback,
// squash-merge, branch-retry, remove) done on the session; data is a
// WorktreeEvent.
const KindWorktree = "worktree"

// Isolation values of a manifest.
const (
	IsolationWorktree = "worktree" // the session runs in its own git worktree
	IsolationInPlace  = "in-place" // the directory is not a git repository (or has no commit)
)

// WorktreeManifest is the worktree part of a session's manifest. Worktree
// (the path) and Workdir are the manifest's own fields.
type WorktreeManifest struct {
	Isolation     string `json:"isolation,omitempty"`
	IsolationNote string `json:"isolation_note,omitempty"`
	// Repository is the checkout the session was launched in.
	Repository string `json:"repository,omitempty"`
	// WorktreePrefix is the launch directory inside the repository; the
	// agent works in Worktree/WorktreePrefix.
	WorktreePrefix string `json:"worktree_prefix,omitempty"`
	Branch         string `json:"branch,omitempty"`
	BaseCommit     string `json:"base_commit,omitempty"`
	BaseBranch     string `json:"base_branch,omitempty"`
	// StartCommit is where the branch began: BaseCommit, or for a retry
	// the checkpoint it started from.
	StartCommit     string       `json:"start_commit,omitempty"`
	RetryOf         *RetryOrigin `json:"retry_of,omitempty"`
	WorktreeRemoved bool         `json:"worktree_removed,omitempty"`
}

// RetryOrigin is the session and checkpoint a branch-retry started from.
type RetryOrigin struct {
	SessionID string `json:"session_id"`
	SHA       string `json:"sha"`
}

// Checkpoint is the data of a checkpoint event: the worktree was committed
// on the session branch.
type Checkpoint struct {
	SHA    string   `json:"sha"`
	Turn   int      `json:"turn"`
	Action string   `json:"action"` // turn, before-rollback, before-squash, before-remove
	Branch string   `json:"branch"`
	Files  []string `json:"files"`
}

// WorktreeEvent is the data of a worktree event.
type WorktreeEvent struct {
	Action string `json:"action"` // rollback, squash-merge, branch-retry, remove
	// SHA is the checkpoint rolled back to or retried from, or the squash
	// commit.
	SHA        string   `json:"sha,omitempty"`
	Head       string   `json:"head,omitempty"` // the session branch after a rollback
	BaseBranch string   `json:"base_branch,omitempty"`
	SessionID  string   `json:"session_id,omitempty"` // the new session of a branch-retry
	Path       string   `json:"path,omitempty"`       // the removed worktree
	Files      []string `json:"files,omitempty"`
	Note       string   `json:"note,omitempty"`
}

// WorktreeListRequest lists session worktrees: every session's, or only
// SessionID's when it is set.
type WorktreeListRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id,omitempty"`
}

// SetHeader implements Request.
func (r *WorktreeListRequest) SetHeader(id string) { r.Type, r.ID = TypeWorktreeList, id }

// WorktreeDiffRequest asks for a session's patch against its base.
type WorktreeDiffRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
}

// SetHeader implements Request.
func (r *WorktreeDiffRequest) SetHeader(id string) { r.Type, r.ID = TypeWorktreeDiff, id }

// WorktreeSummaryRequest asks for a session's change summary and
// checkpoints.
type WorktreeSummaryRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
}

// SetHeader implements Request.
func (r *WorktreeSummaryRequest) SetHeader(id string) { r.Type, r.ID = TypeWorktreeSummary, id }

// WorktreeRemoveRequest removes a session's worktree directory.
type WorktreeRemoveRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
}

// SetHeader implements Request.
func (r *WorktreeRemoveRequest) SetHeader(id string) { r.Type, r.ID = TypeWorktreeRemove, id }

// RollbackRequest resets a session's worktree to one of its checkpoints.
type RollbackRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	SHA       string `json:"sha"`
}

// SetHeader implements Request.
func (r *RollbackRequest) SetHeader(id string) { r.Type, r.ID = TypeRollback, id }

// BranchRetryRequest starts a new session, with the same agent, model and
// prompt (unless Prompt is given), on a new branch from a checkpoint.
type BranchRetryRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	SHA       string `json:"sha"`
	Prompt    string `json:"prompt,omitempty"`
}

// SetHeader implements Request.
func (r *BranchRetryRequest) SetHeader(id string) { r.Type, r.ID = TypeBranchRetry, id }

// SquashMergeRequest merges a session's net change into its base branch as
// one commit; Message defaults to one derived from the session.
type SquashMergeRequest struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	SessionID string `json:"session_id"`
	Message   string `json:"message,omitempty"`
}

// SetHeader implements Request.
func (r *SquashMergeRequest) SetHeader(id string) { r.Type, r.ID = TypeSquashMerge, id }

// CheckpointInfo is one commit on a session branch.
type CheckpointInfo struct {
	SHA       string    `json:"sha"`
	SessionID string    `json:"session_id,omitempty"` // the session that made it ("" for a commit the agent made)
	Turn      int       `json:"turn,omitempty"`
	Action    string    `json:"action"` // turn, before-*, rollback, or agent (a commit the agent made itself)
	Subject   string    `json:"subject"`
	At        time.Time `json:"at"`
	Files     []string  `json:"files,omitempty"`
}

// FileStat is one file's share of a diff.
type FileStat struct {
	Path       string `json:"path"`
	Insertions int    `json:"insertions"`
	Deletions  int    `json:"deletions"`
	Binary     bool   `json:"binary,omitempty"`
}

// DiffStat sums a diff.
type DiffStat struct {
	FilesChanged int        `json:"files_changed"`
	Insertions   int        `json:"insertions"`
	Deletions    int        `json:"deletions"`
	Files        []FileStat `json:"files"`
}

// WorktreeInfo is one session worktree in a worktree-list result.
type WorktreeInfo struct {
	SessionID      string          `json:"session_id"`
	Status         string          `json:"status"`
	Agent          string          `json:"agent"`
	Repository     string          `json:"repository"`
	Path           string          `json:"path"`
	Branch         string          `json:"branch"`
	BaseBranch     string          `json:"base_branch,omitempty"`
	BaseCommit     string          `json:"base_commit"`
	Head           string          `json:"head,omitempty"`
	Exists         bool            `json:"exists"`
	Dirty          bool            `json:"dirty"`
	Checkpoints    int             `json:"checkpoints"`
	LastCheckpoint *CheckpointInfo `json:"last_checkpoint,omitempty"`
	RetryOf        *RetryOrigin    `json:"retry_of,omitempty"`
}

// WorktreeList is the result of worktree-list.
type WorktreeList struct {
	Worktrees []WorktreeInfo `json:"worktrees"`
}

// WorktreeDiff is the result of worktree-diff: the session's change from
// its base commit to the worktree as it is now (or to the branch tip once
// the worktree is removed).
type WorktreeDiff struct {
	SessionID   string `json:"session_id"`
	Branch      string `json:"branch"`
	BaseBranch  string `json:"base_branch,omitempty"`
	BaseCommit  string `json:"base_commit"`
	Head        string `json:"head"` // a tree id
	Uncommitted bool   `json:"uncommitted"`
	Patch       string `json:"patch"`
	DiffStat
}

// WorktreeSummary is the result of worktree-summary.
type WorktreeSummary struct {
	SessionID   string `json:"session_id"`
	Branch      string `json:"branch"`
	BaseBranch  string `json:"base_branch,omitempty"`
	BaseCommit  string `json:"base_commit"`
	Uncommitted bool   `json:"uncommitted"`
	DiffStat
	Checkpoints []CheckpointInfo `json:"checkpoints"`
}

// RollbackResult is the result of rollback.
type RollbackResult struct {
	SessionID string `json:"session_id"`
	To        string `json:"to"`
	// Head is the session branch afterwards: a new commit with To's tree.
	Head  string          `json:"head"`
	Saved *CheckpointInfo `json:"saved,omitempty"` // uncommitted work checkpointed first
	Files []string        `json:"files"`
}

// BranchRetryResult is the result of branch-retry.
type BranchRetryResult struct {
	Session  SessionInfo `json:"session"`
	From     string      `json:"from"`
	Branch   string      `json:"branch"`
	Worktree string      `json:"worktree"`
}

// SquashMergeResult is the result of squash-merge.
type SquashMergeResult struct {
	SessionID  string `json:"session_id"`
	BaseBranch string `json:"base_branch"`
	Parent     string `json:"parent"`
	Commit     string `json:"commit"`
	// Checkout is the base branch's checkout whose files were updated; ""
	// when the branch is not checked out anywhere.
	Checkout string          `json:"checkout,omitempty"`
	Message  string          `json:"message"`
	Saved    *CheckpointInfo `json:"saved,omitempty"`
	DiffStat
}

// WorktreeRemoveResult is the result of worktree-remove.
type WorktreeRemoveResult struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path"`
	Removed   bool   `json:"removed"`
	Branch    string `json:"branch"`
	// BranchDeleted is true only when the branch's changes are already in
	// its base branch; otherwise it is kept with every checkpoint.
	BranchDeleted bool            `json:"branch_deleted"`
	Note          string          `json:"note"`
	Saved         *CheckpointInfo `json:"saved,omitempty"`
}
