package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// ErrRelativePath is returned when a directory path is not absolute: a
// relative path means nothing to a daemon whose working directory is its own.
var ErrRelativePath = errors.New("path is not absolute")

// Directory is a registered directory sessions may run in.
type Directory struct {
	ID      string    `json:"id"`       // ULID
	Path    string    `json:"path"`     // absolute, cleaned
	AddedAt time.Time `json:"added_at"` // UTC
}

// AddDirectory registers path. It is idempotent: when path is already
// registered the existing record comes back with created=false. The store does
// not look at the filesystem; callers check that the path exists.
func (s *Store) AddDirectory(ctx context.Context, path string) (d Directory, created bool, err error) {
	if !filepath.IsAbs(path) {
		return Directory{}, false, fmt.Errorf("add directory %q: %w", path, ErrRelativePath)
	}
	path = filepath.Clean(path)
	now := time.Now().UTC()
	id := ulid.Make().String()
	// ON CONFLICT makes concurrent adds of one path race-free: exactly one
	// insert wins and everybody reads back the same row.
	res, err := s.writer.ExecContext(ctx,
		`INSERT INTO directories (id, path, added_at) VALUES (?, ?, ?) ON CONFLICT (path) DO NOTHING`,
		id, path, nanos(now))
	if err != nil {
		return Directory{}, false, fmt.Errorf("add directory %s: %w", path, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return Directory{}, false, fmt.Errorf("add directory %s: %w", path, err)
	}
	if n == 1 {
		return Directory{ID: id, Path: path, AddedAt: fromNanos(nanos(now))}, true, nil
	}
	// Read through the writer: it is the connection that just saw the row,
	// so there is no question of snapshot staleness.
	d, err = scanDirectory(s.writer.QueryRowContext(ctx,
		`SELECT id, path, added_at FROM directories WHERE path = ?`, path))
	if err != nil {
		return Directory{}, false, fmt.Errorf("add directory %s: %w", path, err)
	}
	return d, false, nil
}

// ListDirectories returns every registered directory, oldest first.
func (s *Store) ListDirectories(ctx context.Context) ([]Directory, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT id, path, added_at FROM directories ORDER BY added_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list directories: %w", err)
	}
	defer rows.Close()
	out := []Directory{}
	for rows.Next() {
		d, err := scanDirectory(rows)
		if err != nil {
			return nil, fmt.Errorf("list directories: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list directories: %w", err)
	}
	return out, nil
}

// DirectoryByPath looks a directory up by path (cleaned before comparing).
func (s *Store) DirectoryByPath(ctx context.Context, path string) (Directory, error) {
	path = filepath.Clean(path)
	d, err := scanDirectory(s.reader.QueryRowContext(ctx,
		`SELECT id, path, added_at FROM directories WHERE path = ?`, path))
	if err != nil {
		return Directory{}, fmt.Errorf("directory %s: %w", path, err)
	}
	return d, nil
}

// Directory looks a directory up by id.
func (s *Store) Directory(ctx context.Context, id string) (Directory, error) {
	d, err := scanDirectory(s.reader.QueryRowContext(ctx,
		`SELECT id, path, added_at FROM directories WHERE id = ?`, id))
	if err != nil {
		return Directory{}, fmt.Errorf("directory %s: %w", id, err)
	}
	return d, nil
}

// RemoveDirectory unregisters a directory. Its sessions and their events stay:
// they are history, not configuration. A directory with active sessions
// (starting, running, waiting for a permission, idle) is not removed: they
// are governed by its policy, and it fails with an *InUseError. The check
// and the delete are one statement, so a session cannot start between them.
func (s *Store) RemoveDirectory(ctx context.Context, id string) error {
	list, args := inList(ActiveStatuses)
	res, err := s.writer.ExecContext(ctx, `DELETE FROM directories WHERE id = ?
		AND NOT EXISTS (SELECT 1 FROM sessions WHERE directory_id = ? AND status IN `+list+`)`,
		append([]any{id, id}, args...)...)
	if err != nil {
		return fmt.Errorf("remove directory %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("remove directory %s: %w", id, err)
	}
	if n == 1 {
		return nil
	}
	if _, err := s.Directory(ctx, id); err != nil {
		return fmt.Errorf("remove directory %s: %w", id, err)
	}
	active, err := s.ListSessions(ctx, SessionFilter{DirectoryID: id, Statuses: ActiveStatuses})
	if err != nil {
		return fmt.Errorf("remove directory %s: %w", id, err)
	}
	ids := make([]string, len(active))
	for i, sess := range active {
		ids[i] = sess.ID
	}
	return &InUseError{DirectoryID: id, Sessions: ids}
}

// ErrInUse is what an *InUseError wraps.
var ErrInUse = errors.New("directory has active sessions")

// InUseError is a directory that cannot be removed while sessions of it
// are active.
type InUseError struct {
	DirectoryID string
	Sessions    []string
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("remove directory %s: %d active session(s) are governed by its policy: %s; stop them first (`reeve session stop SID`)",
		e.DirectoryID, len(e.Sessions), strings.Join(e.Sessions, ", "))
}

func (e *InUseError) Unwrap() error { return ErrInUse }

type rowScanner interface{ Scan(dest ...any) error }

func scanDirectory(r rowScanner) (Directory, error) {
	var d Directory
	var added int64
	if err := r.Scan(&d.ID, &d.Path, &added); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return Directory{}, ErrNotFound
		}
		return Directory{}, err
	}
	d.AddedAt = fromNanos(added)
	return d, nil
}
