package api

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Leases (docs/workers.md): a worker long-polls for a run with its runner
// credential and holds it as a lease: fenced (the lease id is the run id
// and the fence, and every report carries the fence, so a holder that lost
// its lease cannot write over the next one) and expiring (heartbeats
// extend it; the sweeper takes back what was not extended and queues the
// run again). The lease token (rwl_) is the bearer credential of one lease,
// for `reeve worker run-once --lease`.

// DefaultLeaseTTL is how long a lease lives without a heartbeat.
const DefaultLeaseTTL = 60 * time.Second

const (
	maxClaimWait     = 60 * time.Second
	defaultClaimWait = 30 * time.Second
	maxApprovalWait  = 60 * time.Second
	// claimRecheck bounds how long a waiting claimer sleeps without a
	// signal. The queue watcher signals every change, and the worker polls
	// again when its wait ends, so this is only a net under both: idle
	// claimers cost no query each.
	claimRecheck = maxClaimWait
	// queuePoll is how often a replica looks at a workspace's queue while
	// claimers wait there: runs queued through another replica are seen
	// within it.
	queuePoll = time.Second
)

func workerRoutes() []Route {
	w := "/api/runtime/worker"
	l := w + "/leases/{lease}"
	lease := func(method, path, op string, status int, resp, body, summary string, errs ...int) Route {
		r := typed(method, path, op, "Runtime", status, resp).summary(summary).errs(403, 409, 410).errs(errs...)
		if body != "" {
			r = r.body(body, true)
		}
		return r
	}
	return []Route{
		typed("GET", w+"/me", "getWorkerIdentity", "Runtime", 200, "ManagedExecutorResponse").
			summary("The managed executor of the presented runner credential: workspace, tags, agents (worker doctor; claims nothing)"),
		typed("POST", w+"/claim", "claimWorkerLease", "Runtime", 200, "LeaseResponse").success(200, 204).body("WorkerClaimRequest", false).errs(403).
			summary("Long-poll for a queued run the executor may take (its tags and agents, within wait_seconds); 200 a lease with its token, 204 when none came"),
		typed("GET", w+"/leases/by-token", "getWorkerLeaseByToken", "Runtime", 200, "LeaseResponse").errs(403, 410).
			summary("The lease of the presented lease token (rwl_): run-once starts here"),
		lease("POST", l+"/heartbeat", "heartbeatWorkerLease", 200, "LeaseHeartbeatResponse", "LeaseFenceRequest",
			"Extend the lease by its TTL; answers cancel_requested when the run was cancelled. 409 stale_fence, 410 lease_expired"),
		lease("POST", l+"/state", "reportWorkerLeaseState", 200, "WorkflowRunResponse", "LeaseStateRequest", "The run is running (with its session) or waiting for an approval"),
		lease("POST", l+"/events", "appendWorkerLeaseEvents", 200, "LeaseEventsResponse", "LeaseEventsRequest", "Append the worker's evidence to the run's history"),
		lease("POST", l+"/approvals", "raiseWorkerLeaseApproval", 201, "WorkflowApprovalResponse", "LeaseApprovalRequest",
			"Raise an approval node: the run waits for a human (POST /api/workflow-runs/{r}/approvals/{nodeKey}); an existing node key answers 200").success(200, 201),
		lease("GET", l+"/approvals/{nodeKey}", "getWorkerLeaseApproval", 200, "WorkflowApprovalResponse", "",
			"Read an approval node, long-polling up to wait seconds (at most 60) while it is pending", 404).query(qInt("wait", "seconds to wait for a decision")),
		lease("POST", l+"/complete", "completeWorkerLease", 200, "WorkflowRunResponse", "LeaseCompleteRequest",
			"End the lease with the run's outcome: status, exit code, diff summary, checkpoints, usage (recorded in the gateway ledger)"),
		lease("POST", l+"/release", "releaseWorkerLease", 200, "WorkflowRunResponse", "LeaseReleaseRequest",
			"Give the run back to the queue without running it; the attempt is not counted"),
	}
}

func (s *Server) leaseTTL() time.Duration {
	if s.opts.LeaseTTL > 0 {
		return s.opts.LeaseTTL
	}
	return DefaultLeaseTTL
}

// ---- lease names ----

func leaseIDOf(runID string, fence int64) string { return runID + "." + strconv.FormatInt(fence, 10) }

func parseLeaseID(id string) (runID string, fence int64, ok bool) {
	i := strings.LastIndexByte(id, '.')
	if i <= 0 || !validULID(id[:i]) {
		return "", 0, false
	}
	f, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil || f < 1 {
		return "", 0, false
	}
	return id[:i], f, true
}

// leaseOfToken is the lease a well-formed lease token names.
func leaseOfToken(tok string) (string, bool) {
	rest := strings.TrimPrefix(tok, sdk.LeaseTokenPrefix)
	i := strings.LastIndexByte(rest, '_')
	if i <= 0 {
		return "", false
	}
	if _, _, ok := parseLeaseID(rest[:i]); !ok {
		return "", false
	}
	return rest[:i], true
}

var leaseB32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// leaseMinter names a lease and its token once the run and fence are
// known (inside the claim's transaction); it keeps the plaintext.
type leaseMinter struct{ secret, token string }

func newLeaseMinter() (*leaseMinter, error) {
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	return &leaseMinter{secret: strings.ToLower(leaseB32.EncodeToString(b[:]))}, nil
}

func (m *leaseMinter) mint(runID string, fence int64) (string, string) {
	id := leaseIDOf(runID, fence)
	m.token = sdk.LeaseTokenPrefix + id + "_" + m.secret
	return id, auth.Hash(m.token)
}

func (s *Server) leaseOut(r store.WorkflowRun, token string, now time.Time) sdk.Lease {
	ttl := s.leaseTTL()
	l := sdk.Lease{ID: r.LeaseID, Token: token, Fence: r.Fence, RunID: r.ID, ExecutorID: r.ExecutorID,
		HeartbeatInterval: max(1, int(ttl.Seconds())/3), TTL: int(ttl.Seconds()), Run: runOut(r, nil, now)}
	if r.LeaseExpires != nil {
		l.ExpiresAt = *r.LeaseExpires
	}
	return l
}

// ---- identity and claim ----

func (c *call) runnerExecutor() (store.ManagedExecutor, error) {
	wf, err := c.wfStore()
	if err != nil {
		return store.ManagedExecutor{}, err
	}
	e, err := wf.Executor(c.ctx(), c.ws.ID, c.p.ExecutorID)
	if errors.Is(err, store.ErrNotFound) {
		return e, unauthenticated("the managed executor of this credential was deleted")
	}
	return e, err
}

func (s *Server) workerIdentity(c *call) (int, any, error) {
	e, err := c.runnerExecutor()
	if err != nil {
		return 0, nil, err
	}
	s.work.touch(c, e.ID)
	return 200, sdk.ManagedExecutorResponse{Data: executorOut(e)}, nil
}

func (s *Server) claimLease(c *call) (int, any, error) {
	if c.p.LeaseID != "" {
		return 0, nil, forbidden("a lease token is good for its own lease only; claim with the runner credential")
	}
	e, err := c.runnerExecutor()
	if err != nil {
		return 0, nil, err
	}
	var req sdk.WorkerClaimRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	agents, tags := cleanList(req.Agents), cleanList(req.Tags)
	for _, a := range agents {
		if len(e.Agents) > 0 && !slices.Contains(e.Agents, a) {
			return 0, nil, forbidden("managed executor %s does not offer agent %q (it offers %s)", e.Name, a, strings.Join(e.Agents, ", "))
		}
	}
	for _, t := range tags {
		if !slices.Contains(e.Tags, t) {
			return 0, nil, forbidden("managed executor %s does not have tag %q", e.Name, t)
		}
	}
	if len(agents) == 0 {
		agents = e.Agents
	}
	if len(tags) == 0 {
		tags = e.Tags
	}
	wait := defaultClaimWait
	if _, set := c.body["wait_seconds"]; set {
		wait = min(max(time.Duration(req.WaitSeconds)*time.Second, 0), maxClaimWait)
	}
	pool := strings.TrimSpace(req.RunnerPool)
	s.work.touch(c, e.ID, pool)
	wf, _ := c.wfStore()
	f := store.ClaimFilter{WorkspaceID: c.ws.ID, ExecutorID: e.ID, RunnerPool: pool, Agents: agents, Tags: tags, Workdirs: cleanList(req.Workdirs)}
	deadline := time.Now().Add(wait)
	for woken := false; ; woken = true {
		// A wake-up reaches every claimer of the workspace; after the first
		// ones took the new runs, the rest see an empty queue in one read
		// instead of each trying a write.
		if woken {
			if n, _, err := wf.QueuedHead(c.ctx(), c.ws.ID); err == nil && n == 0 {
				if !time.Now().Before(deadline) {
					return http.StatusNoContent, nil, nil
				}
				if !s.work.wait(c.ctx(), c.ws.ID, deadline, claimRecheck) {
					return http.StatusNoContent, nil, nil
				}
				continue
			}
		}
		reason, err := s.budgetBlocks(c)
		if err != nil {
			return 0, nil, err
		}
		if reason != "" {
			// Nothing starts past the cap: what is queued is blocked, where
			// a person sees why, instead of being handed out.
			if _, err := wf.BlockQueued(c.ctx(), c.ws.ID, reason, c.now()); err != nil {
				return 0, nil, err
			}
		} else {
			m, err := newLeaseMinter()
			if err != nil {
				return 0, nil, err
			}
			now := c.now()
			r, err := wf.ClaimRun(c.ctx(), f, store.LeaseGrant{Mint: m.mint, Now: now, ExpiresAt: now.Add(s.leaseTTL()), Actor: c.p.Actor()})
			if err == nil {
				return 200, sdk.LeaseResponse{Data: s.leaseOut(r, m.token, now)}, nil
			}
			if !errors.Is(err, store.ErrNotFound) {
				return 0, nil, err
			}
		}
		if !time.Now().Before(deadline) {
			return http.StatusNoContent, nil, nil
		}
		if !s.work.wait(c.ctx(), c.ws.ID, deadline, claimRecheck) {
			return http.StatusNoContent, nil, nil // the worker went away
		}
	}
}

// ---- holding a lease ----

// leaseRef is the {lease} of the path, checked against the caller.
type leaseRef struct {
	id    string
	runID string
	fence int64
}

func (c *call) leaseRef() (leaseRef, error) {
	id := c.r.PathValue("lease")
	runID, fence, ok := parseLeaseID(id)
	if !ok {
		return leaseRef{}, errorf(http.StatusNotFound, sdk.CodeLeaseNotFound, "no lease %q", id)
	}
	if c.p.LeaseID != "" && c.p.LeaseID != id {
		return leaseRef{}, forbidden("this lease token is for lease %s, not %s", c.p.LeaseID, id)
	}
	return leaseRef{id: id, runID: runID, fence: fence}, nil
}

// noLease is the answer for a lease whose run is not in the caller's
// workspace: 403 when the run is another workspace's (the credential may
// not touch it, and says so rather than pretending it does not exist),
// 404 lease_not_found when there is no such run at all.
func (c *call) noLease(l leaseRef) error {
	if wf, err := c.wfStore(); err == nil {
		if ws, err := wf.RunWorkspace(c.ctx(), l.runID); err == nil && ws != c.ws.ID {
			return forbidden("lease %s belongs to another workspace: this credential claims and reports only in its own", l.id)
		}
	}
	return errorf(http.StatusNotFound, sdk.CodeLeaseNotFound, "no lease %q", l.id)
}

// checkHeld decides whether the caller may act on lease l of run r under
// fence: 403 for another executor's live lease, 409 stale_fence for an
// older fence, 410 lease_expired for a lease that ended or expired.
func (c *call) checkHeld(r *store.WorkflowRun, l leaseRef, fence int64, now time.Time) error {
	if r.LeaseID == l.id && r.ExecutorID != c.p.ExecutorID {
		return forbidden("lease %s is held by another managed executor", l.id)
	}
	if fence != l.fence {
		return errorf(http.StatusConflict, sdk.CodeStaleFence, "the report carries fence %d but lease %s has fence %d", fence, l.id, l.fence)
	}
	if r.Fence > l.fence {
		return errorf(http.StatusConflict, sdk.CodeStaleFence, "lease %s is stale: the run was leased again (fence %d) after it expired", l.id, r.Fence)
	}
	if r.LeaseID != l.id {
		return errorf(http.StatusGone, sdk.CodeLeaseExpired, "lease %s is no longer held: the run is %s", l.id, r.Status)
	}
	if r.LeaseExpires != nil && !now.Before(*r.LeaseExpires) {
		return errorf(http.StatusGone, sdk.CodeLeaseExpired, "lease %s expired at %s; the run goes back to the queue", l.id, r.LeaseExpires.Format(time.RFC3339))
	}
	return nil
}

// onLease runs fn on the lease's run under its lock, after checkHeld.
func (s *Server) onLease(c *call, fence int64, action string, fn func(r *store.WorkflowRun, now time.Time) ([]store.RunEvent, error)) (store.WorkflowRun, error) {
	wf, err := c.wfStore()
	if err != nil {
		return store.WorkflowRun{}, err
	}
	l, err := c.leaseRef()
	if err != nil {
		return store.WorkflowRun{}, err
	}
	now := c.now()
	var audit store.AuditEntry
	if action != "" {
		audit = c.audit(action, "workflow-runs/"+l.runID, map[string]any{"lease_id": l.id})
	}
	r, err := wf.UpdateRun(c.ctx(), c.ws.ID, l.runID, func(r *store.WorkflowRun) ([]store.RunEvent, error) {
		if err := c.checkHeld(r, l, fence, now); err != nil {
			return nil, err
		}
		return fn(r, now)
	}, audit)
	if errors.Is(err, store.ErrNotFound) {
		return r, c.noLease(l)
	}
	return r, err
}

func (s *Server) heartbeatLease(c *call) (int, any, error) {
	var req sdk.LeaseFenceRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	r, err := s.onLease(c, req.Fence, "", func(r *store.WorkflowRun, now time.Time) ([]store.RunEvent, error) {
		exp := now.Add(s.leaseTTL())
		r.LeaseExpires = &exp
		return nil, nil
	})
	if err != nil {
		return 0, nil, err
	}
	// A worker busy with a run still serves its pool.
	s.work.touch(c, r.ExecutorID, r.RunnerPool)
	return 200, sdk.Data[sdk.LeaseHeartbeat]{Data: sdk.LeaseHeartbeat{ExpiresAt: *r.LeaseExpires, CancelRequested: r.CancelRequested, Status: r.Status}}, nil
}

func (s *Server) leaseState(c *call) (int, any, error) {
	var req sdk.LeaseStateRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	actor := c.p.Actor()
	r, err := s.onLease(c, req.Fence, "workflow_run.state", func(r *store.WorkflowRun, now time.Time) ([]store.RunEvent, error) {
		from := r.Status
		switch req.State {
		case sdk.RunRunning:
			if r.StartedAt == nil {
				r.StartedAt = &now
			}
		case sdk.RunWaitingApproval:
		default:
			return nil, invalid(sdk.ErrorDetail{Field: "/state", Message: "state must be running or waiting-approval"})
		}
		r.Status, r.UpdatedAt = req.State, now
		if req.SessionID != "" {
			r.SessionID = req.SessionID
		}
		if from == r.Status && req.Message == "" {
			return nil, nil
		}
		return []store.RunEvent{statusEvent(actor, now, r.Status, map[string]any{"session_id": req.SessionID, "message": req.Message})}, nil
	})
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.WorkflowRunResponse{Data: runOut(r, nil, c.now())}, nil
}

func (s *Server) leaseEvents(c *call) (int, any, error) {
	wf, err := c.wfStore()
	if err != nil {
		return 0, nil, err
	}
	var req sdk.LeaseEventsRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	l, err := c.leaseRef()
	if err != nil {
		return 0, nil, err
	}
	now, actor := c.now(), c.p.Actor()
	evs := make([]store.RunEvent, 0, len(req.Events))
	for _, e := range req.Events {
		at := now
		if e.At != nil {
			at = e.At.UTC()
		}
		evs = append(evs, eventOf(e.Kind, actor, at, e.Data))
	}
	err = wf.AppendRunEvents(c.ctx(), c.ws.ID, l.runID, func(r store.WorkflowRun) error { return c.checkHeld(&r, l, req.Fence, now) }, evs)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, c.noLease(l)
	}
	if err != nil {
		return 0, nil, err
	}
	return 200, map[string]any{"data": map[string]any{"appended": len(evs)}}, nil
}

func (s *Server) raiseApproval(c *call) (int, any, error) {
	wf, err := c.wfStore()
	if err != nil {
		return 0, nil, err
	}
	var req sdk.LeaseApprovalRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	l, err := c.leaseRef()
	if err != nil {
		return 0, nil, err
	}
	timeout := 600
	if req.TimeoutSeconds > 0 {
		timeout = min(req.TimeoutSeconds, 86400)
	}
	now, actor := c.now(), c.p.Actor()
	input, _ := json.Marshal(req.Input)
	if req.Input == nil {
		input = nil
	}
	a := store.RunApproval{RunID: l.runID, NodeKey: req.NodeKey, WorkspaceID: c.ws.ID, State: sdk.ApprovalPending, Tool: req.Tool, Summary: req.Summary,
		Input: input, Fence: l.fence, RequestedAt: now, ExpiresAt: now.Add(time.Duration(timeout) * time.Second)}
	events := []store.RunEvent{
		eventOf(sdk.RunEventApprovalRequest, actor, now, map[string]any{"node_key": req.NodeKey, "tool": req.Tool, "summary": req.Summary, "expires_at": a.ExpiresAt}),
		statusEvent(actor, now, sdk.RunWaitingApproval, map[string]any{"node_key": req.NodeKey}),
	}
	// The holder is checked first as well: raising a node key that exists
	// answers the stored node without running the transition's check.
	cur, err := wf.Run(c.ctx(), c.ws.ID, l.runID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, c.noLease(l)
	}
	if err != nil {
		return 0, nil, err
	}
	if err := c.checkHeld(&cur, l, req.Fence, now); err != nil {
		return 0, nil, err
	}
	got, created, err := wf.RaiseApproval(c.ctx(), a, func(r *store.WorkflowRun) error {
		if err := c.checkHeld(r, l, req.Fence, now); err != nil {
			return err
		}
		r.Status, r.UpdatedAt = sdk.RunWaitingApproval, now
		return nil
	}, events)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, c.noLease(l)
	}
	if err != nil {
		return 0, nil, err
	}
	status := 201
	if !created {
		status = 200
	}
	return status, sdk.WorkflowApprovalResponse{Data: approvalOut(got, now)}, nil
}

// leaseApproval long-polls a node for its decision. The caller must hold
// the lease (any fence check waits for its next report).
func (s *Server) leaseApproval(c *call) (int, any, error) {
	wf, err := c.wfStore()
	if err != nil {
		return 0, nil, err
	}
	l, err := c.leaseRef()
	if err != nil {
		return 0, nil, err
	}
	node := c.r.PathValue("nodeKey")
	wait := min(max(time.Duration(queryInt(c, "wait", 0))*time.Second, 0), maxApprovalWait)
	deadline := time.Now().Add(wait)
	for {
		r, err := wf.Run(c.ctx(), c.ws.ID, l.runID)
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, c.noLease(l)
		}
		if err != nil {
			return 0, nil, err
		}
		now := c.now()
		if err := c.checkHeld(&r, l, l.fence, now); err != nil {
			return 0, nil, err
		}
		a, err := wf.Approval(c.ctx(), l.runID, node)
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, notFound("no approval node %q on this run", node)
		}
		if err != nil {
			return 0, nil, err
		}
		out := approvalOut(a, now)
		if out.State != sdk.ApprovalPending || !time.Now().Before(deadline) {
			return 200, sdk.WorkflowApprovalResponse{Data: out}, nil
		}
		// Decisions through this replica signal at once; another
		// replica's are seen within the poll.
		until := deadline
		if a.ExpiresAt.Before(until) {
			until = a.ExpiresAt
		}
		if !s.work.wait(c.ctx(), "approval:"+l.runID, until, queuePoll) {
			return 200, sdk.WorkflowApprovalResponse{Data: out}, nil
		}
	}
}

func (s *Server) completeLease(c *call) (int, any, error) {
	var req sdk.LeaseCompleteRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	if req.Status != sdk.RunSucceeded && req.Status != sdk.RunFailed && req.Status != sdk.RunCancelled {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/status", Message: "status must be succeeded, failed or cancelled"})
	}
	if req.Usage != nil && req.Usage.CostUSD != "" {
		if v, ok := new(big.Rat).SetString(req.Usage.CostUSD); !ok || v.Sign() < 0 {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "/usage/cost_usd", Message: "cost_usd must be a non-negative decimal number"})
		}
	}
	actor := c.p.Actor()
	var held store.WorkflowRun
	r, err := s.onLease(c, req.Fence, "workflow_run.complete", func(r *store.WorkflowRun, now time.Time) ([]store.RunEvent, error) {
		held = *r
		oc := runOutcome{ExitCode: req.ExitCode, DiffSummary: req.DiffSummary, Checkpoints: req.Checkpoints, Usage: req.Usage, Error: req.Error}
		r.Outcome, _ = json.Marshal(oc)
		if req.SessionID != "" {
			r.SessionID = req.SessionID
		}
		r.Status, r.FinishedAt, r.UpdatedAt = req.Status, &now, now
		r.LeaseID, r.LeaseHash, r.LeaseExpires, r.CancelRequested = "", "", nil, false
		data := map[string]any{"status": req.Status, "exit_code": req.ExitCode, "lease_id": held.LeaseID, "fence": held.Fence, "checkpoints": len(req.Checkpoints)}
		if req.Error != "" {
			data["error"] = req.Error
		}
		if req.Usage != nil {
			data["usage"] = req.Usage
		}
		return []store.RunEvent{eventOf(sdk.RunEventCompleted, actor, now, data), statusEvent(actor, now, req.Status, nil)}, nil
	})
	if err != nil {
		return 0, nil, err
	}
	if err := s.recordRunUsage(c, held, req.Usage); err != nil {
		return 0, nil, fmt.Errorf("record usage of run %s: %w", r.ID, err)
	}
	s.work.signal("approval:" + r.ID)
	return 200, sdk.WorkflowRunResponse{Data: runOut(r, nil, c.now())}, nil
}

func (s *Server) releaseLease(c *call) (int, any, error) {
	var req sdk.LeaseReleaseRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	actor := c.p.Actor()
	r, err := s.onLease(c, req.Fence, "workflow_run.release", func(r *store.WorkflowRun, now time.Time) ([]store.RunEvent, error) {
		lease := r.LeaseID
		r.Status, r.Attempt, r.UpdatedAt = sdk.RunQueued, max(r.Attempt-1, 0), now
		if r.CancelRequested {
			r.Status, r.FinishedAt = sdk.RunCancelled, &now
		}
		r.LeaseID, r.LeaseHash, r.ExecutorID, r.LeaseExpires, r.CancelRequested = "", "", "", nil, false
		return []store.RunEvent{
			eventOf(sdk.RunEventLeaseReleased, actor, now, map[string]any{"lease_id": lease, "reason": req.Reason}),
			statusEvent(actor, now, r.Status, map[string]any{"reason": "released: " + req.Reason}),
		}, nil
	})
	if err != nil {
		return 0, nil, err
	}
	if r.Status == sdk.RunQueued {
		s.work.signalOne(r.WorkspaceID)
	}
	return 200, sdk.WorkflowRunResponse{Data: runOut(r, nil, c.now())}, nil
}

func (s *Server) leaseByToken(c *call) (int, any, error) {
	if c.p.LeaseID == "" {
		return 0, nil, forbidden("present the lease token (rwl_) of the lease to read")
	}
	wf, err := c.wfStore()
	if err != nil {
		return 0, nil, err
	}
	runID, _, _ := parseLeaseID(c.p.LeaseID)
	r, err := wf.Run(c.ctx(), c.ws.ID, runID)
	if err != nil {
		return 0, nil, err
	}
	now := c.now()
	if r.LeaseID != c.p.LeaseID || (r.LeaseExpires != nil && !now.Before(*r.LeaseExpires)) {
		return 0, nil, errorf(http.StatusGone, sdk.CodeLeaseExpired, "lease %s is no longer held", c.p.LeaseID)
	}
	return 200, sdk.LeaseResponse{Data: s.leaseOut(r, "", now)}, nil
}

// ---- the sweeper ----

// RunSweeper takes back expired leases until ctx ends: every second, the
// runs whose lease was not extended in time are queued again (attempt
// counted) or failed after their last attempt, and claimers are woken.
// Every replica may run it; the store's guards make a lease expire once.
func (s *Server) RunSweeper(ctx context.Context) {
	wf, ok := s.st.(store.Workflows)
	if !ok {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.SweepLeases(ctx, wf)
	}
}

// SweepLeases runs one sweep and returns how many leases it took back.
func (s *Server) SweepLeases(ctx context.Context, wf store.Workflows) int {
	n := 0
	for {
		runs, err := wf.ExpireLeases(ctx, s.opts.Now(), 200)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("expire leases", "err", err)
			}
			return n
		}
		n += len(runs)
		for _, r := range runs {
			s.log.Info("lease expired", "run", r.ID, "status", r.Status, "attempt", r.Attempt)
			if r.Status == sdk.RunQueued {
				s.work.signalOne(r.WorkspaceID)
			}
		}
		if len(runs) < 200 {
			return n
		}
	}
}

// ---- waking claimers ----

// workHub wakes waiting claimers and approval pollers. A change made
// through this replica signals its key at once; for a workspace with
// waiting claimers, one watcher per replica also reads the queue's head
// every queuePoll and signals when it moved, so runs queued or requeued
// through another replica are claimed too. Idle claimers cost a channel
// each, not a query each.
type workHub struct {
	s      *Server
	mu     sync.Mutex
	topics map[string]*topic
	// touched limits executor last-seen writes to one a minute per
	// executor and pool.
	touchMu sync.Mutex
	touched map[string]time.Time
}

type topic struct {
	// waiting holds one channel per waiter, oldest first.
	waiting []chan struct{}
	stop    context.CancelFunc
}

func newWorkHub(s *Server) *workHub {
	return &workHub{s: s, topics: map[string]*topic{}, touched: map[string]time.Time{}}
}

// signal wakes every waiter of key (a decision, a change the watcher saw).
func (h *workHub) signal(key string) { h.wake(key, -1) }

// signalOne wakes the longest-waiting claimer: one run was queued, so one
// claimer is enough, and the others do not stampede the store. If that
// claimer cannot take the run (another agent or tag), the watcher sees
// the queue changed and wakes them all within queuePoll.
func (h *workHub) signalOne(key string) { h.wake(key, 1) }

func (h *workHub) wake(key string, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[key]
	if t == nil {
		return
	}
	if n < 0 || n > len(t.waiting) {
		n = len(t.waiting)
	}
	for _, ch := range t.waiting[:n] {
		close(ch)
	}
	t.waiting = t.waiting[n:]
}

// wait blocks until key is signalled, until passes, recheck elapses or
// ctx ends; it returns false only when ctx ended.
func (h *workHub) wait(ctx context.Context, key string, until time.Time, recheck time.Duration) bool {
	ch := make(chan struct{})
	h.mu.Lock()
	t := h.topics[key]
	if t == nil {
		t = &topic{}
		h.topics[key] = t
		if !strings.HasPrefix(key, "approval:") {
			wctx, cancel := context.WithCancel(context.Background())
			t.stop = cancel
			go h.watch(wctx, key)
		}
	}
	t.waiting = append(t.waiting, ch)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		if i := slices.Index(t.waiting, ch); i >= 0 {
			t.waiting = slices.Delete(t.waiting, i, i+1)
		}
		if len(t.waiting) == 0 && h.topics[key] == t {
			if t.stop != nil {
				t.stop()
			}
			delete(h.topics, key)
		}
		h.mu.Unlock()
	}()
	d := min(time.Until(until), recheck)
	timer := time.NewTimer(max(d, 0))
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// watch reads a workspace's queue head while claimers wait there.
func (h *workHub) watch(ctx context.Context, workspaceID string) {
	wf, ok := h.s.st.(store.Workflows)
	if !ok {
		return
	}
	t := time.NewTicker(queuePoll)
	defer t.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, head, err := wf.QueuedHead(ctx, workspaceID)
		if err != nil {
			continue
		}
		sig := fmt.Sprint(n, ":", head)
		if n > 0 && sig != last {
			h.signal(workspaceID)
		}
		last = sig
	}
}

// touch records that a worker of the executor was seen, serving the
// runner pools named (preflight's pool check, docs/workers.md): at most
// one write a minute per executor and pool.
func (h *workHub) touch(c *call, executorID string, pools ...string) {
	now := c.now()
	h.touchMu.Lock()
	key := executorID + "\x00" + strings.Join(pools, "\x00")
	due := now.Sub(h.touched[key]) > time.Minute
	if due {
		// Keyed by pool too, which a worker names: a worker cycling
		// through pool names must not grow the map for good. Forgetting
		// costs at most one extra write per key.
		if len(h.touched) > 10000 {
			clear(h.touched)
		}
		h.touched[key] = now
	}
	h.touchMu.Unlock()
	if !due {
		return
	}
	wf, err := c.wfStore()
	if err != nil {
		return
	}
	go func() {
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		if err := wf.TouchExecutor(ctx, executorID, now, pools...); err != nil {
			h.s.log.Warn("touch executor", "err", err)
		}
	}()
}
