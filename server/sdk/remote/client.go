// Package remote is the Go client of a paired daemon through the relay: it
// connects to the relay with a relay JWT, verifies the daemon's trust
// anchor in an end-to-end key exchange (server/sdk/e2e), and then speaks the
// daemon's own control protocol — hello, launch, subscribe, prompt, kill,
// list, respond-permission — inside sealed frames the relay cannot read.
//
// When the connection drops the client dials again with backoff, runs a new
// key exchange, and resumes every subscription from the last event it
// delivered, so a follower sees each event once and in order across relay
// restarts.
package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"reeve.dev/reeve/server/relay"
	"reeve.dev/reeve/server/sdk/e2e"
)

// Version is what the client reports in its hello.
const Version = "reeve-remote/1"

// TokenSource returns a relay JWT for the next connection.
type TokenSource func(ctx context.Context) (string, error)

// Options configure a Client.
type Options struct {
	// RelayURL is the relay's origin (http, https, ws or wss).
	RelayURL        string
	WorkspaceID     string
	RuntimeTargetID string // the daemon's install id
	// Anchor is the daemon's anchor public key (32 bytes). Fingerprint
	// may be given instead: the daemon is then asked for its key, which
	// must have this fingerprint. When both are given they must agree.
	Anchor      []byte
	Fingerprint string
	// Token supplies relay JWTs; see WorkspaceToken.
	Token      TokenSource
	HTTPClient *http.Client
	// NoReconnect makes a dropped connection final instead of dialling
	// again.
	NoReconnect bool
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts (defaults 200ms and 10s).
	MinBackoff, MaxBackoff time.Duration
	// Logf receives reconnection notes; nil drops them.
	Logf func(format string, args ...any)
	// Name is sent to the daemon in the handshake.
	Name string
}

// Frame is a frame from the daemon outside any subscription stream
// (session-started, hook-permission-request, discovered-session, ...).
type Frame struct {
	Type string
	Raw  json.RawMessage
}

// ErrClosed is a Client after Close.
var ErrClosed = errors.New("remote client closed")

// ErrDisconnected fails a request whose connection dropped before its ack:
// it may or may not have been carried out.
var ErrDisconnected = errors.New("connection to the daemon dropped before the answer")

// Client is a connection to one daemon through the relay.
type Client struct {
	opts   Options
	anchor []byte
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	nextID atomic.Int64
	conns  atomic.Int64

	mu        sync.Mutex
	cur       *channel
	ready     chan struct{} // closed while cur is usable
	pending   map[string]chan Ack
	subs      map[string]*Subscription
	hello     Hello
	admission e2e.Admission
	err       error // why the client ended

	events chan Frame
}

// Dial connects, verifies the daemon's anchor and exchanges hellos. A
// daemon that refuses remote control (locked) fails here with an error
// wrapping e2e.ErrRefused; a wrong anchor with e2e.ErrAnchor or
// e2e.ErrFingerprint.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	if opts.Token == nil {
		return nil, errors.New("remote: Options.Token is required")
	}
	if opts.WorkspaceID == "" || opts.RuntimeTargetID == "" {
		return nil, errors.New("remote: WorkspaceID and RuntimeTargetID are required")
	}
	if opts.Anchor == nil && opts.Fingerprint == "" {
		return nil, errors.New("remote: the daemon's Anchor or its Fingerprint is required")
	}
	if opts.Anchor != nil && opts.Fingerprint != "" && !e2e.FingerprintMatches(opts.Anchor, opts.Fingerprint) {
		return nil, fmt.Errorf("remote: %w: the given anchor has fingerprint %s", e2e.ErrFingerprint, e2e.Fingerprint(opts.Anchor))
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 200 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 10 * time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Name == "" {
		opts.Name = Version
	}
	c := &Client{
		opts: opts, anchor: opts.Anchor, done: make(chan struct{}),
		ready: make(chan struct{}), pending: map[string]chan Ack{}, subs: map[string]*Subscription{},
		events: make(chan Frame, 256),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	ch, err := c.connect(ctx)
	if err != nil {
		c.cancel()
		return nil, err
	}
	go c.run(ch)
	return c, nil
}

// Hello is the daemon's hello on the current (or last) connection.
func (c *Client) Hello() Hello {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hello
}

// Admission is what the daemon said when it admitted the current channel,
// including when its unlock ends.
func (c *Client) Admission() e2e.Admission {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.admission
}

// Anchor is the anchor public key the channel was verified against.
func (c *Client) Anchor() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.anchor...)
}

// Connections counts the connections made so far (1 + reconnections).
func (c *Client) Connections() int { return int(c.conns.Load()) }

// Events delivers frames outside subscriptions. It holds 256; when the
// caller does not read them, later ones are dropped rather than stall the
// subscriptions.
func (c *Client) Events() <-chan Frame { return c.events }

// Done is closed when the client has ended for good; Err says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the client ended, nil while it runs.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the client and its subscriptions.
func (c *Client) Close() error {
	c.finish(ErrClosed)
	<-c.done
	return nil
}

func (c *Client) finish(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.cancel()
}

// connect dials the relay and sets up one channel: handshake, hellos.
func (c *Client) connect(ctx context.Context) (*channel, error) {
	tok, err := c.opts.Token(ctx)
	if err != nil {
		return nil, fmt.Errorf("get a relay token: %w", err)
	}
	u, err := WSURL(c.opts.RelayURL, relay.RoleClient, c.opts.WorkspaceID, c.opts.RuntimeTargetID)
	if err != nil {
		return nil, err
	}
	ws, err := DialRelay(ctx, c.opts.HTTPClient, u, tok)
	if err != nil {
		return nil, err
	}
	hello, _ := json.Marshal(map[string]string{"client": c.opts.Name})
	c.mu.Lock()
	known := c.anchor
	c.mu.Unlock()
	ch, adm, anchor, err := handshake(ctx, ws, known, c.opts.Fingerprint, c.opts.WorkspaceID, c.opts.RuntimeTargetID, hello)
	if err != nil {
		ws.CloseNow()
		return nil, err
	}
	c.mu.Lock()
	c.anchor = anchor
	c.mu.Unlock()
	first, err := ch.read(ctx)
	if err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("read the daemon's hello: %w", err)
	}
	var h Hello
	if err := json.Unmarshal(first, &h); err != nil || h.Type != TypeHello {
		ws.CloseNow()
		return nil, fmt.Errorf("the daemon did not say hello: %.200q", first)
	}
	mine, _ := json.Marshal(Hello{Type: TypeHello, ProtocolVersion: ProtocolVersion, Version: Version})
	if err := ch.write(ctx, mine); err != nil {
		ws.CloseNow()
		return nil, err
	}
	c.conns.Add(1)
	c.mu.Lock()
	c.hello, c.admission, c.cur = h, adm, ch
	close(c.ready)
	c.mu.Unlock()
	return ch, nil
}

// permanent reports whether a connection failure will not cure itself by
// dialling again.
func permanent(err error) bool {
	return errors.Is(err, e2e.ErrAnchor) || errors.Is(err, e2e.ErrFingerprint) || errors.Is(err, e2e.ErrRefused)
}

// run reads the current channel and, when it drops, reconnects and
// resumes the subscriptions.
func (c *Client) run(ch *channel) {
	defer c.shutdown()
	for {
		err := c.readLoop(ch)
		c.disconnected()
		if c.ctx.Err() != nil {
			return
		}
		if c.opts.NoReconnect {
			c.finish(fmt.Errorf("connection to the daemon ended: %w", err))
			return
		}
		c.opts.Logf("remote: connection to the daemon ended (%v); reconnecting", err)
		if ch = c.reconnect(); ch == nil {
			return
		}
		go c.resubscribe()
	}
}

func (c *Client) reconnect() *channel {
	wait := c.opts.MinBackoff
	for {
		ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
		ch, err := c.connect(ctx)
		cancel()
		if err == nil {
			return ch
		}
		if c.ctx.Err() != nil {
			return nil
		}
		if permanent(err) {
			c.finish(err)
			return nil
		}
		d := wait/2 + rand.N(wait/2+1)
		c.opts.Logf("remote: reconnect failed (%v); next try in %s", err, d.Round(time.Millisecond))
		select {
		case <-c.ctx.Done():
			return nil
		case <-time.After(d):
		}
		wait = min(2*wait, c.opts.MaxBackoff)
	}
}

// disconnected fails the requests in flight and blocks new ones until the
// next connection.
func (c *Client) disconnected() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		c.cur.ws.CloseNow()
	}
	c.cur = nil
	c.ready = make(chan struct{})
	for id, p := range c.pending {
		close(p)
		delete(c.pending, id)
	}
}

func (c *Client) shutdown() {
	c.mu.Lock()
	if c.err == nil {
		c.err = ErrClosed
	}
	if c.cur != nil {
		c.cur.close("client closed")
		c.cur = nil
	}
	for _, s := range c.subs {
		s.end(nil, c.err)
	}
	c.subs = map[string]*Subscription{}
	c.mu.Unlock()
	close(c.events)
	close(c.done)
}

func (c *Client) readLoop(ch *channel) error {
	stop := context.AfterFunc(c.ctx, func() { ch.close("client closed") })
	defer stop()
	for {
		msg, err := ch.read(c.ctx)
		if err != nil {
			return err
		}
		c.dispatch(msg)
	}
}

func (c *Client) dispatch(msg []byte) {
	var env envelope
	if json.Unmarshal(msg, &env) != nil {
		return
	}
	switch env.Type {
	case TypeAck:
		var a Ack
		if json.Unmarshal(msg, &a) != nil {
			return
		}
		c.mu.Lock()
		p := c.pending[a.ID]
		delete(c.pending, a.ID)
		c.mu.Unlock()
		if p != nil {
			p <- a
		}
	case TypeSessionUpdate:
		var u SessionUpdate
		if json.Unmarshal(msg, &u) != nil {
			return
		}
		if s := c.sub(u.SessionID); s != nil {
			s.deliver(c.ctx, u)
		}
	case TypeSessionEnded:
		var e SessionEnded
		if json.Unmarshal(msg, &e) != nil {
			return
		}
		c.mu.Lock()
		s := c.subs[e.SessionID]
		delete(c.subs, e.SessionID)
		c.mu.Unlock()
		if s != nil {
			s.end(&e, nil)
		}
	default:
		select {
		case c.events <- Frame{Type: env.Type, Raw: msg}:
		default:
		}
	}
}

func (c *Client) sub(id string) *Subscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subs[id]
}

// resubscribe resumes every subscription after a reconnection from the
// last event it delivered.
func (c *Client) resubscribe() {
	c.mu.Lock()
	subs := make([]*Subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	for _, s := range subs {
		after := s.LastSeq()
		id := c.newID()
		_, err := c.do(c.ctx, id, SubscribeRequest{Type: TypeSubscribe, ID: id, SessionID: s.SessionID, AfterSeq: after})
		if err != nil && !errors.Is(err, ErrDisconnected) && !alreadySubscribed(err) && c.ctx.Err() == nil {
			c.mu.Lock()
			if c.subs[s.SessionID] == s {
				delete(c.subs, s.SessionID)
			}
			c.mu.Unlock()
			s.end(nil, fmt.Errorf("resume subscription after seq %d: %w", after, err))
		}
		// A drop during the resume is retried by the next reconnection.
	}
}

// alreadySubscribed is the daemon saying the channel already follows the
// session: a resume after a reconnection got there first.
func alreadySubscribed(err error) bool {
	var ae *AckError
	return errors.As(err, &ae) && ae.Code == "already_subscribed"
}

func (c *Client) newID() string { return "r" + strconv.FormatInt(c.nextID.Add(1), 10) }

// do sends a request frame with the given id and waits for its ack,
// waiting first for a connection when there is none.
func (c *Client) do(ctx context.Context, id string, frame any) (Ack, error) {
	data, err := json.Marshal(frame)
	if err != nil {
		return Ack{}, err
	}
	for {
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return Ack{}, err
		}
		ready, ch := c.ready, c.cur
		if ch == nil {
			c.mu.Unlock()
			select {
			case <-ready:
				continue
			case <-c.done:
				return Ack{}, c.Err()
			case <-ctx.Done():
				return Ack{}, ctx.Err()
			}
		}
		p := make(chan Ack, 1)
		c.pending[id] = p
		c.mu.Unlock()
		if err := ch.write(ctx, data); err != nil {
			c.mu.Lock()
			delete(c.pending, id)
			c.mu.Unlock()
			return Ack{}, fmt.Errorf("%w: send: %v", ErrDisconnected, err)
		}
		select {
		case a, ok := <-p:
			if !ok {
				return Ack{}, ErrDisconnected
			}
			if !a.OK {
				if a.Error == nil {
					return a, &AckError{Code: "unknown", Message: "request refused"}
				}
				return a, a.Error
			}
			return a, nil
		case <-ctx.Done():
			c.mu.Lock()
			delete(c.pending, id)
			c.mu.Unlock()
			return Ack{}, ctx.Err()
		}
	}
}

func (c *Client) call(ctx context.Context, id string, frame, result any) error {
	a, err := c.do(ctx, id, frame)
	if err != nil || result == nil {
		return err
	}
	if err := json.Unmarshal(a.Result, result); err != nil {
		return fmt.Errorf("decode the result of %s: %w", id, err)
	}
	return nil
}

// Launch starts a session.
func (c *Client) Launch(ctx context.Context, req LaunchRequest) (SessionInfo, error) {
	req.Type, req.ID = TypeLaunch, c.newID()
	var si SessionInfo
	return si, c.call(ctx, req.ID, req, &si)
}

// Prompt gives a session a further prompt.
func (c *Client) Prompt(ctx context.Context, sessionID, text string) error {
	id := c.newID()
	return c.call(ctx, id, PromptRequest{Type: TypePrompt, ID: id, SessionID: sessionID, Text: text}, nil)
}

// Kill stops a running session.
func (c *Client) Kill(ctx context.Context, sessionID string) error {
	id := c.newID()
	return c.call(ctx, id, KillRequest{Type: TypeKill, ID: id, SessionID: sessionID}, nil)
}

// List lists sessions. Discovered sessions arrive on Events as
// discovered-session frames before the answer.
func (c *Client) List(ctx context.Context, req ListRequest) (ListResult, error) {
	req.Type, req.ID = TypeList, c.newID()
	var res ListResult
	return res, c.call(ctx, req.ID, req, &res)
}

// RespondPermission decides a pending permission request.
func (c *Client) RespondPermission(ctx context.Context, req RespondPermissionRequest) (PermissionDecision, error) {
	req.Type, req.ID = TypeRespondPermission, c.newID()
	var d PermissionDecision
	return d, c.call(ctx, req.ID, req, &d)
}

// Subscribe follows a session's events after afterSeq: the stored ones,
// then live ones, with no gap and no duplicate, across reconnections.
func (c *Client) Subscribe(ctx context.Context, sessionID string, afterSeq int64) (*Subscription, error) {
	s := newSubscription(sessionID, afterSeq)
	c.mu.Lock()
	if _, dup := c.subs[sessionID]; dup {
		c.mu.Unlock()
		return nil, &AckError{Code: "already_subscribed", Message: "this client already follows session " + sessionID}
	}
	c.subs[sessionID] = s
	c.mu.Unlock()
	id := c.newID()
	if err := c.call(ctx, id, SubscribeRequest{Type: TypeSubscribe, ID: id, SessionID: sessionID, AfterSeq: afterSeq}, nil); err != nil {
		if errors.Is(err, ErrDisconnected) || alreadySubscribed(err) {
			// The reconnection resumes it (or already has).
			return s, nil
		}
		c.mu.Lock()
		if c.subs[sessionID] == s {
			delete(c.subs, sessionID)
		}
		c.mu.Unlock()
		return nil, err
	}
	return s, nil
}

// Unsubscribe stops following a session; its channel is closed.
func (c *Client) Unsubscribe(ctx context.Context, sessionID string) error {
	id := c.newID()
	err := c.call(ctx, id, UnsubscribeRequest{Type: TypeUnsubscribe, ID: id, SessionID: sessionID}, nil)
	c.mu.Lock()
	s := c.subs[sessionID]
	delete(c.subs, sessionID)
	c.mu.Unlock()
	if s != nil {
		s.end(nil, errors.New("unsubscribed"))
	}
	return err
}

// Subscription is one followed session.
type Subscription struct {
	SessionID string
	c         chan SessionUpdate
	last      atomic.Int64
	once      sync.Once
	mu        sync.Mutex
	ended     *SessionEnded
	err       error
}

func newSubscription(id string, after int64) *Subscription {
	s := &Subscription{SessionID: id, c: make(chan SessionUpdate, 1024)}
	s.last.Store(after)
	return s
}

// Updates delivers the session's events in seq order. It is closed after
// the session has ended (Ended is then set) or the subscription failed
// (Err). The client waits for the reader when it is full.
func (s *Subscription) Updates() <-chan SessionUpdate { return s.c }

// LastSeq is the seq of the last event delivered (or the after_seq the
// subscription started from).
func (s *Subscription) LastSeq() int64 { return s.last.Load() }

// Ended is the session-ended frame, once Updates is closed because the
// session ended.
func (s *Subscription) Ended() *SessionEnded {
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

func (s *Subscription) deliver(ctx context.Context, u SessionUpdate) {
	select {
	case s.c <- u:
		s.last.Store(u.Seq)
	case <-ctx.Done():
	}
}

func (s *Subscription) end(e *SessionEnded, err error) {
	s.once.Do(func() {
		s.mu.Lock()
		s.ended, s.err = e, err
		s.mu.Unlock()
		close(s.c)
	})
}
