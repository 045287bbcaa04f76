package sdk

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Team workers (docs/workers.md): workflow runs queued on the control
// plane, managed executors with their runner credentials, and the runtime
// routes through which a worker claims a run as a fenced, expiring lease,
// heartbeats it, asks for approvals and reports the result.

// Workflow run states. A run moves draft → queued → leased → running
// (⇄ waiting-approval) → succeeded | failed | cancelled; a queued run the
// budget does not admit is blocked; an expired lease puts the run back to
// queued with the attempt counted.
const (
	RunDraft           = "draft"
	RunQueued          = "queued"
	RunBlocked         = "blocked"
	RunLeased          = "leased"
	RunRunning         = "running"
	RunWaitingApproval = "waiting-approval"
	RunSucceeded       = "succeeded"
	RunFailed          = "failed"
	RunCancelled       = "cancelled"
)

// RunTerminal reports whether a run in state s is over.
func RunTerminal(s string) bool {
	return s == RunSucceeded || s == RunFailed || s == RunCancelled
}

// Approval states of a workflow approval node.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalExpired  = "expired" // nobody decided before its deadline: the worker denies
)

// Error codes of the worker routes.
const (
	CodeStaleFence    = "stale_fence"     // 409: a report under a fence the lease has moved past
	CodeLeaseExpired  = "lease_expired"   // 410: the lease expired (the run was requeued) or ended
	CodeLeaseNotFound = "lease_not_found" // 404: no such lease (or token) for this credential
	CodeRunState      = "run_state"       // 409: the run's state forbids the change (cancel a finished run)
	CodeNotRunnable   = "not_runnable"    // 422: preflight issues (the answer's data lists them)
)

// RunnerCredentialPrefix starts a runner credential (a managed executor's
// bearer token); LeaseTokenPrefix starts a lease token, the bearer
// credential of exactly one lease (`reeve worker run-once --lease`).
const (
	RunnerCredentialPrefix = "rwc_"
	LeaseTokenPrefix       = "rwl_"
)

// WorkflowRun is one run of governed agent work: what to do (agent,
// prompt or workflow definition, model, in which repository or working
// directory known to the worker), what a worker needs to take it (tags,
// agent) and what became of it.
type WorkflowRun struct {
	ID          string `json:"id"`
	WorkspaceID string `json:"workspace_id"`
	Status      string `json:"status"`
	// Agent is the adapter to run (claude, codex, gemini, shell, custom).
	Agent string `json:"agent"`
	Model string `json:"model,omitempty"`
	// Prompt is what the agent is asked; Definition a workflow YAML whose
	// steps give the prompt instead (DefinitionID names a stored one).
	Prompt       string `json:"prompt,omitempty"`
	Definition   string `json:"definition,omitempty"`
	DefinitionID string `json:"workflow_definition_id,omitempty"`
	// VersionID is the stored definition's version the run carries, and
	// Digest the SHA-256 of the YAML it runs ("sha256:<hex>"; also for an
	// inline yaml_snapshot).
	VersionID string `json:"workflow_version_id,omitempty"`
	Digest    string `json:"workflow_digest,omitempty"`
	// RunnerPool, when set, lets only workers polling for that pool
	// (`reeve worker start --runner-pool NAME`) claim the run.
	RunnerPool string `json:"runner_pool,omitempty"`
	// Workdir names a directory the worker has (a path, or the name it was
	// given with --workdir); Repo the repository it checks out, if any.
	Workdir string `json:"workdir,omitempty"`
	Repo    string `json:"repo,omitempty"`
	// Tags are the capabilities an executor must have, all of them.
	Tags []string `json:"tags"`
	// ManagedExecutorID pins the run to one executor.
	ManagedExecutorID string `json:"managed_executor_id,omitempty"`
	// SessionID links the run to an agent session (run-attempts), and once
	// started, to the daemon session the worker ran (its latest attempt's).
	SessionID string `json:"session_id,omitempty"`
	// LinkedSessionID is the session the run was queued from (run-attempts);
	// it stays when SessionID becomes the worker's.
	LinkedSessionID string `json:"linked_session_id,omitempty"`
	// SyncedSessionID is the control plane's session record holding the
	// worker's daemon session and its events, published by the daemon's
	// session sync (only in the answer of one run, once it has synced).
	SyncedSessionID string `json:"synced_session_id,omitempty"`
	// Attempt counts leases granted (1 for the first); MaxAttempts bounds
	// how often an expired lease requeues it before it fails.
	Attempt     int `json:"attempt"`
	MaxAttempts int `json:"max_attempts"`
	// LeaseID and ExecutorID name the live holder while leased or running.
	LeaseID    string `json:"lease_id,omitempty"`
	ExecutorID string `json:"executor_id,omitempty"`
	// CancelRequested is set by cancel while a worker holds the run; the
	// holder learns it on its next heartbeat.
	CancelRequested bool   `json:"cancel_requested"`
	BlockedReason   string `json:"blocked_reason,omitempty"`
	RerunOf         string `json:"rerun_of,omitempty"`
	// The outcome, reported by the worker.
	ExitCode    *int               `json:"exit_code,omitempty"`
	DiffSummary string             `json:"diff_summary,omitempty"`
	Checkpoints []RunCheckpoint    `json:"checkpoints,omitempty"`
	Usage       *RunUsage          `json:"usage,omitempty"`
	Error       string             `json:"error,omitempty"`
	CreatedBy   string             `json:"created_by"`
	CreatedAt   time.Time          `json:"created_at"`
	UpdatedAt   time.Time          `json:"updated_at"`
	StartedAt   *time.Time         `json:"started_at,omitempty"`
	FinishedAt  *time.Time         `json:"finished_at,omitempty"`
	Approvals   []WorkflowApproval `json:"approvals,omitempty"`
}

// RunCheckpoint is a commit the daemon made in the run's worktree.
type RunCheckpoint struct {
	SHA     string     `json:"sha"`
	Message string     `json:"message,omitempty"`
	At      *time.Time `json:"at,omitempty"`
}

// RunUsage is the model usage of a run; it is recorded in the workspace's
// gateway ledger (cost_usd is a decimal string).
type RunUsage struct {
	Provider     string `json:"provider,omitempty"`
	Model        string `json:"model,omitempty"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	TotalTokens  int64  `json:"total_tokens"`
	CostUSD      string `json:"cost_usd,omitempty"`
}

// WorkflowRunCreateRequest is the body of POST /api/workflow-runs (and,
// without Agent/Prompt required, of a session's run-attempts). Status is
// draft or queued (default queued).
type WorkflowRunCreateRequest struct {
	Agent             string   `json:"agent,omitempty"`
	Model             string   `json:"model,omitempty"`
	Prompt            string   `json:"prompt,omitempty"`
	YAMLSnapshot      string   `json:"yaml_snapshot,omitempty"`
	DefinitionID      string   `json:"workflow_definition_id,omitempty"`
	VersionID         string   `json:"workflow_version_id,omitempty"`
	WorkflowDigest    string   `json:"workflow_digest,omitempty"`
	RunnerPool        string   `json:"runner_pool,omitempty"`
	Workdir           string   `json:"workdir,omitempty"`
	Repo              string   `json:"repo,omitempty"`
	Tags              []string `json:"tags,omitempty"`
	ManagedExecutorID string   `json:"managed_executor_id,omitempty"`
	SessionID         string   `json:"session_id,omitempty"`
	MaxAttempts       int      `json:"max_attempts,omitempty"`
	Status            string   `json:"status,omitempty"`
}

// WorkflowRunResponse holds one run; WorkflowRunCollectionResponse a page.
type WorkflowRunResponse = Data[WorkflowRun]

// WorkflowRunCollectionResponse is a page of runs, newest last.
type WorkflowRunCollectionResponse struct {
	Data []WorkflowRun `json:"data"`
	Meta ListMeta      `json:"meta"`
}

// WorkflowRunEvent is one entry of a run's history: every transition,
// lease, heartbeat gap, approval and report, in order.
type WorkflowRunEvent struct {
	Seq   int64          `json:"seq"`
	RunID string         `json:"run_id"`
	Kind  string         `json:"kind"`
	Actor string         `json:"actor"`
	At    time.Time      `json:"at"`
	Data  map[string]any `json:"data,omitempty"`
}

// Run event kinds the server writes (workers add their own through
// AppendLeaseEvents: agent-message, tool-call, terminal-output, ...).
const (
	RunEventCreated          = "run.created"
	RunEventStatus           = "run.status"
	RunEventLeased           = "lease.granted"
	RunEventLeaseExpired     = "lease.expired"
	RunEventLeaseReleased    = "lease.released"
	RunEventCancelRequested  = "run.cancel_requested"
	RunEventApprovalRequest  = "approval.requested"
	RunEventApprovalDecision = "approval.decided"
	RunEventCompleted        = "run.completed"
)

// WorkflowRunEventCollectionResponse is a page of a run's history.
type WorkflowRunEventCollectionResponse struct {
	Data []WorkflowRunEvent `json:"data"`
	Meta ListMeta           `json:"meta"`
}

// ManagedExecutor is a worker identity of a workspace: its tags are its
// capabilities (a run's tags must all be among them), Agents the adapters
// it offers (empty: any).
type ManagedExecutor struct {
	ID          string   `json:"id"`
	WorkspaceID string   `json:"workspace_id"`
	Name        string   `json:"name"`
	Tags        []string `json:"tags"`
	Agents      []string `json:"agents"`
	// CredentialPrefix is the shown part of the runner credential.
	CredentialPrefix string     `json:"credential_prefix"`
	CreatedBy        string     `json:"created_by"`
	CreatedAt        time.Time  `json:"created_at"`
	RotatedAt        *time.Time `json:"rotated_at,omitempty"`
	LastSeenAt       *time.Time `json:"last_seen_at,omitempty"`
	// Credential is the runner credential's plaintext: only in the answer
	// of create and rotate-credential, never stored.
	Credential string `json:"credential,omitempty"`
}

// ManagedExecutorCreateRequest creates an executor.
type ManagedExecutorCreateRequest struct {
	Name   string   `json:"name"`
	Tags   []string `json:"tags,omitempty"`
	Agents []string `json:"agents,omitempty"`
}

// ManagedExecutorTagsRequest replaces an executor's tags.
type ManagedExecutorTagsRequest struct {
	Tags []string `json:"tags"`
}

// ManagedExecutorResponse holds one executor.
type ManagedExecutorResponse = Data[ManagedExecutor]

// ManagedExecutorCollectionResponse lists executors.
type ManagedExecutorCollectionResponse struct {
	Data []ManagedExecutor `json:"data"`
	Meta ListMeta          `json:"meta"`
}

// WorkerClaimRequest asks for a run. Agents and Tags are what the worker
// offers (checked against the executor: a worker cannot claim more than
// its credential allows); Workdirs, when given, limits the claim to runs
// naming one of them (or none). WaitSeconds long-polls (0..60; 0 answers
// at once; a body without the field waits 30).
type WorkerClaimRequest struct {
	Agents   []string `json:"agents,omitempty"`
	Tags     []string `json:"tags,omitempty"`
	Workdirs []string `json:"workdirs,omitempty"`
	// RunnerPool is the pool the worker serves: it takes only runs naming
	// this pool ("" takes only runs naming none).
	RunnerPool  string `json:"runner_pool,omitempty"`
	WaitSeconds int    `json:"wait_seconds"`
}

// Lease is a worker's hold on one run: fenced (every report carries the
// fence; a report under an older fence is refused) and expiring (the
// holder heartbeats before ExpiresAt, else the run is requeued). Token is
// the lease's own bearer credential.
type Lease struct {
	ID                string      `json:"lease_id"`
	Token             string      `json:"token,omitempty"`
	Fence             int64       `json:"fence"`
	RunID             string      `json:"run_id"`
	ExecutorID        string      `json:"executor_id"`
	ExpiresAt         time.Time   `json:"expires_at"`
	HeartbeatInterval int         `json:"heartbeat_interval"` // seconds
	TTL               int         `json:"ttl"`                // seconds a heartbeat extends it by
	Run               WorkflowRun `json:"run"`
}

// LeaseResponse holds a lease.
type LeaseResponse = Data[Lease]

// LeaseFenceRequest carries only the fence (heartbeat).
type LeaseFenceRequest struct {
	Fence int64 `json:"fence"`
}

// LeaseHeartbeat answers a heartbeat: the new expiry, and whether the run
// was cancelled (the holder then stops the agent and completes with
// status cancelled).
type LeaseHeartbeat struct {
	ExpiresAt       time.Time `json:"expires_at"`
	CancelRequested bool      `json:"cancel_requested"`
	Status          string    `json:"status"`
}

// LeaseStateRequest reports the run's progress: running (with the session
// id once the agent started) or waiting-approval.
type LeaseStateRequest struct {
	Fence     int64  `json:"fence"`
	State     string `json:"state"`
	SessionID string `json:"session_id,omitempty"`
	Message   string `json:"message,omitempty"`
}

// LeaseEventsRequest appends the worker's evidence to the run's history
// (at most 500 events a call).
type LeaseEventsRequest struct {
	Fence  int64          `json:"fence"`
	Events []LeaseEventIn `json:"events"`
}

// LeaseEventIn is one event a worker reports.
type LeaseEventIn struct {
	Kind string         `json:"kind"`
	At   *time.Time     `json:"at,omitempty"`
	Data map[string]any `json:"data,omitempty"`
}

// WorkflowApproval is an approval node: a tool use the policy asked a
// human about. The worker raises it; an approver decides it through POST
// /api/workflow-runs/{r}/approvals/{nodeKey}; the worker long-polls it.
type WorkflowApproval struct {
	NodeKey     string         `json:"node_key"`
	RunID       string         `json:"run_id"`
	State       string         `json:"state"`
	Tool        string         `json:"tool"`
	Summary     string         `json:"summary,omitempty"`
	Input       map[string]any `json:"input,omitempty"`
	RequestedAt time.Time      `json:"requested_at"`
	ExpiresAt   time.Time      `json:"expires_at"`
	DecidedBy   string         `json:"decided_by,omitempty"`
	DecidedAt   *time.Time     `json:"decided_at,omitempty"`
	Reason      string         `json:"reason,omitempty"`
}

// WorkflowApprovalResponse holds one approval node.
type WorkflowApprovalResponse = Data[WorkflowApproval]

// LeaseApprovalRequest raises an approval node for the leased run; the run
// goes to waiting-approval until every raised node is decided. Raising a
// node key again returns the existing node. TimeoutSeconds (default 600,
// at most 86400) is when it expires undecided.
type LeaseApprovalRequest struct {
	Fence          int64          `json:"fence"`
	NodeKey        string         `json:"node_key"`
	Tool           string         `json:"tool"`
	Summary        string         `json:"summary,omitempty"`
	Input          map[string]any `json:"input,omitempty"`
	TimeoutSeconds int            `json:"timeout_seconds,omitempty"`
}

// WorkflowApprovalDecisionRequest is a human's decision on a node.
type WorkflowApprovalDecisionRequest struct {
	Decision string `json:"decision"` // approve or deny
	Reason   string `json:"reason,omitempty"`
}

// LeaseCompleteRequest ends the lease with the run's outcome: succeeded,
// failed or cancelled. Usage is recorded in the workspace's gateway
// ledger.
type LeaseCompleteRequest struct {
	Fence       int64           `json:"fence"`
	Status      string          `json:"status"`
	ExitCode    *int            `json:"exit_code,omitempty"`
	DiffSummary string          `json:"diff_summary,omitempty"`
	Checkpoints []RunCheckpoint `json:"checkpoints,omitempty"`
	Usage       *RunUsage       `json:"usage,omitempty"`
	SessionID   string          `json:"session_id,omitempty"`
	Error       string          `json:"error,omitempty"`
}

// LeaseReleaseRequest gives a run back without running it (the worker
// lacks its directory or agent): the run is queued again, the attempt not
// counted.
type LeaseReleaseRequest struct {
	Fence  int64  `json:"fence"`
	Reason string `json:"reason"`
}

// WorkflowRunPreflightIssue is one reason a run could not start.
type WorkflowRunPreflightIssue struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// WorkflowRunPreflight is the preflight answer (200 runnable; 422 with the
// same body inside the ErrorEnvelope when not).
type WorkflowRunPreflight struct {
	Runnable bool                        `json:"runnable"`
	Issues   []WorkflowRunPreflightIssue `json:"issues"`
	// Advisories do not make the run unrunnable: a runner pool no fitting
	// worker has served lately (runner_pool_unserved) is one.
	Advisories []WorkflowRunPreflightIssue `json:"advisories,omitempty"`
}

// ---- runtime routes: the worker's side (runner credential or lease token) ----

const workerBase = "/api/runtime/worker"

func leasePath(leaseID, rest string) string {
	return workerBase + "/leases/" + url.PathEscape(leaseID) + rest
}

// WorkerIdentity reads the executor of the client's runner credential
// (worker doctor: credential, workspace and capabilities, no claim).
func (c *Client) WorkerIdentity(ctx context.Context) (ManagedExecutor, error) {
	var r ManagedExecutorResponse
	_, err := c.Do(ctx, http.MethodGet, workerBase+"/me", nil, &r)
	return r.Data, err
}

// ClaimLease long-polls for a run. It returns ok=false when nothing
// matched within the wait (204).
func (c *Client) ClaimLease(ctx context.Context, req WorkerClaimRequest) (Lease, bool, error) {
	var r LeaseResponse
	st, err := c.Do(ctx, http.MethodPost, workerBase+"/claim", req, &r)
	if err != nil || st == http.StatusNoContent {
		return Lease{}, false, err
	}
	return r.Data, true, nil
}

// LeaseByToken reads the lease of the client's lease token (Token must be
// the rwl_ lease token): run-once starts here.
func (c *Client) LeaseByToken(ctx context.Context) (Lease, error) {
	var r LeaseResponse
	_, err := c.Do(ctx, http.MethodGet, workerBase+"/leases/by-token", nil, &r)
	return r.Data, err
}

// HeartbeatLease extends a lease.
func (c *Client) HeartbeatLease(ctx context.Context, leaseID string, fence int64) (LeaseHeartbeat, error) {
	var r Data[LeaseHeartbeat]
	_, err := c.Do(ctx, http.MethodPost, leasePath(leaseID, "/heartbeat"), LeaseFenceRequest{Fence: fence}, &r)
	return r.Data, err
}

// ReportLeaseState moves the leased run to running or waiting-approval.
func (c *Client) ReportLeaseState(ctx context.Context, leaseID string, req LeaseStateRequest) (WorkflowRun, error) {
	var r WorkflowRunResponse
	_, err := c.Do(ctx, http.MethodPost, leasePath(leaseID, "/state"), req, &r)
	return r.Data, err
}

// AppendLeaseEvents adds the worker's evidence to the run's history.
func (c *Client) AppendLeaseEvents(ctx context.Context, leaseID string, req LeaseEventsRequest) error {
	_, err := c.Do(ctx, http.MethodPost, leasePath(leaseID, "/events"), req, nil)
	return err
}

// RaiseLeaseApproval files an approval node for the leased run.
func (c *Client) RaiseLeaseApproval(ctx context.Context, leaseID string, req LeaseApprovalRequest) (WorkflowApproval, error) {
	var r WorkflowApprovalResponse
	_, err := c.Do(ctx, http.MethodPost, leasePath(leaseID, "/approvals"), req, &r)
	return r.Data, err
}

// WaitLeaseApproval reads an approval node, long-polling up to wait for a
// decision (0: answer at once).
func (c *Client) WaitLeaseApproval(ctx context.Context, leaseID, nodeKey string, wait time.Duration) (WorkflowApproval, error) {
	var r WorkflowApprovalResponse
	p := leasePath(leaseID, "/approvals/"+url.PathEscape(nodeKey)) + "?wait=" + strconv.Itoa(int(wait.Seconds()))
	_, err := c.Do(ctx, http.MethodGet, p, nil, &r)
	return r.Data, err
}

// CompleteLease reports the run's outcome and ends the lease.
func (c *Client) CompleteLease(ctx context.Context, leaseID string, req LeaseCompleteRequest) (WorkflowRun, error) {
	var r WorkflowRunResponse
	_, err := c.Do(ctx, http.MethodPost, leasePath(leaseID, "/complete"), req, &r)
	return r.Data, err
}

// ReleaseLease gives the run back to the queue.
func (c *Client) ReleaseLease(ctx context.Context, leaseID string, req LeaseReleaseRequest) (WorkflowRun, error) {
	var r WorkflowRunResponse
	_, err := c.Do(ctx, http.MethodPost, leasePath(leaseID, "/release"), req, &r)
	return r.Data, err
}

// ---- user routes: runs and executors (in a workspace) ----

// CreateWorkflowRun queues (or drafts) a run.
func (c *Client) CreateWorkflowRun(ctx context.Context, workspaceID string, req WorkflowRunCreateRequest) (WorkflowRun, error) {
	var r WorkflowRunResponse
	_, err := c.doWS(ctx, workspaceID, http.MethodPost, "/api/workflow-runs", req, &r)
	return r.Data, err
}

// QueueSessionRunAttempt queues a run linked to an agent session.
func (c *Client) QueueSessionRunAttempt(ctx context.Context, workspaceID, sessionID string, req WorkflowRunCreateRequest) (WorkflowRun, error) {
	var r WorkflowRunResponse
	_, err := c.Do(ctx, http.MethodPost, "/api/resources/"+url.PathEscape(workspaceID)+"/sessions/"+url.PathEscape(sessionID)+"/run-attempts", req, &r)
	return r.Data, err
}

// ListWorkflowRuns lists a workspace's runs, optionally of one status.
func (c *Client) ListWorkflowRuns(ctx context.Context, workspaceID, status string) ([]WorkflowRun, error) {
	var r WorkflowRunCollectionResponse
	p := "/api/workflow-runs?limit=500"
	if status != "" {
		p += "&status=" + url.QueryEscape(status)
	}
	_, err := c.doWS(ctx, workspaceID, http.MethodGet, p, nil, &r)
	return r.Data, err
}

func runPath(runID, rest string) string {
	return "/api/workflow-runs/" + url.PathEscape(runID) + rest
}

// GetWorkflowRun reads one run.
func (c *Client) GetWorkflowRun(ctx context.Context, workspaceID, runID string) (WorkflowRun, error) {
	var r WorkflowRunResponse
	_, err := c.doWS(ctx, workspaceID, http.MethodGet, runPath(runID, ""), nil, &r)
	return r.Data, err
}

// CancelWorkflowRun cancels a run: at once when nobody holds it, else the
// holder is told on its next heartbeat.
func (c *Client) CancelWorkflowRun(ctx context.Context, workspaceID, runID string) (WorkflowRun, error) {
	var r WorkflowRunResponse
	_, err := c.doWS(ctx, workspaceID, http.MethodPost, runPath(runID, "/cancel"), map[string]any{}, &r)
	return r.Data, err
}

// RerunWorkflowRun queues a new run with the same request as a finished one.
func (c *Client) RerunWorkflowRun(ctx context.Context, workspaceID, runID string) (WorkflowRun, error) {
	var r WorkflowRunResponse
	_, err := c.doWS(ctx, workspaceID, http.MethodPost, runPath(runID, "/rerun"), map[string]any{}, &r)
	return r.Data, err
}

// WorkflowRunEvents reads a run's history after a sequence.
func (c *Client) WorkflowRunEvents(ctx context.Context, workspaceID, runID string, after int64) ([]WorkflowRunEvent, error) {
	var r WorkflowRunEventCollectionResponse
	_, err := c.doWS(ctx, workspaceID, http.MethodPost, runPath(runID, "/events"), map[string]any{"after_sequence": after}, &r)
	return r.Data, err
}

// DecideWorkflowApproval approves or denies an approval node.
func (c *Client) DecideWorkflowApproval(ctx context.Context, workspaceID, runID, nodeKey string, req WorkflowApprovalDecisionRequest) (WorkflowApproval, error) {
	var r WorkflowApprovalResponse
	_, err := c.doWS(ctx, workspaceID, http.MethodPost, runPath(runID, "/approvals/"+url.PathEscape(nodeKey)), req, &r)
	return r.Data, err
}

// CreateManagedExecutor creates an executor; the answer carries the runner
// credential, once.
func (c *Client) CreateManagedExecutor(ctx context.Context, workspaceID string, req ManagedExecutorCreateRequest) (ManagedExecutor, error) {
	var r ManagedExecutorResponse
	_, err := c.doWS(ctx, workspaceID, http.MethodPost, "/api/managed-executors", req, &r)
	return r.Data, err
}

// ListManagedExecutors lists a workspace's executors.
func (c *Client) ListManagedExecutors(ctx context.Context, workspaceID string) ([]ManagedExecutor, error) {
	var r ManagedExecutorCollectionResponse
	_, err := c.doWS(ctx, workspaceID, http.MethodGet, "/api/managed-executors", nil, &r)
	return r.Data, err
}

// RotateManagedExecutorCredential replaces the runner credential; the old
// one stops at once.
func (c *Client) RotateManagedExecutorCredential(ctx context.Context, workspaceID, id string) (ManagedExecutor, error) {
	var r ManagedExecutorResponse
	_, err := c.doWS(ctx, workspaceID, http.MethodPost, "/api/managed-executors/"+url.PathEscape(id)+"/rotate-credential", map[string]any{}, &r)
	return r.Data, err
}

// SetManagedExecutorTags replaces an executor's tags.
func (c *Client) SetManagedExecutorTags(ctx context.Context, workspaceID, id string, tags []string) (ManagedExecutor, error) {
	var r ManagedExecutorResponse
	_, err := c.doWS(ctx, workspaceID, http.MethodPatch, "/api/managed-executors/"+url.PathEscape(id)+"/tags", ManagedExecutorTagsRequest{Tags: tags}, &r)
	return r.Data, err
}

// DeleteManagedExecutor deletes an executor; its credential stops at once.
func (c *Client) DeleteManagedExecutor(ctx context.Context, workspaceID, id string) error {
	_, err := c.doWS(ctx, workspaceID, http.MethodDelete, "/api/managed-executors/"+url.PathEscape(id), map[string]any{}, nil)
	return err
}
