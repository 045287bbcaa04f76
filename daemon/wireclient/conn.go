// Package wireclient is the one client of the daemon's control protocol
// (daemon/wire, docs/protocol.md). It speaks the protocol over any
// Transport that carries whole frames — the local WebSocket
// (daemon/controlclient) or a relayed channel encrypted end to end
// (server/sdk/remote) — and does, once, what every client needs above the
// transport: the hello exchange, request ids and their acks,
// subscriptions with lossless resume from after_seq, and reconnection.
//
// It imports only the standard library and daemon/wire, so that the
// server side, the worker and tests may use it without linking the daemon.
package wireclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"reeve.dev/reeve/daemon/wire"
)

// Transport carries whole frames of the control protocol, one JSON object
// each. Implementations need not allow concurrent writes: the Conn writes
// one frame at a time.
type Transport interface {
	// ReadFrame returns the next frame from the daemon.
	ReadFrame(ctx context.Context) ([]byte, error)
	WriteFrame(ctx context.Context, frame []byte) error
	// Close ends the transport, telling the peer why.
	Close(reason string) error
}

// Dialer opens a fresh transport to the daemon: for the first connection
// and for every reconnection.
type Dialer func(ctx context.Context) (Transport, error)

// Options configure a Conn.
type Options struct {
	Dial Dialer
	// Version is the software version sent in the client's hello.
	Version string
	// Reconnect dials again when the transport drops, and resumes every
	// subscription after the last event it delivered. Without it a drop
	// ends the Conn.
	Reconnect bool
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts (defaults 200ms and 10s).
	MinBackoff, MaxBackoff time.Duration
	// ReconnectFor bounds one outage: when no reconnection succeeds for
	// this long, the Conn ends with ErrLost. Zero: no bound.
	ReconnectFor time.Duration
	// Permanent reports a dial error that dialling again cannot cure (a
	// refused credential, a daemon that is gone for good); it ends the
	// Conn at once.
	Permanent func(error) bool
	// RequestTimeout bounds each request, until its ack, when the caller's
	// context has no deadline. Zero: no bound.
	RequestTimeout time.Duration
	// IDPrefix starts every request id (default "c").
	IDPrefix string
	// Logf receives reconnection notes; nil drops them.
	Logf func(format string, args ...any)
}

// Frame is a frame from the daemon outside acks and subscriptions:
// session-started, hook-permission-request, hook-permission-resolved,
// daemon-stopping, and types this client does not know.
type Frame struct {
	Type string
	Raw  json.RawMessage
}

// Errors of a Conn.
var (
	// ErrClosed is a Conn after Close.
	ErrClosed = errors.New("connection to the daemon closed")
	// ErrDisconnected fails a request whose connection dropped before its
	// ack: it may or may not have been carried out.
	ErrDisconnected = errors.New("connection to the daemon dropped before the answer")
	// ErrLost ends a Conn whose connection dropped and could not be
	// made again.
	ErrLost = errors.New("lost the connection to the daemon")
)

// StoppedError ends a Conn whose daemon said it was shutting down (a
// daemon-stopping frame) and could not be reached again.
type StoppedError struct{ Reason string }

func (e *StoppedError) Error() string {
	if e.Reason == "" {
		return "the daemon stopped"
	}
	return "the daemon stopped: " + e.Reason
}

// eventBuffer is how many frames Events holds for a caller that is not
// reading; later ones are dropped (and counted) rather than stall the
// subscriptions and acks behind them.
const eventBuffer = 256

// Conn is a connection to one daemon's control protocol.
type Conn struct {
	opts   Options
	ctx    context.Context // lives until Close or the end
	cancel context.CancelFunc
	done   chan struct{}
	nextID atomic.Int64
	conns  atomic.Int64
	drops  atomic.Int64

	writeMu sync.Mutex

	mu       sync.Mutex
	cur      Transport
	ready    chan struct{} // closed while cur is usable
	pending  map[string]*pending
	order    []string // pending ids, oldest first
	subs     map[string]*Subscription
	hello    wire.Hello
	stopping *StoppedError
	err      error

	events chan Frame
}

type pending struct {
	ack        chan wire.Ack
	collect    bool // a list gathers the discovered-session frames before its ack
	discovered []wire.DiscoveredInfo
}

// Dial connects and exchanges hellos. The Conn then reads in the
// background until Close, or until the connection ends for good.
func Dial(ctx context.Context, opts Options) (*Conn, error) {
	if opts.Dial == nil {
		return nil, errors.New("wireclient: Options.Dial is required")
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 200 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 10 * time.Second
	}
	if opts.IDPrefix == "" {
		opts.IDPrefix = "c"
	}
	if opts.Version == "" {
		opts.Version = "reeve-client"
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	c := &Conn{
		opts: opts, done: make(chan struct{}), ready: make(chan struct{}),
		pending: map[string]*pending{}, subs: map[string]*Subscription{},
		events: make(chan Frame, eventBuffer),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	t, err := c.connect(ctx)
	if err != nil {
		c.cancel()
		return nil, err
	}
	go c.run(t)
	return c, nil
}

// Hello is the daemon's hello on the current (or last) connection.
func (c *Conn) Hello() wire.Hello {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hello
}

// Connections counts the connections made so far (1 + reconnections).
func (c *Conn) Connections() int { return int(c.conns.Load()) }

// Events delivers the frames outside acks and subscriptions, in order.
// It holds 256; when the caller does not read them, later ones are dropped
// (see DroppedEvents) rather than stall everything behind them.
func (c *Conn) Events() <-chan Frame { return c.events }

// DroppedEvents counts frames Events had no room for.
func (c *Conn) DroppedEvents() int64 { return c.drops.Load() }

// Done is closed when the Conn has ended for good; Err says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the Conn ended: ErrClosed after Close, a *StoppedError when
// the daemon shut down, or an error wrapping ErrLost or the transport's.
// It is nil while the Conn runs.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the Conn and its subscriptions.
func (c *Conn) Close() error {
	c.finish(ErrClosed)
	<-c.done
	return nil
}

func (c *Conn) finish(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.cancel()
}

// AccessTokenHolder is a Transport that carries the client's access token
// (a relayed channel); the hello presents it to the daemon.
type AccessTokenHolder interface {
	AccessToken() string
}

// connect dials and exchanges hellos.
func (c *Conn) connect(ctx context.Context) (Transport, error) {
	t, err := c.opts.Dial(ctx)
	if err != nil {
		return nil, err
	}
	first, err := t.ReadFrame(ctx)
	if err != nil {
		t.Close("no hello")
		return nil, fmt.Errorf("read the daemon's hello: %w", err)
	}
	var h wire.Hello
	if err := json.Unmarshal(first, &h); err != nil || h.Type != wire.TypeHello {
		t.Close("no hello")
		return nil, fmt.Errorf("the daemon did not say hello: %.200q", first)
	}
	hello := wire.Hello{Type: wire.TypeHello, ProtocolVersion: wire.ProtocolVersion, Version: c.opts.Version}
	if a, ok := t.(AccessTokenHolder); ok {
		hello.AccessToken = a.AccessToken()
	}
	mine, _ := json.Marshal(hello)
	if err := t.WriteFrame(ctx, mine); err != nil {
		t.Close("hello failed")
		return nil, fmt.Errorf("send hello: %w", err)
	}
	c.conns.Add(1)
	c.mu.Lock()
	c.hello, c.cur, c.stopping = h, t, nil
	close(c.ready)
	c.mu.Unlock()
	return t, nil
}

// run reads the current transport and, when it drops, reconnects and
// resumes the subscriptions, or ends the Conn.
func (c *Conn) run(t Transport) {
	defer c.shutdown()
	for {
		err := c.readLoop(t)
		stopped := c.disconnected()
		if c.ctx.Err() != nil {
			return
		}
		if !c.opts.Reconnect {
			if stopped != nil {
				c.finish(stopped)
			} else {
				c.finish(fmt.Errorf("connection to the daemon ended: %w", err))
			}
			return
		}
		c.opts.Logf("wireclient: connection to the daemon ended (%v); reconnecting", err)
		if t = c.reconnect(err, stopped); t == nil {
			return
		}
		go c.resubscribe()
	}
}

// reconnect dials with backoff until it succeeds, the outage lasts longer
// than ReconnectFor, a permanent error comes, or the Conn is closed.
func (c *Conn) reconnect(cause error, stopped *StoppedError) Transport {
	began := time.Now()
	wait := c.opts.MinBackoff
	giveUp := func(err error) Transport {
		switch {
		case stopped != nil:
			c.finish(stopped)
		case err != nil:
			c.finish(fmt.Errorf("%w: %w", ErrLost, err))
		default:
			c.finish(fmt.Errorf("%w: %w", ErrLost, cause))
		}
		return nil
	}
	for {
		dctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
		if c.opts.ReconnectFor > 0 {
			dctx, cancel = context.WithDeadline(c.ctx, began.Add(c.opts.ReconnectFor))
		}
		t, err := c.connect(dctx)
		cancel()
		if err == nil {
			return t
		}
		if c.ctx.Err() != nil {
			return nil
		}
		if c.opts.Permanent != nil && c.opts.Permanent(err) {
			return giveUp(err)
		}
		if c.opts.ReconnectFor > 0 && time.Since(began) >= c.opts.ReconnectFor {
			return giveUp(err)
		}
		d := wait/2 + rand.N(wait/2+1)
		c.opts.Logf("wireclient: reconnect failed (%v); next try in %s", err, d.Round(time.Millisecond))
		select {
		case <-c.ctx.Done():
			return nil
		case <-time.After(d):
		}
		wait = min(2*wait, c.opts.MaxBackoff)
	}
}

// disconnected fails the requests in flight and blocks new ones until the
// next connection. It returns the daemon's goodbye, if it said one.
func (c *Conn) disconnected() *StoppedError {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		c.cur.Close("reconnecting")
	}
	c.cur = nil
	c.ready = make(chan struct{})
	for id, p := range c.pending {
		close(p.ack)
		delete(c.pending, id)
	}
	c.order = nil
	return c.stopping
}

func (c *Conn) shutdown() {
	c.mu.Lock()
	if c.err == nil {
		c.err = ErrClosed
	}
	if c.cur != nil {
		c.cur.Close("client closed")
		c.cur = nil
	}
	subs := c.subs
	c.subs = map[string]*Subscription{}
	err := c.err
	c.mu.Unlock()
	for _, s := range subs {
		s.end(nil, err)
	}
	close(c.events)
	close(c.done)
}

func (c *Conn) readLoop(t Transport) error {
	stop := context.AfterFunc(c.ctx, func() { t.Close("client closed") })
	defer stop()
	for {
		frame, err := t.ReadFrame(c.ctx)
		if err != nil {
			return err
		}
		c.dispatch(frame)
	}
}

// dispatch routes one frame from the daemon. A frame that cannot be read
// is skipped: the daemon may send types and fields this client does not
// know.
func (c *Conn) dispatch(frame []byte) {
	switch frameType(frame) {
	case wire.TypeSessionUpdate:
		var u wire.SessionUpdate
		if json.Unmarshal(frame, &u) != nil {
			return
		}
		if s := c.sub(u.SessionID); s != nil {
			s.deliver(c.ctx, Update{SessionUpdate: u, Raw: frame})
		}
	case wire.TypeSessionUpdates:
		// Subscribe asks for batches; each element is a session-update
		// frame, handed on as if it had come alone.
		var b wire.SessionUpdates
		if json.Unmarshal(frame, &b) != nil {
			return
		}
		s := c.sub(b.SessionID)
		if s == nil {
			return
		}
		for _, raw := range b.Updates {
			var u wire.SessionUpdate
			if json.Unmarshal(raw, &u) != nil || u.SessionID != b.SessionID {
				continue
			}
			s.deliver(c.ctx, Update{SessionUpdate: u, Raw: raw})
		}
	case wire.TypeAck:
		var a wire.Ack
		if json.Unmarshal(frame, &a) == nil {
			c.deliverAck(a)
		}
	case wire.TypeSessionEnded:
		var e wire.SessionEnded
		if json.Unmarshal(frame, &e) != nil {
			return
		}
		c.mu.Lock()
		s := c.subs[e.SessionID]
		delete(c.subs, e.SessionID)
		c.mu.Unlock()
		if s != nil {
			s.end(&e, nil)
		}
	case wire.TypeDiscoveredSession:
		if !c.collectDiscovered(frame) {
			c.event(wire.TypeDiscoveredSession, frame)
		}
	case wire.TypeDaemonStopping:
		var d wire.DaemonStopping
		json.Unmarshal(frame, &d)
		c.mu.Lock()
		c.stopping = &StoppedError{Reason: d.Reason}
		c.mu.Unlock()
		c.event(wire.TypeDaemonStopping, frame)
	case "":
	default:
		c.event(frameType(frame), frame)
	}
}

func (c *Conn) event(typ string, frame []byte) {
	select {
	case c.events <- Frame{Type: typ, Raw: frame}:
	default:
		c.drops.Add(1)
	}
}

// frameType reads a frame's type. The daemon writes the type first, so
// the common case is a prefix check; anything else is decoded.
func frameType(frame []byte) string {
	const prefix = `{"type":"`
	if bytes.HasPrefix(frame, []byte(prefix)) {
		rest := frame[len(prefix):]
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 && utf8.Valid(rest[:i]) {
			return string(rest[:i])
		}
	}
	var env wire.Envelope
	if json.Unmarshal(frame, &env) != nil {
		return ""
	}
	return env.Type
}

func (c *Conn) deliverAck(a wire.Ack) {
	c.mu.Lock()
	p := c.pending[a.ID]
	delete(c.pending, a.ID)
	for i, id := range c.order {
		if id == a.ID {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	if p != nil {
		p.ack <- a
	}
}

func (c *Conn) collectDiscovered(frame []byte) bool {
	var f wire.DiscoveredSession
	if json.Unmarshal(frame, &f) != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range c.order {
		if p := c.pending[id]; p != nil && p.collect {
			p.discovered = append(p.discovered, f.Session)
			return true
		}
	}
	return false
}

func (c *Conn) sub(id string) *Subscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subs[id]
}

func (c *Conn) newID() string {
	return c.opts.IDPrefix + strconv.FormatInt(c.nextID.Add(1), 10)
}

// Call sends a request and waits for its ack; result, when not nil,
// receives the ack's result. A refused request is a *wire.AckError. It
// waits for a connection when there is none (while reconnecting).
func (c *Conn) Call(ctx context.Context, req wire.Request, result any) error {
	a, _, err := c.do(ctx, req, false)
	if err != nil || result == nil {
		return err
	}
	if err := json.Unmarshal(a.Result, result); err != nil {
		return fmt.Errorf("decode the daemon's answer: %w", err)
	}
	return nil
}

func (c *Conn) do(ctx context.Context, req wire.Request, collect bool) (wire.Ack, []wire.DiscoveredInfo, error) {
	if _, ok := ctx.Deadline(); !ok && c.opts.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.RequestTimeout)
		defer cancel()
	}
	id := c.newID()
	req.SetHeader(id)
	frame, err := json.Marshal(req)
	if err != nil {
		return wire.Ack{}, nil, fmt.Errorf("encode request: %w", err)
	}
	for {
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return wire.Ack{}, nil, err
		}
		ready, t := c.ready, c.cur
		if t == nil {
			c.mu.Unlock()
			select {
			case <-ready:
				continue
			case <-c.done:
				return wire.Ack{}, nil, c.Err()
			case <-ctx.Done():
				return wire.Ack{}, nil, ctx.Err()
			}
		}
		p := &pending{ack: make(chan wire.Ack, 1), collect: collect}
		c.pending[id] = p
		c.order = append(c.order, id)
		c.mu.Unlock()
		c.writeMu.Lock()
		err := t.WriteFrame(ctx, frame)
		c.writeMu.Unlock()
		if err != nil {
			c.forget(id)
			if ctx.Err() != nil {
				return wire.Ack{}, nil, ctx.Err()
			}
			return wire.Ack{}, nil, fmt.Errorf("%w: send: %w", ErrDisconnected, err)
		}
		select {
		case a, ok := <-p.ack:
			if !ok {
				return wire.Ack{}, nil, ErrDisconnected
			}
			if !a.OK {
				if a.Error == nil {
					return a, nil, &wire.AckError{Code: "unknown", Message: "the daemon refused the request without saying why"}
				}
				return a, nil, a.Error
			}
			return a, p.discovered, nil
		case <-ctx.Done():
			c.forget(id)
			return wire.Ack{}, nil, ctx.Err()
		}
	}
}

func (c *Conn) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, id)
	for i, o := range c.order {
		if o == id {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
}
