package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/redact"
	"reeve.dev/reeve/server/sdk"
)

// Server is what a worker asks of the control plane: the runtime routes
// of a runner credential (or, for run-once, of one lease token).
// *sdk.Client is the real one.
type Server interface {
	WorkerIdentity(ctx context.Context) (sdk.ManagedExecutor, error)
	ClaimLease(ctx context.Context, req sdk.WorkerClaimRequest) (sdk.Lease, bool, error)
	LeaseByToken(ctx context.Context) (sdk.Lease, error)
	HeartbeatLease(ctx context.Context, leaseID string, fence int64) (sdk.LeaseHeartbeat, error)
	ReportLeaseState(ctx context.Context, leaseID string, req sdk.LeaseStateRequest) (sdk.WorkflowRun, error)
	RaiseLeaseApproval(ctx context.Context, leaseID string, req sdk.LeaseApprovalRequest) (sdk.WorkflowApproval, error)
	WaitLeaseApproval(ctx context.Context, leaseID, nodeKey string, wait time.Duration) (sdk.WorkflowApproval, error)
	CompleteLease(ctx context.Context, leaseID string, req sdk.LeaseCompleteRequest) (sdk.WorkflowRun, error)
	ReleaseLease(ctx context.Context, leaseID string, req sdk.LeaseReleaseRequest) (sdk.WorkflowRun, error)
	AppendLeaseEvents(ctx context.Context, leaseID string, req sdk.LeaseEventsRequest) error
}

var _ Server = (*sdk.Client)(nil)

// RunMode is the operator mode of every run's session: detect, so that
// what the project policy leaves open goes to a human on the control
// plane, whatever default mode the machine's owner chose for their own
// sessions (a local bypass must not govern the team's runs).
const RunMode = "detect"

// Why a running job was stopped (the cause of its context).
var (
	ErrCancelRequested = errors.New("the run was cancelled on the control plane")
	ErrLeaseLost       = errors.New("the lease was lost (expired, or taken over after a missed heartbeat)")
	ErrStopping        = errors.New("the worker is stopping")
)

// LeaseResult is what became of one lease.
type LeaseResult struct {
	LeaseID string  `json:"lease_id"`
	RunID   string  `json:"run_id"`
	Status  string  `json:"status"` // succeeded, failed, cancelled, released or lost
	Outcome Outcome `json:"-"`
	Error   string  `json:"error,omitempty"`
}

// LeaseRunner runs leases: it heartbeats the lease on its own goroutine,
// executes the run through the daemon, raises approvals, and reports the
// outcome under the lease's fence.
type LeaseRunner struct {
	Server  Server
	Daemon  Daemon
	Profile Profile
	// Agents are the agents this worker offers (checked against the
	// daemon before any claim).
	Agents []string
	// ApprovalTimeout is how long a human has to decide a permission
	// request before the worker denies it (default the daemon's hook
	// timeout, 600 s, less a margin so the worker's deny wins the race).
	ApprovalTimeout time.Duration
	Logf            func(format string, args ...any)
}

func (r *LeaseRunner) logf(format string, args ...any) {
	if r.Logf != nil {
		r.Logf(format, args...)
	}
}

// Run executes one lease to its end. ctx ending (the worker stopping)
// stops the agent; the run is then released, or left to expire when the
// server cannot be told.
func (r *LeaseRunner) Run(ctx context.Context, l sdk.Lease) LeaseResult {
	res := LeaseResult{LeaseID: l.ID, RunID: l.RunID}
	run := l.Run
	// What this worker cannot do goes back to the queue untouched (the
	// attempt is not counted), with the reason on the run's history.
	dir, derr := ResolveDirectory(firstNonEmpty(run.Workdir, repoName(run.Repo)), r.Profile.Workdirs)
	if derr == nil && run.Agent != "" && len(r.Agents) > 0 && !slices.Contains(r.Agents, run.Agent) {
		derr = fmt.Errorf("this worker does not offer agent %q (it offers %s)", run.Agent, strings.Join(r.Agents, ", "))
	}
	if derr == nil && run.Prompt == "" {
		derr = errors.New("the run has no prompt this worker can run (workflow definitions without a prompt are not supported by this worker)")
	}
	if derr != nil {
		r.logf("run %s: releasing: %v", run.ID, derr)
		_, err := r.Server.ReleaseLease(context.WithoutCancel(ctx), l.ID, sdk.LeaseReleaseRequest{Fence: l.Fence, Reason: derr.Error()})
		res.Status, res.Error = "released", derr.Error()
		if err != nil {
			res.Error += "; release: " + err.Error()
		}
		return res
	}

	jctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		r.heartbeat(jctx, l, stop)
	}()
	gov := newLeaseGovernor(r, l)
	evDone := make(chan struct{})
	go func() {
		defer close(evDone)
		gov.forward(jctx)
	}()
	out := Execute(jctx, r.Daemon, dir, Job{RunID: run.ID, Directory: dir, Agent: run.Agent, Model: run.Model, Prompt: run.Prompt, Mode: RunMode}, gov, r.Logf)
	cause := context.Cause(jctx)
	stop(nil)
	<-hbDone
	<-evDone
	if !errors.Is(cause, ErrLeaseLost) {
		// What the session did reaches the run's history before its end.
		gov.flush(context.WithoutCancel(ctx))
	}
	res.Outcome = out

	switch {
	case errors.Is(cause, ErrLeaseLost):
		// Another worker may hold the run now: reporting would be refused
		// (stale fence), and must not be tried as if this were the holder.
		res.Status, res.Error = "lost", cause.Error()
		return res
	case errors.Is(cause, ErrStopping) || (ctx.Err() != nil && !errors.Is(cause, ErrCancelRequested)):
		_, err := r.Server.ReleaseLease(context.WithoutCancel(ctx), l.ID, sdk.LeaseReleaseRequest{Fence: l.Fence, Reason: "the worker stopped while the run was in progress"})
		res.Status, res.Error = "released", "the worker stopped"
		if err != nil {
			res.Error += "; release: " + err.Error()
		}
		return res
	case errors.Is(cause, ErrCancelRequested):
		out.Status = StatusCancelled
		if out.Error == "" || out.Error == "the agent was stopped" {
			out.Error = "cancelled on the control plane"
		}
	}
	res.Status, res.Error = out.Status, out.Error
	if err := r.complete(context.WithoutCancel(ctx), l, out); err != nil {
		r.logf("run %s: report completion: %v", run.ID, err)
		res.Error = strings.TrimPrefix(res.Error+"; report: "+err.Error(), "; ")
	}
	return res
}

// complete reports the outcome, retrying transient failures for a while:
// the evidence matters more than a prompt next claim.
func (r *LeaseRunner) complete(ctx context.Context, l sdk.Lease, out Outcome) error {
	req := sdk.LeaseCompleteRequest{
		Fence: l.Fence, Status: out.Status, ExitCode: &out.ExitCode, DiffSummary: DiffSummary(out.Diff),
		SessionID: out.SessionID, Error: out.Error,
	}
	for _, cp := range out.Checkpoints {
		at := cp.At
		msg := cp.Subject
		if msg == "" {
			msg = fmt.Sprintf("%s (turn %d)", cp.Action, cp.Turn)
		}
		c := sdk.RunCheckpoint{SHA: cp.SHA, Message: msg}
		if !at.IsZero() {
			c.At = &at
		}
		req.Checkpoints = append(req.Checkpoints, c)
	}
	if u := out.Usage; u.InputTokens+u.OutputTokens > 0 || u.HasCost {
		req.Usage = &sdk.RunUsage{Model: u.Model, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
		if u.HasCost {
			req.Usage.CostUSD = strconv.FormatFloat(u.CostUSD, 'f', 6, 64)
		}
	}
	var err error
	for attempt := 0; attempt < 6; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = r.Server.CompleteLease(cctx, l.ID, req)
		cancel()
		if err == nil || !transient(err) {
			return err
		}
		time.Sleep(time.Duration(attempt+1) * time.Second)
	}
	return err
}

// heartbeat extends the lease every interval until ctx ends. A cancel
// request stops the job with ErrCancelRequested; a refusal that means the
// lease is gone (stale fence, expired, unknown), or no successful beat
// before the lease's expiry, stops it with ErrLeaseLost.
func (r *LeaseRunner) heartbeat(ctx context.Context, l sdk.Lease, stop context.CancelCauseFunc) {
	every := time.Duration(l.HeartbeatInterval) * time.Second
	if every <= 0 {
		every = 10 * time.Second
	}
	expires := l.ExpiresAt
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, every+5*time.Second)
		hb, err := r.Server.HeartbeatLease(hctx, l.ID, l.Fence)
		cancel()
		switch {
		case err == nil:
			expires = hb.ExpiresAt
			if hb.CancelRequested {
				stop(ErrCancelRequested)
				return
			}
			if sdk.RunTerminal(hb.Status) {
				stop(fmt.Errorf("%w: the run is %s", ErrLeaseLost, hb.Status))
				return
			}
		case ctx.Err() != nil:
			return
		case !transient(err):
			stop(fmt.Errorf("%w: %v", ErrLeaseLost, err))
			return
		default:
			r.logf("lease %s: heartbeat: %v (retrying)", l.ID, err)
			if !expires.IsZero() && time.Now().After(expires) {
				stop(fmt.Errorf("%w: no heartbeat reached the server before the lease expired (%v)", ErrLeaseLost, err))
				return
			}
		}
	}
}

// transient reports whether an error may pass on retry: no answer, a
// throttle or a server error. A 4xx refusal is final.
func transient(err error) bool {
	var ae *sdk.APIError
	if !errors.As(err, &ae) {
		return true
	}
	return ae.Status == http.StatusTooManyRequests || ae.Status >= 500
}

// leaseGovernor reports a leased run's progress and raises its approvals.
type leaseGovernor struct {
	r     *LeaseRunner
	lease sdk.Lease

	mu      sync.Mutex
	pending []sdk.LeaseEventIn
	sent    int
	dropped int
	kick    chan struct{}
	failed  bool
}

// Evidence limits: what one run may add to its history, and how much of
// one event's text.
const (
	maxRunEvents   = 5000
	maxEventText   = 4096
	eventBatch     = 500
	eventFlushTick = 2 * time.Second
)

func newLeaseGovernor(r *LeaseRunner, l sdk.Lease) *leaseGovernor {
	return &leaseGovernor{r: r, lease: l, kick: make(chan struct{}, 1)}
}

// Record keeps a session event as evidence for the run's history:
// decoded, secret-looking values masked (internal/redact), long text cut.
func (g *leaseGovernor) Record(u wire.SessionUpdate) {
	data := map[string]any{}
	if len(u.Data) > 0 {
		var v any
		if json.Unmarshal(u.Data, &v) == nil {
			if m, ok := v.(map[string]any); ok {
				data = m
			} else {
				data["value"] = v
			}
		}
	}
	data = clip(data).(map[string]any)
	data["session_id"], data["seq"] = u.SessionID, u.Seq
	at := u.TS
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sent+len(g.pending) >= maxRunEvents {
		g.dropped++
		return
	}
	e := sdk.LeaseEventIn{Kind: u.Kind, Data: data}
	if !at.IsZero() {
		e.At = &at
	}
	g.pending = append(g.pending, e)
	if len(g.pending) >= eventBatch {
		select {
		case g.kick <- struct{}{}:
		default:
		}
	}
}

// forward sends the recorded events every tick until ctx ends.
func (g *leaseGovernor) forward(ctx context.Context) {
	t := time.NewTicker(eventFlushTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.kick:
		}
		g.flush(ctx)
	}
}

// flush sends what is pending, in batches. A refusal stops the evidence
// (the lease is gone); a transient failure keeps it for the next tick.
func (g *leaseGovernor) flush(ctx context.Context) {
	for {
		g.mu.Lock()
		if g.failed || len(g.pending) == 0 {
			dropped := g.dropped
			g.dropped = 0
			g.mu.Unlock()
			if dropped > 0 {
				g.send(ctx, []sdk.LeaseEventIn{{Kind: "evidence-truncated", Data: map[string]any{"dropped_events": dropped, "limit": maxRunEvents}}})
			}
			return
		}
		batch := g.pending[:min(len(g.pending), eventBatch)]
		g.mu.Unlock()
		if !g.send(ctx, batch) {
			return
		}
		g.mu.Lock()
		g.pending = g.pending[len(batch):]
		g.sent += len(batch)
		g.mu.Unlock()
	}
}

func (g *leaseGovernor) send(ctx context.Context, batch []sdk.LeaseEventIn) bool {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := g.r.Server.AppendLeaseEvents(sctx, g.lease.ID, sdk.LeaseEventsRequest{Fence: g.lease.Fence, Events: batch})
	if err == nil {
		return true
	}
	if !transient(err) {
		g.mu.Lock()
		g.failed = true
		g.mu.Unlock()
	}
	g.r.logf("lease %s: send evidence: %v", g.lease.ID, err)
	return false
}

// clip masks secrets in a decoded JSON value and cuts long strings: a
// string under a secret-named key, or a secret-shaped part of any string
// (internal/redact). Numbers stay, so token counts are not mistaken for
// tokens.
func clip(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok {
				// Value masks a secret-named key's whole string, String
				// only secret-shaped parts: they differ for the former.
				if m, _ := redact.Value(map[string]any{k: s}).(map[string]any); m[k] != redact.String(s) {
					x[k] = redact.Mask
					continue
				}
			}
			x[k] = clip(e)
		}
	case []any:
		for i, e := range x {
			x[i] = clip(e)
		}
	case string:
		x = redact.String(x)
		if len(x) > maxEventText {
			cut := maxEventText
			for cut > 0 && !utf8.RuneStart(x[cut]) {
				cut--
			}
			return x[:cut] + fmt.Sprintf("... [%d bytes cut]", len(x)-cut)
		}
		return x
	}
	return v
}

func (g *leaseGovernor) Running(ctx context.Context, sessionID string) error {
	_, err := g.r.Server.ReportLeaseState(ctx, g.lease.ID, sdk.LeaseStateRequest{Fence: g.lease.Fence, State: sdk.RunRunning, SessionID: sessionID})
	return err
}

func (g *leaseGovernor) Approve(ctx context.Context, req wire.PermissionRequest) (string, string, error) {
	timeout := g.r.ApprovalTimeout
	if timeout <= 0 {
		timeout = time.Duration(wire.DefaultHookTimeoutSeconds-30) * time.Second
	}
	in := map[string]any{}
	if len(req.Input) > 0 {
		var v any
		if json.Unmarshal(req.Input, &v) == nil {
			if m, ok := v.(map[string]any); ok {
				in = m
			} else {
				in["value"] = v
			}
		}
	}
	summary := req.Reason
	if summary == "" {
		summary = fmt.Sprintf("%s wants to use %s", req.Agent, req.Tool)
	}
	node, err := g.r.Server.RaiseLeaseApproval(ctx, g.lease.ID, sdk.LeaseApprovalRequest{
		Fence: g.lease.Fence, NodeKey: req.ID, Tool: req.Tool, Summary: summary, Input: in,
		TimeoutSeconds: int(timeout.Seconds()),
	})
	if err != nil {
		return "", "", fmt.Errorf("raise approval: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for node.State == sdk.ApprovalPending {
		left := time.Until(deadline)
		if left <= 0 {
			return "", "", fmt.Errorf("nobody decided within %s", timeout.Round(time.Second))
		}
		wait := min(left, 25*time.Second)
		wctx, cancel := context.WithTimeout(ctx, wait+15*time.Second)
		n, err := g.r.Server.WaitLeaseApproval(wctx, g.lease.ID, node.NodeKey, wait)
		cancel()
		if ctx.Err() != nil {
			return "", "", ctx.Err()
		}
		if err != nil {
			if !transient(err) {
				return "", "", fmt.Errorf("wait for the approval: %w", err)
			}
			g.r.logf("approval %s: %v (retrying)", node.NodeKey, err)
			time.Sleep(time.Second)
			continue
		}
		node = n
	}
	reason := node.Reason
	by := node.DecidedBy
	switch node.State {
	case sdk.ApprovalApproved:
		return "allow", joinReason("approved on the control plane", by, reason), nil
	case sdk.ApprovalDenied:
		return "deny", joinReason("denied on the control plane", by, reason), nil
	}
	return "deny", joinReason("the approval "+node.State, by, reason), nil
}

func joinReason(what, by, reason string) string {
	if by != "" {
		what += " by " + by
	}
	if reason != "" {
		what += ": " + reason
	}
	return what
}

// DiffSummary is the one-line summary of a diff the run reports, with the
// files: "3 files changed, 10 insertions(+), 2 deletions(-): a.go, b.go".
func DiffSummary(d wire.DiffStat) string {
	if d.FilesChanged == 0 {
		return "no changes"
	}
	s := fmt.Sprintf("%d file%s changed, %d insertion%s(+), %d deletion%s(-)", d.FilesChanged, plural(d.FilesChanged), d.Insertions, plural(d.Insertions), d.Deletions, plural(d.Deletions))
	var names []string
	for i, f := range d.Files {
		if i == 20 {
			names = append(names, fmt.Sprintf("and %d more", len(d.Files)-20))
			break
		}
		names = append(names, f.Path)
	}
	if len(names) > 0 {
		s += ": " + strings.Join(names, ", ")
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// repoName is the name a repository URL or path goes by among workdirs.
func repoName(repo string) string {
	if repo == "" {
		return ""
	}
	repo = strings.TrimRight(repo, "/")
	if i := strings.LastIndexAny(repo, "/:"); i >= 0 {
		repo = repo[i+1:]
	}
	return strings.TrimSuffix(repo, ".git")
}
