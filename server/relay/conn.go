package relay

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// conn is one admitted WebSocket. Its outbound frames go through a bounded
// queue drained by a writer goroutine that exists only while there is
// something to write, so an idle connection costs its socket buffers and
// the reading goroutine, nothing more.
type conn struct {
	r    *Relay
	ws   *websocket.Conn
	role string
	t    target
	id   string // names a daemon connection in presence
	at   time.Time

	lastRead atomic.Int64 // unix nanoseconds

	mu      sync.Mutex
	q       [][]byte
	spare   [][]byte
	writing bool
	closed  bool // no more frames are queued or routed
	code    websocket.StatusCode
	reason  string
	// Frames queued or being written, for the budgets.
	pendN, pendBytes atomic.Int64
	overSince        time.Time     // when it went over its budget; zero when within
	watching         bool          // a checkSlow timer is pending
	done             chan struct{} // closed when the connection is closed
	// A daemon connection's channels, by id.
	chans map[string]*channel
	// A client connection's channel (nil until attached, or after it ended).
	ch *channel
}

// channel joins one client to one daemon. Either end is a local
// connection or another instance (by id) reached over the bus.
type channel struct {
	id         string
	t          target
	client     *conn
	daemon     *conn
	clientInst string
	daemonInst string
	ended      atomic.Bool
}

// newConn makes a connection whose writer is held (writing is set) until
// start hands it the socket.
func (r *Relay) newConn(role string, t target) *conn {
	c := &conn{r: r, role: role, t: t, at: time.Now().UTC(), writing: true, done: make(chan struct{})}
	if role == RoleDaemon {
		c.id = "d" + r.newChannelID()
		c.chans = map[string]*channel{}
	}
	c.lastRead.Store(time.Now().UnixNano())
	return c
}

// start attaches the upgraded socket and releases the writer.
func (c *conn) start(ws *websocket.Conn) {
	c.mu.Lock()
	c.ws = ws
	if len(c.q) == 0 && !c.closed {
		c.writing = false
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go c.writeLoop()
}

// errClosed: the connection is closed or closing; the frame is dropped.
var errClosed = errors.New("relay connection closed")

// send queues a frame for the peer and never waits: the reading goroutine
// that calls it (a daemon's, shared by all its channels) must not stall on
// one slow peer. The frame counts against the peer's budget and the
// relay's: a peer over its budget for SlowTimeout, or at twice its budget,
// is disconnected as too slow (4429); when the relay's buffers are full,
// the peer holding the most is disconnected first.
func (c *conn) send(frame []byte) error {
	size := int64(len(frame))
	if !c.r.reserve(size) {
		c.r.evictLargest()
		if !c.r.reserve(size) {
			c.tooSlow("the relay's buffers are full")
			return errClosed
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.r.release(size)
		return errClosed
	}
	n, b := c.pendN.Add(1), c.pendBytes.Add(size)
	qf, qb := int64(c.r.opts.QueueFrames), c.r.opts.QueueBytes
	if n > 2*qf || b > 2*qb {
		c.pendN.Add(-1)
		c.pendBytes.Add(-size)
		c.mu.Unlock()
		c.r.release(size)
		c.tooSlow("the peer did not read its frames (twice over its queue budget)")
		return errClosed
	}
	c.q = append(c.q, frame)
	arm := false
	if (n > qf || b > qb) && c.overSince.IsZero() {
		c.overSince = time.Now()
		arm = !c.watching
		c.watching = true
	}
	start := !c.writing
	c.writing = true
	c.mu.Unlock()
	if start {
		go c.writeLoop()
	}
	if arm {
		time.AfterFunc(c.r.opts.SlowTimeout, c.checkSlow)
	}
	return nil
}

// checkSlow disconnects a peer still over its budget SlowTimeout after it
// went over.
func (c *conn) checkSlow() {
	c.mu.Lock()
	since, closed := c.overSince, c.closed
	if since.IsZero() || closed {
		c.watching = false
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if wait := c.r.opts.SlowTimeout - time.Since(since); wait > 0 {
		time.AfterFunc(wait, c.checkSlow)
		return
	}
	c.tooSlow("the peer did not read its frames")
}

func (c *conn) tooSlow(reason string) {
	if c.isClosed() {
		return
	}
	c.r.m.slow.Add(1)
	c.r.log.Info("relay peer too slow; disconnecting", "role", c.role, "workspace", c.t.workspace, "runtime_target", c.t.runtime,
		"reason", reason, "queued_frames", c.pendN.Load(), "queued_bytes", c.pendBytes.Load())
	c.kill(CloseTooSlow, reason)
}

// dropped accounts for a frame that left the queue, written or not.
func (c *conn) dropped(f []byte) {
	if f == nil {
		return
	}
	c.pendN.Add(-1)
	c.pendBytes.Add(-int64(len(f)))
	c.r.release(int64(len(f)))
}

// underBudget clears the over-budget mark once the peer caught up.
func (c *conn) underBudget() {
	if c.pendN.Load() <= int64(c.r.opts.QueueFrames) && c.pendBytes.Load() <= c.r.opts.QueueBytes {
		c.mu.Lock()
		c.overSince = time.Time{}
		c.mu.Unlock()
	}
}

// writeLoop writes queued frames until the queue is empty, then exits. A
// nil frame is the marker finish queues: the connection closes there. On a
// closed connection it sends the close frame and stays the last writer.
func (c *conn) writeLoop() {
	idle := 0
	for {
		c.mu.Lock()
		if c.closed {
			code, reason := c.code, c.reason
			q := c.q
			c.q, c.spare = nil, nil
			c.mu.Unlock()
			for _, f := range q {
				c.dropped(f)
			}
			c.closeSocket(code, reason)
			return
		}
		if len(c.q) == 0 {
			if idle < 2 {
				// Under load the next frame is usually a moment away;
				// yielding once is cheaper than a new goroutine for it.
				idle++
				c.mu.Unlock()
				runtime.Gosched()
				continue
			}
			c.writing = false
			c.q, c.spare = nil, nil // idle connections keep no buffers
			c.mu.Unlock()
			return
		}
		idle = 0
		batch := c.q
		c.q = c.spare[:0]
		c.spare = nil
		c.mu.Unlock()
		// As in readLoop, no per-write deadline: a peer that stops reading
		// fills the queue and is killed, and kill bounds the wait.
		ctx := context.Background()
		var err error
		marker := false
		for i, f := range batch {
			switch {
			case f == nil:
				marker = true
			case err == nil && !marker:
				err = c.ws.Write(ctx, websocket.MessageText, f)
				if err == nil {
					c.r.m.framesOut.Add(1)
				}
			}
			c.dropped(f)
			if f != nil {
				putFrame(f)
			}
			batch[i] = nil
		}
		c.underBudget()
		switch {
		case err != nil:
			// The socket is gone, or the write timed out, which closed it.
			c.kill(websocket.StatusAbnormalClosure, "write failed")
		case marker:
			c.mu.Lock()
			code, reason := c.code, c.reason
			c.mu.Unlock()
			c.kill(code, reason)
		default:
			c.mu.Lock()
			if c.spare == nil {
				c.spare = batch[:0]
			}
			c.mu.Unlock()
		}
	}
}

// finish closes the connection with code after the frames already queued:
// the orderly end of a client's channel.
func (c *conn) finish(code websocket.StatusCode, reason string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.q = append(c.q, nil)
	c.code, c.reason = code, reason
	start := !c.writing
	c.writing = true
	c.mu.Unlock()
	if start {
		go c.writeLoop()
	}
}

// kill closes the connection now, dropping queued frames; the close frame
// goes out once a write in progress ends (or times out).
func (c *conn) kill(code websocket.StatusCode, reason string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.code, c.reason = code, reason
	q := c.q
	c.q = nil
	start := !c.writing
	c.writing = true // the writer that sees closed is the last one
	c.mu.Unlock()
	for _, f := range q {
		c.dropped(f)
	}
	close(c.done)
	if start {
		go c.writeLoop()
	} else if ws := c.socket(); ws != nil {
		// A write in progress may be stuck on a peer that reads nothing:
		// the close frame gets WriteTimeout, then the socket goes.
		time.AfterFunc(c.r.opts.WriteTimeout, func() { ws.CloseNow() })
	}
}

func (c *conn) socket() *websocket.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ws
}

func (c *conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *conn) closeSocket(code websocket.StatusCode, reason string) {
	if c.ws == nil {
		return // never upgraded
	}
	if code == 0 || code == websocket.StatusAbnormalClosure {
		c.ws.CloseNow()
		return
	}
	c.ws.Close(code, reason)
}

// reserve counts n more bytes against MaxBufferedBytes, or reports that
// they do not fit.
func (r *Relay) reserve(n int64) bool {
	for {
		cur := r.buffered.Load()
		if cur+n > r.opts.MaxBufferedBytes {
			return false
		}
		if r.buffered.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

func (r *Relay) release(n int64) { r.buffered.Add(-n) }

// evictLargest disconnects the peer holding the most queued bytes: when the
// relay's buffers are full, the peer that filled them goes, not whichever
// peer happened to be sent to next.
func (r *Relay) evictLargest() {
	r.mu.Lock()
	var worst *conn
	var most int64
	for c := range r.conns {
		if b := c.pendBytes.Load(); b > most {
			worst, most = c, b
		}
	}
	r.mu.Unlock()
	if worst != nil {
		worst.tooSlow("the relay's buffers are full and this peer held the most")
	}
}
