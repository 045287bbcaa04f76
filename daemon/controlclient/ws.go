package controlclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/coder/websocket"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/version"
)

// Conn is a connection to the daemon's control protocol at /ws.
type Conn struct {
	ws     *websocket.Conn
	hello  wire.Hello
	nextID atomic.Int64

	mu      sync.Mutex
	pending map[string]*pendingReq
	order   []string // pending ids, oldest first
	readErr error

	events chan Frame
	done   chan struct{}
}

// Frame is one non-ack frame from the daemon.
type Frame struct {
	Type string
	Raw  json.RawMessage
}

type pendingReq struct {
	ack        chan wire.Ack
	discovered []wire.DiscoveredInfo
	collect    bool // a list request gathers the discovered-session frames before its ack
}

// AckError is a request the daemon refused.
type AckError struct {
	Code    string
	Message string
}

func (e *AckError) Error() string { return e.Message }

// Dial opens the control protocol and exchanges hellos.
func (c *Client) Dial(ctx context.Context) (*Conn, error) {
	opts := &websocket.DialOptions{HTTPHeader: http.Header{}}
	if c.opts.Token != "" {
		opts.HTTPHeader.Set("Authorization", "Bearer "+c.opts.Token)
	}
	url := "ws" + c.base[len("http"):] + "/ws"
	if c.opts.Network == "unix" {
		sock := c.opts.Address
		opts.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	}
	ws, resp, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
			return nil, &APIError{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: fmt.Sprintf("the daemon refused the connection (%s)", resp.Status)}
		}
		return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, c.where(), err)
	}
	ws.SetReadLimit(16 << 20)
	k := &Conn{ws: ws, pending: map[string]*pendingReq{}, events: make(chan Frame, 256), done: make(chan struct{})}
	_, data, err := ws.Read(ctx)
	if err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("read hello: %w", err)
	}
	if err := json.Unmarshal(data, &k.hello); err != nil || k.hello.Type != wire.TypeHello {
		ws.CloseNow()
		return nil, fmt.Errorf("the daemon did not say hello: %q", data)
	}
	if err := k.send(ctx, wire.Hello{Type: wire.TypeHello, ProtocolVersion: wire.ProtocolVersion, Version: version.Version}); err != nil {
		ws.CloseNow()
		return nil, err
	}
	go k.readLoop()
	return k, nil
}

// Hello is the daemon's hello.
func (k *Conn) Hello() wire.Hello { return k.hello }

// Events delivers every frame that is not an ack, in order. The reader
// blocks while it is full, which slows the daemon down instead of dropping.
func (k *Conn) Events() <-chan Frame { return k.events }

// Done is closed when the connection has ended; Err says why.
func (k *Conn) Done() <-chan struct{} { return k.done }

// Err is the reason the connection ended.
func (k *Conn) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.readErr
}

// Close ends the connection.
func (k *Conn) Close() error { return k.ws.Close(websocket.StatusNormalClosure, "") }

// NewID returns a fresh request id.
func (k *Conn) NewID() string { return "c" + strconv.FormatInt(k.nextID.Add(1), 10) }

func (k *Conn) readLoop() {
	defer close(k.done)
	defer close(k.events)
	for {
		_, data, err := k.ws.Read(context.Background())
		if err != nil {
			k.fail(err)
			return
		}
		var env wire.Envelope
		if err := json.Unmarshal(data, &env); err != nil {
			continue
		}
		switch env.Type {
		case wire.TypeAck:
			var a wire.Ack
			if json.Unmarshal(data, &a) == nil {
				k.deliverAck(a)
			}
		case wire.TypeDiscoveredSession:
			if k.collectDiscovered(data) {
				continue
			}
			k.events <- Frame{Type: env.Type, Raw: data}
		default:
			k.events <- Frame{Type: env.Type, Raw: data}
		}
	}
}

func (k *Conn) collectDiscovered(data []byte) bool {
	var f wire.DiscoveredSession
	if json.Unmarshal(data, &f) != nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range k.order {
		if p := k.pending[id]; p != nil && p.collect {
			p.discovered = append(p.discovered, f.Session)
			return true
		}
	}
	return false
}

func (k *Conn) deliverAck(a wire.Ack) {
	k.mu.Lock()
	p := k.pending[a.ID]
	delete(k.pending, a.ID)
	for i, id := range k.order {
		if id == a.ID {
			k.order = append(k.order[:i], k.order[i+1:]...)
			break
		}
	}
	k.mu.Unlock()
	if p != nil {
		p.ack <- a
	}
}

func (k *Conn) fail(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.readErr == nil {
		if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
			err = errors.New("connection closed")
		}
		k.readErr = fmt.Errorf("daemon connection: %w", err)
	}
	for _, p := range k.pending {
		close(p.ack)
	}
	k.pending = map[string]*pendingReq{}
	k.order = nil
}

func (k *Conn) send(ctx context.Context, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return k.ws.Write(ctx, websocket.MessageText, data)
}

// Do sends a request frame whose id field is id and waits for its ack.
func (k *Conn) Do(ctx context.Context, id string, frame any) (wire.Ack, error) {
	a, _, err := k.do(ctx, id, frame, false)
	return a, err
}

func (k *Conn) do(ctx context.Context, id string, frame any, collect bool) (wire.Ack, []wire.DiscoveredInfo, error) {
	p := &pendingReq{ack: make(chan wire.Ack, 1), collect: collect}
	k.mu.Lock()
	if k.readErr != nil {
		err := k.readErr
		k.mu.Unlock()
		return wire.Ack{}, nil, err
	}
	k.pending[id] = p
	k.order = append(k.order, id)
	k.mu.Unlock()
	if err := k.send(ctx, frame); err != nil {
		return wire.Ack{}, nil, fmt.Errorf("send %s: %w", id, err)
	}
	select {
	case a, ok := <-p.ack:
		if !ok {
			return wire.Ack{}, nil, k.Err()
		}
		if !a.OK {
			if a.Error == nil {
				return a, nil, &AckError{Code: "unknown", Message: "request refused"}
			}
			return a, nil, &AckError{Code: a.Error.Code, Message: a.Error.Message}
		}
		return a, p.discovered, nil
	case <-ctx.Done():
		return wire.Ack{}, nil, ctx.Err()
	}
}

// Launch starts a session.
func (k *Conn) Launch(ctx context.Context, req wire.LaunchRequest) (wire.SessionInfo, error) {
	req.Type, req.ID = wire.TypeLaunch, k.NewID()
	var si wire.SessionInfo
	a, err := k.Do(ctx, req.ID, req)
	if err != nil {
		return si, err
	}
	return si, json.Unmarshal(a.Result, &si)
}

// Prompt sends a further prompt to a session.
func (k *Conn) Prompt(ctx context.Context, sessionID, text string) error {
	id := k.NewID()
	_, err := k.Do(ctx, id, wire.PromptRequest{Type: wire.TypePrompt, ID: id, SessionID: sessionID, Text: text})
	return err
}

// Kill stops a running session.
func (k *Conn) Kill(ctx context.Context, sessionID string) error {
	id := k.NewID()
	_, err := k.Do(ctx, id, wire.KillRequest{Type: wire.TypeKill, ID: id, SessionID: sessionID})
	return err
}

// Subscribe starts the stream of a session's events after afterSeq; they
// arrive on Events, ending with a session-ended frame.
func (k *Conn) Subscribe(ctx context.Context, sessionID string, afterSeq int64) error {
	id := k.NewID()
	_, err := k.Do(ctx, id, wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: id, SessionID: sessionID, AfterSeq: afterSeq})
	return err
}

// Unsubscribe stops a stream; no frame of it follows.
func (k *Conn) Unsubscribe(ctx context.Context, sessionID string) error {
	id := k.NewID()
	_, err := k.Do(ctx, id, wire.UnsubscribeRequest{Type: wire.TypeUnsubscribe, ID: id, SessionID: sessionID})
	return err
}

// List lists sessions, with the discovered ones when the scope includes them.
func (k *Conn) List(ctx context.Context, req wire.ListRequest) (wire.ListResult, []wire.DiscoveredInfo, error) {
	req.Type, req.ID = wire.TypeList, k.NewID()
	var res wire.ListResult
	a, found, err := k.do(ctx, req.ID, req, true)
	if err != nil {
		return res, nil, err
	}
	return res, found, json.Unmarshal(a.Result, &res)
}

// RespondPermission decides a pending permission request.
func (k *Conn) RespondPermission(ctx context.Context, req wire.RespondPermissionRequest) (wire.PermissionDecision, error) {
	req.Type, req.ID = wire.TypeRespondPermission, k.NewID()
	var d wire.PermissionDecision
	a, err := k.Do(ctx, req.ID, req)
	if err != nil {
		return d, err
	}
	return d, json.Unmarshal(a.Result, &d)
}

// SetMode sets a session's operator mode.
func (k *Conn) SetMode(ctx context.Context, sessionID, mode string) error {
	id := k.NewID()
	_, err := k.Do(ctx, id, wire.SetModeRequest{Type: wire.TypeSetMode, ID: id, SessionID: sessionID, Mode: mode})
	return err
}
