package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// syncSwitch is an injected fsync of DurableSeq: it fails, or blocks
// until released, or syncs.
type syncSwitch struct {
	fail  atomic.Bool
	block atomic.Pointer[chan struct{}] // set: the fsync waits until it is closed
	calls atomic.Int32
}

var errSyncFailed = errors.New("input/output error")

func (w *syncSwitch) fn(f *os.File) error {
	w.calls.Add(1)
	if b := w.block.Load(); b != nil {
		<-*b
	}
	if w.fail.Load() {
		return errSyncFailed
	}
	return f.Sync()
}

// Events visible in the log are not durable until an fsync says so: a
// failed fsync gives no mark, a slow one gives none before the caller's
// deadline, and the next good one covers everything committed.
func TestDurableSeqWaitsForItsFsync(t *testing.T) {
	ctx := context.Background()
	var w syncSwitch
	s, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "reeve.db"), SyncFault: w.fn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	sess := newSession(t, s)

	// An empty log is durable at 0 without an fsync.
	if n, err := s.DurableSeq(ctx, sess.ID); n != 0 || err != nil || w.calls.Load() != 0 {
		t.Fatalf("empty log: %d %v (%d fsyncs)", n, err, w.calls.Load())
	}
	if _, err := s.DurableSeq(ctx, "no-such-session"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	for i := 0; i < 5; i++ {
		if _, err := s.Append(ctx, sess.ID, "agent-message", []byte(`{"text":"x"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.DurableSeq(ctx, sess.ID); n != 5 || err != nil {
		t.Fatalf("after 5 appends: %d %v", n, err)
	}

	// The fsync fails: the events are visible, no mark is given.
	w.fail.Store(true)
	if _, err := s.Append(ctx, sess.ID, "agent-message", []byte(`{"text":"y"}`)); err != nil {
		t.Fatal(err)
	}
	if evs, err := s.Events(ctx, sess.ID, 5, 0); err != nil || len(evs) != 1 {
		t.Fatalf("visible: %v %v", evs, err)
	}
	if n, err := s.DurableSeq(ctx, sess.ID); !errors.Is(err, errSyncFailed) || n != 0 {
		t.Fatalf("failed fsync: %d %v", n, err)
	}

	// A slow fsync: the caller's deadline ends the wait with no mark.
	w.fail.Store(false)
	release := make(chan struct{})
	w.block.Store(&release)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	n, err := s.DurableSeq(short, sess.ID)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || n != 0 {
		t.Fatalf("slow fsync: %d %v", n, err)
	}
	w.block.Store(nil)
	close(release)
	if n, err := s.DurableSeq(ctx, sess.ID); n != 6 || err != nil {
		t.Fatalf("after the disk recovered: %d %v", n, err)
	}
}
