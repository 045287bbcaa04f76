package api_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// preflightOf posts a preflight request and reads its answer.
func preflightOf(t *testing.T, e *wfEnv, body string, status int) sdk.WorkflowRunPreflight {
	t.Helper()
	a := expect(t, do(t, e.s, "POST", "/api/resources/"+e.u.Workspace+"/workflow-runs/preflight", e.u.Token, body), status, "preflight "+body)
	var out struct {
		Data sdk.WorkflowRunPreflight `json:"data"`
	}
	if err := json.Unmarshal(a.Body, &out); err != nil {
		t.Fatal(err)
	}
	return out.Data
}

func advisedUnserved(p sdk.WorkflowRunPreflight, pool string) bool {
	for _, a := range p.Advisories {
		if a.Code == "runner_pool_unserved" && a.Field == "/runner_pool" && strings.Contains(a.Message, pool) {
			return true
		}
	}
	return false
}

// TestPreflightSaysWhenNoWorkerServesThePool: a run some executor fits,
// but whose runner pool no worker of a fitting executor has claimed for
// lately, is still runnable, with advice saying so; a claim for the pool
// (by a fitting executor's worker, not another's) ends the advice. A run
// no executor fits is refused as before, with no advice on top.
func TestPreflightSaysWhenNoWorkerServesThePool(t *testing.T) {
	e := newWFEnv(t, servertest.Options{}, "linux")
	other, err := e.u.Client.CreateManagedExecutor(e.ctx, e.u.Workspace, sdk.ManagedExecutorCreateRequest{Name: "arm-1", Tags: []string{"arm"}, Agents: []string{"shell"}})
	if err != nil {
		t.Fatal(err)
	}
	plain := `{"agent":"shell","prompt":"make test","tags":["linux"]}`
	gpu := `{"agent":"shell","prompt":"make test","tags":["linux"],"runner_pool":"gpu"}`
	p := preflightOf(t, e, plain, 200)
	if !p.Runnable || len(p.Issues) != 0 || !advisedUnserved(p, "default runner pool") {
		t.Fatalf("before any worker: %+v", p)
	}
	// The other executor's worker polls the default pool: once that is
	// recorded, runs it fits count the pool as served, but this run,
	// which it does not fit, still does not.
	if _, _, err := e.s.Client(other.Credential).ClaimLease(e.ctx, sdk.WorkerClaimRequest{WaitSeconds: 0}); err != nil {
		t.Fatal(err)
	}
	armRun := `{"agent":"shell","prompt":"make test","tags":["arm"]}`
	waitUntil(t, "the arm worker's claim to be recorded", func() bool { return len(preflightOf(t, e, armRun, 200).Advisories) == 0 })
	if p := preflightOf(t, e, plain, 200); !advisedUnserved(p, "default runner pool") {
		t.Fatalf("a worker the run does not fit served its pool: %+v", p)
	}
	// A fitting worker polls the default pool.
	if _, _, err := e.runner.ClaimLease(e.ctx, sdk.WorkerClaimRequest{WaitSeconds: 0}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the default pool to count as served", func() bool { return len(preflightOf(t, e, plain, 200).Advisories) == 0 })
	// Another pool is not served by default-pool workers.
	if p := preflightOf(t, e, gpu, 200); !p.Runnable || !advisedUnserved(p, `runner pool "gpu"`) {
		t.Fatalf("gpu pool before a gpu worker: %+v", p)
	}
	if _, _, err := e.runner.ClaimLease(e.ctx, sdk.WorkerClaimRequest{RunnerPool: "gpu", WaitSeconds: 0}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the gpu pool to count as served", func() bool { return len(preflightOf(t, e, gpu, 200).Advisories) == 0 })
	// Not runnable at all: the issue, no advice about pools.
	if p := preflightOf(t, e, `{"agent":"shell","prompt":"x","tags":["sparc"]}`, 422); p.Runnable || len(p.Advisories) != 0 || len(p.Issues) != 1 || p.Issues[0].Code != "no_matching_executor" {
		t.Fatalf("no executor fits: %+v", p)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
