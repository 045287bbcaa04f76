package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
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

// TestFollowersFromMemoryGetEveryEventOnce: followers that keep up take
// events from the session's tail in memory. Whether they start with the
// session, join in the middle or stall past the tail's bounds, each gets
// every event once, in order, with the data appended, even though the
// producer overwrites its buffer as soon as Append returns.
func TestFollowersFromMemoryGetEveryEventOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := openTest(t)
	const sessions, total, stallAt = 3, 600, 100
	type result struct {
		seqs []int64
		err  error
	}
	var wg sync.WaitGroup
	results := make(chan result, sessions*3)
	follow := func(sessionID string, stall bool, appended *atomic.Int64) {
		defer wg.Done()
		var seqs []int64
		err := s.Follow(ctx, sessionID, 0, func(e Event) error {
			if want := fmt.Sprintf(`{"i":%d}`, e.Seq); string(e.Data) != want {
				return fmt.Errorf("seq %d has data %s, want %s", e.Seq, e.Data, want)
			}
			// Stall until the producer is well past the tail's bounds.
			for stall && e.Seq == stallAt && appended.Load() < stallAt+tailEvents+50 && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			seqs = append(seqs, e.Seq)
			return nil
		})
		results <- result{seqs, err}
	}
	for range sessions {
		sess := newSession(t, s)
		var appended atomic.Int64
		wg.Add(2)
		go follow(sess.ID, false, &appended)
		go follow(sess.ID, true, &appended)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make(json.RawMessage, 0, 32)
			for i := 1; i <= total; i++ {
				if i == total/2 {
					wg.Add(1)
					go follow(sess.ID, false, &appended) // joins in the middle
				}
				buf = fmt.Appendf(buf[:0], `{"i":%d}`, i)
				if _, err := s.Append(ctx, sess.ID, "terminal-output", buf); err != nil {
					t.Error(err)
					return
				}
				clear(buf) // the producer's buffer is its own again
				appended.Store(int64(i))
			}
			if _, err := s.UpdateSessionStatus(ctx, sess.ID, StatusCompleted, ""); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	close(results)
	n := 0
	for r := range results {
		if r.err != nil {
			t.Fatal(r.err)
		}
		checkExactly(t, r.seqs, total)
		n++
	}
	if n != sessions*3 {
		t.Fatalf("%d followers ended, want %d", n, sessions*3)
	}
	if len(s.watchers.tails) != 0 {
		t.Fatalf("%d tails left after every follower ended", len(s.watchers.tails))
	}
}

// TestLogTailStaysBoundedAndContiguous: a watched session's tail keeps at
// most tailEvents events and tailBytes bytes (but always the newest), and
// answers only for cursors inside it.
func TestLogTailStaysBoundedAndContiguous(t *testing.T) {
	var h watchHub
	ch := h.add("s")
	commit := func(seq int64, size int) {
		data := json.RawMessage(`"` + string(make([]byte, size)) + `"`)
		h.committed([]*appendReq{{out: []Event{{SessionID: "s", Seq: seq, Data: data}, {SessionID: "u", Seq: seq, Data: data}}}}, []string{"s", "u"})
	}
	for seq := int64(1); seq <= 1000; seq++ {
		commit(seq, 10)
	}
	if _, ok := h.tails["u"]; ok {
		t.Fatal("an unwatched session has a tail")
	}
	tl := h.tails["s"]
	if len(tl.evs) != tailEvents || tl.evs[0].Seq != 1000-tailEvents+1 {
		t.Fatalf("tail holds %d events from %d, want the newest %d", len(tl.evs), tl.evs[0].Seq, tailEvents)
	}
	for _, c := range []struct {
		after int64
		ok    bool
		n     int
	}{{0, false, 0}, {1000 - tailEvents - 1, false, 0}, {1000 - tailEvents, true, 10}, {995, true, 5}, {1000, true, 0}, {1001, false, 0}} {
		evs, ok := h.since("s", c.after, 10)
		if ok != c.ok || len(evs) != c.n || (c.n > 0 && evs[0].Seq != c.after+1) {
			t.Fatalf("since(%d) = %d events, %v; want %d, %v", c.after, len(evs), ok, c.n, c.ok)
		}
	}
	commit(1001, tailBytes/2)
	commit(1002, tailBytes/2)
	if tl.bytes > tailBytes || tl.evs[len(tl.evs)-1].Seq != 1002 {
		t.Fatalf("tail holds %d bytes up to %d, want at most %d up to 1002", tl.bytes, tl.evs[len(tl.evs)-1].Seq, tailBytes)
	}
	commit(1003, 2*tailBytes) // larger than the bound: kept alone
	if len(tl.evs) != 1 || tl.evs[0].Seq != 1003 {
		t.Fatalf("tail after an oversized event = %d events", len(tl.evs))
	}
	commit(1010, 1) // not the next seq: the tail starts over, no gap
	if evs, ok := h.since("s", 1003, 10); ok {
		t.Fatalf("since(1003) across a gap = %v, want the store asked", evs)
	}
	h.remove("s", ch)
	if len(h.tails) != 0 {
		t.Fatal("the tail outlived its last watcher")
	}
}
