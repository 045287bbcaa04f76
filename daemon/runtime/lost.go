package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
)

// Events that cannot be recorded.
//
// When the disk is full an agent goes on producing output that the store
// cannot write. Those events are gone, but the log must say so: the
// manager counts them per session, and the next write that succeeds for the
// session (the next event, or the retry loop once a session has ended)
// puts an output-lost marker in their place, in the same transaction as
// the event that follows it. An end that could not be recorded is written
// as failed, with a status event saying why (see writeStatus).

// defaultRetryEvery is how often lost-output markers are retried.
const defaultRetryEvery = 2 * time.Second

// loss is what a session could not record.
type loss struct {
	events   int
	kinds    map[string]int
	from, to time.Time
	cause    string
	// end is the status event of an end whose own event was lost.
	end *wire.Status
	// flushing is set while one writer tries to record the marker, so that
	// two writers do not both.
	flushing bool
}

type losses struct {
	mu   sync.Mutex
	m    map[string]*loss
	n    atomic.Int32 // len(m), read without the lock on every append
	wake chan struct{}
}

// lostWrite reports whether err is the store failing to write (a full disk,
// an I/O error), as opposed to a refusal that has nothing to do with space.
func lostWrite(err error) bool {
	return err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrClosed) && !errors.Is(err, store.ErrBadData) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// lose counts an event of kind that could not be written.
func (m *Manager) lose(sessionID, kind string, err error) {
	now := time.Now().UTC()
	m.lost.mu.Lock()
	l := m.lost.m[sessionID]
	if l == nil {
		l = &loss{kinds: map[string]int{}, from: now}
		m.lost.m[sessionID] = l
		m.lost.n.Store(int32(len(m.lost.m)))
		// Once per loss, not per event: the log may be on the full disk.
		fmt.Fprintf(m.opts.Log, "worker: session %s: events cannot be recorded (%v); an output-lost event will say how many\n", sessionID, err)
	}
	l.events++
	l.kinds[kind]++
	l.to = now
	l.cause = err.Error()
	m.lost.mu.Unlock()
	select {
	case m.lost.wake <- struct{}{}:
	default:
	}
}

// loseEnd remembers the status event of an end that could not be written.
func (m *Manager) loseEnd(sessionID string, st wire.Status) {
	m.lost.mu.Lock()
	l := m.lost.m[sessionID]
	if l == nil {
		now := time.Now().UTC()
		l = &loss{kinds: map[string]int{}, from: now, to: now}
		m.lost.m[sessionID] = l
		m.lost.n.Store(int32(len(m.lost.m)))
	}
	l.end = &st
	m.lost.mu.Unlock()
	select {
	case m.lost.wake <- struct{}{}:
	default:
	}
}

// takeLoss returns the events that record a session's loss, to be written
// before anything else of the session, and marks it being flushed; done
// must then be called with whether they were written.
func (m *Manager) takeLoss(sessionID string) (evs []store.EventInput, done func(written bool)) {
	m.lost.mu.Lock()
	defer m.lost.mu.Unlock()
	l := m.lost.m[sessionID]
	if l == nil || l.flushing {
		return nil, nil
	}
	l.flushing = true
	if l.events > 0 {
		raw, _ := json.Marshal(wire.OutputLost{
			Events: l.events, Kinds: maps.Clone(l.kinds), From: l.from, To: l.to,
			Reason: "the daemon could not record them: " + l.cause,
		})
		evs = append(evs, store.EventInput{SessionID: sessionID, Kind: wire.KindOutputLost, Data: raw, TS: l.from})
	}
	if l.end != nil {
		raw, _ := json.Marshal(*l.end)
		evs = append(evs, store.EventInput{SessionID: sessionID, Kind: wire.KindStatus, Data: raw})
	}
	events, kinds, end := l.events, maps.Clone(l.kinds), l.end
	return evs, func(written bool) {
		m.lost.mu.Lock()
		defer m.lost.mu.Unlock()
		l.flushing = false
		if !written {
			return
		}
		// What was lost meanwhile stays for the next marker.
		l.events -= events
		for k, n := range kinds {
			if l.kinds[k] -= n; l.kinds[k] <= 0 {
				delete(l.kinds, k)
			}
		}
		if l.end == end {
			l.end = nil
		}
		if l.events == 0 && l.end == nil {
			delete(m.lost.m, sessionID)
			m.lost.n.Store(int32(len(m.lost.m)))
		} else {
			l.from = l.to
		}
	}
}

// hasLoss is the cheap check on the hot path.
func (m *Manager) hasLoss() bool { return m.lost.n.Load() > 0 }

// retryLost writes the markers of sessions that write nothing more (they
// ended, or wait) once the store takes writes again.
func (m *Manager) retryLost() {
	every := m.opts.RetryEvery
	if every <= 0 {
		every = defaultRetryEvery
	}
	t := time.NewTimer(every)
	t.Stop()
	armed := false
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.lost.wake:
			if !armed {
				t.Reset(every)
				armed = true
			}
			continue
		case <-t.C:
			armed = false
		}
		m.lost.mu.Lock()
		ids := make([]string, 0, len(m.lost.m))
		for id := range m.lost.m {
			ids = append(ids, id)
		}
		m.lost.mu.Unlock()
		for _, id := range ids {
			evs, done := m.takeLoss(id)
			if done == nil {
				continue
			}
			if len(evs) == 0 {
				done(true)
				continue
			}
			_, err := m.opts.Store.AppendMany(m.ctx, evs)
			done(err == nil || errors.Is(err, store.ErrNotFound))
			if err == nil {
				fmt.Fprintf(m.opts.Log, "worker: session %s: recorded where its output was lost\n", id)
			}
		}
		if m.hasLoss() {
			t.Reset(every)
			armed = true
		}
	}
}

// endNotRecorded is the reason of a session failed because its end could
// not be recorded when it came.
func endNotRecorded(status store.Status, reason string, err error) string {
	was := string(status)
	if reason != "" {
		was += ": " + reason
	}
	return fmt.Sprintf("the session ended (%s) but the daemon could not record it then (%v)", was, err)
}
