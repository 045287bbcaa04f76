package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/version"
)

// Sessions is what the session requests of the control protocol, and
// the session routes, ask of the session manager.
type Sessions interface {
	Launch(ctx context.Context, req wire.LaunchRequest) (wire.SessionInfo, error)
	Prompt(ctx context.Context, req wire.PromptRequest) error
	Kill(ctx context.Context, req wire.KillRequest) error
	List(ctx context.Context, req wire.ListRequest) ([]wire.SessionInfo, error)
	Session(ctx context.Context, id string) (wire.SessionInfo, error)
	Manifest(ctx context.Context, id string) (wire.Manifest, error)
	// OnNotice registers fn for every notice (session-started, permission
	// requests and decisions); fn must not block. The returned func
	// removes it.
	OnNotice(fn func(Notice)) (remove func())
}

// Notice is a frame the daemon pushes to clients outside any subscription
// stream: to every connection when SessionID is empty, else to the
// connections that follow that session.
type Notice struct {
	SessionID string
	Frame     any
}

// Worktrees is what the worktree requests ask of the session manager.
type Worktrees interface {
	WorktreeList(ctx context.Context, req wire.WorktreeListRequest) (wire.WorktreeList, error)
	WorktreeDiff(ctx context.Context, req wire.WorktreeDiffRequest) (wire.WorktreeDiff, error)
	WorktreeSummary(ctx context.Context, req wire.WorktreeSummaryRequest) (wire.WorktreeSummary, error)
	Rollback(ctx context.Context, req wire.RollbackRequest) (wire.RollbackResult, error)
	BranchRetry(ctx context.Context, req wire.BranchRetryRequest) (wire.BranchRetryResult, error)
	SquashMerge(ctx context.Context, req wire.SquashMergeRequest) (wire.SquashMergeResult, error)
	WorktreeRemove(ctx context.Context, req wire.WorktreeRemoveRequest) (wire.WorktreeRemoveResult, error)
}

// EventLog is the durable log subscriptions read from.
type EventLog interface {
	FollowBatches(ctx context.Context, sessionID string, afterSeq int64, fn func([]store.Event) error) error
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

// wsServer serves the control protocol at /ws and on relayed channels.
type wsServer struct {
	sessions    Sessions
	permissions Permissions // nil: no hook-bridge requests
	worktrees   Worktrees   // nil: no worktree requests
	log         EventLog
	discover    Discover
	directories Directories
	daemonID    string
	table       map[string]entry
	now         func() time.Time

	mu       sync.Mutex
	conns    map[*wsConn]struct{}
	stopping string // why the daemon is stopping; "" while it serves
}

func newWSServer(opts Options) *wsServer {
	s := &wsServer{
		sessions: opts.Sessions, permissions: opts.Permissions, worktrees: opts.Worktrees,
		log: opts.Log, discover: opts.Discover, daemonID: opts.DaemonID, conns: map[*wsConn]struct{}{},
		directories: opts.Directories, now: time.Now,
	}
	s.table = s.buildTable()
	return s
}

// stop tells every connection, and every later one, that the daemon is
// stopping, and closes them. It returns when each has been told (or has
// failed to take the frame within a second).
func (s *wsServer) stop(reason string) {
	s.mu.Lock()
	s.stopping = reason
	conns := make([]*wsConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() { defer wg.Done(); c.goodbye(reason) }()
	}
	wg.Wait()
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
	s.serve(r.Context(), wsFrames{c}, false)
}

// ServeControl runs the control protocol over fc until it ends or ctx does.
func (a *API) ServeControl(ctx context.Context, fc FrameConn) {
	if a.ws == nil {
		fc.Close("this daemon serves no sessions")
		return
	}
	a.ws.serve(ctx, fc, true)
}

// serve runs one connection; a remote one (relayed) has every request
// decided by its client's access (access.go).
func (s *wsServer) serve(ctx context.Context, fc FrameConn, remote bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn := &wsConn{srv: s, c: fc, ctx: ctx, cancel: cancel, wmu: make(chan struct{}, 1), subs: map[string]*subscription{}, notices: make(chan Notice, noticeQueue)}
	if remote {
		conn.access = &connAccess{}
		conn.access.gate, _ = fc.(AccessGate)
	}
	s.mu.Lock()
	stopping := s.stopping
	if stopping == "" {
		s.conns[conn] = struct{}{}
	}
	s.mu.Unlock()
	if stopping != "" {
		conn.write(wire.Hello{Type: wire.TypeHello, ProtocolVersion: wire.ProtocolVersion, Version: version.Version, DaemonID: s.daemonID})
		conn.goodbye(stopping)
		return
	}
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
	}()
	conn.serve()
}

// goingAway is a FrameConn that can say, when it closes, that the server
// is going away rather than that the client misbehaved.
type goingAway interface {
	GoingAway(reason string) error
}

// goodbye sends the daemon-stopping frame and closes the connection.
func (c *wsConn) goodbye(reason string) {
	data, _ := json.Marshal(wire.DaemonStopping{Type: wire.TypeDaemonStopping, Reason: reason})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), time.Second)
	defer cancel()
	if c.lockWrite(ctx) {
		c.c.WriteFrame(ctx, data)
		<-c.wmu
	}
	if ga, ok := c.c.(goingAway); ok {
		ga.GoingAway(reason)
	} else {
		c.c.Close(reason)
	}
	c.cancel()
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

func (w wsFrames) GoingAway(reason string) error {
	return w.c.Close(websocket.StatusGoingAway, reason)
}

type wsConn struct {
	srv    *wsServer
	c      FrameConn
	ctx    context.Context
	cancel context.CancelFunc
	// wmu is a one-slot semaphore held by the write in progress; unlike a
	// mutex, the goodbye can give up waiting for a stuck write.
	wmu     chan struct{}
	helloed bool
	// access is the remote client's access (nil on a local connection,
	// which the guard has admitted).
	access *connAccess
	// writing is when the write in progress began (unix nanos), 0 when
	// none is; the watchdog closes a connection stuck longer than
	// writeTimeout. One watchdog is far cheaper than a timer per frame.
	writing atomic.Int64

	subMu sync.Mutex
	subs  map[string]*subscription

	notices chan Notice
}

type subscription struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *wsConn) serve() {
	defer c.stopAll()
	defer c.disarmExpiry()
	if err := c.write(wire.Hello{Type: wire.TypeHello, ProtocolVersion: wire.ProtocolVersion, Version: version.Version, DaemonID: c.srv.daemonID}); err != nil {
		return
	}
	go c.watchWrites()
	remove := c.srv.sessions.OnNotice(func(n Notice) {
		if !c.queues(n) {
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
			if !c.shows(n) {
				continue
			}
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
		refresh := c.helloed
		c.helloed = true
		if c.access != nil {
			c.presentAccess(h.AccessToken)
			c.accessPresented(refresh)
		}
		return
	}
	if !c.helloed {
		c.ack(env.ID, nil, &wire.AckError{Code: wire.CodeHelloRequired, Message: "send a hello frame first"})
		return
	}
	e, ok := c.srv.table[env.Type]
	if !ok {
		c.ack(env.ID, nil, &wire.AckError{Code: wire.CodeUnknownType, Message: fmt.Sprintf("unknown frame type %q", env.Type)})
		return
	}
	if c.access != nil {
		if err := c.authorize(env.Type, e.need, data); err != nil {
			c.ack(env.ID, nil, toAckError(err))
			return
		}
	}
	result, err := e.h(c, data)
	switch {
	case errors.Is(err, errAcked):
	case err != nil:
		c.ack(env.ID, nil, toAckError(err))
	default:
		c.ack(env.ID, result, nil)
	}
}

// list answers a list request; the discovered sessions go out as frames
// before the ack.
func (c *wsConn) list(req wire.ListRequest) (any, error) {
	ctx := c.ctx
	switch req.Scope {
	case "":
		req.Scope = wire.ScopeAll
	case wire.ScopeAll, wire.ScopeActive, wire.ScopeDiscovered:
	default:
		return nil, &frameError{code: wire.CodeBadFrame, msg: fmt.Sprintf("unknown scope %q (use ALL, ACTIVE or DISCOVERED)", req.Scope)}
	}
	res := wire.ListResult{Sessions: []wire.SessionInfo{}}
	if req.Scope != wire.ScopeDiscovered {
		list, err := c.srv.sessions.List(ctx, req)
		if err != nil {
			return res, err
		}
		res.Sessions = list
		if c.access != nil {
			res.Sessions = c.visibleSessions(list)
		}
	}
	if req.Scope != wire.ScopeActive && c.srv.discover != nil && c.seesDiscovered() {
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
func (c *wsConn) subscribe(req wire.SubscribeRequest) (any, error) {
	if req.AfterSeq < 0 {
		return nil, &frameError{code: wire.CodeBadFrame, msg: "after_seq must not be negative"}
	}
	if _, err := c.srv.sessions.Session(c.ctx, req.SessionID); err != nil {
		return nil, err
	}
	c.subMu.Lock()
	if _, dup := c.subs[req.SessionID]; dup {
		c.subMu.Unlock()
		return nil, &frameError{code: wire.CodeAlreadyWatched, msg: "this connection already follows session " + req.SessionID}
	}
	sctx, cancel := context.WithCancel(c.ctx)
	sub := &subscription{cancel: cancel, done: make(chan struct{})}
	c.subs[req.SessionID] = sub
	c.subMu.Unlock()
	if err := c.ack(req.ID, nil, nil); err != nil {
		cancel()
		close(sub.done)
		return nil, errAcked
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
		var buf, one []byte
		headLen := len(batchHead(nil, req.SessionID))
		err := c.srv.log.FollowBatches(sctx, req.SessionID, req.AfterSeq, func(evs []store.Event) error {
			if !req.Batch {
				for _, e := range evs {
					buf = updateFrame(buf[:0], e)
					if err := c.writeRaw(buf); err != nil {
						return err
					}
					last = e.Seq
				}
				return nil
			}
			// As many events per frame as fit in wire.MaxBatchBytes; an
			// event that fits no batch, or is alone, goes as itself.
			n := 0
			flush := func() error {
				var err error
				switch n {
				case 0:
					return nil
				case 1:
					err = c.writeRaw(buf[headLen:])
				default:
					err = c.writeRaw(append(buf, "]}"...))
				}
				n = 0
				return err
			}
			buf = batchHead(buf[:0], req.SessionID)
			for _, e := range evs {
				one = updateFrame(one[:0], e)
				if n > 0 && len(buf)+len(one)+3 > wire.MaxBatchBytes {
					if err := flush(); err != nil {
						return err
					}
					buf = batchHead(buf[:0], req.SessionID)
				}
				if n > 0 {
					buf = append(buf, ',')
				}
				buf = append(buf, one...)
				n++
				last = e.Seq
			}
			return flush()
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
	return nil, errAcked
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
func (c *wsConn) unsubscribe(req wire.UnsubscribeRequest) (any, error) {
	c.subMu.Lock()
	sub := c.subs[req.SessionID]
	delete(c.subs, req.SessionID)
	c.subMu.Unlock()
	if sub == nil {
		return nil, &frameError{code: wire.CodeNotSubscribed, msg: "this connection does not follow session " + req.SessionID}
	}
	sub.cancel()
	<-sub.done
	return nil, nil
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
			a = wire.Ack{Type: wire.TypeAck, ID: id, Error: &wire.AckError{Code: wire.CodeAckInternal, Message: err.Error()}}
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

func (c *wsConn) lockWrite(ctx context.Context) bool {
	select {
	case c.wmu <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *wsConn) writeRaw(data []byte) error {
	if !c.lockWrite(c.ctx) {
		return c.ctx.Err()
	}
	defer func() { <-c.wmu }()
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

// updateFrame encodes a session-update (wire.AppendSessionUpdate): the
// event's data is already compact JSON from the store, and re-validating
// it on every replayed frame is the largest cost of a replay.
func updateFrame(buf []byte, e store.Event) []byte {
	return wire.AppendSessionUpdate(buf, e.SessionID, e.Seq, e.TS, e.Kind, e.Data)
}

// batchHead starts a session-updates frame (wire.AppendSessionUpdatesHead).
func batchHead(buf []byte, sessionID string) []byte {
	return wire.AppendSessionUpdatesHead(buf, sessionID)
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
	return &wire.AckError{Code: wire.CodeAckInternal, Message: err.Error()}
}
