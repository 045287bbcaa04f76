package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// InsightSignals are the reads the detection rules run over: each is
// bounded by a time window and a row limit, newest first, so a detection
// run costs a few indexed queries per workspace however old it is.
type InsightSignals interface {
	// PermissionDecisions are the synced daemon events of kind
	// permission-decision (records of the sessions/<id>/events
	// collections) stored since since.
	PermissionDecisions(ctx context.Context, workspaceID string, since time.Time, limit int) ([]Record, error)
	// PermissionDecisionAudit are the audit entries of synced permission
	// decisions (action session.permission-decision) written since since.
	PermissionDecisionAudit(ctx context.Context, workspaceID string, since time.Time, limit int) ([]AuditEntry, error)
	// SessionsUpdatedSince are the session records changed since since.
	SessionsUpdatedSince(ctx context.Context, workspaceID string, since time.Time, limit int) ([]Record, error)
	// FailedRunsSince are the workflow runs that finished failed since since.
	FailedRunsSince(ctx context.Context, workspaceID string, since time.Time, limit int) ([]WorkflowRun, error)
	// WorkspaceIDs lists the live workspaces (the periodic detection's round).
	WorkspaceIDs(ctx context.Context) ([]string, error)
}

// The kind of a synced event is matched as text in its stored JSON (the
// API writes it with encoding/json: `"kind":"permission-decision"`) so
// one portable query serves both engines; the caller parses each record.
// Each query below spells the predicate of its partial index (migration
// 0015) literally, so the planner of either engine can use the index.

func (s *DB) PermissionDecisions(ctx context.Context, workspaceID string, since time.Time, limit int) ([]Record, error) {
	rows, err := s.query(ctx, `SELECT `+recCols+` FROM records WHERE workspace_id = ? AND created_at >= ? AND attributes LIKE '%"kind":"permission-decision"%'
		AND collection LIKE 'sessions/%/events' ORDER BY created_at DESC, seq DESC LIMIT ?`, workspaceID, ts(since), limit)
	if err != nil {
		return nil, fmt.Errorf("list permission decisions: %w", err)
	}
	return collect(rows, scanRecord)
}

func (s *DB) PermissionDecisionAudit(ctx context.Context, workspaceID string, since time.Time, limit int) ([]AuditEntry, error) {
	rows, err := s.query(ctx, `SELECT seq, id, workspace_id, actor, action, target, detail, created_at FROM audit WHERE workspace_id = ? AND created_at >= ?
		AND action = 'session.permission-decision' ORDER BY created_at DESC, seq DESC LIMIT ?`, workspaceID, ts(since), limit)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	return collect(rows, func(sc scanner) (AuditEntry, error) {
		var e AuditEntry
		var d sql.NullString
		var c string
		if err := sc.Scan(&e.Seq, &e.ID, &e.WorkspaceID, &e.Actor, &e.Action, &e.Target, &d, &c); err != nil {
			return AuditEntry{}, err
		}
		e.Detail, e.CreatedAt = nullRaw(d), parseTS(c)
		return e, nil
	})
}

func (s *DB) SessionsUpdatedSince(ctx context.Context, workspaceID string, since time.Time, limit int) ([]Record, error) {
	rows, err := s.query(ctx, `SELECT `+recCols+` FROM records WHERE workspace_id = ? AND updated_at >= ? AND collection = 'sessions'
		ORDER BY updated_at DESC, seq DESC LIMIT ?`, workspaceID, ts(since), limit)
	if err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	return collect(rows, scanRecord)
}

func (s *DB) FailedRunsSince(ctx context.Context, workspaceID string, since time.Time, limit int) ([]WorkflowRun, error) {
	rows, err := s.query(ctx, `SELECT `+runCols+` FROM workflow_runs WHERE workspace_id = ? AND finished_at >= ? AND status = 'failed' ORDER BY finished_at DESC, seq DESC LIMIT ?`,
		workspaceID, ts(since), limit)
	if err != nil {
		return nil, fmt.Errorf("list failed runs: %w", err)
	}
	return collect(rows, scanRun)
}

func (s *DB) WorkspaceIDs(ctx context.Context) ([]string, error) {
	rows, err := s.query(ctx, `SELECT id FROM workspaces WHERE deleted_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	return collect(rows, func(sc scanner) (string, error) {
		var id string
		err := sc.Scan(&id)
		return id, err
	})
}
