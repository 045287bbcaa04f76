package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Workflow runs (docs/workers.md): a state machine on the server. Users
// create, cancel and rerun runs and decide their approval nodes; workers
// move them through their leases (leases.go). Every transition is one
// store.UpdateRun, which decides on the run as it is under its row lock
// and appends the transition's events to the run's history.

// defaultMaxAttempts bounds how often an expired lease requeues a run.
const defaultMaxAttempts = 3

// runSpec is what a run does, kept as the run's spec JSON.
type runSpec struct {
	Prompt       string `json:"prompt,omitempty"`
	Model        string `json:"model,omitempty"`
	Definition   string `json:"definition,omitempty"`
	DefinitionID string `json:"workflow_definition_id,omitempty"`
	VersionID    string `json:"workflow_version_id,omitempty"`
	Digest       string `json:"workflow_digest,omitempty"`
	Repo         string `json:"repo,omitempty"`
	// LinkedSession is the session the run was queued from.
	LinkedSession string `json:"linked_session_id,omitempty"`
}

// runOutcome is what the worker reported, kept as the run's outcome JSON.
type runOutcome struct {
	ExitCode    *int                `json:"exit_code,omitempty"`
	DiffSummary string              `json:"diff_summary,omitempty"`
	Checkpoints []sdk.RunCheckpoint `json:"checkpoints,omitempty"`
	Usage       *sdk.RunUsage       `json:"usage,omitempty"`
	Error       string              `json:"error,omitempty"`
}

func runOut(r store.WorkflowRun, approvals []store.RunApproval, now time.Time) sdk.WorkflowRun {
	var sp runSpec
	_ = json.Unmarshal(r.Spec, &sp)
	var oc runOutcome
	_ = json.Unmarshal(r.Outcome, &oc)
	out := sdk.WorkflowRun{
		ID: r.ID, WorkspaceID: r.WorkspaceID, Status: r.Status, Agent: r.Agent, Model: sp.Model, Prompt: sp.Prompt, Definition: sp.Definition,
		DefinitionID: sp.DefinitionID, VersionID: sp.VersionID, Digest: sp.Digest, RunnerPool: r.RunnerPool, Workdir: r.Workdir, Repo: sp.Repo, Tags: nonNil(r.Tags), ManagedExecutorID: r.ExecutorPin, SessionID: r.SessionID, LinkedSessionID: sp.LinkedSession,
		Attempt: r.Attempt, MaxAttempts: r.MaxAttempts, LeaseID: r.LeaseID, ExecutorID: r.ExecutorID, CancelRequested: r.CancelRequested,
		BlockedReason: r.BlockedReason, RerunOf: r.RerunOf, ExitCode: oc.ExitCode, DiffSummary: oc.DiffSummary, Checkpoints: oc.Checkpoints,
		Usage: oc.Usage, Error: oc.Error, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
	}
	for _, a := range approvals {
		out.Approvals = append(out.Approvals, approvalOut(a, now))
	}
	return out
}

// approvalOut shows a pending node past its deadline as expired: the
// deadline decides, whether or not anyone wrote the expiry down.
func approvalOut(a store.RunApproval, now time.Time) sdk.WorkflowApproval {
	var input map[string]any
	_ = json.Unmarshal(a.Input, &input)
	st := a.State
	if st == sdk.ApprovalPending && !now.Before(a.ExpiresAt) {
		st = sdk.ApprovalExpired
	}
	return sdk.WorkflowApproval{NodeKey: a.NodeKey, RunID: a.RunID, State: st, Tool: a.Tool, Summary: a.Summary, Input: input,
		RequestedAt: a.RequestedAt, ExpiresAt: a.ExpiresAt, DecidedBy: a.DecidedBy, DecidedAt: a.DecidedAt, Reason: a.Reason}
}

func eventOf(kind, actor string, now time.Time, data map[string]any) store.RunEvent {
	var b json.RawMessage
	if data != nil {
		b, _ = json.Marshal(data)
	}
	return store.RunEvent{Kind: kind, Actor: actor, Data: b, CreatedAt: now}
}

func statusEvent(actor string, now time.Time, status string, extra map[string]any) store.RunEvent {
	d := map[string]any{"status": status}
	for k, v := range extra {
		d[k] = v
	}
	return eventOf(sdk.RunEventStatus, actor, now, d)
}

func runStateErr(format string, args ...any) error {
	return errorf(http.StatusConflict, sdk.CodeRunState, format, args...)
}

// ---- the definition ----

// workflowDoc is the workflow YAML a run may carry (yaml_snapshot): the
// same fields as the create request, which override it.
type workflowDoc struct {
	Name        string   `yaml:"name"`
	Description string   `yaml:"description"`
	Agent       string   `yaml:"agent"`
	Model       string   `yaml:"model"`
	Prompt      string   `yaml:"prompt"`
	Tags        []string `yaml:"tags"`
	Workdir     string   `yaml:"workdir"`
	Repo        string   `yaml:"repo"`
	RunnerPool  string   `yaml:"runner_pool"`
	MaxAttempts int      `yaml:"max_attempts"`
}

func parseWorkflow(src string) (workflowDoc, error) {
	var d workflowDoc
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil {
		return d, err
	}
	return d, nil
}

// ---- preflight ----

// runRequest is a create or preflight request with the definition merged
// in, and the issues found on the way.
type runRequest struct {
	sdk.WorkflowRunCreateRequest
	RuntimeTargetID    string
	IntegrationEventID string
	issues             []sdk.WorkflowRunPreflightIssue
	budgetReason       string
	// fitting are the executors whose capabilities fit the run.
	fitting []store.ManagedExecutor
	// digest is the SHA-256 of the workflow YAML the run carries.
	digest string
}

func (q *runRequest) issue(code, field, format string, args ...any) {
	q.issues = append(q.issues, sdk.WorkflowRunPreflightIssue{Code: code, Field: field, Message: fmt.Sprintf(format, args...)})
}

// idField reads a string-or-integer id of the preflight request.
func idField(body map[string]any, key string) string {
	switch v := body[key].(type) {
	case nil:
		return ""
	case string:
		return strings.TrimSpace(v)
	default:
		return toString(v)
	}
}

// checkRun finds every reason the run could not start: the definition
// parses, the ids it names exist in the workspace, an executor with its
// capabilities exists, and the budget admits it. Issues are collected,
// not returned one at a time, so the caller sees them all.
func (s *Server) checkRun(c *call, req sdk.WorkflowRunCreateRequest, body map[string]any, draft bool) (*runRequest, error) {
	q := &runRequest{WorkflowRunCreateRequest: req}
	q.RuntimeTargetID, q.IntegrationEventID = idField(body, "runtime_target_id"), idField(body, "integration_event_id")
	if id := idField(body, "managed_executor_id"); id != "" {
		q.ManagedExecutorID = id
	}
	if id := idField(body, "workflow_definition_id"); id != "" {
		q.DefinitionID = id
	}
	if id := idField(body, "workflow_version_id"); id != "" {
		q.VersionID = id
	}
	if d, ok := body["workflow_digest"].(string); ok && d != "" {
		q.WorkflowDigest = d
	}
	// A stored definition becomes the run's YAML before anything reads it.
	if err := s.resolveDefinition(c, q); err != nil {
		return nil, err
	}
	if q.YAMLSnapshot != "" {
		d, err := parseWorkflow(q.YAMLSnapshot)
		if err != nil {
			q.issue("definition_invalid", "/yaml_snapshot", "the workflow YAML does not parse: %v", err)
		} else {
			q.Agent = firstNonEmpty(q.Agent, d.Agent)
			q.Model = firstNonEmpty(q.Model, d.Model)
			q.Prompt = firstNonEmpty(q.Prompt, d.Prompt)
			q.Workdir = firstNonEmpty(q.Workdir, d.Workdir)
			q.Repo = firstNonEmpty(q.Repo, d.Repo)
			q.RunnerPool = firstNonEmpty(q.RunnerPool, d.RunnerPool)
			if len(q.Tags) == 0 {
				q.Tags = d.Tags
			}
			if q.MaxAttempts == 0 {
				q.MaxAttempts = d.MaxAttempts
			}
		}
	}
	q.Tags = cleanList(q.Tags)
	q.RunnerPool = strings.TrimSpace(q.RunnerPool)
	if q.RunnerPool != "" && !runnerPoolName().MatchString(q.RunnerPool) {
		q.issue("runner_pool_invalid", "/runner_pool", "runner_pool %q is not a pool name (letters, digits, '.', '_' and '-', at most 100)", q.RunnerPool)
	}
	if q.Agent == "" {
		q.issue("agent_missing", "/agent", "name the agent to run (agent, or agent: in the workflow YAML)")
	}
	if q.Prompt == "" && q.YAMLSnapshot == "" {
		q.issue("prompt_missing", "/prompt", "give the agent a prompt (prompt, or prompt: in the workflow YAML)")
	} else if q.Prompt == "" && len(q.issues) == 0 {
		q.issue("prompt_missing", "/yaml_snapshot", "the workflow YAML gives no prompt")
	}
	if q.MaxAttempts < 0 || q.MaxAttempts > 20 {
		q.issue("max_attempts_invalid", "/max_attempts", "max_attempts must be between 1 and 20")
	}
	if strings.ContainsRune(q.Workdir, 0) || len(q.Workdir) > 1000 {
		q.issue("workdir_invalid", "/workdir", "the workdir is not a valid directory name")
	}
	wf, err := c.wfStore()
	if err != nil {
		return nil, err
	}
	executors, err := wf.Executors(c.ctx(), c.ws.ID)
	if err != nil {
		return nil, err
	}
	if q.ManagedExecutorID != "" && !slices.ContainsFunc(executors, func(e store.ManagedExecutor) bool { return e.ID == q.ManagedExecutorID }) {
		q.issue("managed_executor_unknown", "/managed_executor_id", "no managed executor %q in this workspace", q.ManagedExecutorID)
	}
	if q.RuntimeTargetID != "" {
		if _, err := s.st.Install(c.ctx(), c.ws.ID, q.RuntimeTargetID); errors.Is(err, store.ErrNotFound) {
			q.issue("runtime_target_unknown", "/runtime_target_id", "no paired machine %q in this workspace", q.RuntimeTargetID)
		} else if err != nil {
			return nil, err
		}
	}
	if q.IntegrationEventID != "" {
		if _, err := s.st.Record(c.ctx(), c.ws.ID, integrationEventCollection, q.IntegrationEventID); errors.Is(err, store.ErrNotFound) {
			q.issue("integration_event_unknown", "/integration_event_id", "no integration event %q in this workspace", q.IntegrationEventID)
		} else if err != nil {
			return nil, err
		}
	}
	// Workflow routes and execution profiles are not resources this
	// server keeps by id (routes live in the project's routes/*.yaml):
	// an id naming one cannot exist, and saying so beats ignoring it.
	for _, f := range []struct{ key, code, what string }{
		{"workflow_route_id", "workflow_route_unknown", "workflow route"},
		{"workflow_route_version_id", "workflow_route_unknown", "workflow route version"},
		{"workflow_execution_profile_id", "workflow_execution_profile_unknown", "workflow execution profile"},
		{"workflow_execution_profile_version_id", "workflow_execution_profile_unknown", "workflow execution profile version"},
	} {
		if id := idField(body, f.key); id != "" {
			q.issue(f.code, "/"+f.key, "no %s %q in this workspace: this server keeps none by id", f.what, id)
		}
	}
	if q.SessionID != "" {
		if _, err := s.st.Record(c.ctx(), c.ws.ID, "sessions", q.SessionID); errors.Is(err, store.ErrNotFound) {
			q.issue("session_unknown", "/session_id", "no agent session %q in this workspace", q.SessionID)
		} else if err != nil {
			return nil, err
		}
	}
	if draft {
		return q, nil
	}
	for _, e := range executors {
		if executorFits(e, q) {
			q.fitting = append(q.fitting, e)
		}
	}
	if q.Agent != "" && len(q.fitting) == 0 {
		pin := ""
		if q.ManagedExecutorID != "" {
			pin = " (the run is pinned to " + q.ManagedExecutorID + ")"
		}
		q.issue("no_matching_executor", "/tags", "no managed executor offers agent %q with tags [%s]%s", q.Agent, strings.Join(q.Tags, ", "), pin)
	}
	reason, err := s.budgetBlocks(c)
	if err != nil {
		return nil, err
	}
	if reason != "" {
		q.budgetReason = reason
		q.issue(reason, "", "%s", budgetMessage(reason))
	}
	return q, nil
}

func executorFits(e store.ManagedExecutor, q *runRequest) bool {
	if q.ManagedExecutorID != "" && e.ID != q.ManagedExecutorID {
		return false
	}
	if len(e.Agents) > 0 && !slices.Contains(e.Agents, q.Agent) {
		return false
	}
	for _, t := range q.Tags {
		if !slices.Contains(e.Tags, t) {
			return false
		}
	}
	return true
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func preflightError(issues, advisories []sdk.WorkflowRunPreflightIssue) *apiError {
	e := errorf(http.StatusUnprocessableEntity, sdk.CodeNotRunnable, "the run is not runnable: %d issue(s)", len(issues))
	for _, i := range issues {
		e.Details = append(e.Details, sdk.ErrorDetail{Field: i.Field, Message: i.Message})
	}
	e.Extra = map[string]any{"data": sdk.WorkflowRunPreflight{Runnable: false, Issues: issues, Advisories: advisories}}
	return e
}

// poolServedWithin is how recently a worker must have claimed for a run's
// runner pool (or heartbeated a lease of it) for preflight to count the
// pool as served. Workers poll continually and are recorded once a minute.
const poolServedWithin = 5 * time.Minute

// poolAdvisories says, for a run some executor's capabilities fit, when
// no worker of those executors has served the run's runner pool lately.
// It is advice, not a readiness issue: the run is valid and waits in the
// queue until a worker claims for its pool (a pool scaled to zero, a
// worker restarting), so preflight still answers runnable (spec 4.10).
func (s *Server) poolAdvisories(c *call, q *runRequest) ([]sdk.WorkflowRunPreflightIssue, error) {
	if len(q.fitting) == 0 {
		return nil, nil // no_matching_executor already says so
	}
	wf, err := c.wfStore()
	if err != nil {
		return nil, err
	}
	seen, err := wf.PoolSeen(c.ctx(), c.ws.ID, q.RunnerPool)
	if err != nil {
		return nil, err
	}
	since := c.now().Add(-poolServedWithin)
	for _, e := range q.fitting {
		if at, ok := seen[e.ID]; ok && at.After(since) {
			return nil, nil
		}
	}
	pool := "the default runner pool"
	if q.RunnerPool != "" {
		pool = fmt.Sprintf("runner pool %q", q.RunnerPool)
	}
	return []sdk.WorkflowRunPreflightIssue{{Code: "runner_pool_unserved", Field: "/runner_pool",
		Message: fmt.Sprintf("no worker of a managed executor that fits this run has claimed work for %s in the last %s; the run would wait in the queue until one does", pool, poolServedWithin)}}, nil
}

// preflight checks a request without creating a run (spec 4.10).
func (s *Server) preflight(c *call) (int, any, error) {
	var req sdk.WorkflowRunCreateRequest
	// The spec's fields are ids of either type; the create fields are
	// strings. Decode the ones that are ours.
	for _, k := range []string{"agent", "model", "prompt", "yaml_snapshot", "workdir", "repo", "session_id", "runner_pool"} {
		if v, ok := c.body[k].(string); ok {
			b, _ := json.Marshal(map[string]string{k: v})
			_ = json.Unmarshal(b, &req)
		}
	}
	if tags, ok := c.body["tags"].([]any); ok {
		for _, t := range tags {
			if s, ok := t.(string); ok {
				req.Tags = append(req.Tags, s)
			}
		}
	}
	if n, ok := numberOf(c.body["max_attempts"]); ok {
		req.MaxAttempts = int(n)
	}
	draft := c.body["status"] == sdk.RunDraft
	q, err := s.checkRun(c, req, c.body, draft)
	if err != nil {
		return 0, nil, err
	}
	var advisories []sdk.WorkflowRunPreflightIssue
	if !draft {
		if advisories, err = s.poolAdvisories(c, q); err != nil {
			return 0, nil, err
		}
	}
	if len(q.issues) > 0 {
		return 0, nil, preflightError(q.issues, advisories)
	}
	return 200, map[string]any{"data": sdk.WorkflowRunPreflight{Runnable: true, Issues: []sdk.WorkflowRunPreflightIssue{}, Advisories: advisories}}, nil
}

// ---- create ----

func (s *Server) createRun(c *call) (int, any, error) {
	var req sdk.WorkflowRunCreateRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	return s.newRun(c, req, "", "")
}

// queueSessionAttempt is POST .../sessions/{s}/run-attempts: a run linked
// to the session, its agent and model defaulting to the session's.
func (s *Server) queueSessionAttempt(c *call) (int, any, error) {
	var req sdk.WorkflowRunCreateRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	sess, err := c.session()
	if err != nil {
		return 0, nil, err
	}
	req.SessionID = sess.ID
	req.Agent = firstNonEmpty(req.Agent, attrs(sess, "agent"))
	req.Model = firstNonEmpty(req.Model, attrs(sess, "model"))
	return s.newRun(c, req, "", "")
}

func (s *Server) newRun(c *call, req sdk.WorkflowRunCreateRequest, rerunOf, status string) (int, any, error) {
	return s.newRunAs(c, c.p.Actor(), req, rerunOf, status)
}

func (s *Server) newRunAs(c *call, actor string, req sdk.WorkflowRunCreateRequest, rerunOf, status string) (int, any, error) {
	if status == "" {
		status = req.Status
	}
	if status == "" {
		status = sdk.RunQueued
	}
	if status != sdk.RunQueued && status != sdk.RunDraft {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/status", Message: "a new run is draft or queued"})
	}
	body := c.body
	if body == nil {
		body = map[string]any{}
	}
	q, err := s.checkRun(c, req, body, status == sdk.RunDraft)
	if err != nil {
		return 0, nil, err
	}
	// A run the budget does not admit is created blocked, not refused:
	// it is queued once the budget allows (PATCH status queued).
	blocking := []sdk.WorkflowRunPreflightIssue{}
	for _, i := range q.issues {
		if i.Code != q.budgetReason {
			blocking = append(blocking, i)
		}
	}
	if len(blocking) > 0 {
		return 0, nil, preflightError(blocking, nil)
	}
	if q.budgetReason != "" {
		status = sdk.RunBlocked
	}
	if q.MaxAttempts == 0 {
		q.MaxAttempts = defaultMaxAttempts
	}
	spec, _ := json.Marshal(runSpec{Prompt: q.Prompt, Model: q.Model, Definition: q.YAMLSnapshot, DefinitionID: q.DefinitionID, VersionID: q.VersionID,
		Digest: q.digest, Repo: q.Repo, LinkedSession: q.SessionID})
	now := c.now()
	r := store.WorkflowRun{ID: newRecordID(), WorkspaceID: c.ws.ID, Status: status, Agent: q.Agent, Tags: q.Tags, ExecutorPin: q.ManagedExecutorID, RunnerPool: q.RunnerPool,
		Workdir: q.Workdir, Spec: spec, Outcome: json.RawMessage(`{}`), MaxAttempts: q.MaxAttempts, SessionID: q.SessionID, BlockedReason: q.budgetReason,
		RerunOf: rerunOf, CreatedBy: actor, CreatedAt: now, UpdatedAt: now}
	created := map[string]any{"status": status, "agent": r.Agent, "tags": r.Tags, "rerun_of": rerunOf, "session_id": r.SessionID}
	if q.digest != "" {
		created["workflow_definition_id"], created["workflow_version_id"], created["workflow_digest"] = q.DefinitionID, q.VersionID, q.digest
	}
	if r.RunnerPool != "" {
		created["runner_pool"] = r.RunnerPool
	}
	events := []store.RunEvent{eventOf(sdk.RunEventCreated, actor, now, created)}
	if status == sdk.RunBlocked {
		events = append(events, statusEvent("server", now, sdk.RunBlocked, map[string]any{"reason": q.budgetReason}))
	}
	wf, _ := c.wfStore()
	audit := c.audit("workflow_run.create", "workflow-runs/"+r.ID, map[string]any{"status": status, "rerun_of": rerunOf})
	audit.Actor = actor
	if err := wf.CreateRun(c.ctx(), &r, events, audit); errors.Is(err, store.ErrNotFound) {
		// The definition resolved above was deleted before the run was
		// written (the store checks it in the run's transaction).
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "workflow definition %s was deleted while this run was being created", q.DefinitionID)
	} else if err != nil {
		return 0, nil, err
	}
	if status == sdk.RunQueued {
		s.work.signalOne(r.WorkspaceID)
	}
	return 201, sdk.WorkflowRunResponse{Data: runOut(r, nil, now)}, nil
}

// ---- reads ----

// loadRun reads the {workflowRun} of the path with its approvals.
func (c *call) loadRun() (store.WorkflowRun, []store.RunApproval, error) {
	wf, err := c.wfStore()
	if err != nil {
		return store.WorkflowRun{}, nil, err
	}
	id := c.r.PathValue("workflowRun")
	r, err := wf.Run(c.ctx(), c.ws.ID, id)
	if errors.Is(err, store.ErrNotFound) {
		return r, nil, notFound("no workflow run %q", id)
	}
	if err != nil {
		return r, nil, err
	}
	aps, err := wf.Approvals(c.ctx(), r.ID)
	return r, aps, err
}

func (s *Server) getRun(c *call) (int, any, error) {
	r, aps, err := c.loadRun()
	if err != nil {
		return 0, nil, err
	}
	out := []sdk.WorkflowRun{runOut(r, aps, c.now())}
	if err := s.linkSyncedSessions(c, []store.WorkflowRun{r}, out); err != nil {
		return 0, nil, err
	}
	return 200, sdk.WorkflowRunResponse{Data: out[0]}, nil
}

// syncedSessionKey is the natural key of the session record a daemon's
// session sync keeps for its session daemonSessionID.
func syncedSessionKey(daemonSessionID string) string { return "daemon:" + daemonSessionID }

// linkSyncedSessions sets the SyncedSessionID of each of out (the
// answers of runs, in the same order). The worker's daemon publishes its
// session through session sync (docs/server.md), keyed by the daemon's
// session id: a run links to that record once it exists. A page of runs
// is linked in one read, never a query per run.
func (s *Server) linkSyncedSessions(c *call, runs []store.WorkflowRun, out []sdk.WorkflowRun) error {
	keys := make([]string, 0, len(runs))
	for _, r := range runs {
		if r.SessionID != "" {
			keys = append(keys, syncedSessionKey(r.SessionID))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	ids, err := s.st.RecordIDsByKey(c.ctx(), c.ws.ID, "sessions", keys)
	if err != nil {
		return err
	}
	for i, r := range runs {
		if r.SessionID != "" {
			out[i].SyncedSessionID = ids[syncedSessionKey(r.SessionID)]
		}
	}
	return nil
}

var runStatuses = []string{sdk.RunDraft, sdk.RunQueued, sdk.RunBlocked, sdk.RunLeased, sdk.RunRunning, sdk.RunWaitingApproval, sdk.RunSucceeded, sdk.RunFailed, sdk.RunCancelled}

func (s *Server) listRuns(c *call) (int, any, error) {
	wf, err := c.wfStore()
	if err != nil {
		return 0, nil, err
	}
	status := c.r.URL.Query().Get("status")
	if status != "" && !slices.Contains(runStatuses, status) {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "query:status", Message: "status must be one of " + strings.Join(runStatuses, ", ")})
	}
	limit := int(queryInt(c, "limit", 100))
	if limit < 1 || limit > 500 {
		limit = 100
	}
	list, err := wf.Runs(c.ctx(), c.ws.ID, status, store.ListOptions{After: queryInt(c, "after", 0), Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	out := make([]sdk.WorkflowRun, 0, len(list))
	for _, r := range list {
		out = append(out, runOut(r, nil, c.now()))
	}
	if err := s.linkSyncedSessions(c, list, out); err != nil {
		return 0, nil, err
	}
	meta := sdk.ListMeta{Count: len(out)}
	if len(list) == limit {
		meta.NextAfter = list[len(list)-1].Seq
	}
	return 200, sdk.WorkflowRunCollectionResponse{Data: out, Meta: meta}, nil
}

// ---- user transitions ----

// runTransition runs fn on the path's run under its lock.
func (s *Server) runTransition(c *call, action string, fn func(r *store.WorkflowRun) ([]store.RunEvent, error)) (store.WorkflowRun, error) {
	wf, err := c.wfStore()
	if err != nil {
		return store.WorkflowRun{}, err
	}
	id := c.r.PathValue("workflowRun")
	r, err := wf.UpdateRun(c.ctx(), c.ws.ID, id, fn, c.audit(action, "workflow-runs/"+id, c.body))
	if errors.Is(err, store.ErrNotFound) {
		return r, notFound("no workflow run %q", id)
	}
	return r, err
}

// patchRun moves a draft or blocked run to the queue (admission checked
// again) or a queued one back to draft.
func (s *Server) patchRun(c *call) (int, any, error) {
	to, _ := c.body["status"].(string)
	if to != sdk.RunQueued && to != sdk.RunDraft {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/status", Message: "status must be queued or draft"})
	}
	reason := ""
	if to == sdk.RunQueued {
		var err error
		if reason, err = s.budgetBlocks(c); err != nil {
			return 0, nil, err
		}
	}
	now, actor := c.now(), c.p.Actor()
	r, err := s.runTransition(c, "workflow_run.update", func(r *store.WorkflowRun) ([]store.RunEvent, error) {
		switch {
		case to == sdk.RunQueued && (r.Status == sdk.RunDraft || r.Status == sdk.RunBlocked):
			if reason != "" {
				r.Status, r.BlockedReason = sdk.RunBlocked, reason
			} else {
				r.Status, r.BlockedReason = sdk.RunQueued, ""
			}
		case to == sdk.RunDraft && (r.Status == sdk.RunQueued || r.Status == sdk.RunBlocked):
			r.Status, r.BlockedReason = sdk.RunDraft, ""
		case to == r.Status:
			return nil, nil
		default:
			return nil, runStateErr("a %s run cannot become %s", r.Status, to)
		}
		r.UpdatedAt = now
		return []store.RunEvent{statusEvent(actor, now, r.Status, map[string]any{"reason": r.BlockedReason})}, nil
	})
	if err != nil {
		return 0, nil, err
	}
	if r.Status == sdk.RunQueued {
		s.work.signalOne(r.WorkspaceID)
	}
	return 200, sdk.WorkflowRunResponse{Data: runOut(r, nil, now)}, nil
}

// cancelRun ends an unheld run at once; a held one is flagged, and its
// holder learns it on its next heartbeat.
func (s *Server) cancelRun(c *call) (int, any, error) {
	now, actor := c.now(), c.p.Actor()
	r, err := s.runTransition(c, "workflow_run.cancel", func(r *store.WorkflowRun) ([]store.RunEvent, error) {
		switch {
		case sdk.RunTerminal(r.Status):
			return nil, runStateErr("the run is already %s", r.Status)
		case r.Held():
			if r.CancelRequested {
				return nil, nil
			}
			r.CancelRequested, r.UpdatedAt = true, now
			return []store.RunEvent{eventOf(sdk.RunEventCancelRequested, actor, now, map[string]any{"lease_id": r.LeaseID, "executor_id": r.ExecutorID})}, nil
		default:
			r.Status, r.FinishedAt, r.UpdatedAt = sdk.RunCancelled, &now, now
			return []store.RunEvent{statusEvent(actor, now, sdk.RunCancelled, nil)}, nil
		}
	})
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.WorkflowRunResponse{Data: runOut(r, nil, now)}, nil
}

// rerunRun queues a new run with a finished run's request.
func (s *Server) rerunRun(c *call) (int, any, error) {
	r, _, err := c.loadRun()
	if err != nil {
		return 0, nil, err
	}
	if !sdk.RunTerminal(r.Status) {
		return 0, nil, runStateErr("only a finished run can be rerun; this one is %s", r.Status)
	}
	var sp runSpec
	_ = json.Unmarshal(r.Spec, &sp)
	// The rerun runs the same YAML: the version it named, not the
	// definition's latest.
	req := sdk.WorkflowRunCreateRequest{Agent: r.Agent, Model: sp.Model, Prompt: sp.Prompt, YAMLSnapshot: sp.Definition, DefinitionID: sp.DefinitionID,
		VersionID: sp.VersionID, Workdir: r.Workdir, Repo: sp.Repo, Tags: r.Tags, ManagedExecutorID: r.ExecutorPin, SessionID: r.SessionID,
		MaxAttempts: r.MaxAttempts, RunnerPool: r.RunnerPool}
	if sp.LinkedSession != "" {
		req.SessionID = sp.LinkedSession
	}
	// The session stays linked when it is a session of the workspace; a
	// worker's own session id (reported at start) is not carried over.
	if req.SessionID != "" {
		if _, err := s.st.Record(c.ctx(), c.ws.ID, "sessions", req.SessionID); err != nil {
			req.SessionID = ""
		}
	}
	c.body = map[string]any{}
	return s.newRun(c, req, r.ID, sdk.RunQueued)
}

// decideApproval is a human's decision on a node (409 once decided or
// expired); the run goes back to running when no node is pending.
func (s *Server) decideApproval(c *call) (int, any, error) {
	wf, err := c.wfStore()
	if err != nil {
		return 0, nil, err
	}
	var req sdk.WorkflowApprovalDecisionRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	if req.Decision != "approve" && req.Decision != "deny" {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/decision", Message: "decision must be approve or deny"})
	}
	runID, node := c.r.PathValue("workflowRun"), c.r.PathValue("nodeKey")
	now, actor := c.now(), c.p.Actor()
	a, r, err := wf.DecideApproval(c.ctx(), c.ws.ID, runID, node, func(a *store.RunApproval) error {
		if a.State != sdk.ApprovalPending {
			return errorf(http.StatusConflict, sdk.CodeAlreadyDecided, "approval %s is already %s", a.NodeKey, a.State)
		}
		if !now.Before(a.ExpiresAt) {
			a.State, a.DecidedAt, a.DecidedBy, a.Reason = sdk.ApprovalExpired, &now, "server", "nobody decided before the deadline"
			return nil
		}
		a.State, a.DecidedBy, a.DecidedAt, a.Reason = sdk.ApprovalDenied, actor, &now, req.Reason
		if req.Decision == "approve" {
			a.State = sdk.ApprovalApproved
		}
		return nil
	}, func(r *store.WorkflowRun, pending int) []store.RunEvent {
		evs := []store.RunEvent{eventOf(sdk.RunEventApprovalDecision, actor, now, map[string]any{"node_key": node, "decision": req.Decision, "reason": req.Reason})}
		if pending == 0 && r.Status == sdk.RunWaitingApproval {
			r.Status, r.UpdatedAt = sdk.RunRunning, now
			evs = append(evs, statusEvent("server", now, sdk.RunRunning, map[string]any{"reason": "approvals decided"}))
		}
		return evs
	}, c.audit("workflow_run.approval."+req.Decision, "workflow-runs/"+runID+"/approvals/"+node, c.body))
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, notFound("no approval node %q on workflow run %q", node, runID)
	}
	if err != nil {
		return 0, nil, err
	}
	if a.State == sdk.ApprovalExpired {
		return 0, nil, errorf(http.StatusConflict, sdk.CodeAlreadyDecided, "approval %s expired before it was decided", node)
	}
	s.work.signal("approval:" + r.ID)
	return 200, sdk.WorkflowApprovalResponse{Data: approvalOut(a, now)}, nil
}

// runEvents is POST /{r}/events: the run's history after a sequence.
func (s *Server) runEvents(c *call) (int, any, error) {
	r, _, err := c.loadRun()
	if err != nil {
		return 0, nil, err
	}
	after, _ := numberOf(c.body["after_sequence"])
	limit, ok := numberOf(c.body["limit"])
	if !ok || limit < 1 || limit > 1000 {
		limit = 500
	}
	wf, _ := c.wfStore()
	evs, err := wf.RunEvents(c.ctx(), r.ID, after, int(limit))
	if err != nil {
		return 0, nil, err
	}
	out := make([]sdk.WorkflowRunEvent, 0, len(evs))
	for _, e := range evs {
		out = append(out, eventOut(e))
	}
	meta := sdk.ListMeta{Count: len(out)}
	if len(evs) == int(limit) {
		meta.NextAfter = evs[len(evs)-1].Seq
	}
	return 200, sdk.WorkflowRunEventCollectionResponse{Data: out, Meta: meta}, nil
}

func eventOut(e store.RunEvent) sdk.WorkflowRunEvent {
	var data map[string]any
	if len(e.Data) > 0 {
		dec := json.NewDecoder(bytes.NewReader(e.Data))
		dec.UseNumber()
		_ = dec.Decode(&data)
	}
	return sdk.WorkflowRunEvent{Seq: e.Seq, RunID: e.RunID, Kind: e.Kind, Actor: e.Actor, At: e.CreatedAt, Data: data}
}
