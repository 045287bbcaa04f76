package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// produce appends n events to sess from `producers` goroutines, each event's
// data naming its producer and index, and returns once all are acknowledged.
func produce(t testing.TB, s *Store, sessionID string, producers, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < n; i += producers {
				if _, err := s.Append(context.Background(), sessionID, "terminal-output",
					json.RawMessage(fmt.Sprintf(`{"p":%d,"i":%d}`, p, i))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// checkExactly fails unless seqs is exactly 1..n in order.
func checkExactly(t testing.TB, seqs []int64, n int) {
	t.Helper()
	if len(seqs) != n {
		t.Fatalf("received %d events, want %d", len(seqs), n)
	}
	for i, seq := range seqs {
		if seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: gap or duplicate", i, seq)
		}
	}
}

func TestFollowReplaysThenContinuesLive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := openTest(t)
	sess := newSession(t, s)
	const stored, live = 700, 3000
	produce(t, s, sess.ID, 4, stored)

	var seqs []int64
	followed := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		followed <- s.Follow(ctx, sess.ID, 0, func(e Event) error {
			if e.Seq == 1 {
				close(started)
			}
			if e.SessionID != sess.ID || e.Kind != "terminal-output" || len(e.Data) == 0 {
				return fmt.Errorf("malformed event %+v", e)
			}
			seqs = append(seqs, e.Seq)
			return nil
		})
	}()
	<-started
	// Producers write while the follower is still replaying the stored part.
	produce(t, s, sess.ID, 8, live)
	if _, err := s.UpdateSessionStatus(ctx, sess.ID, StatusCompleted, ""); err != nil {
		t.Fatal(err)
	}
	if err := <-followed; err != nil {
		t.Fatalf("follow: %v", err)
	}
	checkExactly(t, seqs, stored+live)
}

func TestFollowFromCursorAndEndedSession(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	sess := newSession(t, s)
	produce(t, s, sess.ID, 1, 10)
	if _, err := s.UpdateSessionStatus(ctx, sess.ID, StatusFailed, "exit 1"); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	// An ended session is replayed from the cursor and Follow returns.
	if err := s.Follow(ctx, sess.ID, 7, func(e Event) error { seqs = append(seqs, e.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 3 || seqs[0] != 8 || seqs[2] != 10 {
		t.Fatalf("from cursor 7: %v", seqs)
	}
	if err := s.Follow(ctx, "nope", 0, func(Event) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	boom := errors.New("boom")
	if err := s.Follow(ctx, sess.ID, 0, func(Event) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("callback error: %v", err)
	}
	n := 0
	if err := s.Follow(ctx, sess.ID, 0, func(Event) error { n++; return ErrStopFollow }); err != nil || n != 1 {
		t.Fatalf("stop: %v after %d", err, n)
	}
}

func TestFollowEndsWithContextWhileIdle(t *testing.T) {
	s := openTest(t)
	sess := newSession(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := s.Follow(ctx, sess.ID, 0, func(Event) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("follow of a live idle session returned %v, want deadline exceeded", err)
	}
	// The watch is released when Follow returns.
	s.watchers.mu.Lock()
	n := len(s.watchers.m)
	s.watchers.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d watch sets left behind", n)
	}
}

func TestFollowerReconnectsDuringHeavyOutput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	s := openTest(t)
	sess := newSession(t, s)
	const total = 20000
	go func() {
		produce(t, s, sess.ID, 16, total)
		if _, err := s.UpdateSessionStatus(context.Background(), sess.ID, StatusCompleted, ""); err != nil {
			t.Error(err)
		}
	}()

	var seqs []int64
	var cursor int64
	cycles := 0
	rng := rand.New(rand.NewPCG(1, 2))
	for {
		cycles++
		// Each connection drops after a random number of events, either from
		// the callback or by cancelling its context, as a browser tab would.
		quota := 1 + rng.IntN(400)
		cctx, ccancel := context.WithCancel(ctx)
		useCancel := rng.IntN(2) == 0
		err := s.Follow(cctx, sess.ID, cursor, func(e Event) error {
			seqs = append(seqs, e.Seq)
			cursor = e.Seq
			quota--
			if quota == 0 {
				if useCancel {
					ccancel()
					return nil
				}
				return ErrStopFollow
			}
			return nil
		})
		ended := err == nil && quota > 0
		ccancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("cycle %d: %v", cycles, err)
		}
		if ctx.Err() != nil {
			t.Fatalf("timed out after %d cycles, %d events", cycles, len(seqs))
		}
		if ended {
			break
		}
	}
	checkExactly(t, seqs, total)
	if cycles < 20 {
		t.Fatalf("only %d reconnect cycles", cycles)
	}
	t.Logf("%d events over %d connections", len(seqs), cycles)
}

func TestSlowFollowerGetsEverything(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := openTest(t)
	sess := newSession(t, s)
	const total = 3000
	producersDone := make(chan struct{})
	go func() {
		defer close(producersDone)
		produce(t, s, sess.ID, 8, total)
		if _, err := s.UpdateSessionStatus(context.Background(), sess.ID, StatusKilled, "stopped by user"); err != nil {
			t.Error(err)
		}
	}()
	var seqs []int64
	err := s.Follow(ctx, sess.ID, 0, func(e Event) error {
		if e.Seq == 1 {
			// Stall until every producer is done: producers must never wait
			// for a follower, and the follower must catch up from the store.
			select {
			case <-producersDone:
			case <-ctx.Done():
				return errors.New("producers were blocked by a stalled follower")
			}
		}
		if e.Seq%100 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
		seqs = append(seqs, e.Seq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkExactly(t, seqs, total)
}

func TestWatchCoalescesSignals(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	sess := newSession(t, s)
	other, _ := s.CreateSession(ctx, NewSession{DirectoryID: sess.DirectoryID, Agent: "shell"})
	signal, cancel := s.Watch(sess.ID)
	for range 10 {
		if _, err := s.Append(ctx, sess.ID, "k", nil); err != nil {
			t.Fatal(err)
		}
	}
	if len(signal) != 1 {
		t.Fatalf("%d pending signals after 10 appends, want exactly 1", len(signal))
	}
	<-signal
	if _, err := s.Append(ctx, other.ID, "k", nil); err != nil {
		t.Fatal(err)
	}
	if len(signal) != 0 {
		t.Fatal("signalled for another session's append")
	}
	cancel()
	cancel() // idempotent
	if _, err := s.Append(ctx, sess.ID, "k", nil); err != nil {
		t.Fatal(err)
	}
	if len(signal) != 0 {
		t.Fatal("signalled after cancel")
	}
}

func TestCloseEndsFollowers(t *testing.T) {
	s := openTest(t)
	sess := newSession(t, s)
	done := make(chan error, 1)
	go func() { done <- s.Follow(context.Background(), sess.ID, 0, func(Event) error { return nil }) }()
	time.Sleep(50 * time.Millisecond) // let it reach the live wait
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("follow ended with %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a live follower outlived Close")
	}
}
