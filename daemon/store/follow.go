package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
//
// Beside the signals the hub keeps, for each watched session, the tail of
// its log as committed (tailEvents, tailBytes): a follower that keeps up
// takes the events that woke it from there instead of querying SQLite, which
// was a fifth of the worker's time for one busy followed session. The tail
// is one per session, shared by its followers, and dropped with its last
// watcher; a follower whose cursor is not inside it reads the store.
type watchHub struct {
	mu sync.Mutex
	m  map[string]map[chan struct{}]struct{}
	// tails holds the committed tail of each watched session's log.
	tails map[string]*logTail
	// storeOnly makes followers read the store after every signal, as they
	// did before the tails: the baseline of BenchmarkFollowBusySession.
	storeOnly bool
	// statusGen counts status changes per session made through this store,
	// so a follower re-reads the session row only when it may have changed
	// instead of after every wake-up.
	statusGen map[string]uint64
}

// The bounds of a watched session's tail: enough for the events of the last
// few commits, which is all a follower that keeps up needs.
const (
	tailEvents = 256
	tailBytes  = 256 << 10
)

// logTail is the newest committed events of one session, oldest first,
// with consecutive seqs.
type logTail struct {
	evs   []Event
	bytes int
}

func (t *logTail) add(e Event) {
	if n := len(t.evs); n > 0 && t.evs[n-1].Seq+1 != e.Seq {
		// Not the next event (nothing else writes the log, but a tail
		// must never hide a gap): start over from this one.
		clear(t.evs)
		t.evs, t.bytes = t.evs[:0], 0
	}
	// Our own copy: the appender's events share their data with the
	// producer, which may reuse it once Append has returned.
	e.Data = slices.Clone(e.Data)
	t.evs = append(t.evs, e)
	t.bytes += len(e.Data)
	drop := 0
	for len(t.evs)-drop > 1 && (len(t.evs)-drop > tailEvents || t.bytes > tailBytes) {
		t.bytes -= len(t.evs[drop].Data)
		drop++
	}
	if drop > 0 {
		clear(t.evs[:drop])
		t.evs = t.evs[drop:]
	}
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
		delete(h.tails, sessionID)
	}
}

// committed adds a committed batch's events to the tails of the watched
// sessions among them, then wakes those sessions' watchers. The appender
// calls it after the commit and before any producer of the batch hears of
// it.
func (h *watchHub) committed(batch []*appendReq, sessionIDs []string) {
	h.mu.Lock()
	for _, r := range batch {
		if r.err != nil {
			continue
		}
		for _, e := range r.out {
			if _, watched := h.m[e.SessionID]; !watched {
				continue
			}
			t := h.tails[e.SessionID]
			if t == nil {
				if h.tails == nil {
					h.tails = make(map[string]*logTail)
				}
				t = &logTail{}
				h.tails[e.SessionID] = t
			}
			t.add(e)
		}
	}
	h.signalLocked(sessionIDs)
	h.mu.Unlock()
}

// since returns up to limit events of the session's tail after seq afterSeq,
// and whether the tail could answer: it has the event after afterSeq, or
// afterSeq is its newest. A false answer means "ask the store". The events
// are the caller's; their Data is shared and must not be modified.
func (h *watchHub) since(sessionID string, afterSeq int64, limit int) ([]Event, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tails[sessionID]
	if t == nil || len(t.evs) == 0 || h.storeOnly {
		return nil, false
	}
	first, last := t.evs[0].Seq, t.evs[len(t.evs)-1].Seq
	if afterSeq < first-1 || afterSeq > last {
		return nil, false
	}
	i := int(afterSeq - (first - 1))
	return slices.Clone(t.evs[i:min(len(t.evs), i+limit)]), true
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
	h.signalLocked(sessionIDs)
}

func (h *watchHub) signalLocked(sessionIDs []string) {
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
// buffered for it beyond one page (the session's shared tail in memory is
// bounded too: watchHub).
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
// Events that were committed while the follower watched may come from
// memory, their Data shared with the session's other followers: fn must
// not modify it.
func (s *Store) FollowBatches(ctx context.Context, sessionID string, afterSeq int64, fn func([]Event) error) error {
	// Watch before the first read: a commit after this point signals us, and
	// a commit before it is visible to the read, so there is no gap.
	signal, cancel := s.Watch(sessionID)
	defer cancel()
	cursor := afterSeq
	// drain delivers what is committed after the cursor: from the hub's
	// tail when the cursor is inside it, else from the store. fromStore
	// forces the store: only a read that starts after a commit is sure to
	// see it, and the tail gets a batch just after its commit.
	drain := func(fromStore bool) error {
		for {
			evs, ok := []Event(nil), false
			if !fromStore {
				evs, ok = s.watchers.since(sessionID, cursor, followPage)
			}
			if !ok {
				var err error
				evs, err = s.Events(ctx, sessionID, cursor, followPage)
				if err != nil {
					return fmt.Errorf("follow %s: %w", sessionID, err)
				}
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
		// The first read is the store's: the tail may start after events
		// committed before this follower watched.
		if err := drain(first); err != nil {
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
				// it, so this last read of the store (started after we saw
				// the status) has them; the tail might not, yet.
				return stopErr(drain(true))
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
