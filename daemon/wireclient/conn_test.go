package wireclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/wire"
)

// pipe is one end of an in-memory frame transport.
type pipe struct {
	in     chan []byte
	out    chan []byte
	closed chan struct{}
	once   *sync.Once
	reason *atomic.Value
}

func pipePair() (client, daemon *pipe) {
	a, b := make(chan []byte, 64), make(chan []byte, 64)
	closed, once, reason := make(chan struct{}), &sync.Once{}, &atomic.Value{}
	return &pipe{in: a, out: b, closed: closed, once: once, reason: reason},
		&pipe{in: b, out: a, closed: closed, once: once, reason: reason}
}

var errPipeClosed = errors.New("pipe closed")

func (p *pipe) ReadFrame(ctx context.Context) ([]byte, error) {
	select {
	case f := <-p.in:
		return f, nil
	case <-p.closed:
		// As on a socket, what was sent before the close arrives first.
		select {
		case f := <-p.in:
			return f, nil
		default:
			return nil, errPipeClosed
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pipe) WriteFrame(ctx context.Context, f []byte) error {
	select {
	case p.out <- append([]byte(nil), f...):
		return nil
	case <-p.closed:
		return errPipeClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pipe) Close(reason string) error {
	p.once.Do(func() { p.reason.Store(reason); close(p.closed) })
	return nil
}

// fakeDaemon answers the protocol on the daemon's end of each pipe with
// its func field, after saying hello.
type fakeDaemon struct {
	t *testing.T
	// handle answers one request frame by writing frames to send.
	handle func(d *daemonEnd, typ, id string, frame []byte)

	mu    sync.Mutex
	ends  []*daemonEnd
	dials atomic.Int32
	// refuse fails dials while set.
	refuse atomic.Value
}

type daemonEnd struct {
	p    *pipe
	conn int // 1 for the first connection
}

func (e *daemonEnd) send(v any) {
	b, _ := json.Marshal(v)
	e.p.WriteFrame(context.Background(), b)
}

func (e *daemonEnd) ack(id string, result any) {
	raw, _ := json.Marshal(result)
	e.send(wire.Ack{Type: wire.TypeAck, ID: id, OK: true, Result: raw})
}

func (e *daemonEnd) refuse(id, code, msg string) {
	e.send(wire.Ack{Type: wire.TypeAck, ID: id, Error: &wire.AckError{Code: code, Message: msg}})
}

func (d *fakeDaemon) dial(ctx context.Context) (Transport, error) {
	if err, _ := d.refuse.Load().(error); err != nil {
		return nil, err
	}
	client, daemon := pipePair()
	e := &daemonEnd{p: daemon, conn: int(d.dials.Add(1))}
	d.mu.Lock()
	d.ends = append(d.ends, e)
	d.mu.Unlock()
	go func() {
		e.send(wire.Hello{Type: wire.TypeHello, ProtocolVersion: 1, Version: "fake", DaemonID: fmt.Sprint("d", e.conn)})
		first, err := daemon.ReadFrame(context.Background())
		if err != nil {
			return
		}
		var h wire.Hello
		if json.Unmarshal(first, &h) != nil || h.Type != wire.TypeHello || h.ProtocolVersion != wire.ProtocolVersion {
			d.t.Errorf("client hello %s", first)
			return
		}
		for {
			f, err := daemon.ReadFrame(context.Background())
			if err != nil {
				return
			}
			var env wire.Envelope
			json.Unmarshal(f, &env)
			d.handle(e, env.Type, env.ID, f)
		}
	}()
	return client, nil
}

func (d *fakeDaemon) end(i int) *daemonEnd {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ends[i]
}

func dialFake(t *testing.T, d *fakeDaemon, o Options) *Conn {
	t.Helper()
	d.t = t
	o.Dial = d.dial
	if o.MinBackoff == 0 {
		o.MinBackoff, o.MaxBackoff = time.Millisecond, 10*time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Requests get the answers meant for them, even 100 at once; a refusal is
// a *wire.AckError with its code; frames outside acks reach Events.
func TestRequestsAndAcks(t *testing.T) {
	d := &fakeDaemon{handle: func(e *daemonEnd, typ, id string, f []byte) {
		switch typ {
		case wire.TypeLaunch:
			var req wire.LaunchRequest
			json.Unmarshal(f, &req)
			if req.Prompt == "refuse" {
				e.refuse(id, wire.CodeUnknownAgent, "no such agent")
				return
			}
			e.send(map[string]string{"type": "session-started", "note": req.Prompt})
			e.ack(id, wire.SessionInfo{ID: "s-" + req.Prompt, Prompt: req.Prompt})
		case wire.TypeKill:
			e.ack(id, nil)
		}
	}}
	c := dialFake(t, d, Options{})
	if c.Hello().DaemonID != "d1" || c.Connections() != 1 {
		t.Fatalf("hello %+v", c.Hello())
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := fmt.Sprint("p", i)
			si, err := c.Launch(ctx, wire.LaunchRequest{Directory: "/d", Prompt: p})
			if err != nil || si.ID != "s-"+p {
				t.Errorf("launch %s: %+v %v", p, si, err)
			}
		}(i)
	}
	wg.Wait()
	_, err := c.Launch(ctx, wire.LaunchRequest{Prompt: "refuse"})
	var ae *wire.AckError
	if !errors.As(err, &ae) || ae.Code != wire.CodeUnknownAgent || err.Error() != "no such agent" {
		t.Fatalf("refusal: %v", err)
	}
	if err := c.Kill(ctx, wire.KillRequest{SessionID: "x"}); err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < 100 {
		select {
		case f := <-c.Events():
			if f.Type != "session-started" {
				t.Fatalf("event %+v", f)
			}
			got++
		case <-time.After(5 * time.Second):
			t.Fatalf("%d events", got)
		}
	}
}

// The discovered sessions sent before a list's ack belong to that list.
func TestListGathersDiscovered(t *testing.T) {
	d := &fakeDaemon{handle: func(e *daemonEnd, typ, id string, f []byte) {
		for i := 0; i < 3; i++ {
			e.send(wire.DiscoveredSession{Type: wire.TypeDiscoveredSession, Session: wire.DiscoveredInfo{Agent: "claude", ID: fmt.Sprint("x", i)}})
		}
		e.ack(id, wire.ListResult{Sessions: []wire.SessionInfo{{ID: "a"}}, Discovered: 3})
	}}
	c := dialFake(t, d, Options{})
	res, found, err := c.List(context.Background(), wire.ListRequest{})
	if err != nil || len(res.Sessions) != 1 || len(found) != 3 || found[2].ID != "x2" {
		t.Fatalf("list %+v %+v %v", res, found, err)
	}
	select {
	case f := <-c.Events():
		t.Fatalf("a discovered session leaked to Events: %s", f.Raw)
	default:
	}
}

// streamer is a fake daemon whose sessions have total events each: a
// subscription streams them after after_seq (and, to be nasty, a few it
// already had), then session-ended.
func streamer(total int64, dropAt int64, dropped *atomic.Bool) func(e *daemonEnd, typ, id string, f []byte) {
	return func(e *daemonEnd, typ, id string, f []byte) {
		if typ != wire.TypeSubscribe {
			e.ack(id, nil)
			return
		}
		var req wire.SubscribeRequest
		json.Unmarshal(f, &req)
		e.ack(id, nil)
		go func() {
			from := max(1, req.AfterSeq-3) // replays up to three it already has
			for seq := from; seq <= total; seq++ {
				if seq == dropAt && dropped.CompareAndSwap(false, true) {
					e.p.Close("dropped")
					return
				}
				if e.p.WriteFrame(context.Background(), updateFrame(req.SessionID, seq)) != nil {
					return
				}
			}
			e.send(wire.SessionEnded{Type: wire.TypeSessionEnded, SessionID: req.SessionID, Status: "completed", LastSeq: total})
		}()
	}
}

func updateFrame(sid string, seq int64) []byte {
	b, _ := json.Marshal(wire.SessionUpdate{Type: wire.TypeSessionUpdate, SessionID: sid, Seq: seq, TS: time.Unix(seq, 0).UTC(), Kind: wire.KindAgentMessage, Data: json.RawMessage(fmt.Sprintf(`{"text":"e%d"}`, seq))})
	return b
}

// A subscription dropped mid-stream resumes on a new connection from the
// last event it delivered: every event once, in order, then the end.
func TestSubscriptionResumesLosslessly(t *testing.T) {
	var dropped atomic.Bool
	d := &fakeDaemon{handle: streamer(3000, 1234, &dropped)}
	c := dialFake(t, d, Options{Reconnect: true})
	s, err := c.Subscribe(context.Background(), "S", 0)
	if err != nil {
		t.Fatal(err)
	}
	var want int64 = 1
	for u := range s.Updates() {
		if u.Seq != want || u.SessionID != "S" || !strings.Contains(string(u.Raw), fmt.Sprintf(`"seq":%d`, u.Seq)) {
			t.Fatalf("got seq %d (%s), want %d", u.Seq, u.Raw, want)
		}
		want++
	}
	if want != 3001 || s.Ended() == nil || s.Ended().LastSeq != 3000 || s.Err() != nil {
		t.Fatalf("ended after %d: %+v %v", want-1, s.Ended(), s.Err())
	}
	if !dropped.Load() || c.Connections() != 2 {
		t.Fatalf("dropped %v, %d connections", dropped.Load(), c.Connections())
	}
	if _, err := c.Subscribe(context.Background(), "S", 2990); err != nil {
		t.Fatalf("subscribe again after the end: %v", err)
	}
}

// Without Reconnect a drop ends the Conn: requests in flight fail as
// disconnected, the subscriptions end with the reason.
func TestDropEndsWithoutReconnect(t *testing.T) {
	inflight := make(chan struct{})
	d := &fakeDaemon{handle: func(e *daemonEnd, typ, id string, f []byte) {
		if typ == wire.TypeSubscribe {
			e.ack(id, nil)
			return
		}
		close(inflight)
	}}
	c := dialFake(t, d, Options{})
	s, err := c.Subscribe(context.Background(), "S", 0)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Kill(context.Background(), wire.KillRequest{SessionID: "S"}) }()
	<-inflight
	d.end(0).p.Close("gone")
	if err := <-errc; !errors.Is(err, ErrDisconnected) {
		t.Fatalf("request in flight: %v", err)
	}
	<-c.Done()
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "pipe closed") {
		t.Fatalf("conn err %v", err)
	}
	for range s.Updates() {
	}
	if s.Ended() != nil || s.Err() == nil {
		t.Fatalf("subscription: %+v %v", s.Ended(), s.Err())
	}
	if err := c.Kill(context.Background(), wire.KillRequest{}); err == nil {
		t.Fatal("a request after the end succeeded")
	}
}

// A daemon that says it is stopping and then cannot be reached ends the
// Conn with a StoppedError carrying its reason; one that is merely gone
// for longer than ReconnectFor ends it with ErrLost.
func TestStoppedAndLost(t *testing.T) {
	d := &fakeDaemon{handle: func(e *daemonEnd, typ, id string, f []byte) { e.ack(id, nil) }}
	c := dialFake(t, d, Options{Reconnect: true, ReconnectFor: 200 * time.Millisecond})
	d.refuse.Store(errors.New("connection refused"))
	e := d.end(0)
	e.send(wire.DaemonStopping{Type: wire.TypeDaemonStopping, Reason: "the daemon is stopping"})
	e.p.Close("bye")
	<-c.Done()
	var st *StoppedError
	if !errors.As(c.Err(), &st) || st.Reason != "the daemon is stopping" {
		t.Fatalf("err %v", c.Err())
	}

	d2 := &fakeDaemon{handle: func(e *daemonEnd, typ, id string, f []byte) { e.ack(id, nil) }}
	c2 := dialFake(t, d2, Options{Reconnect: true, ReconnectFor: 200 * time.Millisecond})
	d2.refuse.Store(errors.New("connection refused"))
	d2.end(0).p.Close("crash")
	select {
	case <-c2.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("reconnecting went on past ReconnectFor")
	}
	if !errors.Is(c2.Err(), ErrLost) || !strings.Contains(c2.Err().Error(), "connection refused") {
		t.Fatalf("err %v", c2.Err())
	}

	// A permanent dial error ends at once.
	perm := errors.New("credential refused")
	d3 := &fakeDaemon{handle: func(e *daemonEnd, typ, id string, f []byte) {}}
	c3 := dialFake(t, d3, Options{Reconnect: true, Permanent: func(err error) bool { return errors.Is(err, perm) }})
	d3.refuse.Store(perm)
	d3.end(0).p.Close("x")
	<-c3.Done()
	if !errors.Is(c3.Err(), perm) || d3.dials.Load() != 1 {
		t.Fatalf("err %v after %d dials", c3.Err(), d3.dials.Load())
	}
}

// A request the daemon never answers gives up after RequestTimeout.
func TestRequestTimeout(t *testing.T) {
	d := &fakeDaemon{handle: func(*daemonEnd, string, string, []byte) {}}
	c := dialFake(t, d, Options{RequestTimeout: 100 * time.Millisecond})
	began := time.Now()
	err := c.Kill(context.Background(), wire.KillRequest{SessionID: "S"})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) > 5*time.Second {
		t.Fatalf("err %v after %s", err, time.Since(began))
	}
}

// Frames nobody reads are dropped and counted rather than stall acks; a
// subscription nobody reads stalls the connection only until it is
// unsubscribed.
func TestSlowReadersDoNotWedgeTheConnection(t *testing.T) {
	d := &fakeDaemon{handle: func(e *daemonEnd, typ, id string, f []byte) {
		switch typ {
		case wire.TypeList:
			for i := 0; i < 300; i++ {
				e.send(map[string]any{"type": "hook-permission-request", "n": i})
			}
			e.ack(id, wire.ListResult{})
		case wire.TypeSubscribe:
			var req wire.SubscribeRequest
			json.Unmarshal(f, &req)
			e.ack(id, nil)
			go func() {
				for seq := int64(1); seq <= 2000; seq++ {
					if e.p.WriteFrame(context.Background(), updateFrame(req.SessionID, seq)) != nil {
						return
					}
				}
			}()
		default:
			e.ack(id, nil)
		}
	}}
	c := dialFake(t, d, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := c.List(ctx, wire.ListRequest{}); err != nil {
		t.Fatal(err)
	}
	if c.DroppedEvents() != 300-eventBuffer {
		t.Fatalf("dropped %d", c.DroppedEvents())
	}
	s, err := c.Subscribe(ctx, "S", 0)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return len(s.Updates()) == subscriptionBuffer })
	if err := c.Unsubscribe(ctx, "S"); err != nil {
		t.Fatalf("unsubscribe while the reader was blocked: %v", err)
	}
	n := 0
	for range s.Updates() {
		n++
	}
	if n != subscriptionBuffer {
		t.Fatalf("%d buffered updates", n)
	}
	if err := c.Kill(ctx, wire.KillRequest{SessionID: "S"}); err != nil {
		t.Fatalf("after unsubscribe: %v", err)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// The type of a frame is read without decoding it when the daemon wrote
// the type first, and decoded otherwise.
func TestFrameType(t *testing.T) {
	for in, want := range map[string]string{
		`{"type":"session-update","seq":1}`: "session-update",
		`{"seq":1,"type":"ack"}`:            "ack",
		`{"type":"a\"b"}`:                   `a"b`,
		`not json`:                          "",
	} {
		if got := frameType([]byte(in)); got != want {
			t.Errorf("frameType(%s) = %q, want %q", in, got, want)
		}
	}
}
