package store

import (
	"context"
	"fmt"
	"time"
)

// Backlog is the work waiting in the database at one moment: what
// /metrics reports as queue depths and lease counts. The database is
// shared by every replica, so every replica reads the same figures.
type Backlog struct {
	// Runs counts the unfinished workflow runs by status (draft, queued,
	// blocked, leased, running, waiting-approval). Finished runs are
	// history, not backlog, and are not counted.
	Runs map[string]int64
	// Leases counts the runs a worker holds, by whether the lease is
	// still live or expired and not yet taken back (ExpireLeases).
	LiveLeases, ExpiredLeases int64
	// Webhooks counts the outbox by delivery state: WebhookDue (waiting
	// for a dispatcher), WebhookScheduled (a retry waiting for its time),
	// WebhookDelivering (leased by a dispatcher now) and WebhookDead.
	// Delivered messages are not counted.
	Webhooks map[string]int64
	// OldestDueWebhook is when the longest-waiting due message became due
	// (zero when none is due).
	OldestDueWebhook time.Time
	// BusMessages are relay bus messages not yet acknowledged by their
	// instance; OldestBusMessage is when the oldest was published (zero
	// when there is none).
	BusMessages      int64
	OldestBusMessage time.Time
}

// Webhook delivery states of Backlog.Webhooks (a pending message is one of
// the first three).
const (
	WebhookDue        = "due"
	WebhookScheduled  = "scheduled"
	WebhookDelivering = "delivering"
)

// UnfinishedRunStatuses are the statuses Backlog.Runs counts, every one
// present (0 when no run has it), in the order of a run's life.
var UnfinishedRunStatuses = []string{"draft", "queued", "blocked", "leased", "running", "waiting-approval"}

// Backlog reads the backlog as of now. Each count reads an index: the
// unfinished runs (workflow_runs_unfinished), the outbox's pending and
// dead messages (webhook_outbox_due), the bus (acknowledged messages are
// deleted, so its table is the backlog).
func (s *DB) Backlog(ctx context.Context, now time.Time) (Backlog, error) {
	b := Backlog{Runs: make(map[string]int64, len(UnfinishedRunStatuses)), Webhooks: map[string]int64{WebhookDue: 0, WebhookScheduled: 0, WebhookDelivering: 0, WebhookDead: 0}}
	for _, st := range UnfinishedRunStatuses {
		b.Runs[st] = 0
	}
	// The IN list is the index's predicate, word for word: SQLite uses a
	// partial index only for a query whose terms match it.
	rows, err := s.query(ctx, `SELECT status, count(*),
			count(CASE WHEN lease_expires_ms > ? THEN 1 END),
			count(CASE WHEN lease_expires_ms <= ? THEN 1 END)
		FROM workflow_runs
		WHERE status IN ('draft', 'queued', 'blocked', 'leased', 'running', 'waiting-approval')
		GROUP BY status`, ms(now), ms(now))
	if err != nil {
		return Backlog{}, fmt.Errorf("count workflow runs: %w", unavailable(err))
	}
	for rows.Next() {
		var status string
		var n, live, expired int64
		if err := rows.Scan(&status, &n, &live, &expired); err != nil {
			rows.Close()
			return Backlog{}, fmt.Errorf("count workflow runs: %w", err)
		}
		b.Runs[status] = n
		b.LiveLeases += live
		b.ExpiredLeases += expired
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Backlog{}, fmt.Errorf("count workflow runs: %w", unavailable(err))
	}

	// A pending message is leased while lease_until is ahead (a dispatcher
	// holds it), else due once next_attempt_at has come.
	rows, err = s.query(ctx, `SELECT CASE
				WHEN state = 'dead' THEN 'dead'
				WHEN lease_until > ? THEN 'delivering'
				WHEN next_attempt_at <= ? THEN 'due'
				ELSE 'scheduled' END AS st,
			count(*), min(next_attempt_at)
		FROM webhook_outbox WHERE state IN ('pending', 'dead')
		GROUP BY st`, ms(now), ms(now))
	if err != nil {
		return Backlog{}, fmt.Errorf("count the webhook outbox: %w", unavailable(err))
	}
	for rows.Next() {
		var st string
		var n, oldest int64
		if err := rows.Scan(&st, &n, &oldest); err != nil {
			rows.Close()
			return Backlog{}, fmt.Errorf("count the webhook outbox: %w", err)
		}
		b.Webhooks[st] = n
		if st == WebhookDue {
			b.OldestDueWebhook = time.UnixMilli(oldest)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Backlog{}, fmt.Errorf("count the webhook outbox: %w", unavailable(err))
	}

	var oldest *int64
	if err := s.queryRow(ctx, `SELECT count(*), min(created_at) FROM relay_bus`).Scan(&b.BusMessages, &oldest); err != nil {
		return Backlog{}, fmt.Errorf("count the relay bus: %w", unavailable(err))
	}
	if oldest != nil {
		b.OldestBusMessage = time.Unix(0, *oldest)
	}
	return b, nil
}
