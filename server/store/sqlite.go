package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver
)

// maxBatch bounds how many queued writes share one transaction (and so one
// fsync): enough to amortise the sync under load, small enough to keep the
// latency of the first writer in the batch low.
const maxBatch = 256

// On SQLite the store is one file in WAL mode. Reads use a pool of
// connections; every write goes through one writer goroutine that commits
// queued writes together (group commit), so concurrent creates share the
// fsync of synchronous=FULL instead of each paying for one.

// hotWrites are prepared on the writer's single connection at open, before
// the writer holds it in a transaction (preparing later would wait for the
// connection the transaction itself holds).
var hotWrites = []string{
	`SAVEPOINT op`, `ROLLBACK TO op`, `RELEASE op`,
	sqlInsertRecord, sqlInsertAudit,
}

func (s *DB) prepareWrites() error {
	for _, q := range hotWrites {
		st, err := s.write.Prepare(q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", q, err)
		}
		s.wstmts.Store(q, st)
	}
	return nil
}

type writeOp struct {
	fn  func(*Tx) error
	res chan error
}

// OpenSQLite opens (creating if needed) the database file at path and
// applies the embedded migrations.
func OpenSQLite(ctx context.Context, path string) (*DB, error) {
	if path == "" {
		return nil, errors.New("open sqlite: empty path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	// Create the file ourselves so that it never exists with a umask-derived
	// mode; SQLite gives -wal and -shm the main file's mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	f.Close()
	dsn := func(extra string) string {
		q := url.Values{}
		for _, p := range []string{"journal_mode(WAL)", "synchronous(FULL)", "busy_timeout(10000)", "foreign_keys(1)", "secure_delete(ON)"} {
			q.Add("_pragma", p)
		}
		if extra != "" {
			q.Add("_txlock", extra)
		}
		return "file:" + path + "?" + q.Encode()
	}
	w, err := sql.Open("sqlite", dsn("immediate"))
	if err != nil {
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	mig, err := migrate(ctx, w, EngineSQLite)
	if err != nil {
		w.Close()
		return nil, err
	}
	// Files left by an older build (the WAL once held signing keys in the
	// clear) are tightened too.
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			w.Close()
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
	}
	r, err := sql.Open("sqlite", dsn(""))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite: %w", err)
	}
	r.SetMaxOpenConns(8)
	r.SetMaxIdleConns(8)
	s := &DB{engine: EngineSQLite, version: mig.To, migration: mig, read: r, write: w, queue: make(chan *writeOp, 1024), done: make(chan struct{}), exited: make(chan struct{})}
	if err := s.prepareWrites(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	s.wg.Add(1)
	go s.writer()
	return s, nil
}

// exec runs fn in a write transaction shared with other queued writes. A
// failing fn is rolled back to its own savepoint and does not affect the
// others.
func (s *DB) execSQLite(ctx context.Context, fn func(*Tx) error) error {
	op := &writeOp{fn: fn, res: make(chan error, 1)}
	select {
	case s.queue <- op:
	case <-s.done:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once queued the write will be committed or failed; wait for that even
	// if ctx ends, so a caller never reports failure for a committed write.
	// Only a write queued after the writer's final drain is never run.
	select {
	case err := <-op.res:
		return err
	case <-s.exited:
		select {
		case err := <-op.res:
			return err
		default:
			return errClosed
		}
	}
}

func (s *DB) writer() {
	defer s.wg.Done()
	defer close(s.exited)
	batch := make([]*writeOp, 0, maxBatch)
	for {
		var first *writeOp
		select {
		case first = <-s.queue:
		case <-s.done:
			// Drain what is already queued, then stop.
			for {
				select {
				case op := <-s.queue:
					s.commit([]*writeOp{op})
				default:
					return
				}
			}
		}
		batch = append(batch[:0], first)
	fill:
		for len(batch) < maxBatch {
			select {
			case op := <-s.queue:
				batch = append(batch, op)
			default:
				break fill
			}
		}
		s.commit(batch)
	}
}

func (s *DB) commit(batch []*writeOp) {
	results := make([]error, len(batch))
	stx, err := s.write.Begin()
	if err != nil {
		for _, op := range batch {
			op.res <- fmt.Errorf("begin: %w", err)
		}
		return
	}
	tx := &Tx{ctx: context.Background(), tx: stx, db: s}
	for i, op := range batch {
		if _, err := tx.Exec(`SAVEPOINT op`); err != nil {
			results[i] = err
			continue
		}
		if err := op.fn(tx); err != nil {
			results[i] = err
			if _, rerr := tx.Exec(`ROLLBACK TO op`); rerr != nil {
				results[i] = errors.Join(err, rerr)
			}
		}
		if _, err := tx.Exec(`RELEASE op`); err != nil && results[i] == nil {
			results[i] = err
		}
	}
	if err := stx.Commit(); err != nil {
		for i := range results {
			if results[i] == nil {
				results[i] = fmt.Errorf("commit: %w", err)
			}
		}
	}
	for i, op := range batch {
		op.res <- results[i]
	}
}
