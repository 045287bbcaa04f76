package wireclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"reeve.dev/reeve/daemon/wire"
)

// Update is one event of a followed session: the decoded frame, and the
// frame as the daemon sent it, for callers that pass it on unchanged.
type Update struct {
	wire.SessionUpdate
	Raw json.RawMessage
}

// subscriptionBuffer is how many events a subscription holds before the
// reader waits for its consumer, which in turn paces the daemon.
const subscriptionBuffer = 1024

// Subscription is one followed session.
type Subscription struct {
	SessionID string
	c         chan Update
	quit      chan struct{} // closed by end, releasing a blocked deliver
	last      atomic.Int64

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
	ended    *wire.SessionEnded
	err      error
}

func newSubscription(id string, after int64) *Subscription {
	s := &Subscription{SessionID: id, c: make(chan Update, subscriptionBuffer), quit: make(chan struct{})}
	s.last.Store(after)
	return s
}

// Updates delivers the session's events in seq order, each once. It is
// closed after the session has ended (Ended is then set) or the
// subscription stopped (Err). While it is full the Conn waits for the
// reader, so a consumer that also sends requests must keep reading.
func (s *Subscription) Updates() <-chan Update { return s.c }

// LastSeq is the seq of the last event delivered (or the after_seq the
// subscription started from): where a resumed subscription starts.
func (s *Subscription) LastSeq() int64 { return s.last.Load() }

// Ended is the session-ended frame, once Updates is closed because the
// session ended.
func (s *Subscription) Ended() *wire.SessionEnded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// Err is why the subscription stopped without the session ending.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// deliver hands one event to the consumer, skipping what it already has:
// after a resume the daemon starts after LastSeq, but a resume racing a
// late frame of the previous connection must not deliver twice.
func (s *Subscription) deliver(ctx context.Context, u Update) {
	s.mu.Lock()
	if s.closed || u.Seq <= s.last.Load() {
		s.mu.Unlock()
		return
	}
	s.inflight.Add(1)
	s.mu.Unlock()
	defer s.inflight.Done()
	select {
	case s.c <- u:
		s.last.Store(u.Seq)
	case <-s.quit:
	case <-ctx.Done():
	}
}

func (s *Subscription) end(e *wire.SessionEnded, err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.ended, s.err = e, err
	close(s.quit)
	s.mu.Unlock()
	// No deliver can start now; wait out one in progress before closing.
	s.inflight.Wait()
	close(s.c)
}

// Subscribe follows a session's events after afterSeq: the stored ones,
// then live ones, with no gap and no duplicate — across reconnections when
// the Conn reconnects — then a session-ended.
func (c *Conn) Subscribe(ctx context.Context, sessionID string, afterSeq int64) (*Subscription, error) {
	s := newSubscription(sessionID, afterSeq)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	if _, dup := c.subs[sessionID]; dup {
		c.mu.Unlock()
		return nil, &wire.AckError{Code: wire.CodeAlreadyWatched, Message: "this connection already follows session " + sessionID}
	}
	c.subs[sessionID] = s
	c.mu.Unlock()
	err := c.Call(ctx, &wire.SubscribeRequest{SessionID: sessionID, AfterSeq: afterSeq, Batch: true}, nil)
	if err == nil || (c.opts.Reconnect && (errors.Is(err, ErrDisconnected) || alreadySubscribed(err))) {
		// A reconnection resumes it (or already has).
		return s, nil
	}
	c.drop(s)
	return nil, err
}

// Unsubscribe stops following a session; its Updates channel is closed
// and no event of it follows.
//
// The subscription ends here first: a reader blocked on its full channel
// lets go at once, so the daemon's ack can be read.
func (c *Conn) Unsubscribe(ctx context.Context, sessionID string) error {
	c.mu.Lock()
	s := c.subs[sessionID]
	delete(c.subs, sessionID)
	c.mu.Unlock()
	if s != nil {
		s.end(nil, errors.New("unsubscribed"))
	}
	return c.Call(ctx, &wire.UnsubscribeRequest{SessionID: sessionID}, nil)
}

func (c *Conn) drop(s *Subscription) {
	c.mu.Lock()
	if c.subs[s.SessionID] == s {
		delete(c.subs, s.SessionID)
	}
	c.mu.Unlock()
}

// resubscribe resumes every subscription after a reconnection from the
// last event it delivered.
func (c *Conn) resubscribe() {
	c.mu.Lock()
	subs := make([]*Subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	for _, s := range subs {
		after := s.LastSeq()
		err := c.Call(c.ctx, &wire.SubscribeRequest{SessionID: s.SessionID, AfterSeq: after, Batch: true}, nil)
		if err == nil || errors.Is(err, ErrDisconnected) || alreadySubscribed(err) || c.ctx.Err() != nil {
			// A drop during the resume is retried by the next reconnection.
			continue
		}
		c.drop(s)
		s.end(nil, fmt.Errorf("resume the subscription after seq %d: %w", after, err))
	}
}

// alreadySubscribed is the daemon saying the connection already follows
// the session: a resume after a reconnection got there first.
func alreadySubscribed(err error) bool {
	var ae *wire.AckError
	return errors.As(err, &ae) && ae.Code == wire.CodeAlreadyWatched
}
