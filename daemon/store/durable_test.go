package store

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// Every batch commits with its own fsync, on a writer connection in
// synchronous=FULL (the seal alone runs in NORMAL and sets FULL again
// before it lets the connection go), so the durable mark is the last seq:
// nothing a reader can see is waiting for the disk.
func TestEveryVisibleEventIsDurable(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	sess := newSession(t, s)
	if n, err := s.DurableSeq(ctx, sess.ID); n != 0 || err != nil {
		t.Fatalf("empty log: %d %v", n, err)
	}
	if _, err := s.DurableSeq(ctx, "no-such-session"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	const producers, each = 20, 50
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := s.Append(ctx, sess.ID, "agent-message", []byte(`{"text":"x"}`)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n, err := s.DurableSeq(ctx, sess.ID); n != producers*each || err != nil {
		t.Fatalf("after %d appends: durable at %d %v", producers*each, n, err)
	}
	if st := s.Stats(); st.Syncs != st.Batches || st.Events != producers*each {
		t.Fatalf("%+v: want one fsync a batch", st)
	}
	var mode int
	if err := s.writer.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&mode); err != nil || mode != 2 {
		t.Fatalf("the writer's synchronous mode is %d (%v), want 2 (FULL)", mode, err)
	}
}
