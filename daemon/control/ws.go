package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/version"
)

// Sessions is what the control protocol asks of the session manager.
type Sessions interface {
	Launch(ctx context.Context, req wire.LaunchRequest) (wire.SessionInfo, error)
	Prompt(ctx context.Context, sessionID, text string) error
	Kill(ctx context.Context, sessionID string) error
	List(ctx context.Context, req wire.ListRequest) ([]wire.SessionInfo, error)
	Session(ctx context.Context, id string) (wire.SessionInfo, error)
	Manifest(ctx context.Context, id string) (wire.Manifest, error)
	// OnNotice registers fn for every notice (session-started, and the
	// frames of later parts such as permission requests); fn must not
	// block. The returned func removes it.
	OnNotice(fn func(wire.Notice)) (remove func())
}

// Command handles a further request type of the control protocol, for
// parts that live outside this package. frame is the whole request; the
// result becomes the ack's result.
type Command func(ctx context.Context, frame []byte) (result any, err error)

// EventLog is the durable log subscriptions read from.
type EventLog interface {
	Follow(ctx context.Context, sessionID string, afterSeq int64, fn func(store.Event) error) error
	Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]store.Event, error)
}

// Discover finds sessions agents ran outside reeve.
type Discover func(ctx context.Context) ([]wire.DiscoveredInfo, error)

// codedError is an error that carries a protocol error code.
type codedError interface {
	error
	ErrorCode() string
}

const (
	// maxFrame bounds one incoming frame.
	maxFrame = 1 << 20
	// writeTimeout bounds one outgoing frame. A client that reads nothing
	// for this long is disconnected, with a close reason, rather than
	// buffered for without limit.
	writeTimeout = 60 * time.Second
	// noticeQueue is how many notices may wait for a slow client before it
	// is disconnected.
	noticeQueue = 256
)

// wsServer serves the control protocol at /ws.
type wsServer struct {
	sessions Sessions
	log      EventLog
	discover Discover
	commands map[string]Command
	daemonID string
}

// FrameConn carries whole frames of the control protocol: a local
// WebSocket, or a channel relayed to a remote client and encrypted end to
// end. The protocol is the same over both.
type FrameConn interface {
	// ReadFrame returns the next frame; ErrBinaryFrame for a frame that is
	// not text, after which reading may go on.
	ReadFrame(ctx context.Context) ([]byte, error)
	WriteFrame(ctx context.Context, frame []byte) error
	// Close ends the connection, telling the peer why.
	Close(reason string) error
}

// ErrBinaryFrame is a frame that is not JSON text.
var ErrBinaryFrame = errors.New("frames are JSON text messages")

func (s *wsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The guard has already checked Host, Origin and the token; the
	// library's own same-origin check would refuse allowed origins.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	c.SetReadLimit(maxFrame)
	defer c.CloseNow()
	s.serve(r.Context(), wsFrames{c})
}

// ServeControl runs the control protocol over fc until it ends or ctx does.
func (a *API) ServeControl(ctx context.Context, fc FrameConn) {
	if a.ws == nil {
		fc.Close("this daemon serves no sessions")
		return
	}
	a.ws.serve(ctx, fc)
}

func (s *wsServer) serve(ctx context.Context, fc FrameConn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn := &wsConn{srv: s, c: fc, ctx: ctx, subs: map[string]*subscription{}, notices: make(chan wire.Notice, noticeQueue)}
	conn.serve()
}

// wsFrames is a local WebSocket as a FrameConn.
type wsFrames struct{ c *websocket.Conn }

func (w wsFrames) ReadFrame(ctx context.Context) ([]byte, error) {
	typ, data, err := w.c.Read(ctx)
	if err == nil && typ != websocket.MessageText {
		return nil, ErrBinaryFrame
	}
	return data, err
}

func (w wsFrames) WriteFrame(ctx context.Context, frame []byte) error {
	return w.c.Write(ctx, websocket.MessageText, frame)
}

func (w wsFrames) Close(reason string) error {
	return w.c.Close(websocket.StatusPolicyViolation, reason)
}

type wsConn struct {
	srv     *wsServer
	c       FrameConn
	ctx     context.Context
	writeMu sync.Mutex
	helloed bool
	// writing is when the write in progress began (unix nanos), 0 when
	// none is; the watchdog closes a connection stuck longer than
	// writeTimeout. One watchdog is far cheaper than a timer per frame.
	writing atomic.Int64

	subMu sync.Mutex
	subs  map[string]*subscription

	notices chan wire.Notice
}

type subscription struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *wsConn) serve() {
	defer c.stopAll()
	if err := c.write(wire.Hello{Type: wire.TypeHello, ProtocolVersion: wire.ProtocolVersion, Version: version.Version, DaemonID: c.srv.daemonID}); err != nil {
		return
	}
	go c.watchWrites()
	remove := c.srv.sessions.OnNotice(func(n wire.Notice) {
		if n.SessionID != "" && !c.follows(n.SessionID) {
			return
		}
		select {
		case c.notices <- n:
		default:
			// Closing waits for the peer; notices are sent under the
			// manager's lock, so it must not happen here.
			go c.c.Close("client too slow to read notices")
		}
	})
	defer remove()
	go c.forwardNotices()

	for {
		data, err := c.c.ReadFrame(c.ctx)
		if errors.Is(err, ErrBinaryFrame) {
			c.ack("", nil, &wire.AckError{Code: wire.CodeBadFrame, Message: err.Error()})
			continue
		}
		if err != nil {
			return
		}
		c.handle(data)
	}
}

func (c *wsConn) forwardNotices() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case n := <-c.notices:
			if c.write(n.Frame) != nil {
				return
			}
		}
	}
}

// handle answers one incoming frame with exactly one ack (a hello gets none:
// it is not a request).
func (c *wsConn) handle(data []byte) {
	var env wire.Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		c.ack("", nil, &wire.AckError{Code: wire.CodeBadFrame, Message: "frame is not a JSON object with a string type: " + err.Error()})
		return
	}
	if env.Type == wire.TypeHello {
		var h wire.Hello
		if err := json.Unmarshal(data, &h); err != nil || h.ProtocolVersion < 1 {
			c.ack(env.ID, nil, &wire.AckError{Code: wire.CodeBadFrame, Message: "hello needs a protocol_version of 1 or more"})
			return
		}
		c.helloed = true
		return
	}
	if !c.helloed {
		c.ack(env.ID, nil, &wire.AckError{Code: wire.CodeHelloRequired, Message: "send a hello frame first"})
		return
	}
	ctx := c.ctx
	var result any
	var err error
	switch env.Type {
	case wire.TypeLaunch:
		var req wire.LaunchRequest
		if err = decodeFrame(data, &req); err == nil {
			result, err = c.srv.sessions.Launch(ctx, req)
		}
	case wire.TypePrompt:
		var req wire.PromptRequest
		if err = decodeFrame(data, &req); err == nil {
			err = c.srv.sessions.Prompt(ctx, req.SessionID, req.Text)
		}
	case wire.TypeKill:
		var req wire.KillRequest
		if err = decodeFrame(data, &req); err == nil {
			err = c.srv.sessions.Kill(ctx, req.SessionID)
		}
	case wire.TypeList:
		var req wire.ListRequest
		if err = decodeFrame(data, &req); err == nil {
			result, err = c.list(ctx, req)
		}
	case wire.TypeSubscribe:
		var req wire.SubscribeRequest
		if err = decodeFrame(data, &req); err == nil {
			// subscribe acks itself: the ack must precede the replay.
			c.subscribe(env.ID, req)
			return
		}
	case wire.TypeUnsubscribe:
		var req wire.UnsubscribeRequest
		if err = decodeFrame(data, &req); err == nil {
			err = c.unsubscribe(req.SessionID)
		}
	default:
		if cmd, ok := c.srv.commands[env.Type]; ok {
			result, err = cmd(ctx, data)
			break
		}
		err = &frameError{code: wire.CodeUnknownType, msg: fmt.Sprintf("unknown frame type %q", env.Type)}
	}
	if err != nil {
		c.ack(env.ID, nil, toAckError(err))
		return
	}
	c.ack(env.ID, result, nil)
}

func (c *wsConn) list(ctx context.Context, req wire.ListRequest) (wire.ListResult, error) {
	switch req.Scope {
	case "":
		req.Scope = wire.ScopeAll
	case wire.ScopeAll, wire.ScopeActive, wire.ScopeDiscovered:
	default:
		return wire.ListResult{}, &frameError{code: wire.CodeBadFrame, msg: fmt.Sprintf("unknown scope %q (use ALL, ACTIVE or DISCOVERED)", req.Scope)}
	}
	res := wire.ListResult{Sessions: []wire.SessionInfo{}}
	if req.Scope != wire.ScopeDiscovered {
		list, err := c.srv.sessions.List(ctx, req)
		if err != nil {
			return res, err
		}
		res.Sessions = list
	}
	if req.Scope != wire.ScopeActive && c.srv.discover != nil {
		found, err := c.srv.discover(ctx)
		if err != nil {
			return res, err
		}
		for _, d := range found {
			if req.Agent != "" && d.Agent != req.Agent {
				continue
			}
			if err := c.write(wire.DiscoveredSession{Type: wire.TypeDiscoveredSession, Session: d}); err != nil {
				return res, err
			}
			res.Discovered++
		}
	}
	return res, nil
}

// subscribe acks, then streams the session's log after AfterSeq from the
// store, then live, then a session-ended frame. The stream is paced by the
// writes: a slow client makes Follow read later, never buffer more.
func (c *wsConn) subscribe(id string, req wire.SubscribeRequest) {
	if req.AfterSeq < 0 {
		c.ack(id, nil, &wire.AckError{Code: wire.CodeBadFrame, Message: "after_seq must not be negative"})
		return
	}
	if _, err := c.srv.sessions.Session(c.ctx, req.SessionID); err != nil {
		c.ack(id, nil, toAckError(err))
		return
	}
	c.subMu.Lock()
	if _, dup := c.subs[req.SessionID]; dup {
		c.subMu.Unlock()
		c.ack(id, nil, &wire.AckError{Code: wire.CodeAlreadyWatched, Message: "this connection already follows session " + req.SessionID})
		return
	}
	sctx, cancel := context.WithCancel(c.ctx)
	sub := &subscription{cancel: cancel, done: make(chan struct{})}
	c.subs[req.SessionID] = sub
	c.subMu.Unlock()
	if err := c.ack(id, nil, nil); err != nil {
		cancel()
		close(sub.done)
		return
	}
	go func() {
		defer close(sub.done)
		defer func() {
			c.subMu.Lock()
			if c.subs[req.SessionID] == sub {
				delete(c.subs, req.SessionID)
			}
			c.subMu.Unlock()
		}()
		last := req.AfterSeq
		var buf []byte
		err := c.srv.log.Follow(sctx, req.SessionID, req.AfterSeq, func(e store.Event) error {
			last = e.Seq
			buf = updateFrame(buf[:0], e)
			return c.writeRaw(buf)
		})
		if err != nil || sctx.Err() != nil {
			return
		}
		si, err := c.srv.sessions.Session(c.ctx, req.SessionID)
		if err != nil {
			return
		}
		c.write(wire.SessionEnded{Type: wire.TypeSessionEnded, SessionID: req.SessionID, Status: si.Status, Reason: si.StatusReason, LastSeq: max(last, si.LastSeq)})
	}()
}

// follows reports whether this connection subscribes to the session.
func (c *wsConn) follows(sessionID string) bool {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	_, ok := c.subs[sessionID]
	return ok
}

// unsubscribe stops a subscription and waits for it, so no frame of that
// session follows the ack.
func (c *wsConn) unsubscribe(sessionID string) error {
	c.subMu.Lock()
	sub := c.subs[sessionID]
	delete(c.subs, sessionID)
	c.subMu.Unlock()
	if sub == nil {
		return &frameError{code: "not_subscribed", msg: "this connection does not follow session " + sessionID}
	}
	sub.cancel()
	<-sub.done
	return nil
}

func (c *wsConn) stopAll() {
	c.subMu.Lock()
	subs := c.subs
	c.subs = map[string]*subscription{}
	c.subMu.Unlock()
	for _, s := range subs {
		s.cancel()
		<-s.done
	}
}

func (c *wsConn) ack(id string, result any, aerr *wire.AckError) error {
	a := wire.Ack{Type: wire.TypeAck, ID: id, OK: aerr == nil, Error: aerr}
	if result != nil && aerr == nil {
		raw, err := json.Marshal(result)
		if err != nil {
			a = wire.Ack{Type: wire.TypeAck, ID: id, Error: &wire.AckError{Code: "internal", Message: err.Error()}}
		} else {
			a.Result = raw
		}
	}
	return c.write(a)
}

func (c *wsConn) write(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.writeRaw(data)
}

func (c *wsConn) writeRaw(data []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.writing.Store(time.Now().UnixNano())
	defer c.writing.Store(0)
	return c.c.WriteFrame(c.ctx, data)
}

// watchWrites disconnects a client that stops reading: its write would
// otherwise block the subscription forever.
func (c *wsConn) watchWrites() {
	tick := time.NewTicker(writeTimeout / 10)
	defer tick.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-tick.C:
			if began := c.writing.Load(); began != 0 && time.Since(time.Unix(0, began)) > writeTimeout {
				c.c.Close("client stopped reading")
				return
			}
		}
	}
}

// updateFrame encodes a session-update by hand: the event's data is
// already compact JSON from the store, and re-validating it on every
// replayed frame is the largest cost of a replay.
func updateFrame(buf []byte, e store.Event) []byte {
	buf = append(buf, `{"type":"session-update","session_id":`...)
	buf = strconv.AppendQuote(buf, e.SessionID)
	buf = append(buf, `,"seq":`...)
	buf = strconv.AppendInt(buf, e.Seq, 10)
	buf = append(buf, `,"ts":"`...)
	buf = e.TS.UTC().AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","kind":`...)
	buf = strconv.AppendQuote(buf, e.Kind)
	buf = append(buf, `,"data":`...)
	if len(e.Data) == 0 {
		buf = append(buf, "null"...)
	} else {
		buf = append(buf, e.Data...)
	}
	return append(buf, '}')
}

// frameError is a protocol-level failure with its code.
type frameError struct{ code, msg string }

func (e *frameError) Error() string     { return e.msg }
func (e *frameError) ErrorCode() string { return e.code }

func decodeFrame(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return &frameError{code: wire.CodeBadFrame, msg: "malformed frame: " + err.Error()}
	}
	return nil
}

func toAckError(err error) *wire.AckError {
	var ce codedError
	if errors.As(err, &ce) {
		return &wire.AckError{Code: ce.ErrorCode(), Message: err.Error()}
	}
	return &wire.AckError{Code: "internal", Message: err.Error()}
}
