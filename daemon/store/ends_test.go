package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// diskFull is an injected write failure that reads like SQLite's own.
var errDiskFull = errors.New("database or disk is full (13)")

type faultSwitch struct{ on atomic.Bool }

func (f *faultSwitch) fn() error {
	if f.on.Load() {
		return errDiskFull
	}
	return nil
}

func openFaulty(t *testing.T, path string, f *faultSwitch) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{Path: path, WriteFault: f.fn})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func fastSettle(t *testing.T) {
	old := settleEvery
	settleEvery = 20 * time.Millisecond
	t.Cleanup(func() { settleEvery = old })
}

// An end that cannot be written is shown at once, ends followers, and is
// written when writes succeed again.
func TestEndKeptWhileDiskFull(t *testing.T) {
	fastSettle(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "reeve.db")
	var fault faultSwitch
	s := openFaulty(t, path, &fault)
	sess := newSession(t, s)
	if _, err := s.UpdateSessionStatus(ctx, sess.ID, StatusRunning, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, sess.ID, "terminal-output", []byte(`{"text":"a"}`)); err != nil {
		t.Fatal(err)
	}

	followed := make(chan error, 1)
	var seen []int64
	go func() {
		followed <- s.Follow(ctx, sess.ID, 0, func(e Event) error { seen = append(seen, e.Seq); return nil })
	}()

	fault.on.Store(true)
	if _, err := s.Append(ctx, sess.ID, "terminal-output", []byte(`{"text":"b"}`)); err == nil {
		t.Fatal("append succeeded on a full disk")
	}
	if err := s.SetManifest(ctx, sess.ID, []byte(`{}`)); err == nil {
		t.Fatal("set manifest succeeded on a full disk")
	}
	// A non-terminal status is not kept: the caller hears of the failure.
	if _, err := s.UpdateSessionStatus(ctx, sess.ID, StatusIdle, ""); err == nil || errors.Is(err, ErrEndPending) {
		t.Fatalf("idle on a full disk: %v", err)
	}
	got, err := s.UpdateSessionStatus(ctx, sess.ID, StatusFailed, "the end could not be recorded")
	if !errors.Is(err, ErrEndPending) {
		t.Fatalf("end on a full disk: %v", err)
	}
	if got.Status != StatusFailed || got.EndedAt.IsZero() {
		t.Fatalf("returned %+v", got)
	}
	if s.PendingEnds() != 1 {
		t.Fatalf("pending ends %d", s.PendingEnds())
	}
	// Every reader sees the end.
	if r, _ := s.Session(ctx, sess.ID); r.Status != StatusFailed || r.StatusReason != "the end could not be recorded" {
		t.Fatalf("session reads %+v", r)
	}
	if act, _ := s.ListSessions(ctx, SessionFilter{Statuses: ActiveStatuses}); len(act) != 0 {
		t.Fatalf("active sessions %+v", act)
	}
	if ended, _ := s.ListSessions(ctx, SessionFilter{Statuses: []Status{StatusFailed}}); len(ended) != 1 {
		t.Fatalf("failed sessions %+v", ended)
	}
	if n, _ := s.CountActiveSessions(ctx); n != 0 {
		t.Fatalf("active count %d", n)
	}
	select {
	case err := <-followed:
		if err != nil || !slices.Equal(seen, []int64{1}) {
			t.Fatalf("follow ended with %v after %v", err, seen)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a follower of a session whose end could not be written did not end")
	}
	// Retries keep failing while the disk is full.
	time.Sleep(100 * time.Millisecond)
	if s.PendingEnds() != 1 {
		t.Fatalf("pending ends %d while the disk is full", s.PendingEnds())
	}

	fault.on.Store(false)
	deadline := time.Now().Add(30 * time.Second)
	for s.PendingEnds() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the kept end was not written once space returned")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Close()
	again := openAt(t, path)
	if r, _ := again.Session(ctx, sess.ID); r.Status != StatusFailed || r.EndedAt.IsZero() {
		t.Fatalf("after reopening %+v", r)
	}
	if len(again.RecoveredEnds()) != 0 {
		t.Fatalf("recovered %v, nothing was left to recover", again.RecoveredEnds())
	}
}

// An end kept while the worker stops is written by the next Open, from the
// file allocated beforehand.
func TestEndRecoveredAtNextOpen(t *testing.T) {
	fastSettle(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "reeve.db")
	var fault faultSwitch
	s := openFaulty(t, path, &fault)
	a, b := newSession(t, s), newSession(t, s)
	for _, id := range []string{a.ID, b.ID} {
		if _, err := s.UpdateSessionStatus(ctx, id, StatusRunning, ""); err != nil {
			t.Fatal(err)
		}
	}
	info, err := os.Stat(path + ".ends")
	if err != nil || info.Size() != endsFileSize || info.Mode().Perm() != 0o600 {
		t.Fatalf("ends file: %v %v", info, err)
	}
	fault.on.Store(true)
	if _, err := s.UpdateSessionStatus(ctx, a.ID, StatusFailed, "disk full at the end"); !errors.Is(err, ErrEndPending) {
		t.Fatal(err)
	}
	// A later end of a session replaces its pending one.
	if _, err := s.UpdateSessionStatus(ctx, a.ID, StatusKilled, "stopped"); !errors.Is(err, ErrEndPending) {
		t.Fatal(err)
	}
	// An unknown session is not kept.
	if _, err := s.UpdateSessionStatus(ctx, "nope", StatusFailed, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	s.Close()

	again := openAt(t, path)
	if got := again.RecoveredEnds(); !slices.Equal(got, []string{a.ID}) {
		t.Fatalf("recovered %v", got)
	}
	if r, _ := again.Session(ctx, a.ID); r.Status != StatusKilled || r.StatusReason != "stopped" || r.EndedAt.IsZero() {
		t.Fatalf("recovered session %+v", r)
	}
	if r, _ := again.Session(ctx, b.ID); r.Status != StatusRunning {
		t.Fatalf("other session %+v", r)
	}
	again.Close()
	// Applied once: the third open finds nothing.
	third := openAt(t, path)
	if got := third.RecoveredEnds(); len(got) != 0 {
		t.Fatalf("recovered twice: %v", got)
	}
}

// A status written later supersedes the kept one, which must then not
// overwrite it when the settler runs.
func TestEndPendingSupersededByWrite(t *testing.T) {
	fastSettle(t)
	ctx := context.Background()
	var fault faultSwitch
	s := openFaulty(t, filepath.Join(t.TempDir(), "reeve.db"), &fault)
	sess := newSession(t, s)
	fault.on.Store(true)
	if _, err := s.UpdateSessionStatus(ctx, sess.ID, StatusFailed, "x"); !errors.Is(err, ErrEndPending) {
		t.Fatal(err)
	}
	fault.on.Store(false)
	if _, err := s.UpdateSessionStatus(ctx, sess.ID, StatusRunning, "resumed"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if r, _ := s.Session(ctx, sess.ID); r.Status != StatusRunning || s.PendingEnds() != 0 {
		t.Fatalf("session %+v, %d pending", r, s.PendingEnds())
	}
}

// Batches commit without an fsync and the syncer makes them durable behind
// them: every other write must still find the connection fsyncing its own
// commits, and the appends' callers are answered only after a sync.
func TestAppendsSyncedApartFromCommits(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	sess := newSession(t, s)
	for range 20 {
		if _, err := s.Append(ctx, sess.ID, "terminal-output", payload256); err != nil {
			t.Fatal(err)
		}
	}
	var sync int
	if err := s.writer.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil || sync != 2 {
		t.Fatalf("writer connection synchronous=%d (%v), want 2 (FULL)", sync, err)
	}
	st := s.Stats()
	if st.Events != 20 || st.Syncs == 0 || st.Syncs > st.Batches {
		t.Fatalf("stats %+v", st)
	}
}
