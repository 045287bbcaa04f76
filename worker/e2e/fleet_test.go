package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// Twenty runs queued for three worker processes: each run succeeds
// exactly once, on its first attempt, with its evidence.
func TestTwentyRunsThreeWorkers(t *testing.T) {
	p := newPlane(t, servertest.Options{})
	_, cred := p.executor(p.owner, "fleet", nil, nil)
	repo := gitRepo(t, "app")
	m := newMachine(t, nil)
	const n = 20
	var runs []sdk.WorkflowRun
	for i := range n {
		runs = append(runs, p.queue(sdk.WorkflowRunCreateRequest{Agent: "shell", Prompt: fmt.Sprintf("echo %d > out-%d.txt", i, i), Workdir: "app"}))
	}
	var workers []*workerProc
	for i := range 3 {
		workers = append(workers, m.startWorker(fmt.Sprintf("w%d", i), "--server", p.srv.URL, "--credential-file", cred, "--workdir", repo, "--agents", "shell"))
	}
	for i, r := range runs {
		got := p.waitRun(r.ID, "the end", 5*time.Minute, func(r sdk.WorkflowRun) bool { return sdk.RunTerminal(r.Status) })
		if got.Status != sdk.RunSucceeded || got.Attempt != 1 || got.SessionID == "" || got.ExitCode == nil || *got.ExitCode != 0 {
			t.Fatalf("run %d: %+v", i, got)
		}
		if want := fmt.Sprintf("out-%d.txt", i); !strings.Contains(got.DiffSummary, want) {
			t.Errorf("run %d: diff summary %q lacks %s", i, got.DiffSummary, want)
		}
		if len(got.Checkpoints) == 0 {
			t.Errorf("run %d: no checkpoints", i)
		}
	}
	// Each run was finished by exactly one worker, once.
	seen := map[string]string{}
	busy := 0
	for _, w := range workers {
		rs := w.results()
		if len(rs) > 0 {
			busy++
		}
		for _, l := range rs {
			if l.Status != "succeeded" {
				t.Errorf("worker %s: %+v", w.name, l)
			}
			if prev, ok := seen[l.RunID]; ok {
				t.Errorf("run %s finished by %s and %s", l.RunID, prev, w.name)
			}
			seen[l.RunID] = w.name
		}
	}
	if len(seen) != n {
		t.Fatalf("%d runs reported finished, want %d", len(seen), n)
	}
	t.Logf("%d of 3 workers took runs", busy)
	// worker stop ends each one cleanly: the lock is absent afterwards.
	for _, w := range workers {
		r := m.must("worker", "stop", "--worker-profile", w.name, "--json")
		if st := decodeJSON[map[string]any](t, r.stdout); st["action"] != "stopped" {
			t.Fatalf("stop %s: %s", w.name, r.stdout)
		}
		if code := w.exited(time.Minute); code != 0 {
			t.Fatalf("worker %s exited %d:\n%s", w.name, code, w.log())
		}
		d := decodeJSON[map[string]any](t, m.run("worker", "doctor", "--worker-profile", w.name, "--json").stdout)
		if d["processLock"] != "absent" {
			t.Fatalf("after stop: processLock %v", d["processLock"])
		}
	}
}

// A worker killed with -9 mid-run leaves a lease that expires; another
// worker takes the run again and finishes it.
func TestKilledWorkerLeaseExpiresAndAnotherFinishes(t *testing.T) {
	p := newPlane(t, servertest.Options{LeaseTTL: 3 * time.Second})
	_, cred := p.executor(p.owner, "fleet", nil, nil)
	repo := gitRepo(t, "app")
	m := newMachine(t, nil)
	args := []string{"--server", p.srv.URL, "--credential-file", cred, "--workdir", repo, "--agents", "shell"}
	a := m.startWorker("a", args...)
	run := p.queue(sdk.WorkflowRunCreateRequest{Agent: "shell", Prompt: "sleep 4; echo finished > slow.txt", Workdir: "app"})
	first := p.waitRun(run.ID, "running", 2*time.Minute, func(r sdk.WorkflowRun) bool { return r.Status == sdk.RunRunning })
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.exited(time.Minute)
	// The killed worker's lock is stale: doctor says so, stop clears it.
	d := decodeJSON[map[string]any](t, m.run("worker", "doctor", "--worker-profile", "a", "--json").stdout)
	if d["processLock"] != "stale" {
		t.Fatalf("after kill -9: processLock %v", d["processLock"])
	}
	b := m.startWorker("b", args...)
	done := p.waitRun(run.ID, "another worker to finish it", 3*time.Minute, func(r sdk.WorkflowRun) bool { return sdk.RunTerminal(r.Status) })
	// Attempt 2, or more if a loaded machine let a heartbeat miss the
	// short TTL before the kill: each expiry is counted.
	if done.Status != sdk.RunSucceeded || done.Attempt < 2 || done.Attempt <= first.Attempt || done.SessionID == first.SessionID || !strings.Contains(done.DiffSummary, "slow.txt") {
		t.Fatalf("first %+v\nfinished %+v", first, done)
	}
	if rs := b.results(); len(rs) != 1 || rs[0].RunID != run.ID || rs[0].Status != "succeeded" {
		t.Fatalf("worker b: %+v", rs)
	}
	r := m.run("worker", "stop", "--worker-profile", "a", "--json")
	if st := decodeJSON[map[string]any](t, r.stdout); r.code != 0 || st["action"] != "cleared-stale" {
		t.Fatalf("stop a stale worker: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := m.run("worker", "stop", "--worker-profile", "a", "--json"); r.code != 3 {
		t.Fatalf("stop with no worker: exit %d %s", r.code, r.stdout)
	}
}

// Cancelling a running run reaches the holder on a heartbeat: it stops
// the agent (the daemon's session is killed) and the run ends cancelled.
func TestCancelStopsTheAgent(t *testing.T) {
	// Heartbeats every 3 s: cancel arrives within one of them.
	p := newPlane(t, servertest.Options{LeaseTTL: 9 * time.Second})
	_, cred := p.executor(p.owner, "fleet", nil, nil)
	repo := gitRepo(t, "app")
	m := newMachine(t, nil)
	w := m.startWorker("w", "--server", p.srv.URL, "--credential-file", cred, "--workdir", repo, "--agents", "shell")
	run := p.queue(sdk.WorkflowRunCreateRequest{Agent: "shell", Prompt: "sleep 300", Workdir: "app"})
	running := p.waitRun(run.ID, "running", 2*time.Minute, func(r sdk.WorkflowRun) bool { return r.Status == sdk.RunRunning })
	if _, err := p.owner.Client.CancelWorkflowRun(ctxT(t), p.owner.Workspace, run.ID); err != nil {
		t.Fatal(err)
	}
	done := p.waitRun(run.ID, "cancelled", time.Minute, func(r sdk.WorkflowRun) bool { return sdk.RunTerminal(r.Status) })
	if done.Status != sdk.RunCancelled {
		t.Fatalf("after cancel: %+v", done)
	}
	c, _, err := controlclient.FromHome(home.Dir(m.home), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	si, err := c.Session(context.Background(), running.SessionID)
	if err != nil || si.Status != "killed" {
		t.Fatalf("the agent's session: %+v %v", si, err)
	}
	if rs := w.results(); len(rs) != 1 || rs[0].Status != "cancelled" {
		t.Fatalf("worker: %+v", rs)
	}
}

// run-once runs exactly the lease its token names; an unknown token, a
// spent one, and a run it cannot do each get a clear answer.
func TestRunOnceWithLeaseToken(t *testing.T) {
	p := newPlane(t, servertest.Options{})
	ex, cred := p.executor(p.owner, "orchestrator", nil, nil)
	repo := gitRepo(t, "app")
	m := newMachine(t, nil)
	credBytes, _ := os.ReadFile(cred)
	orchestrator := p.srv.Client(strings.TrimSpace(string(credBytes)))

	run := p.queue(sdk.WorkflowRunCreateRequest{Agent: "shell", Prompt: "echo once | tee once.txt", Workdir: "app"})
	l, ok, err := orchestrator.ClaimLease(ctxT(t), sdk.WorkerClaimRequest{WaitSeconds: 5})
	if err != nil || !ok || l.RunID != run.ID || !strings.HasPrefix(l.Token, sdk.LeaseTokenPrefix) || l.ExecutorID != ex.ID {
		t.Fatalf("claim: %+v %v %v", l, ok, err)
	}
	flags := []string{"--server", p.srv.URL, "--workdir", repo, "--agents", "shell", "--json"}
	r := m.run(append([]string{"worker", "run-once", "--lease", l.Token}, flags...)...)
	if r.code != 0 {
		t.Fatalf("run-once: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	out := decodeJSON[struct {
		leaseLine
		Cleanup struct {
			Lease         string `json:"lease"`
			DaemonSession string `json:"daemon_session"`
		} `json:"cleanup"`
	}](t, r.stdout)
	if out.Status != "succeeded" || out.RunID != run.ID || out.SessionID == "" || !strings.Contains(out.DiffSummary, "once.txt") {
		t.Fatalf("run-once: %s", r.stdout)
	}
	if !strings.Contains(r.stderr, "cleanup: lease completed") {
		t.Fatalf("no cleanup on stderr: %s", r.stderr)
	}
	if got := p.run(run.ID); got.Status != sdk.RunSucceeded || got.SessionID != out.SessionID {
		t.Fatalf("run: %+v", got)
	}
	if strings.Contains(r.stdout+r.stderr, l.Token) {
		t.Fatal("run-once printed the lease token")
	}
	// The session's events are on the run's history, beside the server's.
	evs, err := p.owner.Client.WorkflowRunEvents(ctxT(t), p.owner.Workspace, run.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range evs {
		kinds[e.Kind]++
	}
	if kinds["terminal-output"] == 0 || kinds["checkpoint"] == 0 || kinds[sdk.RunEventCompleted] != 1 {
		t.Fatalf("run history kinds: %v", kinds)
	}

	// The spent token, and one the server never issued.
	if r := m.run(append([]string{"worker", "run-once", "--lease", l.Token}, flags...)...); r.code != 7 || !strings.Contains(r.stderr, "expired or ended") {
		t.Fatalf("spent token: exit %d %s", r.code, r.stderr)
	}
	if r := m.run(append([]string{"worker", "run-once", "--lease", "rwl_unknown"}, flags...)...); r.code != 6 || !strings.Contains(r.stderr, "lease token") {
		t.Fatalf("unknown token: exit %d %s", r.code, r.stderr)
	}
	if r := m.run(append([]string{"worker", "run-once", "--lease", "not-a-token"}, flags...)...); r.code != 2 {
		t.Fatalf("malformed token: exit %d %s", r.code, r.stderr)
	}

	// A run naming a directory this worker does not have, and one for an
	// agent it does not offer: given back with the reason, still queued.
	for _, req := range []sdk.WorkflowRunCreateRequest{
		{Agent: "shell", Prompt: "true", Workdir: filepath.Join(t.TempDir(), "elsewhere")},
		{Agent: "codex", Prompt: "true", Workdir: "app"},
	} {
		bad := p.queue(req)
		l, ok, err := orchestrator.ClaimLease(ctxT(t), sdk.WorkerClaimRequest{WaitSeconds: 5})
		if err != nil || !ok || l.RunID != bad.ID {
			t.Fatalf("claim %+v: %+v %v %v", req, l, ok, err)
		}
		r := m.run(append([]string{"worker", "run-once", "--lease", l.Token}, flags...)...)
		if r.code != 5 || !strings.Contains(r.stdout, "released") {
			t.Fatalf("run-once of %+v: exit %d\n%s\n%s", req, r.code, r.stdout, r.stderr)
		}
		got := p.run(bad.ID)
		if got.Status != sdk.RunQueued || got.SessionID != "" {
			t.Fatalf("after release: %+v", got)
		}
		p.owner.Client.CancelWorkflowRun(ctxT(t), p.owner.Workspace, bad.ID)
	}
}
