package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Event is one entry of a session's append-only log.
type Event struct {
	SessionID string          `json:"session_id"`
	Seq       int64           `json:"seq"` // 1, 2, 3, ... per session, gap-free
	TS        time.Time       `json:"ts"`  // UTC
	Kind      string          `json:"kind"`
	Data      json.RawMessage `json:"data"`
}

// EventInput is an event to append; the store assigns its seq.
type EventInput struct {
	SessionID string
	Kind      string
	Data      json.RawMessage // valid JSON; empty means null
	// Value, when set instead of Data, is encoded with json.Marshal on the
	// caller's goroutine: what Marshal makes is valid JSON, so unlike Data
	// it is not scanned again (json.Valid was 1.7% of the worker's CPU
	// with 50 busy terminals, more than encoding the events).
	Value any
	// TS is when the event happened; zero means the time of the Append call.
	TS time.Time
}

// Stats counts the appender's work since Open.
type Stats struct {
	Batches int64 // committed transactions of events
	Syncs   int64 // fsyncs of the log: one for each committed batch
	Events  int64 // events committed
}

const (
	// maxBatchEvents bounds one transaction, so a flood of producers cannot
	// make one commit (and the latency of everyone in it) arbitrarily long.
	maxBatchEvents = 4096
	// appendQueue is how many append requests may wait for the appender
	// before producers block: back-pressure instead of an unbounded queue.
	appendQueue = 4096
	// insertChunk is how many rows one INSERT statement carries: per-statement
	// overhead (bind, step, halt) dominates single-row inserts.
	insertChunk = 128
)

// appendReq is one caller's events travelling through the appender. All
// events of one request land in the same transaction.
type appendReq struct {
	in   []EventInput
	out  []Event
	err  error
	done chan struct{}
}

// appender is the single goroutine that writes events. Owning the seq
// counters in one goroutine is what makes seqs gap-free without locking.
type appender struct {
	ch   chan *appendReq
	done chan struct{} // closed when the goroutine has exited

	// lastSeq caches each session's highest committed seq; the goroutine is
	// its only user. Entries are dropped when a batch fails, so a rolled-back
	// seq is never skipped over.
	lastSeq map[string]int64

	// inserts holds the multi-row INSERT statements by row count.
	inserts map[int]*sql.Stmt

	// sinceCheckpoint counts bytes committed since the last checkpoint
	// request; the appender goroutine is its only user.
	sinceCheckpoint int

	// The unsealed tail of the log (seal.go): event_seqs holds every event
	// with id <= sealedUpto; unsealed counts the committed events after it,
	// and the appender seals once it reaches nextSeal. The appender
	// goroutine is their only user.
	sealedUpto int64
	unsealed   int
	nextSeal   int
	sealEvery  int // sealEvery; tests make it small
	sealFailed bool

	batches atomic.Int64
	syncs   atomic.Int64
	events  atomic.Int64
}

// Append durably appends one event to a session's log and returns it with its
// seq. It returns only once the transaction holding the event is fsynced;
// concurrent callers share transactions (group commit). If ctx ends after the
// event was queued, Append returns ctx's error but the event may still be
// committed. ErrNotFound means the session does not exist.
func (s *Store) Append(ctx context.Context, sessionID, kind string, data json.RawMessage) (Event, error) {
	evs, err := s.AppendMany(ctx, []EventInput{{SessionID: sessionID, Kind: kind, Data: data}})
	if err != nil {
		return Event{}, err
	}
	return evs[0], nil
}

// AppendMany durably appends events (possibly of several sessions) in one
// transaction, all or none, and returns them with their seqs in input order.
// A high-rate producer that has several events at hand should use it: one
// round trip through the appender instead of one per event.
func (s *Store) AppendMany(ctx context.Context, in []EventInput) ([]Event, error) {
	if len(in) == 0 {
		return []Event{}, nil
	}
	if len(in) > maxBatchEvents {
		return nil, fmt.Errorf("append: %d events in one call, the limit is %d", len(in), maxBatchEvents)
	}
	// Our own copy: defaults are filled in below, and the caller may reuse
	// its slice as soon as we return.
	in = slices.Clone(in)
	now := time.Now()
	// Validation happens here, on the callers' goroutines, so the single
	// appender goroutine only writes.
	for i := range in {
		e := &in[i]
		if e.SessionID == "" || e.Kind == "" {
			return nil, errors.New("append: session id and kind are required")
		}
		switch {
		case e.Value != nil:
			if len(e.Data) > 0 {
				return nil, fmt.Errorf("append %s to %s: both data and a value: %w", e.Kind, e.SessionID, ErrBadData)
			}
			raw, err := json.Marshal(e.Value)
			if err != nil {
				return nil, fmt.Errorf("append %s to %s: encode: %w (%w)", e.Kind, e.SessionID, err, ErrBadData)
			}
			e.Data, e.Value = raw, nil
		case len(e.Data) == 0:
			e.Data = json.RawMessage("null")
		case !json.Valid(e.Data):
			return nil, fmt.Errorf("append %s to %s: data is not valid JSON: %w", e.Kind, e.SessionID, ErrBadData)
		}
		if e.TS.IsZero() {
			e.TS = now
		}
	}
	req := &appendReq{in: in, done: make(chan struct{})}
	if err := s.enqueue(ctx, req); err != nil {
		return nil, err
	}
	select {
	case <-req.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("append: %w", ctx.Err())
	}
	if req.err != nil {
		return nil, req.err
	}
	return req.out, nil
}

func (s *Store) enqueue(ctx context.Context, req *appendReq) error {
	// The read lock is held across the send so Close cannot close the
	// channel under a sender; the appender keeps draining meanwhile.
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return fmt.Errorf("append: %w", ErrClosed)
	}
	select {
	case s.app.ch <- req:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("append: %w", ctx.Err())
	}
}

// Stats reports the appender's counters.
func (s *Store) Stats() Stats {
	return Stats{Batches: s.app.batches.Load(), Syncs: s.app.syncs.Load(), Events: s.app.events.Load()}
}

// runAppender collects whatever requests are waiting into one transaction.
// While a commit's fsync runs, new requests queue up, so the batch size grows
// with the load by itself: one fsync per batch, never per event.
func (s *Store) runAppender() {
	defer close(s.app.done)
	var batch []*appendReq
	// idle fires when nothing was appended for sealIdle with a tail to seal
	// (seal.go): a quiet log gets an empty tail, so its reads scan nothing.
	idleAfter := sealIdle
	idle := time.NewTimer(idleAfter)
	defer idle.Stop()
	for {
		var req *appendReq
		ok := true
		if s.app.unsealed > 0 && !s.app.sealFailed {
			idle.Reset(idleAfter)
			select {
			case req, ok = <-s.app.ch:
			case <-idle.C:
				s.seal(context.Background())
				continue
			}
		} else {
			req, ok = <-s.app.ch
		}
		if !ok {
			return
		}
		batch = append(batch[:0], req)
		n := len(req.in)
		open := true
	collect:
		for n < maxBatchEvents {
			select {
			case r, ok := <-s.app.ch:
				if !ok {
					open = false
					break collect
				}
				batch = append(batch, r)
				n += len(r.in)
			default:
				break collect
			}
		}
		s.commitBatch(batch)
		clear(batch) // drop references so finished requests can be collected
		if !open {
			return
		}
	}
}

func (s *Store) commitBatch(batch []*appendReq) {
	touched, err := s.writeBatch(batch)
	if err != nil {
		// The transaction rolled back: forget the seqs we handed out so the
		// next batch re-reads the committed maximum.
		for id := range touched {
			delete(s.app.lastSeq, id)
		}
		if len(batch) > 1 {
			// One request's failure must not fail its batch-mates: retry
			// each alone. A failure of the disk itself fails them all again.
			for _, r := range batch {
				r.err, r.out = nil, nil
				s.commitBatch([]*appendReq{r})
			}
			return
		}
		for _, r := range batch {
			if r.err == nil {
				r.err = err
				r.out = nil
			}
			close(r.done)
		}
		return
	}
	// Followers first: they then start reading while the producers wake.
	ids := make([]string, 0, len(touched))
	for id := range touched {
		ids = append(ids, id)
	}
	s.watchers.committed(batch, ids)
	var events int64
	var bytes int
	for _, r := range batch {
		if r.err == nil {
			events += int64(len(r.out))
			for _, e := range r.out {
				bytes += len(e.Data) + len(e.SessionID) + len(e.Kind)
			}
		}
	}
	s.app.batches.Add(1)
	s.app.events.Add(events)
	s.app.unsealed += int(events)
	// The commit was durable: answer the callers.
	s.app.syncs.Add(1)
	for _, r := range batch {
		close(r.done)
	}
	if s.sealDue() {
		s.seal(context.Background())
	}
	s.requestCheckpoint(bytes)
	s.wakeSettler()
}

// writeBatch writes and commits one batch. Requests naming an unknown session
// fail alone (r.err set) without failing the batch.
func (s *Store) writeBatch(batch []*appendReq) (touched map[string]struct{}, err error) {
	touched = make(map[string]struct{})
	// Close cancels the store's context only after the appender has drained,
	// so a batch is never abandoned half-way; and a cancellable context would
	// make the driver start a watcher goroutine per statement.
	ctx := context.Background()
	// The writer's connection is in synchronous=FULL: the commit returns
	// once the batch's frames are durable in the -wal file, and SQLite
	// makes them visible to readers only then, so no reader or follower
	// ever sees an event a crash of the machine could take back (design:
	// persisted before it is broadcast).
	conn, err := s.writer.Conn(ctx)
	if err != nil {
		return touched, fmt.Errorf("append: %w", err)
	}
	defer conn.Close()
	return touched, s.writeBatchTx(ctx, conn, batch, touched)
}

func (s *Store) writeBatchTx(ctx context.Context, conn *sql.Conn, batch []*appendReq, touched map[string]struct{}) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("append: begin: %w", err)
	}
	defer tx.Rollback()
	var rows []any // pending insert arguments, flushed insertChunk rows at a time
	// flush writes the pending rows with the largest statements that fit.
	txIns := make(map[int]*sql.Stmt, len(s.app.inserts))
	flush := func() error {
		for off := 0; off < len(rows); {
			n := insertChunk
			for n*5 > len(rows)-off {
				n /= 2
			}
			st := txIns[n]
			if st == nil {
				st = tx.StmtContext(ctx, s.app.inserts[n])
				txIns[n] = st
			}
			if _, err := st.ExecContext(ctx, rows[off:off+n*5]...); err != nil {
				return fmt.Errorf("append: insert: %w", err)
			}
			off += n * 5
		}
		rows = rows[:0]
		return nil
	}
	for _, r := range batch {
		if err := s.loadSeqs(ctx, tx, r); err != nil {
			if errors.Is(err, ErrNotFound) {
				r.err = err
				continue
			}
			return err
		}
		r.out = make([]Event, len(r.in))
		for i, e := range r.in {
			seq := s.app.lastSeq[e.SessionID] + 1
			s.app.lastSeq[e.SessionID] = seq
			touched[e.SessionID] = struct{}{}
			ts := e.TS.UTC()
			rows = append(rows, e.SessionID, seq, nanos(ts), e.Kind, []byte(e.Data))
			if len(rows) == insertChunk*5 {
				if err := flush(); err != nil {
					return err
				}
			}
			r.out[i] = Event{SessionID: e.SessionID, Seq: seq, TS: ts, Kind: e.Kind, Data: e.Data}
		}
	}
	if len(rows) > 0 {
		if err := flush(); err != nil {
			return err
		}
	}
	if err := s.fault(); err != nil {
		return fmt.Errorf("append: commit: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("append: commit: %w", err)
	}
	return nil
}

// prepareInserts prepares the multi-row INSERTs, one per power of two up to
// insertChunk, so any row count is at most log2(insertChunk)+1 statements.
// They must exist before the appender runs: preparing inside a batch would
// wait for the writer connection the batch's own transaction holds.
//
// They are INSERT OR ROLLBACK: a plain INSERT that breaks the unique
// (session_id, seq) index half-way must undo only its own rows, so SQLite
// first copies every page the statement touches into a statement journal,
// a temporary file: with 32 KiB pages that was a seventh of the appender's
// time under load (BenchmarkFollowUnderLoad's profile), all of it syscalls.
// The appender rolls the whole batch back on any error anyway, so a
// conflict may as well roll back the transaction, which needs no such
// journal.
func (s *Store) prepareInserts(ctx context.Context) error {
	for n := 1; n <= insertChunk; n *= 2 {
		q := `INSERT OR ROLLBACK INTO events (session_id, seq, ts, kind, data) VALUES ` +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?),", n), ",")
		st, err := s.writer.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare insert of %d rows: %w", n, err)
		}
		s.app.inserts[n] = st
	}
	return nil
}

// loadSeqs makes sure lastSeq knows every session of r, reading the committed
// maximum inside the batch's transaction. It fails with ErrNotFound, before
// anything of r is written, if one of r's sessions does not exist.
func (s *Store) loadSeqs(ctx context.Context, tx *sql.Tx, r *appendReq) error {
	for _, e := range r.in {
		if _, ok := s.app.lastSeq[e.SessionID]; ok {
			continue
		}
		var exists int
		var last sql.NullInt64
		err := tx.QueryRowContext(ctx, lastSeqSQL, e.SessionID).Scan(&exists, &last)
		if err != nil {
			return fmt.Errorf("append: read last seq of %s: %w", e.SessionID, err)
		}
		if exists == 0 {
			return fmt.Errorf("append to session %s: %w", e.SessionID, ErrNotFound)
		}
		s.app.lastSeq[e.SessionID] = last.Int64
	}
	return nil
}

// Events returns up to limit events of a session with seq > afterSeq, in seq
// order. limit <= 0 means no limit. An unknown session has no events.
//
// Replay is the hot read path (every follower, every `logs`), so it talks to
// the driver directly: database/sql would copy each row's data a second time
// and add per-row locking and conversions that cost more than SQLite's step.
func (s *Store) Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	s.stmtsMu.RLock()
	defer s.stmtsMu.RUnlock()
	if s.stmtsClosed {
		return nil, fmt.Errorf("read events of %s: %w", sessionID, ErrClosed)
	}
	conn, err := s.reader.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("read events of %s: %w", sessionID, err)
	}
	defer conn.Close()
	var out []Event
	err = conn.Raw(func(dc any) error {
		st, err := s.eventsStmt(dc)
		if err != nil {
			return err
		}
		// A page is short, so instead of handing ctx to the driver (which
		// starts an interrupt watcher goroutine per query) we check it
		// between rows.
		rows, err := st.QueryContext(context.WithoutCancel(ctx), []driver.NamedValue{
			{Ordinal: 1, Value: sessionID},
			{Ordinal: 2, Value: afterSeq},
			{Ordinal: 3, Value: int64(limit)},
		})
		if err != nil {
			return err
		}
		defer rows.Close()
		out = make([]Event, 0, min(max(limit, 16), 1024))
		dest := make([]driver.Value, 4)
		kinds := make(map[string]string)
		for {
			if len(out)%256 == 255 && ctx.Err() != nil {
				return ctx.Err()
			}
			if err := rows.Next(dest); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			seq, ok1 := dest[0].(int64)
			ts, ok2 := dest[1].(int64)
			kind, ok3 := dest[2].(string)
			data, ok4 := dest[3].([]byte) // freshly allocated by the driver: ours to keep
			if !ok1 || !ok2 || !ok3 || !ok4 {
				return fmt.Errorf("unexpected column types %T %T %T %T", dest[0], dest[1], dest[2], dest[3])
			}
			// One string per distinct kind: a log has a handful of kinds and
			// millions of events.
			if k, ok := kinds[kind]; ok {
				kind = k
			} else {
				kinds[kind] = kind
			}
			if data == nil {
				data = []byte{} // SQLite returns an empty blob as NULL pointer
			}
			out = append(out, Event{SessionID: sessionID, Seq: seq, TS: fromNanos(ts), Kind: kind, Data: data})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("read events of %s: %w", sessionID, err)
	}
	return out, nil
}

// LastSeq returns the highest seq of a session's log, 0 when it is empty.
func (s *Store) LastSeq(ctx context.Context, sessionID string) (int64, error) {
	var exists int
	var last sql.NullInt64
	err := s.reader.QueryRowContext(ctx, lastSeqSQL, sessionID).Scan(&exists, &last)
	if err != nil {
		return 0, fmt.Errorf("last seq of %s: %w", sessionID, err)
	}
	if exists == 0 {
		return 0, fmt.Errorf("last seq of %s: %w", sessionID, ErrNotFound)
	}
	return last.Int64, nil
}

// eventsStmt is the replay query prepared on one reader connection, once:
// a follower's read of the one or two events that woke it would otherwise
// spend as long parsing and planning the query as running it. A driver
// connection is used by one caller at a time (database/sql holds it for
// Raw), and so is its statement.
func (s *Store) eventsStmt(dc any) (driver.StmtQueryContext, error) {
	if st, ok := s.stmts.Load(dc); ok {
		return st.(driver.StmtQueryContext), nil
	}
	p, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, fmt.Errorf("driver connection %T cannot prepare", dc)
	}
	st, err := p.PrepareContext(context.Background(), selectEventsSQL)
	if err != nil {
		return nil, err
	}
	q, ok := st.(driver.StmtQueryContext)
	if !ok {
		st.Close()
		return nil, fmt.Errorf("driver statement %T cannot query", st)
	}
	s.stmts.Store(dc, q)
	return q, nil
}

// closeStmts finalises the statements prepared by eventsStmt; Close calls
// it before closing their connections.
func (s *Store) closeStmts() error {
	s.stmtsMu.Lock()
	defer s.stmtsMu.Unlock()
	s.stmtsClosed = true
	var errs []error
	s.stmts.Range(func(k, v any) bool {
		errs = append(errs, v.(driver.Stmt).Close())
		s.stmts.Delete(k)
		return true
	})
	return errors.Join(errs...)
}
