package controlclient

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wireclient"
	"reeve.dev/reeve/internal/version"
)

// ErrNoDaemon is a home that no daemon runs from: its lock is free.
var ErrNoDaemon = errors.New("no daemon is running")

// ConnOptions shape the control-protocol connection of Dial and DialHome.
type ConnOptions struct {
	// Reconnect dials again after a drop and resumes the subscriptions
	// (wireclient.Options.Reconnect).
	Reconnect bool
	// ReconnectFor bounds one outage (default 30s with Reconnect).
	ReconnectFor time.Duration
	// RequestTimeout bounds each request that has no deadline of its own.
	RequestTimeout time.Duration
	// PingInterval is how often the connection checks that the daemon
	// still answers (default 15s); a ping unanswered for as long drops the
	// connection, so a frozen daemon cannot hang a follower.
	PingInterval time.Duration
	Logf         func(format string, args ...any)
}

// Dial opens the control protocol at /ws of this client's daemon.
func (c *Client) Dial(ctx context.Context, o ConnOptions) (*wireclient.Conn, error) {
	return dialConn(ctx, o, func(context.Context) (*Client, error) { return c, nil }, nil)
}

// DialHome opens the control protocol of the daemon running from dir.
// Each reconnection finds the daemon again from the home, since a
// restarted worker may listen elsewhere, and reconnecting ends with
// ErrNoDaemon once no daemon runs from dir.
func DialHome(ctx context.Context, dir home.Dir, o ConnOptions) (*wireclient.Conn, error) {
	locate := func(context.Context) (*Client, error) {
		if locked, err := dir.Locked(); err == nil && !locked {
			return nil, fmt.Errorf("%w from %s", ErrNoDaemon, dir)
		}
		c, _, err := FromHome(dir, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w at %s: the worker has not recorded an endpoint", ErrUnreachable, dir)
		}
		return c, err
	}
	return dialConn(ctx, o, locate, func(err error) bool { return errors.Is(err, ErrNoDaemon) })
}

func dialConn(ctx context.Context, o ConnOptions, locate func(context.Context) (*Client, error), permanent func(error) bool) (*wireclient.Conn, error) {
	if o.Reconnect && o.ReconnectFor == 0 {
		o.ReconnectFor = 30 * time.Second
	}
	if o.PingInterval <= 0 {
		o.PingInterval = 15 * time.Second
	}
	return wireclient.Dial(ctx, wireclient.Options{
		Dial: func(ctx context.Context) (wireclient.Transport, error) {
			c, err := locate(ctx)
			if err != nil {
				return nil, err
			}
			return c.dialWS(ctx, o.PingInterval)
		},
		Version:        "reeve/" + version.Version,
		Reconnect:      o.Reconnect,
		ReconnectFor:   o.ReconnectFor,
		Permanent:      permanent,
		RequestTimeout: o.RequestTimeout,
		Logf:           o.Logf,
	})
}

// dialWS opens /ws as a wireclient.Transport.
func (c *Client) dialWS(ctx context.Context, pingEvery time.Duration) (*wsTransport, error) {
	opts := &websocket.DialOptions{HTTPHeader: http.Header{}}
	if c.opts.Token != "" {
		opts.HTTPHeader.Set("Authorization", "Bearer "+c.opts.Token)
	}
	if c.opts.Network == "unix" {
		sock := c.opts.Address
		opts.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
	}
	ws, resp, err := websocket.Dial(ctx, "ws"+c.base[len("http"):]+"/ws", opts)
	if err != nil {
		if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
			return nil, &APIError{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: fmt.Sprintf("the daemon refused the connection (%s)", resp.Status)}
		}
		return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, c.where(), err)
	}
	ws.SetReadLimit(16 << 20)
	t := &wsTransport{ws: ws, done: make(chan struct{})}
	go t.keepalive(pingEvery)
	return t, nil
}

// wsTransport is the local WebSocket as a wireclient.Transport.
type wsTransport struct {
	ws   *websocket.Conn
	once sync.Once
	done chan struct{} // closed by Close: the keepalive stops
}

func (t *wsTransport) ReadFrame(ctx context.Context) ([]byte, error) {
	for {
		typ, data, err := t.ws.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				if ce.Reason != "" {
					return nil, fmt.Errorf("the daemon closed the connection: %s", ce.Reason)
				}
				return nil, errors.New("the daemon closed the connection")
			}
			return nil, err
		}
		if typ == websocket.MessageText {
			return data, nil
		}
	}
}

func (t *wsTransport) WriteFrame(ctx context.Context, frame []byte) error {
	return t.ws.Write(ctx, websocket.MessageText, frame)
}

func (t *wsTransport) Close(reason string) error {
	t.once.Do(func() { close(t.done) })
	return t.ws.Close(websocket.StatusNormalClosure, reason)
}

// keepalive drops a connection whose daemon stops answering pings: a
// frozen worker must not leave a follower waiting forever.
func (t *wsTransport) keepalive(every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := t.ws.Ping(ctx)
		cancel()
		if err != nil {
			t.ws.CloseNow()
			return
		}
	}
}
