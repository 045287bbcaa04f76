package contextvault

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver

	"reeve.dev/reeve/internal/atomicfile"
)

// local is the device's own state, in <home>/context/context.db: the
// sources it belongs to with their sync cursors, the epoch keys wrapped to
// it (never a bare key), the sealed events (pushed, or waiting to be), and
// the devices it has seen (pinned fingerprints).
type local struct {
	db *sql.DB
}

const localSchema = `
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL,
    epoch INTEGER NOT NULL DEFAULT 0, cursor INTEGER NOT NULL DEFAULT 0, role TEXT NOT NULL DEFAULT '',
    use_when TEXT NOT NULL DEFAULT '', update_when TEXT NOT NULL DEFAULT '',
    repo_url TEXT NOT NULL DEFAULT '', provider TEXT NOT NULL DEFAULT '', branch TEXT NOT NULL DEFAULT '',
    head_commit TEXT NOT NULL DEFAULT '', sync_state TEXT NOT NULL DEFAULT '', rotation_due INTEGER NOT NULL DEFAULT 0,
    pending_proposals INTEGER NOT NULL DEFAULT 0, gone INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS keys (
    source_id TEXT NOT NULL, epoch INTEGER NOT NULL, wrapped TEXT NOT NULL, wrapped_by TEXT NOT NULL,
    PRIMARY KEY (source_id, epoch));
CREATE TABLE IF NOT EXISTS events (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    source_id TEXT NOT NULL, event_id TEXT NOT NULL, seq INTEGER NOT NULL DEFAULT 0,
    entry_id TEXT NOT NULL, kind TEXT NOT NULL, epoch INTEGER NOT NULL, base TEXT NOT NULL DEFAULT '',
    use_when TEXT NOT NULL DEFAULT '', update_when TEXT NOT NULL DEFAULT '', path TEXT NOT NULL DEFAULT '',
    commit_sha TEXT NOT NULL DEFAULT '', ciphertext TEXT NOT NULL DEFAULT '', device_id TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS events_by_id ON events(source_id, event_id);
CREATE INDEX IF NOT EXISTS events_by_seq ON events(source_id, seq);
CREATE TABLE IF NOT EXISTS pins (device_id TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, recipient TEXT NOT NULL, signing_key TEXT NOT NULL, user_id INTEGER NOT NULL DEFAULT 0);
`

func openLocal(dir string) (*local, error) {
	if err := atomicfile.EnsurePrivateDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "context.db")
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "synchronous(FULL)", "busy_timeout(10000)"} {
		q.Add("_pragma", p)
	}
	q.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// Reads may happen inside a write transaction (keys while applying
	// pulled events): WAL lets them use their own connections.
	db.SetMaxOpenConns(4)
	if _, err := db.Exec(localSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(f, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			db.Close()
			return nil, err
		}
	}
	return &local{db: db}, nil
}

func (l *local) close() error { return l.db.Close() }

func (l *local) meta(k string) string {
	var v string
	_ = l.db.QueryRow(`SELECT v FROM meta WHERE k = ?`, k).Scan(&v)
	return v
}

func (l *local) setMeta(k, v string) error {
	_, err := l.db.Exec(`INSERT INTO meta (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, k, v)
	return err
}

// Source is a context source as this device knows it.
type Source struct {
	ID               string `json:"id"`
	Kind             string `json:"kind"`
	Name             string `json:"name"`
	Epoch            int64  `json:"epoch"`
	Cursor           int64  `json:"cursor"`
	Role             string `json:"role"`
	UseWhen          string `json:"use_when,omitempty"`
	UpdateWhen       string `json:"update_when,omitempty"`
	RepoURL          string `json:"repo_url,omitempty"`
	Provider         string `json:"provider,omitempty"`
	Branch           string `json:"branch,omitempty"`
	HeadCommit       string `json:"head_commit,omitempty"`
	SyncState        string `json:"sync_state,omitempty"`
	RotationDue      bool   `json:"rotation_due"`
	PendingProposals int    `json:"pending_proposals"`
	// Gone: the server no longer lists it for this device (removed).
	Gone bool `json:"gone,omitempty"`
}

const sourceCols = `id, kind, name, epoch, cursor, role, use_when, update_when, repo_url, provider, branch, head_commit, sync_state, rotation_due, pending_proposals, gone`

func scanSource(sc interface{ Scan(...any) error }) (Source, error) {
	var s Source
	err := sc.Scan(&s.ID, &s.Kind, &s.Name, &s.Epoch, &s.Cursor, &s.Role, &s.UseWhen, &s.UpdateWhen, &s.RepoURL, &s.Provider, &s.Branch, &s.HeadCommit, &s.SyncState, &s.RotationDue, &s.PendingProposals, &s.Gone)
	return s, err
}

func (l *local) sources() ([]Source, error) {
	rows, err := l.db.Query(`SELECT ` + sourceCols + ` FROM sources ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Source
	for rows.Next() {
		s, err := scanSource(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// source finds a source by id or name.
func (l *local) source(ref string) (Source, error) {
	s, err := scanSource(l.db.QueryRow(`SELECT `+sourceCols+` FROM sources WHERE id = ? OR name = ? ORDER BY gone LIMIT 1`, ref, ref))
	if errors.Is(err, sql.ErrNoRows) {
		return s, fmt.Errorf("%w: no context source %q on this device (sync-pull, or team-grants-accept, brings shared ones)", ErrNotFound, ref)
	}
	return s, err
}

// putSource records the server's view of a source, keeping the cursor.
func (l *local) putSource(s Source) error {
	_, err := l.db.Exec(`INSERT INTO sources (`+sourceCols+`) VALUES (?,?,?,?,0,?,?,?,?,?,?,?,?,?,?,0)
		ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, name = excluded.name, epoch = excluded.epoch, role = excluded.role,
		use_when = excluded.use_when, update_when = excluded.update_when, repo_url = excluded.repo_url, provider = excluded.provider,
		branch = excluded.branch, head_commit = excluded.head_commit, sync_state = excluded.sync_state, rotation_due = excluded.rotation_due,
		pending_proposals = excluded.pending_proposals, gone = 0`,
		s.ID, s.Kind, s.Name, s.Epoch, s.Role, s.UseWhen, s.UpdateWhen, s.RepoURL, s.Provider, s.Branch, s.HeadCommit, s.SyncState, s.RotationDue, s.PendingProposals)
	return err
}

func (l *local) markGone(id string) error {
	_, err := l.db.Exec(`UPDATE sources SET gone = 1, role = '' WHERE id = ?`, id)
	return err
}

// ---- keys ----

type localKey struct {
	SourceID  string
	Epoch     int64
	Wrapped   string
	WrappedBy string
}

func (l *local) keys(sourceID string) ([]localKey, error) {
	rows, err := l.db.Query(`SELECT source_id, epoch, wrapped, wrapped_by FROM keys WHERE source_id = ? ORDER BY epoch`, sourceID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []localKey
	for rows.Next() {
		var k localKey
		if err := rows.Scan(&k.SourceID, &k.Epoch, &k.Wrapped, &k.WrappedBy); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

func (l *local) key(sourceID string, epoch int64) (localKey, error) {
	k := localKey{SourceID: sourceID, Epoch: epoch}
	err := l.db.QueryRow(`SELECT wrapped, wrapped_by FROM keys WHERE source_id = ? AND epoch = ?`, sourceID, epoch).Scan(&k.Wrapped, &k.WrappedBy)
	if errors.Is(err, sql.ErrNoRows) {
		return k, fmt.Errorf("%w: this device has no key for epoch %d of %s (team-grants-accept or sync-pull brings granted keys)", ErrNoKey, epoch, sourceID)
	}
	return k, err
}

func (l *local) putKey(k localKey) error {
	_, err := l.db.Exec(`INSERT INTO keys (source_id, epoch, wrapped, wrapped_by) VALUES (?,?,?,?) ON CONFLICT (source_id, epoch) DO NOTHING`, k.SourceID, k.Epoch, k.Wrapped, k.WrappedBy)
	return err
}

// ---- events ----

// Event is a sealed event as stored on the device. Seq is 0 until the
// server has taken it.
type Event struct {
	N          int64
	SourceID   string
	EventID    string
	Seq        int64
	EntryID    string
	Kind       string
	Epoch      int64
	Base       string
	UseWhen    string
	UpdateWhen string
	Path       string
	Commit     string
	Ciphertext string
	DeviceID   string
	CreatedAt  time.Time
}

const eventCols = `n, source_id, event_id, seq, entry_id, kind, epoch, base, use_when, update_when, path, commit_sha, ciphertext, device_id, created_at`

func scanEvent(sc interface{ Scan(...any) error }) (Event, error) {
	var e Event
	var c string
	err := sc.Scan(&e.N, &e.SourceID, &e.EventID, &e.Seq, &e.EntryID, &e.Kind, &e.Epoch, &e.Base, &e.UseWhen, &e.UpdateWhen, &e.Path, &e.Commit, &e.Ciphertext, &e.DeviceID, &c)
	e.CreatedAt, _ = time.Parse(time.RFC3339Nano, c)
	return e, err
}

func (l *local) events(q string, args ...any) ([]Event, error) {
	rows, err := l.db.Query(`SELECT `+eventCols+` FROM events WHERE `+q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func (l *local) allEvents(sourceID string) ([]Event, error) {
	return l.events(`source_id = ? ORDER BY n`, sourceID)
}

func (l *local) outbox(sourceID string) ([]Event, error) {
	return l.events(`source_id = ? AND seq = 0 ORDER BY n`, sourceID)
}

func insertEvent(tx *sql.Tx, e Event) error {
	_, err := tx.Exec(`INSERT INTO events (source_id, event_id, seq, entry_id, kind, epoch, base, use_when, update_when, path, commit_sha, ciphertext, device_id, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		e.SourceID, e.EventID, e.Seq, e.EntryID, e.Kind, e.Epoch, e.Base, e.UseWhen, e.UpdateWhen, e.Path, e.Commit, e.Ciphertext, e.DeviceID, e.CreatedAt.UTC().Format(time.RFC3339Nano))
	return err
}

// tx runs fn in one write transaction.
func (l *local) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// ---- pins ----

// Pin is a device as first seen: its keys may not change afterwards.
type Pin struct {
	DeviceID, Fingerprint, Recipient, SigningKey string
	UserID                                       int64
}

func (l *local) pin(id string) (Pin, bool) {
	p := Pin{DeviceID: id}
	err := l.db.QueryRow(`SELECT fingerprint, recipient, signing_key, user_id FROM pins WHERE device_id = ?`, id).Scan(&p.Fingerprint, &p.Recipient, &p.SigningKey, &p.UserID)
	return p, err == nil
}

func (l *local) putPin(p Pin) error {
	_, err := l.db.Exec(`INSERT INTO pins (device_id, fingerprint, recipient, signing_key, user_id) VALUES (?,?,?,?,?) ON CONFLICT (device_id) DO NOTHING`, p.DeviceID, p.Fingerprint, p.Recipient, p.SigningKey, p.UserID)
	return err
}
