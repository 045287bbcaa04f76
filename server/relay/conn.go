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
	room    chan struct{} // signalled when the writer takes frames
	done    chan struct{} // closed when the connection is closed
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
	c := &conn{r: r, role: role, t: t, at: time.Now().UTC(), writing: true, room: make(chan struct{}, 1), done: make(chan struct{})}
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

// send queues a frame. When the queue is full it waits up to SlowTimeout
// for room, then disconnects this (receiving) connection as too slow: a
// slow peer is never buffered without bound.
func (c *conn) send(frame []byte) error {
	var timer *time.Timer
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return errClosed
		}
		if len(c.q) < c.r.opts.QueueFrames {
			c.q = append(c.q, frame)
			left := len(c.q) < c.r.opts.QueueFrames
			start := !c.writing
			c.writing = true
			c.mu.Unlock()
			if start {
				go c.writeLoop()
			}
			if left && timer != nil {
				// Another waiting sender may fit too.
				select {
				case c.room <- struct{}{}:
				default:
				}
			}
			if timer != nil {
				timer.Stop()
			}
			return nil
		}
		c.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(c.r.opts.SlowTimeout)
		}
		select {
		case <-c.room:
		case <-c.done:
			timer.Stop()
			return errClosed
		case <-timer.C:
			c.r.m.slow.Add(1)
			c.r.log.Info("relay peer too slow; disconnecting", "role", c.role, "workspace", c.t.workspace, "runtime_target", c.t.runtime)
			c.kill(CloseTooSlow, "the peer did not read its frames")
			return errClosed
		}
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
			c.q, c.spare = nil, nil
			c.mu.Unlock()
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
		select {
		case c.room <- struct{}{}:
		default:
		}
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
				putFrame(f)
			}
			batch[i] = nil
		}
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
	c.q = nil
	start := !c.writing
	c.writing = true // the writer that sees closed is the last one
	c.mu.Unlock()
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
