package api_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/server/api"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store/storetest"
)

// wfEnv is a server, a workspace owner and a managed executor.
type wfEnv struct {
	s      *servertest.Server
	u      servertest.User
	ex     sdk.ManagedExecutor
	runner *sdk.Client
	ctx    context.Context
}

func newWFEnv(t *testing.T, o servertest.Options, tags ...string) *wfEnv {
	t.Helper()
	s := servertest.Start(t, o)
	u := s.NewUser("lead@example.com")
	ctx := context.Background()
	ex, err := u.Client.CreateManagedExecutor(ctx, u.Workspace, sdk.ManagedExecutorCreateRequest{Name: "ci-1", Tags: tags, Agents: []string{"shell", "claude"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ex.Credential, sdk.RunnerCredentialPrefix) {
		t.Fatalf("credential %q", ex.Credential)
	}
	return &wfEnv{s: s, u: u, ex: ex, runner: s.Client(ex.Credential), ctx: ctx}
}

func (e *wfEnv) queue(t *testing.T, req sdk.WorkflowRunCreateRequest) sdk.WorkflowRun {
	t.Helper()
	if req.Agent == "" {
		req.Agent = "shell"
	}
	if req.Prompt == "" {
		req.Prompt = "make test"
	}
	r, err := e.u.Client.CreateWorkflowRun(e.ctx, e.u.Workspace, req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *wfEnv) claim(t *testing.T, c *sdk.Client, wait int) sdk.Lease {
	t.Helper()
	l, ok, err := c.ClaimLease(e.ctx, sdk.WorkerClaimRequest{WaitSeconds: wait})
	if err != nil || !ok {
		t.Fatalf("claim: ok=%v %v", ok, err)
	}
	return l
}

func wantCode(t *testing.T, err error, status int, code string) {
	t.Helper()
	var ae *sdk.APIError
	if !errors.As(err, &ae) || ae.Status != status || (code != "" && ae.Body.Code != code) {
		t.Fatalf("got %v, want %d %s", err, status, code)
	}
}

func TestWorkerLeaseLifecycle(t *testing.T) {
	e := newWFEnv(t, servertest.Options{}, "linux")
	// The credential is shown once: listings never carry it.
	list, err := e.u.Client.ListManagedExecutors(e.ctx, e.u.Workspace)
	if err != nil || len(list) != 1 || list[0].Credential != "" || list[0].CredentialPrefix == "" {
		t.Fatalf("list: %+v %v", list, err)
	}
	me, err := e.runner.WorkerIdentity(e.ctx)
	if err != nil || me.ID != e.ex.ID || me.WorkspaceID != e.u.Workspace {
		t.Fatalf("identity: %+v %v", me, err)
	}
	run := e.queue(t, sdk.WorkflowRunCreateRequest{Tags: []string{"linux"}, Workdir: "app", Model: "m1"})
	if run.Status != sdk.RunQueued || run.Attempt != 0 {
		t.Fatalf("created %+v", run)
	}
	l := e.claim(t, e.runner, 5)
	if l.RunID != run.ID || l.Fence != 1 || l.Run.Prompt != "make test" || l.Run.Workdir != "app" || !strings.HasPrefix(l.Token, sdk.LeaseTokenPrefix) || l.TTL <= 0 {
		t.Fatalf("lease %+v", l)
	}
	// Nothing else is queued: a zero wait answers 204 at once.
	if _, ok, err := e.runner.ClaimLease(e.ctx, sdk.WorkerClaimRequest{WaitSeconds: 0}); ok || err != nil {
		t.Fatalf("second claim: %v %v", ok, err)
	}
	hb, err := e.runner.HeartbeatLease(e.ctx, l.ID, l.Fence)
	if err != nil || hb.CancelRequested || !hb.ExpiresAt.After(time.Now()) {
		t.Fatalf("heartbeat: %+v %v", hb, err)
	}
	_, err = e.runner.HeartbeatLease(e.ctx, l.ID, l.Fence+1)
	wantCode(t, err, 409, sdk.CodeStaleFence)
	if r, err := e.runner.ReportLeaseState(e.ctx, l.ID, sdk.LeaseStateRequest{Fence: l.Fence, State: sdk.RunRunning, SessionID: "sess-1"}); err != nil || r.Status != sdk.RunRunning || r.StartedAt == nil {
		t.Fatalf("running: %+v %v", r, err)
	}
	if err := e.runner.AppendLeaseEvents(e.ctx, l.ID, sdk.LeaseEventsRequest{Fence: l.Fence, Events: []sdk.LeaseEventIn{{Kind: "tool-call", Data: map[string]any{"tool": "Bash"}}}}); err != nil {
		t.Fatal(err)
	}
	// An approval: the run waits; a human decides through REST; the
	// worker's long poll sees it.
	node, err := e.runner.RaiseLeaseApproval(e.ctx, l.ID, sdk.LeaseApprovalRequest{Fence: l.Fence, NodeKey: "tool-1", Tool: "Bash", Summary: "rm -rf build", Input: map[string]any{"command": "rm -rf build"}})
	if err != nil || node.State != sdk.ApprovalPending {
		t.Fatalf("raise: %+v %v", node, err)
	}
	if got, _ := e.u.Client.GetWorkflowRun(e.ctx, e.u.Workspace, run.ID); got.Status != sdk.RunWaitingApproval || len(got.Approvals) != 1 {
		t.Fatalf("waiting: %+v", got)
	}
	decided := make(chan sdk.WorkflowApproval, 1)
	go func() {
		a, err := e.runner.WaitLeaseApproval(e.ctx, l.ID, "tool-1", 20*time.Second)
		if err != nil {
			t.Error(err)
		}
		decided <- a
	}()
	if _, err := e.u.Client.DecideWorkflowApproval(e.ctx, e.u.Workspace, run.ID, "tool-1", sdk.WorkflowApprovalDecisionRequest{Decision: "approve", Reason: "fine"}); err != nil {
		t.Fatal(err)
	}
	if a := <-decided; a.State != sdk.ApprovalApproved || a.DecidedBy == "" {
		t.Fatalf("the worker saw %+v", a)
	}
	_, err = e.u.Client.DecideWorkflowApproval(e.ctx, e.u.Workspace, run.ID, "tool-1", sdk.WorkflowApprovalDecisionRequest{Decision: "deny"})
	wantCode(t, err, 409, sdk.CodeAlreadyDecided)
	if got, _ := e.u.Client.GetWorkflowRun(e.ctx, e.u.Workspace, run.ID); got.Status != sdk.RunRunning {
		t.Fatalf("after the decision: %s", got.Status)
	}
	zero := 0
	done, err := e.runner.CompleteLease(e.ctx, l.ID, sdk.LeaseCompleteRequest{Fence: l.Fence, Status: sdk.RunSucceeded, ExitCode: &zero, DiffSummary: "1 file changed",
		Checkpoints: []sdk.RunCheckpoint{{SHA: "0123456789abcdef0123456789abcdef01234567", Message: "turn 1"}},
		Usage:       &sdk.RunUsage{Provider: "provider_a", Model: "m1", InputTokens: 10, OutputTokens: 5, TotalTokens: 15, CostUSD: "0.25"}})
	if err != nil || done.Status != sdk.RunSucceeded || done.LeaseID != "" || done.DiffSummary != "1 file changed" || len(done.Checkpoints) != 1 || done.Usage.CostUSD != "0.25" {
		t.Fatalf("complete: %+v %v", done, err)
	}
	// The lease is over: every report is refused and the run keeps its state.
	_, err = e.runner.HeartbeatLease(e.ctx, l.ID, l.Fence)
	wantCode(t, err, 410, sdk.CodeLeaseExpired)
	_, err = e.runner.CompleteLease(e.ctx, l.ID, sdk.LeaseCompleteRequest{Fence: l.Fence, Status: sdk.RunFailed})
	wantCode(t, err, 410, sdk.CodeLeaseExpired)
	_, err = e.s.Client(l.Token).LeaseByToken(e.ctx)
	wantCode(t, err, 410, sdk.CodeLeaseExpired)
	// The usage is in the workspace's gateway ledger.
	led := do(t, e.s, "GET", "/api/workspaces/"+e.u.Workspace+"/audit", e.u.Token, nil)
	if !strings.Contains(string(led.Body), "gateway/usage") {
		t.Fatalf("no ledger entry in the audit: %s", led.Body)
	}
	// The views come from the history.
	for _, v := range []string{"story", "telemetry", "trace-feed", "trace-feed/export", "gates", "audit-packet"} {
		a := expect(t, do(t, e.s, "GET", "/api/workflow-runs/"+run.ID+"/"+v, e.u.Token, nil), 200, v)
		for _, want := range map[string][]string{
			"story":      {"leased to executor " + e.ex.ID, "asked a human to approve Bash", "finished succeeded with exit code 0"},
			"telemetry":  {`"attempts":1`, `"approved":1`, `"tool-call":1`},
			"trace-feed": {`"name":"attempt"`, `"name":"approval"`, `"status":"succeeded"`},
			"gates":      {`"overall":"passed"`, `"gate":"exit_status","state":"passed"`},
		}[v] {
			if !strings.Contains(string(a.Body), want) {
				t.Errorf("%s lacks %q: %s", v, want, a.Body)
			}
		}
	}
	evs, err := e.u.Client.WorkflowRunEvents(e.ctx, e.u.Workspace, run.ID, 0)
	if err != nil || len(evs) < 8 || evs[0].Kind != sdk.RunEventCreated || evs[len(evs)-1].Kind != sdk.RunEventStatus {
		t.Fatalf("history: %d %v", len(evs), err)
	}
	// Rerun queues a new run with the same request.
	again, err := e.u.Client.RerunWorkflowRun(e.ctx, e.u.Workspace, run.ID)
	if err != nil || again.RerunOf != run.ID || again.Status != sdk.RunQueued || again.Prompt != "make test" || again.Workdir != "app" {
		t.Fatalf("rerun: %+v %v", again, err)
	}
	_, err = e.u.Client.RerunWorkflowRun(e.ctx, e.u.Workspace, again.ID)
	wantCode(t, err, 409, sdk.CodeRunState)
}

// TestWorkerLeaseExpiry: a holder that stops heartbeating loses the run
// to the sweeper; the next holder gets a higher fence and the old one's
// reports are refused as stale.
func TestWorkerLeaseExpiry(t *testing.T) {
	e := newWFEnv(t, servertest.Options{LeaseTTL: 2 * time.Second})
	other, err := e.u.Client.CreateManagedExecutor(e.ctx, e.u.Workspace, sdk.ManagedExecutorCreateRequest{Name: "ci-2"})
	if err != nil {
		t.Fatal(err)
	}
	run := e.queue(t, sdk.WorkflowRunCreateRequest{MaxAttempts: 2})
	first := e.claim(t, e.runner, 5)
	// The second executor long-polls; the sweeper requeues the run and
	// wakes it.
	second := e.claim(t, e.s.Client(other.Credential), 20)
	if second.RunID != run.ID || second.Fence != 2 || second.Run.Attempt != 2 || second.ExecutorID != other.ID {
		t.Fatalf("second lease %+v", second)
	}
	_, err = e.runner.HeartbeatLease(e.ctx, first.ID, first.Fence)
	wantCode(t, err, 409, sdk.CodeStaleFence)
	_, err = e.runner.CompleteLease(e.ctx, first.ID, sdk.LeaseCompleteRequest{Fence: first.Fence, Status: sdk.RunSucceeded})
	wantCode(t, err, 409, sdk.CodeStaleFence)
	// The old executor cannot act on the new lease either.
	_, err = e.runner.HeartbeatLease(e.ctx, second.ID, second.Fence)
	wantCode(t, err, 403, sdk.CodeForbidden)
	// The second holder also goes silent: its attempts are used up and the
	// run fails with the reason.
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := e.u.Client.GetWorkflowRun(e.ctx, e.u.Workspace, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == sdk.RunFailed {
			if !strings.Contains(r.Error, "lease_expired") || r.Attempt != 2 {
				t.Fatalf("failed run %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not fail after its last lease expired: %+v", r)
		}
		time.Sleep(200 * time.Millisecond)
	}
	story := expect(t, do(t, e.s, "GET", "/api/workflow-runs/"+run.ID+"/story", e.u.Token, nil), 200, "story")
	if strings.Count(string(story.Body), "expired without a heartbeat") != 2 {
		t.Fatalf("story: %s", story.Body)
	}
}

func TestWorkerCancelReachesHolder(t *testing.T) {
	e := newWFEnv(t, servertest.Options{})
	queued := e.queue(t, sdk.WorkflowRunCreateRequest{})
	run := e.queue(t, sdk.WorkflowRunCreateRequest{})
	// Cancelling a queued run ends it at once.
	l := e.claim(t, e.runner, 5) // takes the older run first
	if l.RunID != queued.ID {
		t.Fatalf("claimed %s, want the older %s", l.RunID, queued.ID)
	}
	c, err := e.u.Client.CancelWorkflowRun(e.ctx, e.u.Workspace, run.ID)
	if err != nil || c.Status != sdk.RunCancelled || c.FinishedAt == nil {
		t.Fatalf("cancel queued: %+v %v", c, err)
	}
	_, err = e.u.Client.CancelWorkflowRun(e.ctx, e.u.Workspace, run.ID)
	wantCode(t, err, 409, sdk.CodeRunState)
	// A held run: the holder hears it on its next heartbeat.
	if _, err := e.runner.ReportLeaseState(e.ctx, l.ID, sdk.LeaseStateRequest{Fence: l.Fence, State: sdk.RunRunning}); err != nil {
		t.Fatal(err)
	}
	c, err = e.u.Client.CancelWorkflowRun(e.ctx, e.u.Workspace, queued.ID)
	if err != nil || c.Status != sdk.RunRunning || !c.CancelRequested {
		t.Fatalf("cancel held: %+v %v", c, err)
	}
	hb, err := e.runner.HeartbeatLease(e.ctx, l.ID, l.Fence)
	if err != nil || !hb.CancelRequested {
		t.Fatalf("heartbeat after cancel: %+v %v", hb, err)
	}
	done, err := e.runner.CompleteLease(e.ctx, l.ID, sdk.LeaseCompleteRequest{Fence: l.Fence, Status: sdk.RunCancelled, Error: "cancelled by the user"})
	if err != nil || done.Status != sdk.RunCancelled {
		t.Fatalf("complete cancelled: %+v %v", done, err)
	}
}

// TestWorkerScopeMatrix: a runner credential claims only its workspace's
// runs within its capabilities and reports only on the leases it holds.
func TestWorkerScopeMatrix(t *testing.T) {
	e := newWFEnv(t, servertest.Options{}, "linux")
	ctx := e.ctx
	sib, err := e.u.Client.CreateManagedExecutor(ctx, e.u.Workspace, sdk.ManagedExecutorCreateRequest{Name: "sibling", Tags: []string{"linux"}})
	if err != nil {
		t.Fatal(err)
	}
	b := e.s.NewUser("other@example.com")
	bex, err := b.Client.CreateManagedExecutor(ctx, b.Workspace, sdk.ManagedExecutorCreateRequest{Name: "b", Tags: []string{"linux"}})
	if err != nil {
		t.Fatal(err)
	}
	bRunner, sibling := e.s.Client(bex.Credential), e.s.Client(sib.Credential)
	e.queue(t, sdk.WorkflowRunCreateRequest{Tags: []string{"linux"}})
	// Another workspace's executor sees no run.
	if _, ok, err := bRunner.ClaimLease(ctx, sdk.WorkerClaimRequest{WaitSeconds: 0}); ok || err != nil {
		t.Fatalf("other workspace claimed: %v %v", ok, err)
	}
	l := e.claim(t, e.runner, 5)
	path := "/api/runtime/worker/leases/" + l.ID
	fence := fmt.Sprintf(`{"fence":%d}`, l.Fence)
	// The sibling executor of the same workspace: 403 on each lease route.
	for _, p := range []struct{ method, path, body string }{
		{"POST", path + "/heartbeat", fence},
		{"POST", path + "/state", fmt.Sprintf(`{"fence":%d,"state":"running"}`, l.Fence)},
		{"POST", path + "/events", fmt.Sprintf(`{"fence":%d,"events":[{"kind":"x"}]}`, l.Fence)},
		{"POST", path + "/approvals", fmt.Sprintf(`{"fence":%d,"node_key":"n","tool":"Bash"}`, l.Fence)},
		{"POST", path + "/complete", fmt.Sprintf(`{"fence":%d,"status":"succeeded"}`, l.Fence)},
		{"POST", path + "/release", fmt.Sprintf(`{"fence":%d,"reason":"x"}`, l.Fence)},
	} {
		expect(t, do(t, e.s, p.method, p.path, sib.Credential, p.body), 403, "sibling "+p.path)
		// Another workspace's executor: 403, whether it names this
		// workspace or not.
		expect(t, do(t, e.s, p.method, p.path, bex.Credential, p.body, api.WorkspaceHeader, e.u.Workspace), 403, "other workspace "+p.path)
		expect(t, do(t, e.s, p.method, p.path, bex.Credential, p.body), 403, "other workspace (own scope) "+p.path)
		// A user token is not a runner credential.
		expect(t, do(t, e.s, p.method, p.path, e.u.Token, p.body), 401, "user token "+p.path)
	}
	expect(t, do(t, e.s, "GET", path+"/approvals/n", sib.Credential, nil), 403, "sibling approval read")
	expect(t, do(t, e.s, "GET", path+"/approvals/n", bex.Credential, nil), 403, "other workspace approval read")
	// A well-formed lease of a run that exists nowhere: 404 for anyone.
	ghost := "/api/runtime/worker/leases/01ARZ3NDEKTSV4RRFFQ69G5FAV.1/heartbeat"
	expect(t, do(t, e.s, "POST", ghost, e.ex.Credential, fence), 404, "no such lease")
	expect(t, do(t, e.s, "POST", ghost, bex.Credential, fence), 404, "no such lease, other workspace")
	// A node that exists is no way around it either.
	if _, err := e.runner.RaiseLeaseApproval(ctx, l.ID, sdk.LeaseApprovalRequest{Fence: l.Fence, NodeKey: "held", Tool: "Bash"}); err != nil {
		t.Fatal(err)
	}
	expect(t, do(t, e.s, "POST", path+"/approvals", sib.Credential, fmt.Sprintf(`{"fence":%d,"node_key":"held","tool":"Bash"}`, l.Fence)), 403, "sibling raising an existing node")
	expect(t, do(t, e.s, "GET", path+"/approvals/held", sib.Credential, nil), 403, "sibling reading an existing node")
	// Capabilities: a tag or an agent the executor lacks is refused.
	_, _, err = sibling.ClaimLease(ctx, sdk.WorkerClaimRequest{Tags: []string{"gpu"}})
	wantCode(t, err, 403, sdk.CodeForbidden)
	_, _, err = e.runner.ClaimLease(ctx, sdk.WorkerClaimRequest{Agents: []string{"codex"}})
	wantCode(t, err, 403, sdk.CodeForbidden)
	// The lease token: its own lease only, never a claim.
	tok := e.s.Client(l.Token)
	if got, err := tok.LeaseByToken(ctx); err != nil || got.ID != l.ID || got.Token != "" {
		t.Fatalf("by token: %+v %v", got, err)
	}
	if _, err := tok.HeartbeatLease(ctx, l.ID, l.Fence); err != nil {
		t.Fatalf("heartbeat with the lease token: %v", err)
	}
	_, _, err = tok.ClaimLease(ctx, sdk.WorkerClaimRequest{})
	wantCode(t, err, 403, sdk.CodeForbidden)
	_, err = e.runner.LeaseByToken(ctx)
	wantCode(t, err, 403, sdk.CodeForbidden)
	// A runner credential is no user and no daemon: every other route
	// refuses it with 403 (a valid credential, not allowed there); a
	// forged one is 401 as anywhere.
	for _, p := range []struct{ method, path, body string }{
		{"GET", "/api/workflow-runs", ""},
		{"POST", "/api/workflow-runs", `{"agent":"shell","prompt":"x"}`},
		{"POST", "/api/workflow-runs/" + l.RunID + "/cancel", ""},
		{"POST", "/api/managed-executors", `{"name":"x"}`},
		{"GET", "/api/resources/" + e.u.Workspace + "/sessions", ""},
		{"POST", "/api/runtime/agent-sessions/sync", `{}`},
		{"GET", "/api/runtime/install", ""},
	} {
		var body any
		if p.body != "" {
			body = p.body
		}
		expect(t, do(t, e.s, p.method, p.path, e.ex.Credential, body), 403, "runner credential on "+p.path)
		expect(t, do(t, e.s, p.method, p.path, l.Token, body), 403, "lease token on "+p.path)
		expect(t, do(t, e.s, p.method, p.path, sdk.RunnerCredentialPrefix+"forged", body), 401, "forged runner credential on "+p.path)
	}
	// A plain member cannot create, rotate or delete executors.
	m := e.s.AddMember(e.u.Workspace, "member@example.com", sdk.RoleMember)
	_, err = m.Client.CreateManagedExecutor(ctx, e.u.Workspace, sdk.ManagedExecutorCreateRequest{Name: "mine"})
	wantCode(t, err, 403, sdk.CodeForbidden)
	_, err = m.Client.RotateManagedExecutorCredential(ctx, e.u.Workspace, e.ex.ID)
	wantCode(t, err, 403, sdk.CodeForbidden)
	// Rotation: the old credential stops at once, the new one works.
	rot, err := e.u.Client.RotateManagedExecutorCredential(ctx, e.u.Workspace, e.ex.ID)
	if err != nil || rot.Credential == "" || rot.Credential == e.ex.Credential {
		t.Fatalf("rotate: %+v %v", rot, err)
	}
	_, err = e.runner.WorkerIdentity(ctx)
	wantCode(t, err, 401, sdk.CodeUnauthenticated)
	if _, err := e.s.Client(rot.Credential).HeartbeatLease(ctx, l.ID, l.Fence); err != nil {
		t.Fatalf("the rotated credential keeps the executor's lease: %v", err)
	}
	// Tags replace the capabilities; deletion stops the credential.
	if got, err := e.u.Client.SetManagedExecutorTags(ctx, e.u.Workspace, sib.ID, []string{"gpu", "linux", "gpu"}); err != nil || strings.Join(got.Tags, ",") != "gpu,linux" {
		t.Fatalf("tags: %+v %v", got, err)
	}
	if err := e.u.Client.DeleteManagedExecutor(ctx, e.u.Workspace, sib.ID); err != nil {
		t.Fatal(err)
	}
	_, err = sibling.WorkerIdentity(ctx)
	wantCode(t, err, 401, sdk.CodeUnauthenticated)
	// Bad input keeps the run's state: an unknown lease, a forged token.
	expect(t, do(t, e.s, "POST", "/api/runtime/worker/leases/nonsense/heartbeat", rot.Credential, fence), 404, "unknown lease")
	_, err = e.s.Client(sdk.LeaseTokenPrefix + "forged").LeaseByToken(ctx)
	wantCode(t, err, 401, sdk.CodeUnauthenticated)
	if r, _ := e.u.Client.GetWorkflowRun(ctx, e.u.Workspace, l.RunID); r.Status != sdk.RunWaitingApproval || r.LeaseID != l.ID {
		t.Fatalf("the run changed: %+v", r)
	}
}

func TestWorkflowPreflightAndBudget(t *testing.T) {
	e := newWFEnv(t, servertest.Options{}, "linux")
	ctx, ws := e.ctx, e.u.Workspace
	pf := "/api/resources/" + ws + "/workflow-runs/preflight"
	for _, c := range []struct{ name, body, code string }{
		{"malformed yaml", `{"yaml_snapshot":"agent: [shell\nprompt: x"}`, "definition_invalid"},
		{"unknown yaml key", `{"yaml_snapshot":"agent: shell\nprompt: x\nstepz: 1"}`, "definition_invalid"},
		{"unknown executor", `{"agent":"shell","prompt":"x","managed_executor_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}`, "managed_executor_unknown"},
		{"unknown definition", `{"agent":"shell","prompt":"x","workflow_definition_id":7}`, "workflow_definition_unknown"},
		{"unknown machine", `{"agent":"shell","prompt":"x","runtime_target_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}`, "runtime_target_unknown"},
		{"no executor has the tag", `{"agent":"shell","prompt":"x","tags":["gpu"]}`, "no_matching_executor"},
		{"no executor has the agent", `{"agent":"codex","prompt":"x"}`, "no_matching_executor"},
		{"no agent", `{"prompt":"x"}`, "agent_missing"},
	} {
		a := expect(t, do(t, e.s, "POST", pf, e.u.Token, c.body), 422, c.name)
		if a.errCode() != sdk.CodeNotRunnable || !strings.Contains(string(a.Body), `"code":"`+c.code+`"`) {
			t.Errorf("%s: %s", c.name, a.Body)
		}
		// The same request creates nothing.
		expect(t, do(t, e.s, "POST", "/api/workflow-runs", e.u.Token, strings.Replace(c.body, `"workflow_definition_id":7`, `"workflow_definition_id":"7"`, 1)), 422, "create: "+c.name)
	}
	if runs, _ := e.u.Client.ListWorkflowRuns(ctx, ws, ""); len(runs) != 0 {
		t.Fatalf("refused requests created runs: %+v", runs)
	}
	ok := expect(t, do(t, e.s, "POST", pf, e.u.Token, `{"yaml_snapshot":"agent: shell\nprompt: make test\ntags: [linux]\n"}`), 200, "runnable")
	if dataOf(ok)["runnable"] != true {
		t.Fatalf("%s", ok.Body)
	}
	// A run from a session is linked to it.
	sess := expect(t, do(t, e.s, "POST", "/api/resources/"+ws+"/sessions", e.u.Token, `{"title":"fix","source_kind":"manual"}`), 201, "session")
	sid := dataOf(sess)["id"].(string)
	att := expect(t, do(t, e.s, "POST", "/api/resources/"+ws+"/sessions/"+sid+"/run-attempts", e.u.Token, `{"agent":"shell","prompt":"again"}`), 201, "run attempt")
	if d := dataOf(att); d["session_id"] != sid || d["status"] != "queued" {
		t.Fatalf("run attempt: %s", att.Body)
	}
	// Budget: usage past the cap blocks new runs before they start.
	l := e.claim(t, e.runner, 5)
	if _, err := e.runner.CompleteLease(ctx, l.ID, sdk.LeaseCompleteRequest{Fence: l.Fence, Status: sdk.RunSucceeded, Usage: &sdk.RunUsage{TotalTokens: 1, CostUSD: "1.00"}}); err != nil {
		t.Fatal(err)
	}
	expect(t, do(t, e.s, "PATCH", "/api/workspaces/"+ws, e.u.Token, `{"budget_policy":{"hard_cap_usd":"1.00"}}`), 200, "cap")
	blocked := e.queue(t, sdk.WorkflowRunCreateRequest{})
	if blocked.Status != sdk.RunBlocked || blocked.BlockedReason != "hard_cap_exceeded" {
		t.Fatalf("over the cap: %+v", blocked)
	}
	if _, ok, err := e.runner.ClaimLease(ctx, sdk.WorkerClaimRequest{WaitSeconds: 0}); ok || err != nil {
		t.Fatalf("a blocked run was claimed: %v %v", ok, err)
	}
	a := expect(t, do(t, e.s, "POST", pf, e.u.Token, `{"agent":"shell","prompt":"x"}`), 422, "preflight over the cap")
	if !strings.Contains(string(a.Body), "hard_cap_exceeded") {
		t.Fatalf("%s", a.Body)
	}
	expect(t, do(t, e.s, "PATCH", "/api/workflow-runs/"+blocked.ID, e.u.Token, `{"status":"queued"}`), 200, "still blocked")
	if r, _ := e.u.Client.GetWorkflowRun(ctx, ws, blocked.ID); r.Status != sdk.RunBlocked {
		t.Fatalf("queued past the cap: %s", r.Status)
	}
	expect(t, do(t, e.s, "PATCH", "/api/workspaces/"+ws, e.u.Token, `{"budget_policy":{"hard_cap_usd":"5.00"}}`), 200, "raise the cap")
	q := expect(t, do(t, e.s, "PATCH", "/api/workflow-runs/"+blocked.ID, e.u.Token, `{"status":"queued"}`), 200, "queued")
	if dataOf(q)["status"] != "queued" {
		t.Fatalf("%s", q.Body)
	}
	expect(t, do(t, e.s, "PATCH", "/api/workflow-runs/"+l.RunID, e.u.Token, `{"status":"queued"}`), 409, "requeue a finished run")
}

// TestWorkerClaimRace: 50 claimers over HTTP race for 10 runs; each run
// has exactly one holder. On PostgreSQL the claimers are split across two
// server replicas on one database.
func TestWorkerClaimRace(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testClaimRace(t, servertest.Options{}, false) })
	t.Run("postgres-two-replicas", func(t *testing.T) {
		storetest.Available(t)
		url := storetest.PostgresURL(t)
		testClaimRace(t, servertest.Options{DatabaseURL: url, DataDir: filepath.Join(t.TempDir(), "data")}, true)
	})
}

func testClaimRace(t *testing.T, o servertest.Options, twoReplicas bool) {
	e := newWFEnv(t, o)
	servers := []*servertest.Server{e.s}
	if twoReplicas {
		servers = append(servers, servertest.Start(t, o))
	}
	var creds []string
	for i := 0; i < 5; i++ {
		ex, err := e.u.Client.CreateManagedExecutor(e.ctx, e.u.Workspace, sdk.ManagedExecutorCreateRequest{Name: fmt.Sprintf("r%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		creds = append(creds, ex.Credential)
	}
	// The claimers wait first, so the runs arrive while they long-poll.
	var mu sync.Mutex
	won := map[string][]int64{}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := servers[i%len(servers)].Client(creds[i%len(creds)])
			l, ok, err := c.ClaimLease(e.ctx, sdk.WorkerClaimRequest{WaitSeconds: 8})
			// A 503 says "retry" (the shared PostgreSQL can run out of
			// connections while other packages' tests use it): a worker
			// does retry, and the invariant is about holders, not 503s.
			for try := 0; try < 5 && sdk.IsCode(err, sdk.CodeUnavailable); try++ {
				time.Sleep(time.Second)
				l, ok, err = c.ClaimLease(e.ctx, sdk.WorkerClaimRequest{WaitSeconds: 2})
			}
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				mu.Lock()
				won[l.RunID] = append(won[l.RunID], l.Fence)
				mu.Unlock()
			}
		}(i)
	}
	time.Sleep(500 * time.Millisecond)
	for i := 0; i < 10; i++ {
		e.queue(t, sdk.WorkflowRunCreateRequest{})
	}
	wg.Wait()
	if len(won) != 10 {
		t.Fatalf("%d runs claimed, want 10", len(won))
	}
	for id, fences := range won {
		if len(fences) != 1 || fences[0] != 1 {
			t.Fatalf("run %s claimed with fences %v", id, fences)
		}
	}
	runs, err := e.u.Client.ListWorkflowRuns(e.ctx, e.u.Workspace, sdk.RunLeased)
	if err != nil || len(runs) != 10 {
		t.Fatalf("leased: %d %v", len(runs), err)
	}
}
