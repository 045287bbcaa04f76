package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The SQL of team workers: portable, with two engine differences kept
// here. A claim on PostgreSQL locks its candidates FOR UPDATE SKIP LOCKED
// at READ COMMITTED, so concurrent claimers on any replica pass over each
// other's rows instead of queueing behind them or aborting; on SQLite the
// one writer already serializes claims. Transitions lock the run's row
// (FOR UPDATE on PostgreSQL) and decide on what they read under the lock.

var _ Workflows = (*DB)(nil)

// forUpdate is the row-locking suffix of a transition's read.
func (s *DB) forUpdate() string {
	if s.engine == EnginePostgres {
		return " FOR UPDATE"
	}
	return ""
}

// execLocked runs a transition: at READ COMMITTED on PostgreSQL, where the
// FOR UPDATE read makes check-then-set atomic without serialization
// failures between unrelated runs.
func (s *DB) execLocked(ctx context.Context, fn func(*Tx) error) error {
	return s.execSimple(ctx, fn)
}

func jsonList(v []string) string {
	if v == nil {
		v = []string{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func parseList(s string) []string {
	out := []string{}
	_ = json.Unmarshal([]byte(s), &out)
	return out
}

func objOrEmpty(b json.RawMessage) string {
	if len(b) == 0 {
		return "{}"
	}
	return string(b)
}

func nullMS(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := time.UnixMilli(v.Int64).UTC()
	return &t
}

func msOrNil(t *time.Time) any {
	if t == nil {
		return nil
	}
	return ms(*t)
}

func strOrNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// ---- executors ----

const execCols = `id, workspace_id, name, tags, agents, token_hash, token_prefix, created_by, created_at, rotated_at, last_seen_at, deleted_at`

func scanExecutor(sc scanner) (ManagedExecutor, error) {
	var e ManagedExecutor
	var tags, agents, c string
	var hash, rot, seen, del sql.NullString
	if err := sc.Scan(&e.ID, &e.WorkspaceID, &e.Name, &tags, &agents, &hash, &e.TokenPrefix, &e.CreatedBy, &c, &rot, &seen, &del); err != nil {
		return ManagedExecutor{}, err
	}
	e.Tags, e.Agents, e.TokenHash = parseList(tags), parseList(agents), hash.String
	e.CreatedAt, e.RotatedAt, e.LastSeenAt, e.DeletedAt = parseTS(c), nullTS(rot), nullTS(seen), nullTS(del)
	return e, nil
}

func (s *DB) CreateExecutor(ctx context.Context, e ManagedExecutor, audit AuditEntry) error {
	return s.execSimple(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO managed_executors (`+execCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
			e.ID, e.WorkspaceID, e.Name, jsonList(e.Tags), jsonList(e.Agents), strOrNil(e.TokenHash), e.TokenPrefix, e.CreatedBy, ts(e.CreatedAt),
			tsOrNil(e.RotatedAt), tsOrNil(e.LastSeenAt), tsOrNil(e.DeletedAt))
		if isUniqueViolation(err) {
			return fmt.Errorf("a managed executor named %q exists: %w", e.Name, ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("create managed executor: %w", err)
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) Executor(ctx context.Context, workspaceID, id string) (ManagedExecutor, error) {
	e, err := scanExecutor(s.queryRow(ctx, `SELECT `+execCols+` FROM managed_executors WHERE workspace_id = ? AND id = ? AND deleted_at IS NULL`, workspaceID, id))
	return e, notFound(err)
}

func (s *DB) ExecutorByTokenHash(ctx context.Context, hash string) (ManagedExecutor, error) {
	e, err := scanExecutor(s.queryRow(ctx, `SELECT `+execCols+` FROM managed_executors WHERE token_hash = ? AND deleted_at IS NULL`, hash))
	return e, notFound(err)
}

func (s *DB) Executors(ctx context.Context, workspaceID string) ([]ManagedExecutor, error) {
	rows, err := s.query(ctx, `SELECT `+execCols+` FROM managed_executors WHERE workspace_id = ? AND deleted_at IS NULL ORDER BY created_at, id`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("list managed executors: %w", err)
	}
	return collect(rows, scanExecutor)
}

func (s *DB) UpdateExecutor(ctx context.Context, workspaceID, id string, fn func(*ManagedExecutor) error, audit AuditEntry) (ManagedExecutor, error) {
	var out ManagedExecutor
	err := s.execLocked(ctx, func(tx *Tx) error {
		e, err := scanExecutor(tx.QueryRow(`SELECT `+execCols+` FROM managed_executors WHERE workspace_id = ? AND id = ? AND deleted_at IS NULL`+s.forUpdate(), workspaceID, id))
		if err != nil {
			return notFound(err)
		}
		if err := fn(&e); err != nil {
			return err
		}
		if e.DeletedAt != nil {
			e.TokenHash = ""
			// A deleted executor serves no pool: its rows would otherwise
			// stay for good (the executor's row stays, runs name it).
			if _, err := tx.Exec(`DELETE FROM executor_pools WHERE executor_id = ?`, e.ID); err != nil {
				return fmt.Errorf("delete the pools of managed executor %s: %w", e.ID, err)
			}
		}
		_, err = tx.Exec(`UPDATE managed_executors SET name = ?, tags = ?, agents = ?, token_hash = ?, token_prefix = ?, rotated_at = ?, last_seen_at = ?, deleted_at = ? WHERE id = ?`,
			e.Name, jsonList(e.Tags), jsonList(e.Agents), strOrNil(e.TokenHash), e.TokenPrefix, tsOrNil(e.RotatedAt), tsOrNil(e.LastSeenAt), tsOrNil(e.DeletedAt), e.ID)
		if isUniqueViolation(err) {
			return fmt.Errorf("a managed executor named %q exists: %w", e.Name, ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("update managed executor: %w", err)
		}
		out = e
		return insertAudit(tx, audit)
	})
	return out, err
}

// poolForgetAfter is how long an executor's workers may go without
// claiming for a pool before TouchExecutor forgets that they serve it
// (preflight only asks about the last few minutes).
const poolForgetAfter = 7 * 24 * time.Hour

func (s *DB) TouchExecutor(ctx context.Context, id string, now time.Time, pools ...string) error {
	return s.execSimple(ctx, func(tx *Tx) error {
		if _, err := tx.Exec(`UPDATE managed_executors SET last_seen_at = ? WHERE id = ?`, ts(now), id); err != nil {
			return err
		}
		// Only a live executor records pools: a touch that raced the
		// executor's delete must not bring its rows back.
		for _, pool := range pools {
			if _, err := tx.Exec(`INSERT INTO executor_pools (executor_id, workspace_id, pool, last_seen_at)
				SELECT id, workspace_id, ?, ? FROM managed_executors WHERE id = ? AND deleted_at IS NULL
				ON CONFLICT (executor_id, pool) DO UPDATE SET last_seen_at = excluded.last_seen_at`, pool, ts(now), id); err != nil {
				return err
			}
		}
		return forgetStalePools(tx, id, now)
	})
}

// forgetStalePools deletes the executor's pools its workers stopped
// claiming for poolForgetAfter ago (a worker moved to another pool, a
// pool scaled away). The times are compared parsed: RFC 3339 text with
// trimmed fractions does not sort as the times do.
func forgetStalePools(tx *Tx, id string, now time.Time) error {
	rows, err := tx.Query(`SELECT pool, last_seen_at FROM executor_pools WHERE executor_id = ?`, id)
	if err != nil {
		return fmt.Errorf("read the pools of managed executor %s: %w", id, err)
	}
	var stale []string
	for rows.Next() {
		var pool, at string
		if err := rows.Scan(&pool, &at); err != nil {
			rows.Close()
			return fmt.Errorf("read the pools of managed executor %s: %w", id, err)
		}
		if parseTS(at).Before(now.Add(-poolForgetAfter)) {
			stale = append(stale, pool)
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the pools of managed executor %s: %w", id, err)
	}
	for _, pool := range stale {
		if _, err := tx.Exec(`DELETE FROM executor_pools WHERE executor_id = ? AND pool = ?`, id, pool); err != nil {
			return fmt.Errorf("forget pool %q of managed executor %s: %w", pool, id, err)
		}
	}
	return nil
}

func (s *DB) PoolSeen(ctx context.Context, workspaceID, pool string) (map[string]time.Time, error) {
	rows, err := s.query(ctx, `SELECT executor_id, last_seen_at FROM executor_pools WHERE workspace_id = ? AND pool = ?`, workspaceID, pool)
	if err != nil {
		return nil, fmt.Errorf("pool seen: %w", err)
	}
	type seen struct {
		id string
		at time.Time
	}
	list, err := collect(rows, func(sc scanner) (seen, error) {
		var e seen
		var at string
		err := sc.Scan(&e.id, &at)
		e.at = parseTS(at)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("pool seen: %w", err)
	}
	out := make(map[string]time.Time, len(list))
	for _, e := range list {
		out[e.id] = e.at
	}
	return out, nil
}

// ---- runs ----

const runCols = `seq, id, workspace_id, status, agent, tags, executor_pin, workdir, spec, attempt, max_attempts, fence, lease_id, lease_hash, executor_id, lease_expires_ms, cancel_requested, session_id, outcome, blocked_reason, rerun_of, created_by, created_at, updated_at, started_at, finished_at, runner_pool`

func scanRun(sc scanner) (WorkflowRun, error) {
	var r WorkflowRun
	var tags, spec, outcome, c, u string
	var leaseID, leaseHash, started, finished sql.NullString
	var exp sql.NullInt64
	var cancel int64
	err := sc.Scan(&r.Seq, &r.ID, &r.WorkspaceID, &r.Status, &r.Agent, &tags, &r.ExecutorPin, &r.Workdir, &spec, &r.Attempt, &r.MaxAttempts, &r.Fence,
		&leaseID, &leaseHash, &r.ExecutorID, &exp, &cancel, &r.SessionID, &outcome, &r.BlockedReason, &r.RerunOf, &r.CreatedBy, &c, &u, &started, &finished, &r.RunnerPool)
	if err != nil {
		return WorkflowRun{}, err
	}
	r.Tags, r.Spec, r.Outcome = parseList(tags), json.RawMessage(spec), json.RawMessage(outcome)
	r.LeaseID, r.LeaseHash, r.LeaseExpires, r.CancelRequested = leaseID.String, leaseHash.String, nullMS(exp), cancel != 0
	r.CreatedAt, r.UpdatedAt, r.StartedAt, r.FinishedAt = parseTS(c), parseTS(u), nullTS(started), nullTS(finished)
	return r, nil
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// runValues are the columns after seq, in runCols order.
func runValues(r *WorkflowRun) []any {
	return []any{r.ID, r.WorkspaceID, r.Status, r.Agent, jsonList(r.Tags), r.ExecutorPin, r.Workdir, objOrEmpty(r.Spec), r.Attempt, r.MaxAttempts, r.Fence,
		strOrNil(r.LeaseID), strOrNil(r.LeaseHash), r.ExecutorID, msOrNil(r.LeaseExpires), boolInt(r.CancelRequested), r.SessionID, objOrEmpty(r.Outcome),
		r.BlockedReason, r.RerunOf, r.CreatedBy, ts(r.CreatedAt), ts(r.UpdatedAt), tsOrNil(r.StartedAt), tsOrNil(r.FinishedAt), r.RunnerPool}
}

// sqlUpdateRunWhere writes every mutable column of a run; callers add
// their guards after "WHERE id = ?".
const sqlUpdateRunWhere = `UPDATE workflow_runs SET status = ?, agent = ?, tags = ?, executor_pin = ?, workdir = ?, spec = ?, attempt = ?, max_attempts = ?, fence = ?,
	lease_id = ?, lease_hash = ?, executor_id = ?, lease_expires_ms = ?, cancel_requested = ?, session_id = ?, outcome = ?, blocked_reason = ?, rerun_of = ?,
	updated_at = ?, started_at = ?, finished_at = ? WHERE id = ?`

func runSetValues(r *WorkflowRun) []any {
	return []any{r.Status, r.Agent, jsonList(r.Tags), r.ExecutorPin, r.Workdir, objOrEmpty(r.Spec), r.Attempt, r.MaxAttempts, r.Fence,
		strOrNil(r.LeaseID), strOrNil(r.LeaseHash), r.ExecutorID, msOrNil(r.LeaseExpires), boolInt(r.CancelRequested), r.SessionID, objOrEmpty(r.Outcome),
		r.BlockedReason, r.RerunOf, ts(r.UpdatedAt), tsOrNil(r.StartedAt), tsOrNil(r.FinishedAt)}
}

func writeRun(tx *Tx, r *WorkflowRun) error {
	if _, err := tx.Exec(sqlUpdateRunWhere, append(runSetValues(r), r.ID)...); err != nil {
		return fmt.Errorf("update workflow run: %w", err)
	}
	return nil
}

func insertRunEvents(tx *Tx, r WorkflowRun, events []RunEvent) error {
	for _, e := range events {
		if e.CreatedAt.IsZero() {
			e.CreatedAt = time.Now()
		}
		if _, err := tx.Exec(`INSERT INTO workflow_run_events (run_id, workspace_id, kind, actor, data, created_at) VALUES (?,?,?,?,?,?)`,
			r.ID, r.WorkspaceID, e.Kind, e.Actor, rawOrNil(e.Data), ts(e.CreatedAt)); err != nil {
			return fmt.Errorf("append run event: %w", err)
		}
	}
	return emitRunEvents(tx, r, events)
}

func (s *DB) CreateRun(ctx context.Context, r *WorkflowRun, events []RunEvent, audit AuditEntry) error {
	return s.execSimple(ctx, func(tx *Tx) error {
		if err := s.holdDefinition(tx, r.WorkspaceID, string(r.Spec)); err != nil {
			return err
		}
		err := tx.QueryRow(`INSERT INTO workflow_runs (`+runCols[len("seq, "):]+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING seq`, runValues(r)...).Scan(&r.Seq)
		if isUniqueViolation(err) {
			return fmt.Errorf("workflow run %s exists: %w", r.ID, ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("create workflow run: %w", err)
		}
		if err := insertRunEvents(tx, *r, events); err != nil {
			return err
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) Run(ctx context.Context, workspaceID, id string) (WorkflowRun, error) {
	r, err := scanRun(s.queryRow(ctx, `SELECT `+runCols+` FROM workflow_runs WHERE workspace_id = ? AND id = ?`, workspaceID, id))
	return r, notFound(err)
}

func (s *DB) RunWorkspace(ctx context.Context, id string) (string, error) {
	var ws string
	err := s.queryRow(ctx, `SELECT workspace_id FROM workflow_runs WHERE id = ?`, id).Scan(&ws)
	return ws, notFound(err)
}

func (s *DB) RunByLeaseHash(ctx context.Context, hash string) (WorkflowRun, error) {
	r, err := scanRun(s.queryRow(ctx, `SELECT `+runCols+` FROM workflow_runs WHERE lease_hash = ?`, hash))
	return r, notFound(err)
}

func (s *DB) Runs(ctx context.Context, workspaceID, status string, opts ListOptions) ([]WorkflowRun, error) {
	return seqPage(ctx, s, "workflow runs", `SELECT `+runCols+` FROM workflow_runs`, workspaceID, opts, 0, scanRun, equals{"status", status})
}

func (s *DB) UpdateRun(ctx context.Context, workspaceID, id string, fn func(*WorkflowRun) ([]RunEvent, error), audit AuditEntry) (WorkflowRun, error) {
	var out WorkflowRun
	err := s.execLocked(ctx, func(tx *Tx) error {
		r, err := scanRun(tx.QueryRow(`SELECT `+runCols+` FROM workflow_runs WHERE workspace_id = ? AND id = ?`+s.forUpdate(), workspaceID, id))
		if err != nil {
			return notFound(err)
		}
		events, err := fn(&r)
		if err != nil {
			return err
		}
		if err := writeRun(tx, &r); err != nil {
			return err
		}
		if err := insertRunEvents(tx, r, events); err != nil {
			return err
		}
		out = r
		return insertAudit(tx, audit)
	})
	return out, err
}

// claimPage is how many queued runs a claim looks at (and, on
// PostgreSQL, locks) at a time while it searches for one it may take.
const claimPage = 32

func (s *DB) ClaimRun(ctx context.Context, f ClaimFilter, g LeaseGrant) (WorkflowRun, error) {
	var out WorkflowRun
	err := s.execLocked(ctx, func(tx *Tx) error {
		var after int64
		for {
			// The page is read without locks: only the run a claimer takes
			// is locked, so fifty claimers racing for ten runs each find one
			// instead of skipping past rows another merely looked at.
			rows, err := tx.Query(`SELECT `+runCols+` FROM workflow_runs WHERE workspace_id = ? AND status = 'queued' AND seq > ? AND (executor_pin = '' OR executor_pin = ?) AND runner_pool = ? ORDER BY seq LIMIT ?`,
				f.WorkspaceID, after, f.ExecutorID, f.RunnerPool, claimPage)
			if err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			page, err := collect(rows, scanRun)
			if err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			for _, r := range page {
				if !f.Matches(r) {
					continue
				}
				if s.engine == EnginePostgres {
					// Lock it unless another claimer holds it; re-read, since
					// it may have been taken since the page was read.
					cur, err := scanRun(tx.QueryRow(`SELECT `+runCols+` FROM workflow_runs WHERE id = ? AND status = 'queued' FOR UPDATE SKIP LOCKED`, r.ID))
					if errors.Is(err, sql.ErrNoRows) {
						continue
					}
					if err != nil {
						return fmt.Errorf("claim: %w", err)
					}
					r = cur
				}
				r.Status, r.Attempt, r.Fence = "leased", r.Attempt+1, r.Fence+1
				r.LeaseID, r.LeaseHash, r.ExecutorID = g.LeaseID, g.TokenHash, f.ExecutorID
				if g.Mint != nil {
					r.LeaseID, r.LeaseHash = g.Mint(r.ID, r.Fence)
				}
				exp := g.ExpiresAt
				r.LeaseExpires, r.CancelRequested, r.UpdatedAt, r.BlockedReason = &exp, false, g.Now, ""
				// The status guard re-checks under the lock: nobody else
				// leased the run between the read and this write.
				res, err := tx.Exec(sqlUpdateRunWhere+` AND status = 'queued'`, append(runSetValues(&r), r.ID)...)
				if err != nil {
					return fmt.Errorf("claim: %w", err)
				}
				if n, _ := res.RowsAffected(); n != 1 {
					continue
				}
				data, _ := json.Marshal(map[string]any{"lease_id": r.LeaseID, "fence": r.Fence, "attempt": r.Attempt, "executor_id": f.ExecutorID, "expires_at": exp.UTC()})
				if err := insertRunEvents(tx, r, []RunEvent{{Kind: "lease.granted", Actor: g.Actor, Data: data, CreatedAt: g.Now}}); err != nil {
					return err
				}
				out = r
				return nil
			}
			if len(page) < claimPage {
				return ErrNotFound
			}
			after = page[len(page)-1].Seq
		}
	})
	return out, err
}

func (s *DB) QueuedHead(ctx context.Context, workspaceID string) (int, int64, error) {
	var n int
	var max sql.NullInt64
	err := s.queryRow(ctx, `SELECT count(*), max(seq) FROM workflow_runs WHERE workspace_id = ? AND status = 'queued'`, workspaceID).Scan(&n, &max)
	if err != nil {
		return 0, 0, unavailable(err)
	}
	return n, max.Int64, nil
}

func (s *DB) ExpireLeases(ctx context.Context, now time.Time, limit int) ([]WorkflowRun, error) {
	if limit <= 0 {
		limit = 100
	}
	skip := ""
	if s.engine == EnginePostgres {
		skip = " FOR UPDATE SKIP LOCKED"
	}
	var out []WorkflowRun
	err := s.execLocked(ctx, func(tx *Tx) error {
		out = out[:0]
		rows, err := tx.Query(`SELECT `+runCols+` FROM workflow_runs WHERE lease_expires_ms IS NOT NULL AND lease_expires_ms < ? ORDER BY lease_expires_ms LIMIT ?`+skip, ms(now), limit)
		if err != nil {
			return fmt.Errorf("expire leases: %w", err)
		}
		due, err := collect(rows, scanRun)
		if err != nil {
			return fmt.Errorf("expire leases: %w", err)
		}
		for _, r := range due {
			data, _ := json.Marshal(map[string]any{"lease_id": r.LeaseID, "fence": r.Fence, "attempt": r.Attempt, "executor_id": r.ExecutorID})
			events := []RunEvent{{Kind: "lease.expired", Actor: "server", Data: data, CreatedAt: now}}
			ExpireLease(&r, now)
			st, _ := json.Marshal(map[string]any{"status": r.Status, "reason": "lease_expired"})
			events = append(events, RunEvent{Kind: "run.status", Actor: "server", Data: st, CreatedAt: now})
			res, err := tx.Exec(sqlUpdateRunWhere+` AND lease_expires_ms < ?`, append(runSetValues(&r), r.ID, ms(now))...)
			if err != nil {
				return fmt.Errorf("expire lease: %w", err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				continue // a heartbeat extended it first
			}
			if err := insertRunEvents(tx, r, events); err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// ExpireLease is what becomes of a run whose lease expired: queued again
// (the attempt stays counted), failed once it used its attempts, cancelled
// when a cancel was waiting for the holder.
func ExpireLease(r *WorkflowRun, now time.Time) {
	switch {
	case r.CancelRequested:
		r.Status = "cancelled"
	case r.Attempt >= r.MaxAttempts:
		r.Status = "failed"
		r.Outcome = mergeOutcome(r.Outcome, map[string]any{"error": fmt.Sprintf("lease_expired: the lease expired on each of %d attempts", r.Attempt)})
	default:
		r.Status = "queued"
	}
	if r.Status != "queued" {
		r.FinishedAt = &now
	}
	r.LeaseID, r.LeaseHash, r.ExecutorID, r.LeaseExpires, r.CancelRequested, r.UpdatedAt = "", "", "", nil, false, now
}

func mergeOutcome(cur json.RawMessage, add map[string]any) json.RawMessage {
	m := map[string]any{}
	_ = json.Unmarshal(cur, &m)
	for k, v := range add {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

func (s *DB) BlockQueued(ctx context.Context, workspaceID, reason string, now time.Time) ([]WorkflowRun, error) {
	var out []WorkflowRun
	err := s.execLocked(ctx, func(tx *Tx) error {
		out = out[:0]
		rows, err := tx.Query(`SELECT `+runCols+` FROM workflow_runs WHERE workspace_id = ? AND status = 'queued' ORDER BY seq LIMIT 500`+s.forUpdate(), workspaceID)
		if err != nil {
			return err
		}
		queued, err := collect(rows, scanRun)
		if err != nil {
			return err
		}
		for _, r := range queued {
			r.Status, r.BlockedReason, r.UpdatedAt = "blocked", reason, now
			if err := writeRun(tx, &r); err != nil {
				return err
			}
			data, _ := json.Marshal(map[string]any{"status": "blocked", "reason": reason})
			if err := insertRunEvents(tx, r, []RunEvent{{Kind: "run.status", Actor: "server", Data: data, CreatedAt: now}}); err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// ---- history ----

func scanRunEvent(sc scanner) (RunEvent, error) {
	var e RunEvent
	var data sql.NullString
	var c string
	if err := sc.Scan(&e.Seq, &e.RunID, &e.WorkspaceID, &e.Kind, &e.Actor, &data, &c); err != nil {
		return RunEvent{}, err
	}
	e.Data, e.CreatedAt = nullRaw(data), parseTS(c)
	return e, nil
}

func (s *DB) RunEvents(ctx context.Context, runID string, after int64, limit int) ([]RunEvent, error) {
	if limit <= 0 {
		limit = 500
	}
	rows, err := s.query(ctx, `SELECT seq, run_id, workspace_id, kind, actor, data, created_at FROM workflow_run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`, runID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("run events: %w", err)
	}
	return collect(rows, scanRunEvent)
}

func (s *DB) AppendRunEvents(ctx context.Context, workspaceID, runID string, check func(WorkflowRun) error, events []RunEvent) error {
	return s.execLocked(ctx, func(tx *Tx) error {
		// FOR SHARE would do on PostgreSQL; the row lock keeps a report from
		// landing after a concurrent expiry moved the lease on.
		r, err := scanRun(tx.QueryRow(`SELECT `+runCols+` FROM workflow_runs WHERE workspace_id = ? AND id = ?`+s.forUpdate(), workspaceID, runID))
		if err != nil {
			return notFound(err)
		}
		if err := check(r); err != nil {
			return err
		}
		return insertRunEvents(tx, r, events)
	})
}

// ---- approvals ----

const approvalCols = `run_id, node_key, workspace_id, state, tool, summary, input, fence, requested_at, expires_ms, decided_by, decided_at, reason`

func scanApproval(sc scanner) (RunApproval, error) {
	var a RunApproval
	var input, decided sql.NullString
	var req string
	var exp int64
	if err := sc.Scan(&a.RunID, &a.NodeKey, &a.WorkspaceID, &a.State, &a.Tool, &a.Summary, &input, &a.Fence, &req, &exp, &a.DecidedBy, &decided, &a.Reason); err != nil {
		return RunApproval{}, err
	}
	a.Input, a.RequestedAt, a.ExpiresAt, a.DecidedAt = nullRaw(input), parseTS(req), time.UnixMilli(exp).UTC(), nullTS(decided)
	return a, nil
}

func (s *DB) RaiseApproval(ctx context.Context, a RunApproval, check func(*WorkflowRun) error, events []RunEvent) (RunApproval, bool, error) {
	var out RunApproval
	var created bool
	err := s.execLocked(ctx, func(tx *Tx) error {
		created = false
		r, err := scanRun(tx.QueryRow(`SELECT `+runCols+` FROM workflow_runs WHERE workspace_id = ? AND id = ?`+s.forUpdate(), a.WorkspaceID, a.RunID))
		if err != nil {
			return notFound(err)
		}
		if cur, err := scanApproval(tx.QueryRow(`SELECT `+approvalCols+` FROM workflow_approvals WHERE run_id = ? AND node_key = ?`, a.RunID, a.NodeKey)); err == nil {
			out = cur
			return nil
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err := check(&r); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO workflow_approvals (`+approvalCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`,
			a.RunID, a.NodeKey, a.WorkspaceID, a.State, a.Tool, a.Summary, rawOrNil(a.Input), a.Fence, ts(a.RequestedAt), ms(a.ExpiresAt), a.DecidedBy, tsOrNil(a.DecidedAt), a.Reason); err != nil {
			return fmt.Errorf("raise approval: %w", err)
		}
		if err := writeRun(tx, &r); err != nil {
			return err
		}
		if err := insertRunEvents(tx, r, events); err != nil {
			return err
		}
		out, created = a, true
		return nil
	})
	return out, created, err
}

func (s *DB) Approval(ctx context.Context, runID, nodeKey string) (RunApproval, error) {
	a, err := scanApproval(s.queryRow(ctx, `SELECT `+approvalCols+` FROM workflow_approvals WHERE run_id = ? AND node_key = ?`, runID, nodeKey))
	return a, notFound(err)
}

func (s *DB) Approvals(ctx context.Context, runID string) ([]RunApproval, error) {
	rows, err := s.query(ctx, `SELECT `+approvalCols+` FROM workflow_approvals WHERE run_id = ? ORDER BY requested_at, node_key`, runID)
	if err != nil {
		return nil, fmt.Errorf("approvals: %w", err)
	}
	return collect(rows, scanApproval)
}

func (s *DB) DecideApproval(ctx context.Context, workspaceID, runID, nodeKey string, fn func(*RunApproval) error, fnRun func(*WorkflowRun, int) []RunEvent, audit AuditEntry) (RunApproval, WorkflowRun, error) {
	var outA RunApproval
	var outR WorkflowRun
	err := s.execLocked(ctx, func(tx *Tx) error {
		r, err := scanRun(tx.QueryRow(`SELECT `+runCols+` FROM workflow_runs WHERE workspace_id = ? AND id = ?`+s.forUpdate(), workspaceID, runID))
		if err != nil {
			return notFound(err)
		}
		a, err := scanApproval(tx.QueryRow(`SELECT `+approvalCols+` FROM workflow_approvals WHERE run_id = ? AND node_key = ?`, runID, nodeKey))
		if err != nil {
			return notFound(err)
		}
		if err := fn(&a); err != nil {
			return err
		}
		if _, err := tx.Exec(`UPDATE workflow_approvals SET state = ?, decided_by = ?, decided_at = ?, reason = ? WHERE run_id = ? AND node_key = ?`,
			a.State, a.DecidedBy, tsOrNil(a.DecidedAt), a.Reason, runID, nodeKey); err != nil {
			return fmt.Errorf("decide approval: %w", err)
		}
		var pending int
		if err := tx.QueryRow(`SELECT count(*) FROM workflow_approvals WHERE run_id = ? AND state = 'pending'`, runID).Scan(&pending); err != nil {
			return err
		}
		events := fnRun(&r, pending)
		if err := writeRun(tx, &r); err != nil {
			return err
		}
		if err := insertRunEvents(tx, r, events); err != nil {
			return err
		}
		outA, outR = a, r
		return insertAudit(tx, audit)
	})
	return outA, outR, err
}
