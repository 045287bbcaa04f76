package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

type wfStore interface {
	Store
	Workflows
}

type wfFix struct {
	s   wfStore
	ctx context.Context
	ws  string
	now time.Time
}

func newWFFix(t *testing.T, s wfStore) *wfFix {
	t.Helper()
	ctx := context.Background()
	u, _, err := s.EnsureUser(ctx, "owner@example.com")
	if err != nil {
		t.Fatal(err)
	}
	f := &wfFix{s: s, ctx: ctx, ws: newID(), now: time.Now().UTC().Truncate(time.Millisecond)}
	if err := s.CreateWorkspace(ctx, Workspace{ID: f.ws, Name: "w", PolicyMode: "open_access", CreatedAt: f.now, UpdatedAt: f.now}, u.ID); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *wfFix) run(t *testing.T, mut func(*WorkflowRun)) WorkflowRun {
	t.Helper()
	r := WorkflowRun{ID: newID(), WorkspaceID: f.ws, Status: "queued", Agent: "shell", Tags: []string{}, MaxAttempts: 3,
		Spec: json.RawMessage(`{"prompt":"hi"}`), CreatedBy: "user:1", CreatedAt: f.now, UpdatedAt: f.now}
	if mut != nil {
		mut(&r)
	}
	if err := f.s.CreateRun(f.ctx, &r, []RunEvent{{Kind: "run.created", Actor: "user:1", CreatedAt: f.now}}, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *wfFix) grant(exp time.Duration) LeaseGrant {
	return LeaseGrant{LeaseID: newID(), TokenHash: newID(), Now: f.now, ExpiresAt: f.now.Add(exp), Actor: "executor:x"}
}

func TestWorkflowExecutors(t *testing.T) { eachEngine(t, testWorkflowExecutors) }

func testWorkflowExecutors(t *testing.T, e engine) {
	f := newWFFix(t, e.open(t))
	ex := ManagedExecutor{ID: newID(), WorkspaceID: f.ws, Name: "ci", Tags: []string{"linux", "gpu"}, Agents: []string{"shell"}, TokenHash: "h1", TokenPrefix: "rwc_abc", CreatedBy: "user:1", CreatedAt: f.now}
	if err := f.s.CreateExecutor(f.ctx, ex, AuditEntry{WorkspaceID: f.ws, Action: "executor.create"}); err != nil {
		t.Fatal(err)
	}
	dup := ex
	dup.ID, dup.TokenHash = newID(), "h2"
	if err := f.s.CreateExecutor(f.ctx, dup, AuditEntry{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("same name: %v, want ErrConflict", err)
	}
	got, err := f.s.ExecutorByTokenHash(f.ctx, "h1")
	if err != nil || got.ID != ex.ID || len(got.Tags) != 2 || got.Agents[0] != "shell" {
		t.Fatalf("by hash: %+v %v", got, err)
	}
	// Rotation: the old hash stops at once.
	if _, err := f.s.UpdateExecutor(f.ctx, f.ws, ex.ID, func(m *ManagedExecutor) error { m.TokenHash = "h3"; r := f.now; m.RotatedAt = &r; return nil }, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.ExecutorByTokenHash(f.ctx, "h1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old hash after rotation: %v", err)
	}
	if got, err := f.s.ExecutorByTokenHash(f.ctx, "h3"); err != nil || got.RotatedAt == nil {
		t.Fatalf("new hash: %+v %v", got, err)
	}
	if err := f.s.TouchExecutor(f.ctx, ex.ID, f.now); err != nil {
		t.Fatal(err)
	}
	// The pools its workers serve: the default one and "gpu", seen again
	// later; a touch naming no pool records none.
	if seen, err := f.s.PoolSeen(f.ctx, f.ws, ""); err != nil || len(seen) != 0 {
		t.Fatalf("pools before any claim: %v %v", seen, err)
	}
	later := f.now.Add(90 * time.Second)
	for _, touch := range []struct {
		at    time.Time
		pools []string
	}{{f.now, []string{"", "gpu"}}, {later, []string{"gpu"}}} {
		if err := f.s.TouchExecutor(f.ctx, ex.ID, touch.at, touch.pools...); err != nil {
			t.Fatal(err)
		}
	}
	for pool, want := range map[string]time.Time{"": f.now, "gpu": later} {
		seen, err := f.s.PoolSeen(f.ctx, f.ws, pool)
		if err != nil || len(seen) != 1 || !seen[ex.ID].Equal(want) {
			t.Fatalf("pool %q seen %v %v, want %s", pool, seen, err, want)
		}
	}
	if seen, err := f.s.PoolSeen(f.ctx, f.ws, "arm"); err != nil || len(seen) != 0 {
		t.Fatalf("a pool never served: %v %v", seen, err)
	}
	if seen, err := f.s.PoolSeen(f.ctx, newID(), "gpu"); err != nil || len(seen) != 0 {
		t.Fatalf("another workspace sees the pool: %v %v", seen, err)
	}
	// Another workspace does not see it.
	if _, err := f.s.Executor(f.ctx, newID(), ex.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other workspace: %v", err)
	}
	// Deletion clears the credential and frees the name.
	if _, err := f.s.UpdateExecutor(f.ctx, f.ws, ex.ID, func(m *ManagedExecutor) error { d := f.now; m.DeletedAt = &d; return nil }, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.ExecutorByTokenHash(f.ctx, "h3"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted executor's hash: %v", err)
	}
	if list, err := f.s.Executors(f.ctx, f.ws); err != nil || len(list) != 0 {
		t.Fatalf("list after delete: %v %v", list, err)
	}
	if err := f.s.CreateExecutor(f.ctx, dup, AuditEntry{}); err != nil {
		t.Fatalf("name reused after delete: %v", err)
	}
	if _, err := f.s.UpdateExecutor(f.ctx, f.ws, ex.ID, func(*ManagedExecutor) error { return nil }, AuditEntry{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update deleted: %v", err)
	}
}

func TestWorkflowClaimFilters(t *testing.T) { eachEngine(t, testWorkflowClaimFilters) }

func testWorkflowClaimFilters(t *testing.T, e engine) {
	f := newWFFix(t, e.open(t))
	gpu := f.run(t, func(r *WorkflowRun) { r.Tags = []string{"gpu"} })
	pinned := f.run(t, func(r *WorkflowRun) { r.ExecutorPin = "E2" })
	codex := f.run(t, func(r *WorkflowRun) { r.Agent = "codex" })
	elsewhere := f.run(t, func(r *WorkflowRun) { r.Workdir = "other-repo" })
	draft := f.run(t, func(r *WorkflowRun) { r.Status = "draft" })
	_ = draft
	// E1 offers shell only, tags linux, workdir app: nothing fits.
	f1 := ClaimFilter{WorkspaceID: f.ws, ExecutorID: "E1", Agents: []string{"shell"}, Tags: []string{"linux"}, Workdirs: []string{"app"}}
	if _, err := f.s.ClaimRun(f.ctx, f1, f.grant(time.Minute)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("nothing should match: %v", err)
	}
	// Another workspace's claimer sees none of them.
	if _, err := f.s.ClaimRun(f.ctx, ClaimFilter{WorkspaceID: newID(), ExecutorID: "E2"}, f.grant(time.Minute)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other workspace: %v", err)
	}
	// In creation order: an empty filter list means "any", so a filter can
	// also fit a run made for a later one; the oldest fitting run is the
	// one it must get.
	want := []struct {
		id string
		cf ClaimFilter
	}{
		{gpu.ID, ClaimFilter{WorkspaceID: f.ws, ExecutorID: "E1", Tags: []string{"gpu", "linux"}}},
		{pinned.ID, ClaimFilter{WorkspaceID: f.ws, ExecutorID: "E2"}},
		{codex.ID, ClaimFilter{WorkspaceID: f.ws, ExecutorID: "E1", Agents: []string{"codex"}}},
		{elsewhere.ID, ClaimFilter{WorkspaceID: f.ws, ExecutorID: "E1", Workdirs: []string{"other-repo"}}},
	}
	for _, w := range want {
		id, cf := w.id, w.cf
		g := f.grant(time.Minute)
		r, err := f.s.ClaimRun(f.ctx, cf, g)
		if err != nil || r.ID != id {
			t.Fatalf("claim with %+v: got %s %v, want %s", cf, r.ID, err, id)
		}
		if r.Status != "leased" || r.Fence != 1 || r.Attempt != 1 || r.LeaseID != g.LeaseID || r.ExecutorID != cf.ExecutorID {
			t.Fatalf("claimed run: %+v", r)
		}
		if got, err := f.s.RunByLeaseHash(f.ctx, g.TokenHash); err != nil || got.ID != id {
			t.Fatalf("by lease hash: %v %v", got.ID, err)
		}
	}
	if n, _, err := f.s.QueuedHead(f.ctx, f.ws); err != nil || n != 0 {
		t.Fatalf("queued after claims: %d %v", n, err)
	}
	evs, err := f.s.RunEvents(f.ctx, gpu.ID, 0, 0)
	if err != nil || len(evs) != 2 || evs[0].Kind != "run.created" || evs[1].Kind != "lease.granted" {
		t.Fatalf("history: %+v %v", evs, err)
	}
}

func TestWorkflowLeaseExpiry(t *testing.T) { eachEngine(t, testWorkflowLeaseExpiry) }

func testWorkflowLeaseExpiry(t *testing.T, e engine) {
	f := newWFFix(t, e.open(t))
	r := f.run(t, func(r *WorkflowRun) { r.MaxAttempts = 2 })
	cf := ClaimFilter{WorkspaceID: f.ws, ExecutorID: "E1"}
	g := f.grant(time.Second)
	if _, err := f.s.ClaimRun(f.ctx, cf, g); err != nil {
		t.Fatal(err)
	}
	// Not yet due.
	if out, err := f.s.ExpireLeases(f.ctx, f.now, 10); err != nil || len(out) != 0 {
		t.Fatalf("early expiry: %v %v", out, err)
	}
	out, err := f.s.ExpireLeases(f.ctx, f.now.Add(2*time.Second), 10)
	if err != nil || len(out) != 1 || out[0].Status != "queued" || out[0].Attempt != 1 || out[0].LeaseID != "" {
		t.Fatalf("first expiry: %+v %v", out, err)
	}
	if _, err := f.s.RunByLeaseHash(f.ctx, g.TokenHash); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired token still finds the run: %v", err)
	}
	g2 := f.grant(time.Second)
	second, err := f.s.ClaimRun(f.ctx, cf, g2)
	if err != nil || second.Fence != 2 || second.Attempt != 2 {
		t.Fatalf("second claim: %+v %v", second, err)
	}
	// A heartbeat through UpdateRun extends the lease; the sweep then
	// leaves it alone.
	later := f.now.Add(10 * time.Second)
	if _, err := f.s.UpdateRun(f.ctx, f.ws, r.ID, func(w *WorkflowRun) ([]RunEvent, error) { w.LeaseExpires = &later; return nil, nil }, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if out, err := f.s.ExpireLeases(f.ctx, f.now.Add(5*time.Second), 10); err != nil || len(out) != 0 {
		t.Fatalf("extended lease expired: %v %v", out, err)
	}
	out, err = f.s.ExpireLeases(f.ctx, f.now.Add(11*time.Second), 10)
	if err != nil || len(out) != 1 || out[0].Status != "failed" || out[0].FinishedAt == nil {
		t.Fatalf("expiry after the last attempt: %+v %v", out, err)
	}
	// A cancelled holder's expiry ends the run cancelled.
	c := f.run(t, nil)
	if _, err := f.s.ClaimRun(f.ctx, cf, f.grant(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.UpdateRun(f.ctx, f.ws, c.ID, func(w *WorkflowRun) ([]RunEvent, error) { w.CancelRequested = true; return nil, nil }, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	out, err = f.s.ExpireLeases(f.ctx, f.now.Add(2*time.Second), 10)
	if err != nil || len(out) != 1 || out[0].Status != "cancelled" {
		t.Fatalf("cancelled expiry: %+v %v", out, err)
	}
	// Blocking.
	f.run(t, nil)
	f.run(t, nil)
	blocked, err := f.s.BlockQueued(f.ctx, f.ws, "hard_cap_exceeded", f.now)
	if err != nil || len(blocked) != 2 || blocked[0].BlockedReason != "hard_cap_exceeded" {
		t.Fatalf("block: %+v %v", blocked, err)
	}
	if list, err := f.s.Runs(f.ctx, f.ws, "blocked", ListOptions{}); err != nil || len(list) != 2 {
		t.Fatalf("blocked list: %d %v", len(list), err)
	}
}

func TestWorkflowApprovals(t *testing.T) { eachEngine(t, testWorkflowApprovals) }

func testWorkflowApprovals(t *testing.T, e engine) {
	f := newWFFix(t, e.open(t))
	r := f.run(t, nil)
	if _, err := f.s.ClaimRun(f.ctx, ClaimFilter{WorkspaceID: f.ws, ExecutorID: "E1"}, f.grant(time.Minute)); err != nil {
		t.Fatal(err)
	}
	a := RunApproval{RunID: r.ID, NodeKey: "n1", WorkspaceID: f.ws, State: "pending", Tool: "Bash", Summary: "rm -rf build", Input: json.RawMessage(`{"command":"rm -rf build"}`), Fence: 1, RequestedAt: f.now, ExpiresAt: f.now.Add(time.Minute)}
	toWaiting := func(w *WorkflowRun) error { w.Status = "waiting-approval"; return nil }
	got, created, err := f.s.RaiseApproval(f.ctx, a, toWaiting, []RunEvent{{Kind: "approval.requested", Actor: "executor:E1"}})
	if err != nil || !created || got.Tool != "Bash" {
		t.Fatalf("raise: %+v %v %v", got, created, err)
	}
	again, created, err := f.s.RaiseApproval(f.ctx, a, func(*WorkflowRun) error { t.Error("check ran for an existing node"); return nil }, nil)
	if err != nil || created || again.NodeKey != "n1" {
		t.Fatalf("raise again: %+v %v %v", again, created, err)
	}
	if cur, _ := f.s.Run(f.ctx, f.ws, r.ID); cur.Status != "waiting-approval" {
		t.Fatalf("run status %s", cur.Status)
	}
	refuse := errors.New("refused")
	if _, _, err := f.s.RaiseApproval(f.ctx, RunApproval{RunID: r.ID, NodeKey: "n2", WorkspaceID: f.ws, State: "pending", RequestedAt: f.now, ExpiresAt: f.now}, func(*WorkflowRun) error { return refuse }, nil); !errors.Is(err, refuse) {
		t.Fatalf("refused raise: %v", err)
	}
	if list, err := f.s.Approvals(f.ctx, r.ID); err != nil || len(list) != 1 {
		t.Fatalf("approvals: %v %v", list, err)
	}
	dec, run, err := f.s.DecideApproval(f.ctx, f.ws, r.ID, "n1", func(x *RunApproval) error {
		x.State, x.DecidedBy = "approved", "user:1"
		d := f.now
		x.DecidedAt = &d
		return nil
	}, func(w *WorkflowRun, pending int) []RunEvent {
		if pending == 0 {
			w.Status = "running"
		}
		return []RunEvent{{Kind: "approval.decided", Actor: "user:1"}}
	}, AuditEntry{WorkspaceID: f.ws, Action: "approval.decide"})
	if err != nil || dec.State != "approved" || run.Status != "running" {
		t.Fatalf("decide: %+v %s %v", dec, run.Status, err)
	}
	if got, err := f.s.Approval(f.ctx, r.ID, "n1"); err != nil || got.DecidedAt == nil || got.DecidedBy != "user:1" {
		t.Fatalf("approval after decision: %+v %v", got, err)
	}
	if _, err := f.s.Approval(f.ctx, r.ID, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown node: %v", err)
	}
	// Appending events is refused when check refuses; the history keeps
	// what was accepted.
	if err := f.s.AppendRunEvents(f.ctx, f.ws, r.ID, func(WorkflowRun) error { return refuse }, []RunEvent{{Kind: "x"}}); !errors.Is(err, refuse) {
		t.Fatalf("refused append: %v", err)
	}
	if err := f.s.AppendRunEvents(f.ctx, f.ws, r.ID, func(WorkflowRun) error { return nil }, []RunEvent{{Kind: "agent-message", Actor: "executor:E1", Data: json.RawMessage(`{"text":"done"}`)}}); err != nil {
		t.Fatal(err)
	}
	evs, err := f.s.RunEvents(f.ctx, r.ID, 0, 0)
	if err != nil || evs[len(evs)-1].Kind != "agent-message" || string(evs[len(evs)-1].Data) != `{"text":"done"}` {
		t.Fatalf("events: %+v %v", evs, err)
	}
	if tail, _ := f.s.RunEvents(f.ctx, r.ID, evs[len(evs)-2].Seq, 0); len(tail) != 1 {
		t.Fatalf("after cursor: %d", len(tail))
	}
}

// TestWorkflowClaimRace: 50 claimers race for 10 runs; every run is taken
// exactly once and 40 claimers get nothing. On PostgreSQL the claimers are
// split across two stores on one database (two replicas).
func TestWorkflowClaimRace(t *testing.T) { eachEngine(t, testWorkflowClaimRace) }

func testWorkflowClaimRace(t *testing.T, e engine) {
	a := e.open(t)
	stores := []wfStore{a}
	if e.name == EnginePostgres {
		stores = append(stores, e.open(t))
	}
	f := newWFFix(t, a)
	runs := map[string]bool{}
	for i := 0; i < 10; i++ {
		runs[f.run(t, nil).ID] = true
	}
	var mu sync.Mutex
	won := map[string]int{}
	fences := map[int64]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	start := make(chan struct{})
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			st := stores[i%len(stores)]
			r, err := st.ClaimRun(f.ctx, ClaimFilter{WorkspaceID: f.ws, ExecutorID: fmt.Sprintf("E%d", i)}, f.grant(time.Minute))
			if errors.Is(err, ErrNotFound) {
				return
			}
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			won[r.ID]++
			fences[r.Fence]++
			mu.Unlock()
		}(i)
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(won) != 10 {
		t.Fatalf("%d runs claimed, want 10: %v", len(won), won)
	}
	for id, n := range won {
		if !runs[id] || n != 1 {
			t.Fatalf("run %s claimed %d times", id, n)
		}
	}
	list, err := a.Runs(f.ctx, f.ws, "leased", ListOptions{})
	if err != nil || len(list) != 10 {
		t.Fatalf("leased runs: %d %v", len(list), err)
	}
	holders := map[string]bool{}
	for _, r := range list {
		if holders[r.ExecutorID] {
			t.Fatalf("executor %s holds two runs", r.ExecutorID)
		}
		holders[r.ExecutorID] = true
	}
}

// TestExecutorPoolsPruned: executor_pools keeps only pools a live
// executor's workers served lately. Deleting the executor deletes its
// pools, a touch racing the delete brings none back, a pool not served
// for poolForgetAfter is forgotten at the executor's next touch, and
// migration 0016 clears the rows earlier deletes left behind.
func TestExecutorPoolsPruned(t *testing.T) { eachEngine(t, testExecutorPoolsPruned) }

func testExecutorPoolsPruned(t *testing.T, e engine) {
	s := e.open(t)
	f := newWFFix(t, s)
	rows := func(id string) map[string]bool {
		t.Helper()
		out := map[string]bool{}
		err := s.execSimple(f.ctx, func(tx *Tx) error {
			rs, err := tx.Query(`SELECT pool FROM executor_pools WHERE executor_id = ?`, id)
			if err != nil {
				return err
			}
			defer rs.Close()
			for rs.Next() {
				var p string
				if err := rs.Scan(&p); err != nil {
					return err
				}
				out[p] = true
			}
			return rs.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	executor := func(name string) ManagedExecutor {
		t.Helper()
		ex := ManagedExecutor{ID: newID(), WorkspaceID: f.ws, Name: name, Tags: []string{}, Agents: []string{"shell"}, TokenHash: newID(), CreatedBy: "user:1", CreatedAt: f.now}
		if err := s.CreateExecutor(f.ctx, ex, AuditEntry{}); err != nil {
			t.Fatal(err)
		}
		return ex
	}
	touch := func(id string, at time.Time, pools ...string) {
		t.Helper()
		if err := s.TouchExecutor(f.ctx, id, at, pools...); err != nil {
			t.Fatal(err)
		}
	}
	a, b := executor("a"), executor("b")
	touch(a.ID, f.now, "", "gpu")
	touch(b.ID, f.now, "gpu")
	// A week later a's workers claim only for "arm": "gpu" and the
	// default pool are forgotten; a pool touched within the week stays.
	touch(a.ID, f.now.Add(3*24*time.Hour), "")
	touch(a.ID, f.now.Add(poolForgetAfter+time.Hour), "arm")
	if got := rows(a.ID); len(got) != 2 || !got["arm"] || !got[""] {
		t.Fatalf("a's pools after a week: %v", got)
	}
	touch(a.ID, f.now.Add(3*24*time.Hour+poolForgetAfter+time.Minute), "arm")
	if got := rows(a.ID); len(got) != 1 || !got["arm"] {
		t.Fatalf("a's pools after the default pool's week: %v", got)
	}
	if seen, err := s.PoolSeen(f.ctx, f.ws, "gpu"); err != nil || len(seen) != 1 || seen[b.ID].IsZero() {
		t.Fatalf("b's gpu pool went with a's: %v %v", seen, err)
	}
	// Deleting a deletes its pools; a late touch brings none back.
	if _, err := s.UpdateExecutor(f.ctx, f.ws, a.ID, func(m *ManagedExecutor) error { d := f.now; m.DeletedAt = &d; return nil }, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if got := rows(a.ID); len(got) != 0 {
		t.Fatalf("a deleted executor's pools: %v", got)
	}
	touch(a.ID, f.now.Add(poolForgetAfter+2*time.Hour), "arm", "")
	if got := rows(a.ID); len(got) != 0 {
		t.Fatalf("a touch after the delete wrote pools: %v", got)
	}
	if got := rows(b.ID); len(got) != 1 || !got["gpu"] {
		t.Fatalf("b's pools after a's delete: %v", got)
	}
	// Rows an earlier delete left (and rows of no executor at all) are
	// cleared by migration 0016; live executors' rows stay.
	orphan := newID()
	if err := s.execSimple(f.ctx, func(tx *Tx) error {
		for _, id := range []string{a.ID, orphan} {
			if _, err := tx.Exec(`INSERT INTO executor_pools (executor_id, workspace_id, pool, last_seen_at) VALUES (?, ?, 'gpu', ?)`, id, f.ws, ts(f.now)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ms, err := migrationsFor(e.name)
	if err != nil {
		t.Fatal(err)
	}
	var prune string
	for _, m := range ms {
		if m.Name == "0016_executor_pools_prune.sql" {
			prune = m.Body
		}
	}
	if prune == "" {
		t.Fatalf("no migration 0016_executor_pools_prune.sql for %s", e.name)
	}
	if err := s.execSimple(f.ctx, func(tx *Tx) error { _, err := tx.Exec(prune); return err }); err != nil {
		t.Fatal(err)
	}
	if len(rows(a.ID)) != 0 || len(rows(orphan)) != 0 {
		t.Fatalf("the migration left rows: deleted %v, orphan %v", rows(a.ID), rows(orphan))
	}
	if got := rows(b.ID); len(got) != 1 || !got["gpu"] {
		t.Fatalf("the migration took a live executor's pools: %v", got)
	}
}
