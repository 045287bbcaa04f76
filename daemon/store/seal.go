package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"time"
)

// The seq index in bulk.
//
// A session's events are found by seq through event_seqs, (session_id,
// seq) -> events.id, which the appender fills for many commits at once
// instead of SQLite updating an index in every commit. SQLite writes every
// page a commit changed to the WAL, whole: an index maintained per commit
// cost each busy session a 32 KiB leaf per commit, 84% of the appender's
// WAL bytes and about half its CPU with 50 busy PTY sessions
// (BenchmarkAppendBusySessions). Filled in bulk, a session's leaf is
// written once per seal, for all its events since the last one.
//
// The events after event_seqs_upto.upto, the unsealed tail, are in the log
// but not yet in event_seqs. Every read by seq looks in both, in one
// statement and so one snapshot: the tail is the events with id > upto (a
// range of the table's own key), of which it keeps the session's. A seal
// moves the whole tail into event_seqs and advances upto in one
// transaction, so an event is always in exactly one of the two. The tail
// is bounded by sealEvery events, so its scan stays cheap, and sealed
// whenever the log goes quiet; a tail left by a crash is sealed by the next
// seal.
//
// event_seqs' primary key still rejects a second event with a session's
// seq, at the seal rather than at the insert: the appender alone assigns
// seqs, so that would be its bug, and the seal then fails (logged) while
// the events stay readable in the tail.

const (
	// sealEvery is how many events the unsealed tail may hold before the
	// appender seals it: large enough that a busy session's leaf of
	// event_seqs is written once for many of its events, small enough that
	// scanning the tail costs a read little (BenchmarkReadsWithTail).
	sealEvery = 1024
)

// sealIdle is how long the appender waits for more events before it seals a
// shorter tail: a log that went quiet is read with no tail to scan, and
// under load, when commits follow each other closely, seals stay sealEvery
// apart. A variable so that tests can keep a tail; the appender reads it
// when it starts.
var sealIdle = 100 * time.Millisecond

// The reads by seq: event_seqs for the sealed part, then the tail. In each
// arm a session's events come in seq order; the ORDER BY merges the two.
const (
	tailSQL = `(SELECT upto FROM event_seqs_upto)`

	selectEventsSQL = `SELECT i.seq, e.ts, e.kind, e.data
		FROM event_seqs i CROSS JOIN events e ON e.id = i.event_id
		WHERE i.session_id = ?1 AND i.seq > ?2
	UNION ALL
	SELECT seq, ts, kind, data FROM events
		WHERE id > ` + tailSQL + ` AND session_id = ?1 AND seq > ?2
	ORDER BY 1 LIMIT ?3`

	// lastSeqSQL is a session's existence and its log's highest seq (0
	// when empty).
	lastSeqSQL = `SELECT (SELECT COUNT(*) FROM sessions WHERE id = ?1),
		MAX(IFNULL((SELECT MAX(seq) FROM event_seqs WHERE session_id = ?1), 0),
			IFNULL((SELECT MAX(seq) FROM events WHERE id > ` + tailSQL + ` AND session_id = ?1), 0))`
)

// loadSeal reads where the tail starts and how long it is; Open calls it
// before the appender runs.
func (s *Store) loadSeal(ctx context.Context) error {
	if err := s.writer.QueryRowContext(ctx, `SELECT upto FROM event_seqs_upto`).Scan(&s.app.sealedUpto); err != nil {
		return fmt.Errorf("read the sealed mark: %w", err)
	}
	var n int64
	if err := s.writer.QueryRowContext(ctx, `SELECT COUNT(*) FROM events WHERE id > ?`, s.app.sealedUpto).Scan(&n); err != nil {
		return fmt.Errorf("count the unsealed events: %w", err)
	}
	s.app.sealEvery = sealEvery
	s.app.unsealed, s.app.nextSeal = int(n), sealEvery
	return nil
}

// sealDue is whether the tail is long enough to seal; the appender calls
// it after each commit.
func (s *Store) sealDue() bool {
	return s.app.unsealed >= s.app.nextSeal
}

// seal moves the unsealed tail into event_seqs. It runs on the appender's
// goroutine, on the writer connection, after a batch was committed and its
// callers answered, so the batch's followers are not kept waiting. The
// connection is in synchronous=NORMAL for it, because the seal need not be
// durable before anything: the next batch's fsync makes it so, and a seal
// lost with the machine leaves a longer tail, still read. A failed seal is
// retried sealEvery events later, not when idle.
func (s *Store) seal(ctx context.Context) {
	err := s.normalSync(ctx, func(conn *sql.Conn) error { return s.sealTx(ctx, conn) })
	if err != nil {
		slog.Warn("store: sealing the seq index failed; the events stay readable", "err", fmt.Errorf("%s: %w", s.path, err))
		s.app.nextSeal = s.app.unsealed + s.app.sealEvery
		s.app.sealFailed = true // no idle retries until a seal succeeds
		return
	}
	s.app.unsealed, s.app.nextSeal, s.app.sealFailed = 0, s.app.sealEvery, false
}

func (s *Store) sealTx(ctx context.Context, conn *sql.Conn) error {
	if err := s.fault(); err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var last int64
	if err := tx.QueryRowContext(ctx, `SELECT IFNULL(MAX(id), 0) FROM events`).Scan(&last); err != nil {
		return err
	}
	// In key order, so each session's entries go in one run. OR ROLLBACK
	// for the reason prepareInserts gives.
	if _, err := tx.ExecContext(ctx, `INSERT OR ROLLBACK INTO event_seqs (session_id, seq, event_id)
		SELECT session_id, seq, id FROM events WHERE id > ?1 AND id <= ?2 ORDER BY session_id, seq`,
		s.app.sealedUpto, last); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE event_seqs_upto SET upto = ?`, last); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.app.sealedUpto = last
	return nil
}

// normalSync runs f on the writer connection in synchronous=NORMAL, which
// the connection leaves again before it is released: every write but the
// seal keeps its own fsync. Only the appender's goroutine calls it, once a
// seal (every sealEvery events, or when the log goes quiet), so parsing
// the two statements each time costs nothing worth keeping prepared
// driver statements for.
func (s *Store) normalSync(ctx context.Context, f func(conn *sql.Conn) error) error {
	conn, err := s.writer.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = NORMAL`); err != nil {
		return err
	}
	defer func() {
		if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = FULL`); err != nil {
			// Never hand the connection on without its fsyncs.
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	return f(conn)
}
