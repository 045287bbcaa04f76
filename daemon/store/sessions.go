package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// Session is one agent run and the header of its event log.
type Session struct {
	ID           string          `json:"id"` // ULID
	DirectoryID  string          `json:"directory_id"`
	Agent        string          `json:"agent"`
	Model        string          `json:"model,omitempty"`
	Prompt       string          `json:"prompt,omitempty"`
	Worktree     string          `json:"worktree,omitempty"` // git worktree path, empty outside git
	Workdir      string          `json:"workdir,omitempty"`  // where the agent process runs
	Status       Status          `json:"status"`
	StatusReason string          `json:"status_reason,omitempty"`
	CreatedAt    time.Time       `json:"created_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
	EndedAt      time.Time       `json:"ended_at,omitzero"` // zero unless Status is terminal
	Manifest     json.RawMessage `json:"manifest"`          // free-form JSON object owned by the runtime
}

// NewSession is what CreateSession needs.
type NewSession struct {
	// ID may be preset (for example to name the worktree branch before the
	// row exists); empty means a fresh ULID.
	ID          string
	DirectoryID string // must be a registered directory
	Agent       string // required
	Model       string
	Prompt      string
	Worktree    string
	Workdir     string
	// Status defaults to starting.
	Status Status
	// Manifest defaults to {}.
	Manifest json.RawMessage
}

// SessionFilter narrows ListSessions; zero fields match everything.
type SessionFilter struct {
	Statuses    []Status
	DirectoryID string
	Agent       string
}

const sessionColumns = `id, directory_id, agent, model, prompt, worktree, workdir, status, status_reason,
	created_at, updated_at, ended_at, manifest`

// CreateSession records a new session. The directory must be registered, so a
// session can never point at a directory the daemon never accepted.
func (s *Store) CreateSession(ctx context.Context, ns NewSession) (Session, error) {
	if ns.ID == "" {
		ns.ID = ulid.Make().String()
	}
	if ns.Agent == "" {
		return Session{}, errors.New("create session: agent is required")
	}
	if ns.Status == "" {
		ns.Status = StatusStarting
	}
	if !ns.Status.Valid() {
		return Session{}, fmt.Errorf("create session: unknown status %q", ns.Status)
	}
	manifest, err := normalizeManifest(ns.Manifest)
	if err != nil {
		return Session{}, fmt.Errorf("create session: %w", err)
	}
	now := nanos(time.Now())
	var ended any
	if ns.Status.Terminal() {
		ended = now
	}
	// INSERT ... SELECT ... WHERE EXISTS checks the directory and inserts in
	// one statement, so a concurrent RemoveDirectory cannot slip between.
	res, err := s.writer.ExecContext(ctx, `INSERT INTO sessions (`+sessionColumns+`)
		SELECT ?, ?, ?, ?, ?, ?, ?, ?, '', ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM directories WHERE id = ?)`,
		ns.ID, ns.DirectoryID, ns.Agent, ns.Model, ns.Prompt, ns.Worktree, ns.Workdir, string(ns.Status),
		now, now, ended, string(manifest), ns.DirectoryID)
	if err != nil {
		return Session{}, fmt.Errorf("create session: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Session{}, fmt.Errorf("create session: %w", err)
	} else if n == 0 {
		return Session{}, fmt.Errorf("create session: directory %s: %w", ns.DirectoryID, ErrNotFound)
	}
	return s.sessionFrom(ctx, s.writer, ns.ID)
}

// Session returns a session by id.
func (s *Store) Session(ctx context.Context, id string) (Session, error) {
	return s.sessionFrom(ctx, s.reader, id)
}

func (s *Store) sessionFrom(ctx context.Context, db *sql.DB, id string) (Session, error) {
	sess, err := scanSession(db.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, id))
	if err != nil {
		return Session{}, fmt.Errorf("session %s: %w", id, err)
	}
	return s.overlay(sess), nil
}

// ListSessions returns the sessions matching f, oldest first.
func (s *Store) ListSessions(ctx context.Context, f SessionFilter) ([]Session, error) {
	var where []string
	var args []any
	// With ends pending, the stored status of some sessions is not theirs:
	// filter by status after applying them.
	filterLater := len(f.Statuses) > 0 && s.ends.n.Load() > 0
	if len(f.Statuses) > 0 && !filterLater {
		list, a := inList(f.Statuses)
		where = append(where, "status IN "+list)
		args = append(args, a...)
	}
	if f.DirectoryID != "" {
		where = append(where, "directory_id = ?")
		args = append(args, f.DirectoryID)
	}
	if f.Agent != "" {
		where = append(where, "agent = ?")
		args = append(args, f.Agent)
	}
	q := `SELECT ` + sessionColumns + ` FROM sessions`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	// ULIDs sort by creation time, and break ties deterministically.
	q += " ORDER BY created_at, id"
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	out := []Session{}
	for rows.Next() {
		sess, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		sess = s.overlay(sess)
		if filterLater && !slices.Contains(f.Statuses, sess.Status) {
			continue
		}
		out = append(out, sess)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return out, nil
}

// UpdateSessionStatus sets a session's status and reason. The store does not
// police transitions (a resumable agent may go from completed back to
// running); it keeps EndedAt consistent: set on entering a terminal status,
// cleared on leaving it. Followers of the session are woken so that Follow can
// notice the end.
func (s *Store) UpdateSessionStatus(ctx context.Context, id string, status Status, reason string) (Session, error) {
	if !status.Valid() {
		return Session{}, fmt.Errorf("update session %s: unknown status %q", id, status)
	}
	now := nanos(time.Now())
	var res sql.Result
	s.ends.writing.Lock() // the settler must not write a kept end in between (ends.go)
	defer s.ends.writing.Unlock()
	err := s.fault()
	switch {
	case err != nil: // an injected failure stands for the statement's
	case status.Terminal():
		res, err = s.writer.ExecContext(ctx, `UPDATE sessions SET status = ?, status_reason = ?, updated_at = ?,
			ended_at = CASE WHEN ended_at IS NULL THEN ? ELSE ended_at END WHERE id = ?`,
			string(status), reason, now, now, id)
	default:
		res, err = s.writer.ExecContext(ctx, `UPDATE sessions SET status = ?, status_reason = ?, updated_at = ?,
			ended_at = NULL WHERE id = ?`, string(status), reason, now, id)
	}
	if err != nil {
		if status.Terminal() && ctx.Err() == nil {
			// The write failed for the store's own reason (a full disk):
			// the end is kept and shown, not lost (ends.go).
			return s.keepEnd(ctx, id, status, reason, now, err)
		}
		return Session{}, fmt.Errorf("update session %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Session{}, fmt.Errorf("update session %s: %w", id, err)
	} else if n == 0 {
		return Session{}, fmt.Errorf("update session %s: %w", id, ErrNotFound)
	}
	// A status written supersedes one kept pending.
	s.ends.drop(id, 0)
	s.watchers.statusChanged(id)
	return s.sessionFrom(ctx, s.writer, id)
}

// SetManifest replaces a session's manifest, which must be a JSON object.
func (s *Store) SetManifest(ctx context.Context, id string, manifest json.RawMessage) error {
	m, err := normalizeManifest(manifest)
	if err != nil {
		return fmt.Errorf("set manifest of %s: %w", id, err)
	}
	if err := s.fault(); err != nil {
		return fmt.Errorf("set manifest of %s: %w", id, err)
	}
	res, err := s.writer.ExecContext(ctx, `UPDATE sessions SET manifest = ?, updated_at = ? WHERE id = ?`,
		string(m), nanos(time.Now()), id)
	if err != nil {
		return fmt.Errorf("set manifest of %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("set manifest of %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("set manifest of %s: %w", id, ErrNotFound)
	}
	return nil
}

// MarkRunningInterrupted moves every session in an active status to
// interrupted with reason and returns their ids. The worker calls it at start:
// a session that was active when the previous worker died has no process
// behind it any more.
func (s *Store) MarkRunningInterrupted(ctx context.Context, reason string) ([]string, error) {
	list, args := inList(ActiveStatuses)
	now := nanos(time.Now())
	args = append([]any{string(StatusInterrupted), reason, now, now}, args...)
	rows, err := s.writer.QueryContext(ctx, `UPDATE sessions SET status = ?, status_reason = ?, updated_at = ?, ended_at = ?
		WHERE status IN `+list+` RETURNING id`, args...)
	if err != nil {
		return nil, fmt.Errorf("mark sessions interrupted: %w", err)
	}
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("mark sessions interrupted: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mark sessions interrupted: %w", err)
	}
	// Close before notifying: the UPDATE's implicit transaction commits
	// when its statement is reset, and a woken follower must see it.
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("mark sessions interrupted: %w", err)
	}
	s.watchers.statusChanged(ids...)
	return ids, nil
}

func normalizeManifest(m json.RawMessage) (json.RawMessage, error) {
	if len(m) == 0 {
		return json.RawMessage(`{}`), nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(m, &obj); err != nil || obj == nil {
		return nil, errors.New("manifest must be a JSON object")
	}
	return m, nil
}

func scanSession(r rowScanner) (Session, error) {
	var sess Session
	var status, manifest string
	var created, updated int64
	var ended sql.NullInt64
	if err := r.Scan(&sess.ID, &sess.DirectoryID, &sess.Agent, &sess.Model, &sess.Prompt, &sess.Worktree, &sess.Workdir,
		&status, &sess.StatusReason, &created, &updated, &ended, &manifest); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return Session{}, ErrNotFound
		}
		return Session{}, err
	}
	sess.Status = Status(status)
	sess.CreatedAt = fromNanos(created)
	sess.UpdatedAt = fromNanos(updated)
	if ended.Valid {
		sess.EndedAt = fromNanos(ended.Int64)
	}
	sess.Manifest = json.RawMessage(manifest)
	return sess, nil
}
