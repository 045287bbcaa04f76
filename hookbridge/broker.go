// Package hookbridge decides whether an agent may use a tool: the project
// policy first, then the rules a human set for the session, then the
// session's operator mode, and, in detect mode, a human answering a
// pending permission request. It also holds the decision formats the
// agents' hooks expect.
package hookbridge

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"reeve.dev/reeve/daemon/wire"
)

// Operator modes of a session.
const (
	ModeDetect = "detect" // ask a human
	ModeBypass = "bypass" // allow, and record it
)

// ValidMode reports whether m is an operator mode.
func ValidMode(m string) bool { return m == ModeDetect || m == ModeBypass }

// Decisions.
const (
	Allow = "allow"
	Deny  = "deny"
)

// Request is a tool use waiting for a human.
type Request = wire.PermissionRequest

// Decision is how a tool use was decided, by whom and why.
type Decision = wire.PermissionDecision

// Errors of Decide.
var (
	ErrUnknownRequest = errors.New("no such permission request")
	ErrAlreadyDecided = errors.New("the permission request has already been decided")
)

// BrokerOptions configure a broker.
type BrokerOptions struct {
	// Timeout bounds how long a request waits for a human before it is
	// denied; default 10 minutes.
	Timeout time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Broker holds pending permission requests and the per-session rules that
// humans set with "for the rest of this session".
type Broker struct {
	opts BrokerOptions

	mu      sync.Mutex
	pending map[string]*pending
	decided map[string]Decision // answered requests, so a late second answer gets a clear error
	rules   map[string]map[string]Decision
}

type pending struct {
	req  Request
	done chan Decision // buffered 1; written once, under Broker.mu
}

// NewBroker builds a broker.
func NewBroker(opts BrokerOptions) *Broker {
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Broker{opts: opts, pending: map[string]*pending{}, decided: map[string]Decision{}, rules: map[string]map[string]Decision{}}
}

// Timeout is how long a request waits for a human.
func (b *Broker) Timeout() time.Duration { return b.opts.Timeout }

// SessionRule returns the decision a human made "for the rest of this
// session" about this tool, if any.
func (b *Broker) SessionRule(sessionID, tool string) (Decision, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.rules[sessionID][tool]
	if ok {
		d.DecidedBy = "session-rule"
		d.RequestID = ""
		d.At = b.opts.Now().UTC()
	}
	return d, ok
}

// Open files a request and returns it with a channel that delivers its
// decision. Wait (or Cancel) must follow.
func (b *Broker) Open(req Request) (Request, <-chan Decision) {
	req.ID = ulid.Make().String()
	req.CreatedAt = b.opts.Now().UTC()
	p := &pending{req: req, done: make(chan Decision, 1)}
	b.mu.Lock()
	b.pending[req.ID] = p
	b.forgetOld()
	b.mu.Unlock()
	return req, p.done
}

// Wait blocks until the request is decided, its timeout passes (deny) or
// ctx ends (deny: the hook that asked is gone). It never allows by
// accident: every way out but a decision is a deny.
func (b *Broker) Wait(ctx context.Context, req Request, done <-chan Decision) Decision {
	timer := time.NewTimer(b.opts.Timeout)
	defer timer.Stop()
	select {
	case d := <-done:
		return d
	case <-timer.C:
		return b.resolve(req.ID, Decision{Decision: Deny, DecidedBy: "timeout",
			Reason: fmt.Sprintf("nobody decided within %s, so reeve denied it", b.opts.Timeout)})
	case <-ctx.Done():
		return b.resolve(req.ID, Decision{Decision: Deny, DecidedBy: "daemon", Reason: "the request was abandoned: " + context.Cause(ctx).Error()})
	}
}

// decidedMemory is how long an answered request is remembered, so that a
// late second answer gets "already decided" rather than "unknown".
const decidedMemory = 24 * time.Hour

// forgetOld drops answered requests older than decidedMemory; b.mu is held.
func (b *Broker) forgetOld() {
	cutoff := b.opts.Now().Add(-decidedMemory)
	for id, d := range b.decided {
		if d.At.Before(cutoff) {
			delete(b.decided, id)
		}
	}
}

// resolve decides a request unless it was decided already, and returns
// the decision that stands.
func (b *Broker) resolve(id string, d Decision) Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	if prior, ok := b.decided[id]; ok {
		return prior
	}
	p, ok := b.pending[id]
	if !ok {
		return d
	}
	d.RequestID, d.SessionID, d.Tool = id, p.req.SessionID, p.req.Tool
	d.At = b.opts.Now().UTC()
	delete(b.pending, id)
	b.decided[id] = d
	if d.Remember {
		if b.rules[p.req.SessionID] == nil {
			b.rules[p.req.SessionID] = map[string]Decision{}
		}
		b.rules[p.req.SessionID][p.req.Tool] = d
	}
	p.done <- d
	return d
}

// Decide answers a pending request. The first decision wins; a later one
// gets ErrAlreadyDecided, an unknown id ErrUnknownRequest.
func (b *Broker) Decide(id, decision, by, reason string, remember bool) (Decision, Request, error) {
	if decision != Allow && decision != Deny {
		return Decision{}, Request{}, fmt.Errorf("decision must be %q or %q, not %q", Allow, Deny, decision)
	}
	b.mu.Lock()
	if prior, ok := b.decided[id]; ok {
		b.mu.Unlock()
		return prior, Request{}, fmt.Errorf("%w (%s by %s)", ErrAlreadyDecided, prior.Decision, prior.DecidedBy)
	}
	p, ok := b.pending[id]
	b.mu.Unlock()
	if !ok {
		return Decision{}, Request{}, fmt.Errorf("%w: %q", ErrUnknownRequest, id)
	}
	if by == "" {
		by = "human"
	}
	d := b.resolve(id, Decision{Decision: decision, DecidedBy: by, Reason: reason, Remember: remember})
	if d.DecidedBy != by || d.Decision != decision {
		return d, p.req, fmt.Errorf("%w (%s by %s)", ErrAlreadyDecided, d.Decision, d.DecidedBy)
	}
	return d, p.req, nil
}

// Pending lists undecided requests, oldest first, optionally of one
// session.
func (b *Broker) Pending(sessionID string) []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []Request{}
	for _, p := range b.pending {
		if sessionID == "" || p.req.SessionID == sessionID {
			out = append(out, p.req)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// DenyPending denies the session's pending requests.
func (b *Broker) DenyPending(sessionID, reason string) {
	for _, r := range b.Pending(sessionID) {
		b.resolve(r.ID, Decision{Decision: Deny, DecidedBy: "daemon", Reason: reason})
	}
}

// EndSession denies the session's pending requests and forgets its rules.
func (b *Broker) EndSession(sessionID, reason string) {
	b.DenyPending(sessionID, reason)
	b.mu.Lock()
	delete(b.rules, sessionID)
	b.mu.Unlock()
}
