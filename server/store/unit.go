package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// RecordTx is the record engine inside one write transaction (see InTx):
// what it reads is current, and everything it writes commits together or
// not at all.
type RecordTx interface {
	Record(workspaceID, collection, id string) (Record, error)
	RecordByKey(workspaceID, collection, key string) (Record, error)
	// Create inserts r; ErrConflict when its natural key is taken (the
	// transaction stays usable: nothing was written).
	Create(r *Record) error
	// Update writes r's attributes and updated_at; ErrNotFound when gone.
	Update(r *Record) error
	// AddMember makes userID a member of the workspace with role;
	// ErrConflict when they already are one.
	AddMember(workspaceID string, userID int64, role string, now time.Time) error
	Audit(e AuditEntry) error
}

// InTx runs fn in one write transaction. fn may run more than once (a
// PostgreSQL serialization failure is retried from the start), so it
// must not keep state across runs other than what it recomputes.
func (s *DB) InTx(ctx context.Context, fn func(RecordTx) error) error {
	return s.exec(ctx, func(tx *Tx) error { return fn(recordTx{tx: tx, db: s}) })
}

type recordTx struct {
	tx *Tx
	db *DB
}

func (t recordTx) Record(workspaceID, collection, id string) (Record, error) {
	r, err := scanRecord(t.tx.QueryRow(`SELECT `+recCols+` FROM records WHERE id = ? AND workspace_id = ? AND collection = ?`, id, workspaceID, collection))
	return r, notFound(err)
}

func (t recordTx) RecordByKey(workspaceID, collection, key string) (Record, error) {
	r, err := scanRecord(t.tx.QueryRow(`SELECT `+recCols+` FROM records WHERE workspace_id = ? AND collection = ? AND natural_key = ?`, workspaceID, collection, key))
	return r, notFound(err)
}

func (t recordTx) Create(r *Record) error {
	if r.ID == "" {
		r.ID = newID()
	}
	// DO NOTHING rather than a unique violation: on PostgreSQL an error
	// would abort the whole transaction.
	err := t.tx.QueryRow(`INSERT INTO records (id, workspace_id, collection, natural_key, attributes, created_by, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING RETURNING seq`,
		r.ID, r.WorkspaceID, r.Collection, nullKey(r.NaturalKey), string(r.Attributes), r.CreatedBy, ts(r.CreatedAt), ts(r.UpdatedAt)).Scan(&r.Seq)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return ErrConflict
		}
		return fmt.Errorf("create record: %w", err)
	}
	return t.db.reindex(t.tx, *r)
}

func (t recordTx) Update(r *Record) error {
	err := t.tx.QueryRow(`UPDATE records SET attributes = ?, updated_at = ? WHERE id = ? AND workspace_id = ? AND collection = ? RETURNING seq`,
		string(r.Attributes), ts(r.UpdatedAt), r.ID, r.WorkspaceID, r.Collection).Scan(&r.Seq)
	if err != nil {
		return fmt.Errorf("update record: %w", notFound(err))
	}
	return t.db.reindex(t.tx, *r)
}

func (t recordTx) AddMember(workspaceID string, userID int64, role string, now time.Time) error {
	res, err := t.tx.Exec(`INSERT INTO members (workspace_id, user_id, role, created_at) VALUES (?,?,?,?) ON CONFLICT DO NOTHING`, workspaceID, userID, role, ts(now))
	if err != nil {
		return fmt.Errorf("add member: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrConflict
	}
	return nil
}

func (t recordTx) Audit(e AuditEntry) error { return insertAudit(t.tx, e) }
