package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrStopFollow may be returned by a Follow callback to end the follow
// cleanly: Follow then returns nil.
var ErrStopFollow = errors.New("stop following")

// followPage is how many events Follow reads per query: big enough to make
// replay cheap, small enough that a slow callback holds little memory.
const followPage = 1024

// watchHub fans "something changed in session X" out to watchers. A signal
// carries no data: each watcher owns one slot that coalesces any number of
// signals, so a slow watcher costs one pending signal, never a growing buffer.
type watchHub struct {
	mu sync.Mutex
	m  map[string]map[chan struct{}]struct{}
	// statusGen counts status changes per session made through this store,
	// so a follower re-reads the session row only when it may have changed
	// instead of after every wake-up.
	statusGen map[string]uint64
}

func (h *watchHub) add(sessionID string) chan struct{} {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string]map[chan struct{}]struct{})
	}
	set := h.m[sessionID]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		h.m[sessionID] = set
	}
	set[ch] = struct{}{}
	return ch
}

func (h *watchHub) remove(sessionID string, ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.m[sessionID]
	delete(set, ch)
	if len(set) == 0 {
		delete(h.m, sessionID)
	}
}

// statusChanged records a committed status change and wakes the watchers.
func (h *watchHub) statusChanged(sessionIDs ...string) {
	h.mu.Lock()
	if h.statusGen == nil {
		h.statusGen = make(map[string]uint64)
	}
	for _, id := range sessionIDs {
		h.statusGen[id]++
	}
	h.mu.Unlock()
	h.notify(sessionIDs...)
}

func (h *watchHub) generation(sessionID string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.statusGen[sessionID]
}

func (h *watchHub) notify(sessionIDs ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range sessionIDs {
		for ch := range h.m[id] {
			select {
			case ch <- struct{}{}:
			default: // a signal is already pending; it covers this one too
			}
		}
	}
}

// Watch returns a channel that receives a signal after each committed change
// to the session: a batch that appended to its log, or a status change.
// Signals coalesce (the channel has one slot), so after a signal the watcher
// must re-read from its own cursor. cancel releases the watch; the channel is
// never closed.
func (s *Store) Watch(sessionID string) (<-chan struct{}, func()) {
	ch := s.watchers.add(sessionID)
	var once sync.Once
	return ch, func() { once.Do(func() { s.watchers.remove(sessionID, ch) }) }
}

// Follow delivers a session's events with seq > afterSeq to fn, in order,
// exactly once each: first the stored ones, then new ones as they are
// committed. fn runs on the caller's goroutine; a slow fn simply falls behind
// and catches up from the store, so nothing is dropped and nothing is
// buffered beyond one page.
//
// Follow returns
//   - nil once the session has a terminal status and every event committed
//     before that status change has been delivered (events appended after
//     the session ended are left to a later Follow or Events call);
//   - nil when fn returns ErrStopFollow, and fn's error for any other error;
//   - ctx's error when ctx ends, ErrClosed when the store is closed;
//   - ErrNotFound (wrapped) when the session does not exist.
func (s *Store) Follow(ctx context.Context, sessionID string, afterSeq int64, fn func(Event) error) error {
	return s.FollowBatches(ctx, sessionID, afterSeq, func(evs []Event) error {
		for _, e := range evs {
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	})
}

// FollowBatches is Follow handing fn every event that is ready at once, up
// to a page: a replay or a follower that fell behind gets many per call, a
// follower that keeps up usually one. fn must not keep evs after it returns
// an error; on success Follow resumes after the last of them. When fn
// returns an error for a batch, none of that batch counts as delivered.
func (s *Store) FollowBatches(ctx context.Context, sessionID string, afterSeq int64, fn func([]Event) error) error {
	// Watch before the first read: a commit after this point signals us, and
	// a commit before it is visible to the read, so there is no gap.
	signal, cancel := s.Watch(sessionID)
	defer cancel()
	cursor := afterSeq
	drain := func() error {
		for {
			evs, err := s.Events(ctx, sessionID, cursor, followPage)
			if err != nil {
				return fmt.Errorf("follow %s: %w", sessionID, err)
			}
			if len(evs) > 0 {
				if err := fn(evs); err != nil {
					return err
				}
				cursor = evs[len(evs)-1].Seq
			}
			if len(evs) < followPage {
				return nil
			}
		}
	}
	checked, first := uint64(0), true
	for {
		if err := drain(); err != nil {
			return stopErr(err)
		}
		// The generation is bumped (and then a signal sent) after a status
		// change commits, so reading it before the row never misses one.
		if gen := s.watchers.generation(sessionID); first || gen != checked {
			first, checked = false, gen
			sess, err := s.Session(ctx, sessionID)
			if err != nil {
				return fmt.Errorf("follow: %w", err)
			}
			if sess.Status.Terminal() {
				// Events appended before the status change committed before
				// it, so this last read (started after we saw the status)
				// has them.
				return stopErr(drain())
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("follow %s: %w", sessionID, ctx.Err())
		case <-s.ctx.Done():
			return fmt.Errorf("follow %s: %w", sessionID, ErrClosed)
		case <-signal:
		}
	}
}

func stopErr(err error) error {
	if errors.Is(err, ErrStopFollow) {
		return nil
	}
	return err
}
