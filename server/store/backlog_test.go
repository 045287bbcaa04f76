package store

import (
	"maps"
	"testing"
	"time"
)

// Backlog counts unfinished runs by status, live and expired leases, the
// webhook outbox by delivery state and the relay bus, and leaves finished
// work out, on either engine.
func TestBacklog(t *testing.T) { eachEngine(t, testBacklog) }

func testBacklog(t *testing.T, e engine) {
	s := e.open(t)
	f := newWFFix(t, s)
	now := f.now

	b, err := s.Backlog(f.ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Runs) != len(UnfinishedRunStatuses) || len(b.Webhooks) != 4 || b.LiveLeases != 0 || b.BusMessages != 0 || !b.OldestBusMessage.IsZero() || !b.OldestDueWebhook.IsZero() {
		t.Fatalf("empty database: %+v", b)
	}
	for _, st := range UnfinishedRunStatuses {
		if n, ok := b.Runs[st]; !ok || n != 0 {
			t.Fatalf("status %s of an empty database: %d %v", st, n, ok)
		}
	}

	// Runs: a draft, a blocked one, three queued, of which two are then
	// claimed (one for a minute, one for a second) and a finished one.
	f.run(t, func(r *WorkflowRun) { r.Status = "draft" })
	f.run(t, func(r *WorkflowRun) { r.Status = "blocked"; r.BlockedReason = "cap" })
	for range 3 {
		f.run(t, nil)
	}
	done := f.run(t, func(r *WorkflowRun) { r.Status = "succeeded" })
	cf := ClaimFilter{WorkspaceID: f.ws, ExecutorID: "E1"}
	long, err := s.ClaimRun(f.ctx, cf, f.grant(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimRun(f.ctx, cf, f.grant(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateRun(f.ctx, f.ws, long.ID, func(r *WorkflowRun) ([]RunEvent, error) { r.Status = "running"; return nil, nil }, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"draft": 1, "queued": 1, "blocked": 1, "leased": 1, "running": 1, "waiting-approval": 0}
	b, err = s.Backlog(f.ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(b.Runs, want) || b.LiveLeases != 2 || b.ExpiredLeases != 0 {
		t.Fatalf("runs %v, leases %d live %d expired; want %v, 2 live (the finished run %s is not counted)", b.Runs, b.LiveLeases, b.ExpiredLeases, want, done.ID)
	}
	// Ten seconds on, the short lease has expired and nobody took it back.
	if b, err = s.Backlog(f.ctx, now.Add(10*time.Second)); err != nil || b.LiveLeases != 1 || b.ExpiredLeases != 1 {
		t.Fatalf("after the short lease's expiry: %d live, %d expired, %v", b.LiveLeases, b.ExpiredLeases, err)
	}
	// The holder finishes: the run and its lease leave the backlog.
	if _, err := s.UpdateRun(f.ctx, f.ws, long.ID, func(r *WorkflowRun) ([]RunEvent, error) {
		r.Status, r.LeaseID, r.LeaseHash, r.LeaseExpires = "succeeded", "", "", nil
		return nil, nil
	}, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if b, err = s.Backlog(f.ctx, now); err != nil || b.Runs["running"] != 0 || b.LiveLeases != 1 {
		t.Fatalf("after completion: runs %v, %d live leases, %v", b.Runs, b.LiveLeases, err)
	}

	// Webhooks: four messages; one leased and delivered, one leased and
	// failed with a retry in an hour, one dead, one due.
	ep := newID()
	for i := range 4 {
		if _, err := s.EnqueueWebhook(f.ctx, f.ws, ep, OutboundEvent{Kind: "run.updated", Data: map[string]int{"n": i}}, now.Add(time.Duration(i)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := s.ClaimWebhooks(f.ctx, "d1", now.Add(time.Second), time.Minute, 3)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	b, err = s.Backlog(f.ctx, now.Add(time.Second))
	if err != nil || b.Webhooks[WebhookDelivering] != 3 || b.Webhooks[WebhookDue] != 1 || !b.OldestDueWebhook.Equal(now.Add(3*time.Millisecond)) {
		t.Fatalf("three leased, one due: %v oldest due %v, %v", b.Webhooks, b.OldestDueWebhook, err)
	}
	finish := func(i int, outcome string, next time.Time) {
		t.Helper()
		a := WebhookAttempt{MessageID: claimed[i].ID, WorkspaceID: f.ws, EndpointID: ep, Kind: "run.updated", Attempt: 1, StatusCode: 500, Outcome: outcome, AttemptedAt: now.Add(time.Second)}
		if err := s.FinishWebhookAttempt(f.ctx, "d1", a, next); err != nil {
			t.Fatal(err)
		}
	}
	finish(0, WebhookDelivered, now)
	finish(1, "retry", now.Add(time.Hour))
	finish(2, WebhookDead, now)
	wantHooks := map[string]int64{WebhookDue: 1, WebhookScheduled: 1, WebhookDelivering: 0, WebhookDead: 1}
	if b, err = s.Backlog(f.ctx, now.Add(2*time.Second)); err != nil || !maps.Equal(b.Webhooks, wantHooks) {
		t.Fatalf("outbox %v, want %v (%v)", b.Webhooks, wantHooks, err)
	}
	// An hour on, the retry is due too, and the oldest due is still the
	// message that never went out.
	if b, err = s.Backlog(f.ctx, now.Add(2*time.Hour)); err != nil || b.Webhooks[WebhookDue] != 2 || !b.OldestDueWebhook.Equal(now.Add(3*time.Millisecond)) {
		t.Fatalf("outbox an hour on: %v oldest due %v (%v)", b.Webhooks, b.OldestDueWebhook, err)
	}

	// The relay bus: published messages wait until their instance
	// acknowledges them.
	if err := s.TouchRelayInstance(f.ctx, "inst-a", now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PublishBus(f.ctx, []BusMessage{{To: "inst-a", Body: []byte(`{}`)}, {To: "inst-a", Body: []byte(`{}`)}}, 8, now.Add(-time.Minute), now); err != nil {
		t.Fatal(err)
	}
	if b, err = s.Backlog(f.ctx, now); err != nil || b.BusMessages != 2 || !b.OldestBusMessage.Equal(now) {
		t.Fatalf("bus: %d oldest %v (%v)", b.BusMessages, b.OldestBusMessage, err)
	}
	got, err := s.PullBus(f.ctx, "inst-a", 0, 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("pull: %d %v", len(got), err)
	}
	if _, err := s.PullBus(f.ctx, "inst-a", got[1].Seq, 10); err != nil {
		t.Fatal(err)
	}
	if b, err = s.Backlog(f.ctx, now); err != nil || b.BusMessages != 0 || !b.OldestBusMessage.IsZero() {
		t.Fatalf("bus after acknowledgement: %d %v (%v)", b.BusMessages, b.OldestBusMessage, err)
	}
}
