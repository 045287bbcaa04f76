package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Ends that cannot be written.
//
// When the disk is full, the end of a session (its terminal status) cannot be
// committed, and a session whose process is gone would stay "running" for
// ever: `wait` would hang and nothing would say why. So a terminal status
// whose write fails is kept in memory instead of lost: every read of the
// session (Session, ListSessions, Follow) sees it at once, followers are
// woken so that they end, and a settler goroutine writes it as soon as a
// write succeeds again.
//
// The memory of a worker does not survive it, so pending ends are also kept
// in a small file beside the database, allocated in full when the store
// opens: overwriting bytes a file already owns needs no free space on the
// usual file systems (ext4, xfs, tmpfs), so the record can be made on a full
// disk. The next Open applies what it finds there. On a copy-on-write file
// system the overwrite may fail too; the session is then ended as
// interrupted by the next worker, as after a crash.

// ErrEndPending is wrapped by UpdateSessionStatus when a terminal status was
// accepted and is visible to readers but could not be written yet (for
// example the disk is full); the store writes it once it can.
var ErrEndPending = errors.New("the end is not written yet (kept in memory and retried)")

const (
	// endsFileSize is the size of the pending-ends file, allocated once.
	// An entry takes about 100 bytes plus its reason.
	endsFileSize = 32 << 10
	// maxEndReason bounds a reason kept in the file.
	maxEndReason = 400
)

// settleEvery is how often pending ends are retried while there are any.
// A variable so that tests need not wait seconds.
var settleEvery = 2 * time.Second

// pendingEnd is a terminal status that is not written yet.
type pendingEnd struct {
	Session string `json:"session"`
	Status  Status `json:"status"`
	Reason  string `json:"reason"`
	At      int64  `json:"at"` // unix nanoseconds: when the session ended
}

// endBook holds the pending ends and their file.
type endBook struct {
	// writing orders the settler's write of a kept end with every status
	// write: without it the settler could read an end, a newer status be
	// written and the end dropped, and the settler then overwrite that
	// newer status with the stale end.
	writing sync.Mutex
	mu      sync.Mutex
	m       map[string]pendingEnd
	file    *os.File // nil when it could not be made: memory only
	n       atomic.Int32
	wake    chan struct{}
	// recovered lists the sessions ended at Open from the file.
	recovered []string
}

func (b *endBook) get(id string) (pendingEnd, bool) {
	if b.n.Load() == 0 {
		return pendingEnd{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.m[id]
	return e, ok
}

func (b *endBook) put(e pendingEnd) {
	b.mu.Lock()
	b.m[e.Session] = e
	b.n.Store(int32(len(b.m)))
	b.saveLocked()
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// drop forgets id's pending end; with at != 0 only if it is still that one.
func (b *endBook) drop(id string, at int64) {
	if b.n.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.m[id]; !ok || (at != 0 && e.At != at) {
		return
	}
	delete(b.m, id)
	b.n.Store(int32(len(b.m)))
	b.saveLocked()
}

func (b *endBook) list() []pendingEnd {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]pendingEnd, 0, len(b.m))
	for _, e := range b.m {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b pendingEnd) int { return cmp.Compare(a.At, b.At) })
	return out
}

// saveLocked overwrites the file in place with the pending ends, oldest
// first, as many as fit, padded with spaces to its full size.
func (b *endBook) saveLocked() {
	if b.file == nil {
		return
	}
	list := make([]pendingEnd, 0, len(b.m))
	for _, e := range b.m {
		if len(e.Reason) > maxEndReason {
			e.Reason = e.Reason[:maxEndReason]
		}
		list = append(list, e)
	}
	slices.SortFunc(list, func(a, b pendingEnd) int { return cmp.Compare(a.At, b.At) })
	var raw []byte
	for {
		raw, _ = json.Marshal(list)
		if len(raw) <= endsFileSize || len(list) == 0 {
			break
		}
		list = list[:len(list)-1] // the newest stays in memory only
	}
	buf := bytes.Repeat([]byte{' '}, endsFileSize)
	copy(buf, raw)
	if len(list) == 0 {
		copy(buf, "[]")
	}
	if _, err := b.file.WriteAt(buf, 0); err != nil {
		slog.Warn("store: could not record pending session ends", "err", err)
		return
	}
	if err := b.file.Sync(); err != nil {
		slog.Warn("store: could not sync pending session ends", "err", err)
	}
}

// openEnds opens (allocating when new) the pending-ends file and returns
// what it holds.
func openEnds(path string) (*os.File, []pendingEnd, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, nil, err
	}
	raw, err := io.ReadAll(io.LimitReader(f, endsFileSize+1))
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	var list []pendingEnd
	if trimmed := bytes.TrimRight(raw, " \x00\n"); len(trimmed) > 0 {
		if err := json.Unmarshal(trimmed, &list); err != nil {
			slog.Warn("store: ignoring an unreadable pending-ends file", "path", path, "err", err)
			list = nil
		}
	}
	if len(raw) != endsFileSize {
		// Write every byte (a truncate would leave a sparse file, which
		// needs free space at the first overwrite).
		buf := bytes.Repeat([]byte{' '}, endsFileSize)
		if len(list) == 0 {
			copy(buf, "[]")
		} else {
			copy(buf, bytes.TrimRight(raw, " \x00\n"))
		}
		err := f.Truncate(0)
		if err == nil {
			_, err = f.WriteAt(buf, 0)
		}
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
			return nil, list, err
		}
	}
	return f, list, nil
}

// initEnds opens the pending-ends file and writes the ends a previous
// process left in it. Sessions it ends are listed by RecoveredEnds.
func (s *Store) initEnds(ctx context.Context) {
	s.ends.m = make(map[string]pendingEnd)
	s.ends.wake = make(chan struct{}, 1)
	f, list, err := openEnds(s.path + ".ends")
	if err != nil {
		slog.Warn("store: pending session ends are kept in memory only", "err", err)
	}
	s.ends.file = f
	for _, e := range list {
		if !e.Status.Terminal() || e.Session == "" {
			continue
		}
		ok, err := s.writeEnd(ctx, e, true)
		switch {
		case err != nil:
			// Still no space: keep it for the settler.
			s.ends.m[e.Session] = e
		case ok:
			s.ends.recovered = append(s.ends.recovered, e.Session)
		}
	}
	s.ends.n.Store(int32(len(s.ends.m)))
	if len(list) > 0 {
		s.ends.mu.Lock()
		s.ends.saveLocked()
		s.ends.mu.Unlock()
	}
}

// RecoveredEnds lists the sessions this Open ended from the ends a previous
// process could not write: their logs miss whatever came after the disk
// filled up.
func (s *Store) RecoveredEnds() []string { return slices.Clone(s.ends.recovered) }

// PendingEnds counts the ends accepted but not written yet.
func (s *Store) PendingEnds() int { return int(s.ends.n.Load()) }

// writeEnd writes a pending end to the session row. With onlyActive it
// leaves a session that has meanwhile ended otherwise alone; ok reports
// whether the row changed.
func (s *Store) writeEnd(ctx context.Context, e pendingEnd, onlyActive bool) (ok bool, err error) {
	if err := s.fault(); err != nil {
		return false, err
	}
	q := `UPDATE sessions SET status = ?, status_reason = ?, updated_at = ?,
		ended_at = CASE WHEN ended_at IS NULL THEN ? ELSE ended_at END WHERE id = ?`
	args := []any{string(e.Status), e.Reason, nanos(time.Now()), e.At, e.Session}
	if onlyActive {
		list, a := inList(ActiveStatuses)
		q += ` AND status IN ` + list
		args = append(args, a...)
	}
	res, err := s.writer.ExecContext(ctx, q, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// keepEnd accepts a terminal status whose write failed with cause.
func (s *Store) keepEnd(ctx context.Context, id string, status Status, reason string, at int64, cause error) (Session, error) {
	sess, err := s.sessionFrom(ctx, s.reader, id)
	if err != nil {
		return Session{}, fmt.Errorf("update session %s: %w", id, err)
	}
	s.ends.put(pendingEnd{Session: id, Status: status, Reason: reason, At: at})
	s.watchers.statusChanged(id)
	slog.Warn("store: a session's end could not be written; kept until it can be", "session", id, "status", status, "err", cause)
	return s.overlay(sess), fmt.Errorf("update session %s: %w: %v", id, ErrEndPending, cause)
}

// overlay applies a pending end to a session read from the database.
func (s *Store) overlay(sess Session) Session {
	e, ok := s.ends.get(sess.ID)
	if !ok {
		return sess
	}
	sess.Status, sess.StatusReason = e.Status, e.Reason
	sess.UpdatedAt = fromNanos(e.At)
	if sess.EndedAt.IsZero() {
		sess.EndedAt = fromNanos(e.At)
	}
	return sess
}

// runSettler writes pending ends once writes succeed again: it tries every
// settleEvery while any is pending, and after each commit of the appender
// (a commit is a sign that space came back).
func (s *Store) runSettler() {
	defer close(s.settleDone)
	t := time.NewTimer(settleEvery)
	t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.ends.wake:
		case <-t.C:
		}
		s.settle()
		if s.ends.n.Load() > 0 {
			t.Reset(settleEvery)
		}
	}
}

// settle tries to write every pending end, stopping at the first failure.
func (s *Store) settle() {
	for _, e := range s.ends.list() {
		s.ends.writing.Lock()
		if cur, ok := s.ends.get(e.Session); !ok || cur.At != e.At {
			s.ends.writing.Unlock() // superseded meanwhile
			continue
		}
		if _, err := s.writeEnd(s.ctx, e, false); err != nil {
			s.ends.writing.Unlock()
			return
		}
		s.ends.drop(e.Session, e.At)
		s.ends.writing.Unlock()
		s.watchers.statusChanged(e.Session)
		slog.Info("store: wrote a session's end that had been kept in memory", "session", e.Session, "status", e.Status)
	}
}

// wakeSettler is called after a successful commit.
func (s *Store) wakeSettler() {
	if s.ends.n.Load() == 0 {
		return
	}
	select {
	case s.ends.wake <- struct{}{}:
	default:
	}
}

// fault returns the injected write failure, if any (Options.WriteFault).
func (s *Store) fault() error {
	if s.writeFault == nil {
		return nil
	}
	return s.writeFault()
}
