package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

const whCols = `id, workspace_id, endpoint_id, kind, payload, state, attempts, next_attempt_at, lease_owner, last_error, created_at, updated_at`

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func scanWebhook(sc scanner) (WebhookMessage, error) {
	var m WebhookMessage
	var payload string
	var next, c, u int64
	if err := sc.Scan(&m.ID, &m.WorkspaceID, &m.EndpointID, &m.Kind, &payload, &m.State, &m.Attempts, &next, &m.LeaseOwner, &m.LastError, &c, &u); err != nil {
		return WebhookMessage{}, err
	}
	m.Payload, m.NextAttemptAt, m.CreatedAt, m.UpdatedAt = json.RawMessage(payload), fromMS(next), fromMS(c), fromMS(u)
	return m, nil
}

// envelope is the body every endpoint receives, in the shape Standard
// Webhooks recommends: type, timestamp, data.
type envelope struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      any       `json:"data"`
}

func insertWebhook(tx *Tx, workspaceID, endpointID string, ev OutboundEvent, now time.Time) (WebhookMessage, error) {
	body, err := json.Marshal(envelope{Type: ev.Kind, Timestamp: now.UTC(), Data: ev.Data})
	if err != nil {
		return WebhookMessage{}, fmt.Errorf("webhook payload %s: %w", ev.Kind, err)
	}
	m := WebhookMessage{ID: "msg_" + newID(), WorkspaceID: workspaceID, EndpointID: endpointID, Kind: ev.Kind, Payload: body,
		State: WebhookPending, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}
	_, err = tx.Exec(`INSERT INTO webhook_outbox (id, workspace_id, endpoint_id, kind, payload, state, attempts, next_attempt_at, created_at, updated_at) VALUES (?,?,?,?,?,?,0,?,?,?)`,
		m.ID, workspaceID, endpointID, ev.Kind, string(body), WebhookPending, ms(now), ms(now), ms(now))
	if err != nil {
		return WebhookMessage{}, fmt.Errorf("enqueue webhook: %w", err)
	}
	return m, nil
}

// endpointSubscription is what the fan-out reads of an endpoint record.
type endpointSubscription struct {
	Direction string   `json:"direction"`
	Events    []string `json:"events"`
	Disabled  bool     `json:"disabled"`
}

func (e endpointSubscription) wants(kind string) bool {
	return !e.Disabled && e.Direction != "inbound" && (slices.Contains(e.Events, "*") || slices.Contains(e.Events, kind))
}

// emitWebhooks writes, inside tx, one message per endpoint of the
// workspace subscribed to each event. It runs in the transaction of the
// change (through insertAudit), so the messages commit or vanish with it.
func emitWebhooks(tx *Tx, workspaceID string, events []OutboundEvent, now time.Time) error {
	if workspaceID == "" || len(events) == 0 {
		return nil
	}
	rows, err := tx.Query(`SELECT id, attributes FROM records WHERE workspace_id = ? AND collection = ?`, workspaceID, WebhookEndpointCollection)
	if err != nil {
		return fmt.Errorf("webhook endpoints: %w", err)
	}
	type ep struct {
		id  string
		sub endpointSubscription
	}
	var eps []ep
	for rows.Next() {
		var id, attrs string
		if err := rows.Scan(&id, &attrs); err != nil {
			rows.Close()
			return err
		}
		var sub endpointSubscription
		if json.Unmarshal([]byte(attrs), &sub) == nil {
			eps = append(eps, ep{id, sub})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, ev := range events {
		for _, e := range eps {
			if e.sub.wants(ev.Kind) {
				if _, err := insertWebhook(tx, workspaceID, e.id, ev, now); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (s *DB) EnqueueWebhook(ctx context.Context, workspaceID, endpointID string, ev OutboundEvent, now time.Time) (WebhookMessage, error) {
	var m WebhookMessage
	err := s.execSimple(ctx, func(tx *Tx) error {
		var err error
		m, err = insertWebhook(tx, workspaceID, endpointID, ev, now)
		return err
	})
	return m, err
}

func (s *DB) ClaimWebhooks(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]WebhookMessage, error) {
	if limit <= 0 {
		limit = 16
	}
	// Most polls find nothing: ask the read pool first, so an idle
	// dispatcher does not take SQLite's writer (or a serializable
	// transaction) every poll.
	var one int
	err := s.queryRow(ctx, `SELECT 1 FROM webhook_outbox WHERE state = 'pending' AND next_attempt_at <= ? AND lease_until <= ? LIMIT 1`, ms(now), ms(now)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim webhooks: %w", unavailable(err))
	}
	var out []WebhookMessage
	err = s.exec(ctx, func(tx *Tx) error {
		rows, err := tx.Query(`UPDATE webhook_outbox SET lease_owner = ?, lease_until = ?
			WHERE id IN (SELECT id FROM webhook_outbox WHERE state = 'pending' AND next_attempt_at <= ? AND lease_until <= ? ORDER BY next_attempt_at LIMIT ?)
			RETURNING `+whCols, owner, ms(now.Add(lease)), ms(now), ms(now), limit)
		if err != nil {
			return fmt.Errorf("claim webhooks: %w", err)
		}
		out, err = collect(rows, scanWebhook)
		return err
	})
	slices.SortFunc(out, func(a, b WebhookMessage) int { return a.NextAttemptAt.Compare(b.NextAttemptAt) })
	return out, err
}

func (s *DB) FinishWebhookAttempt(ctx context.Context, owner string, a WebhookAttempt, next time.Time) error {
	state := WebhookPending
	switch a.Outcome {
	case WebhookDelivered, WebhookDead:
		state = a.Outcome
	case "retry":
	default:
		return fmt.Errorf("finish webhook attempt: unknown outcome %q", a.Outcome)
	}
	return s.execSimple(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`UPDATE webhook_outbox SET state = ?, attempts = ?, next_attempt_at = ?, lease_owner = '', lease_until = 0, last_error = ?, updated_at = ?
			WHERE id = ? AND lease_owner = ? AND state = 'pending'`,
			state, a.Attempt, ms(next), a.Error, ms(a.AttemptedAt), a.MessageID, owner)
		if err != nil {
			return fmt.Errorf("finish webhook attempt: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrConflict
		}
		_, err = tx.Exec(`INSERT INTO webhook_attempts (message_id, workspace_id, endpoint_id, kind, attempt, status_code, latency_ms, outcome, error, attempted_at) VALUES (?,?,?,?,?,?,?,?,?,?)`,
			a.MessageID, a.WorkspaceID, a.EndpointID, a.Kind, a.Attempt, a.StatusCode, a.Latency.Milliseconds(), a.Outcome, a.Error, ms(a.AttemptedAt))
		if err != nil {
			return fmt.Errorf("record webhook attempt: %w", err)
		}
		return nil
	})
}

func (s *DB) WebhookMessages(ctx context.Context, workspaceID, endpointID string, limit int) ([]WebhookMessage, error) {
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	rows, err := s.query(ctx, `SELECT `+whCols+` FROM webhook_outbox WHERE workspace_id = ? AND endpoint_id = ? ORDER BY created_at DESC, id DESC LIMIT ?`, workspaceID, endpointID, limit)
	if err != nil {
		return nil, fmt.Errorf("list webhook messages: %w", err)
	}
	return collect(rows, scanWebhook)
}

func scanAttempt(sc scanner) (WebhookAttempt, error) {
	var a WebhookAttempt
	var lat, at int64
	if err := sc.Scan(&a.Seq, &a.MessageID, &a.WorkspaceID, &a.EndpointID, &a.Kind, &a.Attempt, &a.StatusCode, &lat, &a.Outcome, &a.Error, &at); err != nil {
		return WebhookAttempt{}, err
	}
	a.Latency, a.AttemptedAt = time.Duration(lat)*time.Millisecond, fromMS(at)
	return a, nil
}

func (s *DB) WebhookAttempts(ctx context.Context, workspaceID, endpointID string, opts ListOptions) ([]WebhookAttempt, error) {
	limit := opts.Limit
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	rows, err := s.query(ctx, `SELECT seq, message_id, workspace_id, endpoint_id, kind, attempt, status_code, latency_ms, outcome, error, attempted_at
		FROM webhook_attempts WHERE workspace_id = ? AND endpoint_id = ? AND seq > ? ORDER BY seq LIMIT ?`, workspaceID, endpointID, opts.After, limit)
	if err != nil {
		return nil, fmt.Errorf("list webhook attempts: %w", err)
	}
	return collect(rows, scanAttempt)
}

func (s *DB) RetryDeadWebhooks(ctx context.Context, workspaceID, endpointID string, now time.Time) (int64, error) {
	var n int64
	err := s.execSimple(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`UPDATE webhook_outbox SET state = 'pending', attempts = 0, next_attempt_at = ?, updated_at = ? WHERE workspace_id = ? AND endpoint_id = ? AND state = 'dead'`,
			ms(now), ms(now), workspaceID, endpointID)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

func (s *DB) ThrottleHit(ctx context.Context, workspaceID, source string, window time.Time) (int64, error) {
	var hits int64
	err := s.execSimple(ctx, func(tx *Tx) error {
		if err := tx.QueryRow(`INSERT INTO webhook_throttle (workspace_id, source, window_start, hits) VALUES (?,?,?,1)
			ON CONFLICT (workspace_id, source, window_start) DO UPDATE SET hits = webhook_throttle.hits + 1 RETURNING hits`,
			workspaceID, source, ms(window)).Scan(&hits); err != nil {
			return fmt.Errorf("throttle: %w", err)
		}
		if hits == 1 {
			// A new window: the key's older windows are no longer read.
			if _, err := tx.Exec(`DELETE FROM webhook_throttle WHERE workspace_id = ? AND source = ? AND window_start < ?`, workspaceID, source, ms(window)); err != nil {
				return fmt.Errorf("throttle: %w", err)
			}
		}
		return nil
	})
	return hits, err
}

// runStateEvents are the run events that change a run's state; approval
// nodes are a run's permission requests.
var runStateEvents = map[string]string{
	"run.created": "workflow_run.state_changed", "run.status": "workflow_run.state_changed", "lease.granted": "workflow_run.state_changed",
	"lease.expired": "workflow_run.state_changed", "lease.released": "workflow_run.state_changed", "run.completed": "workflow_run.state_changed",
	"approval.requested": "permission.requested", "approval.decided": "permission.decided",
}

// emitRunEvents turns a run's state changes into outbound events, in the
// transaction that writes them.
func emitRunEvents(tx *Tx, r WorkflowRun, events []RunEvent) error {
	var out []OutboundEvent
	for _, e := range events {
		kind, ok := runStateEvents[e.Kind]
		if !ok {
			continue
		}
		data := map[string]any{"workflow_run_id": r.ID, "status": r.Status, "agent": r.Agent, "event": e.Kind, "actor": e.Actor}
		if len(e.Data) > 0 {
			data["detail"] = json.RawMessage(e.Data)
		}
		if kind != "workflow_run.state_changed" {
			data["source"] = "workflow_run"
		}
		out = append(out, OutboundEvent{Kind: kind, Data: data})
	}
	if len(out) == 0 {
		return nil
	}
	at := time.Now()
	if len(events) > 0 && !events[0].CreatedAt.IsZero() {
		at = events[0].CreatedAt
	}
	return emitWebhooks(tx, r.WorkspaceID, out, at)
}

// emitBudgetCrossings emits budget.threshold_crossed, in the transaction
// of the ledger entry that crossed it, for each threshold of the policy's
// cap (its warn_at fraction, and the cap itself) that the entry's cost
// stepped over: exactly one entry crosses a threshold, however many
// writers race, because period totals grow under the row's lock.
func emitBudgetCrossings(tx *Tx, e *LedgerEntry, p BudgetPolicy) error {
	if p.HardCap == nil || *p.HardCap <= 0 || e.Cost <= 0 {
		return nil
	}
	period := p.Period
	if period == "" {
		period = PeriodMonthly
	}
	key := PeriodKey(period, e.CreatedAt)
	var total int64
	if err := tx.QueryRow(`SELECT total_nanos FROM ledger_periods WHERE workspace_id = ? AND period = ?`, e.WorkspaceID, key).Scan(&total); err != nil {
		return fmt.Errorf("budget thresholds: %w", err)
	}
	before := total - int64(e.Cost)
	var events []OutboundEvent
	for _, frac := range []float64{p.WarnAt, 1} {
		if frac <= 0 || frac > 1 || (frac == p.WarnAt && frac == 1 && len(events) > 0) {
			continue
		}
		limit := int64(float64(*p.HardCap) * frac)
		if before < limit && total >= limit {
			events = append(events, OutboundEvent{Kind: "budget.threshold_crossed", Data: map[string]any{
				"period": key, "threshold": frac, "threshold_usd": USD(limit).String(), "spent_usd": USD(total).String(),
				"hard_cap_usd": p.HardCap.String(), "ledger_entry_id": e.ID,
			}})
		}
	}
	return emitWebhooks(tx, e.WorkspaceID, events, e.CreatedAt)
}
