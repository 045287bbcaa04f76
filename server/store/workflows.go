package store

import (
	"context"
	"encoding/json"
	"time"
)

// Team workers' persistence (docs/workers.md): managed executors, workflow
// runs with the lease of their live holder, run history and approval
// nodes. The API asks its Store for Workflows.

// ManagedExecutor is a worker identity; TokenHash is the SHA-256 of its
// runner credential (empty once deleted).
type ManagedExecutor struct {
	ID, WorkspaceID, Name  string
	Tags, Agents           []string
	TokenHash, TokenPrefix string
	CreatedBy              string
	CreatedAt              time.Time
	RotatedAt, LastSeenAt  *time.Time
	DeletedAt              *time.Time
}

// WorkflowRun is a run and, while it is held, its lease.
type WorkflowRun struct {
	Seq                     int64
	ID, WorkspaceID, Status string
	Agent                   string
	Tags                    []string
	ExecutorPin, Workdir    string
	// RunnerPool, when set, limits the run to workers claiming for that
	// pool (and a pooled worker takes only its pool's runs).
	RunnerPool string
	// Spec is what to run (prompt, model, definition, repo), a JSON object
	// the API owns; Outcome what the worker reported.
	Spec, Outcome        json.RawMessage
	Attempt, MaxAttempts int
	Fence                int64
	// The lease: set while leased, running or waiting for an approval.
	LeaseID, LeaseHash, ExecutorID string
	LeaseExpires                   *time.Time
	CancelRequested                bool
	SessionID                      string
	BlockedReason, RerunOf         string
	CreatedBy                      string
	CreatedAt, UpdatedAt           time.Time
	StartedAt, FinishedAt          *time.Time
}

// Held reports whether a worker holds the run.
func (r WorkflowRun) Held() bool { return r.LeaseID != "" }

// RunEvent is one entry of a run's history.
type RunEvent struct {
	Seq                             int64
	RunID, WorkspaceID, Kind, Actor string
	Data                            json.RawMessage
	CreatedAt                       time.Time
}

// RunApproval is an approval node of a run.
type RunApproval struct {
	RunID, NodeKey, WorkspaceID string
	State, Tool, Summary        string
	Input                       json.RawMessage
	Fence                       int64
	RequestedAt, ExpiresAt      time.Time
	DecidedBy                   string
	DecidedAt                   *time.Time
	Reason                      string
}

// ClaimFilter says which queued runs a worker may take: its workspace;
// runs pinned to no executor or to ExecutorID; of its runner pool exactly
// (the default pool is ""); whose agent is among Agents (empty: any);
// whose tags are all among Tags; whose workdir is empty or among Workdirs
// (empty: any).
type ClaimFilter struct {
	WorkspaceID, ExecutorID string
	RunnerPool              string
	Agents, Tags, Workdirs  []string
}

// Matches reports whether r passes f (the store checks the cheap columns
// in SQL and the rest with this).
func (f ClaimFilter) Matches(r WorkflowRun) bool {
	if r.WorkspaceID != f.WorkspaceID || (r.ExecutorPin != "" && r.ExecutorPin != f.ExecutorID) || r.RunnerPool != f.RunnerPool {
		return false
	}
	if len(f.Agents) > 0 && !contains(f.Agents, r.Agent) {
		return false
	}
	for _, t := range r.Tags {
		if !contains(f.Tags, t) {
			return false
		}
	}
	return r.Workdir == "" || len(f.Workdirs) == 0 || contains(f.Workdirs, r.Workdir)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// LeaseGrant is the lease ClaimRun gives the run it picks. Mint, when
// set, names the lease from the run and its new fence (it must be pure:
// a retried transaction calls it again); else LeaseID and TokenHash are
// used as given.
type LeaseGrant struct {
	LeaseID, TokenHash string
	Mint               func(runID string, fence int64) (leaseID, tokenHash string)
	Now, ExpiresAt     time.Time
	Actor              string
}

// Workflows is the team workers' part of the store. Every method that
// checks and changes state does both in one transaction.
type Workflows interface {
	// Executors. CreateExecutor returns ErrConflict when the name is taken
	// by a live executor of the workspace.
	CreateExecutor(ctx context.Context, e ManagedExecutor, audit AuditEntry) error
	Executor(ctx context.Context, workspaceID, id string) (ManagedExecutor, error)
	// ExecutorByTokenHash finds a live executor by its credential's hash.
	ExecutorByTokenHash(ctx context.Context, hash string) (ManagedExecutor, error)
	// Executors lists a workspace's live executors in creation order.
	Executors(ctx context.Context, workspaceID string) ([]ManagedExecutor, error)
	// UpdateExecutor applies fn to a live executor (tags, a new token hash,
	// deletion) in one transaction; deletion also deletes its pools.
	UpdateExecutor(ctx context.Context, workspaceID, id string, fn func(*ManagedExecutor) error, audit AuditEntry) (ManagedExecutor, error)
	// TouchExecutor records that a worker of the executor was seen at now,
	// serving the runner pools named (claiming for one, or holding a lease
	// of one; "" is the default pool), and forgets the pools it has not
	// served for poolForgetAfter. A deleted executor records none.
	TouchExecutor(ctx context.Context, id string, now time.Time, pools ...string) error
	// PoolSeen is when each executor of the workspace was last seen
	// serving pool, by executor id; executors never seen there are absent.
	PoolSeen(ctx context.Context, workspaceID, pool string) (map[string]time.Time, error)

	// Runs. CreateRun numbers r (Seq) and appends its first events.
	CreateRun(ctx context.Context, r *WorkflowRun, events []RunEvent, audit AuditEntry) error
	Run(ctx context.Context, workspaceID, id string) (WorkflowRun, error)
	// RunWorkspace is the workspace of a run, whichever it is: the lease
	// routes tell another workspace's lease (403) from none (404).
	RunWorkspace(ctx context.Context, id string) (string, error)
	// RunByLeaseHash finds the run a lease token holds (ErrNotFound when
	// no run holds it any more).
	RunByLeaseHash(ctx context.Context, hash string) (WorkflowRun, error)
	// Runs lists a workspace's runs in queue order, of one status or all.
	Runs(ctx context.Context, workspaceID, status string, opts ListOptions) ([]WorkflowRun, error)
	// UpdateRun applies fn to the current run and appends the events it
	// returns, in one transaction: every transition goes through it.
	UpdateRun(ctx context.Context, workspaceID, id string, fn func(*WorkflowRun) ([]RunEvent, error), audit AuditEntry) (WorkflowRun, error)
	// ClaimRun leases the oldest queued run that passes f: attempt + 1,
	// fence + 1, status leased, the grant's lease. Concurrent claimers, on
	// any replica, never take the same run (PostgreSQL: FOR UPDATE SKIP
	// LOCKED; SQLite: the one writer). ErrNotFound when none matches.
	ClaimRun(ctx context.Context, f ClaimFilter, g LeaseGrant) (WorkflowRun, error)
	// QueuedHead counts a workspace's queued runs and gives the greatest
	// queued sequence: a cheap read that tells waiting claimers whether
	// the queue changed.
	QueuedHead(ctx context.Context, workspaceID string) (count int, maxSeq int64, err error)
	// ExpireLeases takes back leases that expired before now (at most
	// limit): the run is queued again with its attempt counted, or failed
	// when it has used max_attempts. It returns the runs as they became.
	ExpireLeases(ctx context.Context, now time.Time, limit int) ([]WorkflowRun, error)
	// BlockQueued moves a workspace's queued runs to blocked with reason.
	BlockQueued(ctx context.Context, workspaceID, reason string, now time.Time) ([]WorkflowRun, error)

	// History.
	RunEvents(ctx context.Context, runID string, after int64, limit int) ([]RunEvent, error)
	// AppendRunEvents appends events after check approves the run as it is.
	AppendRunEvents(ctx context.Context, workspaceID, runID string, check func(WorkflowRun) error, events []RunEvent) error

	// Approvals. RaiseApproval files a node after check approves the run
	// (and may change it: waiting-approval); an existing node key returns
	// the stored node with created=false and changes nothing.
	RaiseApproval(ctx context.Context, a RunApproval, check func(*WorkflowRun) error, events []RunEvent) (RunApproval, bool, error)
	Approval(ctx context.Context, runID, nodeKey string) (RunApproval, error)
	Approvals(ctx context.Context, runID string) ([]RunApproval, error)
	// DecideApproval applies fn to the node, then fnRun to the run with the
	// number of nodes still pending, in one transaction.
	DecideApproval(ctx context.Context, workspaceID, runID, nodeKey string, fn func(*RunApproval) error, fnRun func(r *WorkflowRun, pending int) []RunEvent, audit AuditEntry) (RunApproval, WorkflowRun, error)
}
