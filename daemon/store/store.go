// Package store is the daemon's durable state: registered directories,
// sessions and their append-only event logs, kept in one SQLite file in the
// daemon home.
//
// The file runs in WAL mode with synchronous=FULL, so every commit is fsynced
// before it is acknowledged. All writes go through a single writer connection
// (SQLite allows one writer at a time anyway, and one connection avoids
// SQLITE_BUSY retries between our own goroutines); reads use a separate pool
// that WAL lets run concurrently with the writer.
//
// Events are appended by a single appender goroutine that group-commits
// whatever is pending into one transaction, one fsync a batch. SQLite makes
// a commit visible to readers only once its fsync is done, so Append
// returns, and followers are signalled, only for events on disk: no reader
// ever sees an event that a crash of the machine could take back, with its
// seq then handed to another event.
// Followers (Follow, Watch) are paced by the store: they re-read from their
// own cursor after a coalesced signal, so there is neither a per-follower
// buffer to overflow nor a gap or duplicate between replay and live events.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// ErrNotFound is returned when a directory, session or event does not exist.
var ErrNotFound = errors.New("not found")

// ErrClosed is returned by operations on a store after Close.
var ErrClosed = errors.New("store closed")

// ErrBadData means an event to append was refused for its data (not valid
// JSON, or a value that does not encode): nothing was written, and the
// same event would be refused again.
var ErrBadData = errors.New("bad event data")

// fileMode is the mode of the database and its -wal and -shm companions: they
// hold prompts and agent output, which are as private as credentials.
const fileMode fs.FileMode = 0o600

// pageSize is the SQLite page size of the store. A rowid table keeps a row
// on its leaf page up to nearly a page, and spills larger rows to overflow
// pages it fills completely; the waste is worst for rows of half a page to a
// page, which go one to a page. With 32 KiB pages that region (16-32 KB) is
// beyond terminal chunks: chunks of 1.5 to 6 KB, escapes included, take
// 1.08-1.21x their bytes (TestWriteAmplification), where 4 KiB pages took
// 1.8x for 2-4 KB rows and the 16 KiB pages of schema version 2 took 3.85x
// for 4 KB chunks. A file of another page size is rewritten at Open.
const pageSize = 32768

// Options configures Open.
type Options struct {
	// Path of the SQLite file. It is created (mode 0600) when missing.
	Path string
	// ReadConns caps the read pool; zero means 4.
	ReadConns int
	// WriteFault, when set, is consulted before each write of the log and
	// of sessions; an error it returns fails that write as a full disk
	// would. Tests use it to break writes and then let them succeed again.
	WriteFault func() error
}

// Store is the daemon's durable store. It is safe for concurrent use.
type Store struct {
	path   string
	writer *sql.DB // exactly one connection: every write is serialized here
	reader *sql.DB // query_only pool for concurrent readers
	ckpt   *sql.DB // one connection for background checkpoints

	ckptSignal chan struct{}
	ckptDone   chan struct{}

	// ctx bounds the store's own goroutines; cancel ends them at Close.
	ctx    context.Context
	cancel context.CancelFunc

	app      *appender
	watchers watchHub

	// stmts holds the replay statement of each reader connection
	// (eventsStmt). A read holds stmtsMu's read lock while it uses one,
	// so that Close finalises them only once no read is running (a
	// follower may be reading when the store closes), and stmtsClosed
	// turns later reads away.
	stmts       sync.Map
	stmtsMu     sync.RWMutex
	stmtsClosed bool

	// ends holds terminal statuses that could not be written (ends.go).
	ends       endBook
	settleDone chan struct{}
	writeFault func() error

	// closeMu guards closed and the closing of app.ch against senders.
	closeMu   sync.RWMutex
	closed    bool
	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating when needed) the store at opts.Path, applies pending
// migrations and starts the event appender. The store's goroutines live until
// Close; ctx only bounds the work Open itself does.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Path == "" {
		return nil, errors.New("open store: empty path")
	}
	if strings.ContainsAny(opts.Path, "?#") {
		// The driver treats '?' as the start of its DSN parameters.
		return nil, fmt.Errorf("open store %s: path must not contain '?' or '#'", opts.Path)
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = 4
	}
	// Create the file ourselves so it never exists, even briefly, with a
	// umask-derived mode. SQLite then gives -wal and -shm the main file's mode.
	f, err := os.OpenFile(opts.Path, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	f.Close()

	writer, err := sql.Open("sqlite", dsn(opts.Path, false))
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", opts.Path, err)
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)

	s := &Store{path: opts.Path, writer: writer, writeFault: opts.WriteFault, app: &appender{
		ch:      make(chan *appendReq, appendQueue),
		done:    make(chan struct{}),
		lastSeq: make(map[string]int64),
		inserts: make(map[int]*sql.Stmt),
	}}
	if err := s.init(ctx, opts); err != nil {
		for _, st := range s.app.inserts {
			st.Close()
		}
		writer.Close()
		if s.reader != nil {
			s.reader.Close()
		}
		if s.ckpt != nil {
			s.ckpt.Close()
		}
		return nil, fmt.Errorf("open store %s: %w", opts.Path, err)
	}
	s.initEnds(ctx)
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.ckptSignal = make(chan struct{}, 1)
	s.ckptDone = make(chan struct{})
	s.settleDone = make(chan struct{})
	go s.runCheckpointer(s.ckpt)
	go s.runAppender()
	go s.runSettler()
	if s.ends.n.Load() > 0 {
		s.wakeSettler()
	}
	return s, nil
}

func (s *Store) init(ctx context.Context, opts Options) error {
	// The page size only takes on a file SQLite has not initialised yet, and
	// must come before the switch to WAL (the driver runs DSN pragmas sorted
	// by name, so both are done here); an older file keeps its page size
	// until repage. WAL mode is persistent, so readers opened afterwards find
	// the file in WAL mode.
	if _, err := s.writer.ExecContext(ctx, fmt.Sprintf(`PRAGMA page_size = %d`, pageSize)); err != nil {
		return fmt.Errorf("set page size: %w", err)
	}
	var mode string
	if err := s.writer.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode); err != nil {
		return fmt.Errorf("set journal mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, want wal", mode)
	}
	if err := migrate(ctx, s.writer); err != nil {
		return err
	}
	if err := s.repage(ctx); err != nil {
		return err
	}
	reader, err := sql.Open("sqlite", dsn(opts.Path, true))
	if err != nil {
		return err
	}
	reader.SetMaxOpenConns(opts.ReadConns)
	reader.SetMaxIdleConns(opts.ReadConns)
	s.reader = reader
	if err := reader.PingContext(ctx); err != nil {
		return err
	}
	ckpt, err := sql.Open("sqlite", dsn(opts.Path, false))
	if err != nil {
		return err
	}
	ckpt.SetMaxOpenConns(1)
	s.ckpt = ckpt
	if err := s.prepareInserts(ctx); err != nil {
		return err
	}
	if err := s.loadSeal(ctx); err != nil {
		return err
	}
	return tightenModes(opts.Path)
}

// repage rewrites a file made with another page size (16 KiB before schema
// version 3) with pageSize. VACUUM is the only way to change the page size of
// a file, and only outside WAL mode; it is atomic (a crash leaves the old
// file), and it also returns the pages that migrations freed. It runs before
// any other connection is opened, so nothing waits on it but Open.
func (s *Store) repage(ctx context.Context) error {
	var current int
	if err := s.writer.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&current); err != nil {
		return fmt.Errorf("read page size: %w", err)
	}
	if current == pageSize {
		return nil
	}
	slog.Info("store: rewriting the database with smaller pages, once", "path", s.path, "from", current, "to", pageSize)
	var mode string
	for _, q := range []string{`PRAGMA journal_mode = DELETE`, fmt.Sprintf(`PRAGMA page_size = %d`, pageSize), `VACUUM`, `PRAGMA journal_mode = WAL`} {
		var err error
		if strings.HasPrefix(q, "PRAGMA journal_mode") {
			err = s.writer.QueryRowContext(ctx, q).Scan(&mode)
		} else {
			_, err = s.writer.ExecContext(ctx, q)
		}
		if err != nil {
			return fmt.Errorf("rewrite with %d-byte pages: %s: %w", pageSize, q, err)
		}
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q after the rewrite, want wal", mode)
	}
	return nil
}

// dsn builds the driver name for path. synchronous=FULL makes each WAL commit
// fsync before returning: that is what lets Append promise durability.
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
		q.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", writerAutoCheckpoint))
	}
	return path + "?" + q.Encode()
}

// tightenModes forces 0600 on the database and its companions regardless of
// the umask or of files left behind by an older build.
func tightenModes(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, fileMode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("chmod %s: %w", p, err)
		}
	}
	return nil
}

// Close stops the store's goroutines and closes the database. It is safe to
// call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		// Refuse new appends, then let the appender commit what it already
		// accepted: a caller that got its request in is answered properly.
		s.closeMu.Lock()
		s.closed = true
		close(s.app.ch)
		s.closeMu.Unlock()
		<-s.app.done
		s.cancel()
		<-s.ckptDone
		<-s.settleDone
		errs := []error{s.closeStmts()}
		if s.ends.file != nil {
			errs = append(errs, s.ends.file.Close())
		}
		for _, st := range s.app.inserts {
			errs = append(errs, st.Close())
		}
		s.closeErr = errors.Join(append(errs, s.ckpt.Close(), s.reader.Close(), s.writer.Close())...)
		if s.closeErr != nil {
			s.closeErr = fmt.Errorf("close store: %w", s.closeErr)
		}
	})
	return s.closeErr
}

// Path returns the path of the database file.
func (s *Store) Path() string { return s.path }

func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }
