package relay

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/oklog/ulid/v2"

	"reeve.dev/reeve/server/relay/relaywire"
	"reeve.dev/reeve/server/sdk"
)

// Subprotocol is the WebSocket subprotocol the relay speaks. A browser,
// which cannot set headers, offers it together with "reeve.jwt.<token>";
// the relay echoes only this one.
const Subprotocol = "reeve.relay.v1"

// TokenSubprotocolPrefix marks the subprotocol value carrying the JWT.
const TokenSubprotocolPrefix = "reeve.jwt."

// Close codes the relay sends after an upgrade. Refusals before the
// upgrade are HTTP statuses (401, 403) instead.
const (
	// CloseNormal ends a client's channel that the daemon or the client
	// closed.
	CloseNormal = websocket.StatusNormalClosure
	// CloseGoingAway: the relay is shutting down.
	CloseGoingAway = websocket.StatusGoingAway
	// CloseBadEnvelope: the peer sent a frame that is not an envelope of
	// its role, or a binary frame.
	CloseBadEnvelope websocket.StatusCode = 4400
	// CloseRevoked: the daemon's install was detached.
	CloseRevoked websocket.StatusCode = 4403
	// CloseNoDaemon: a client's runtime target has no daemon connected
	// (after an "error" envelope).
	CloseNoDaemon websocket.StatusCode = 4404
	// CloseKeepalive: the peer did not answer a ping in time.
	CloseKeepalive websocket.StatusCode = 4408
	// CloseReplaced: a newer connection of the same daemon replaced this
	// one.
	CloseReplaced websocket.StatusCode = 4409
	// CloseTooSlow: the peer did not read its frames; its queue stayed full
	// for SlowTimeout.
	CloseTooSlow websocket.StatusCode = 4429
)

// Options configure a Relay; zero values have working defaults.
type Options struct {
	// Control admits connections and reaches other instances. Required.
	Control Control
	// InstanceID names this instance on the bus; default a new ULID.
	InstanceID string
	// QueueFrames and QueueBytes are each connection's outbound budget;
	// defaults 1024 frames and 4 MiB. A peer may stay over it for
	// SlowTimeout; at twice the budget it is disconnected at once.
	QueueFrames int
	QueueBytes  int64
	// MaxBufferedBytes bounds the frames the whole relay holds for its
	// peers (and for the bus); default 256 MiB. When it is reached the
	// peer holding the most is disconnected.
	MaxBufferedBytes int64
	// SlowTimeout is how long a peer may stay over its budget before it
	// is disconnected as too slow (4429); default 5s. Senders never wait:
	// a slow peer never holds up the connection that feeds it.
	SlowTimeout time.Duration
	// WriteTimeout is how long a disconnected peer's close frame may wait
	// behind a write in progress before the socket is dropped; default 5s.
	WriteTimeout time.Duration
	// PingInterval: a connection silent this long is pinged, and closed
	// when the pong does not come within another interval; default 30s.
	PingInterval time.Duration
	// PresenceInterval is how often the instance re-reports its daemon
	// connections (they expire after three intervals); default 10s.
	PresenceInterval time.Duration
	// PullWait is the bus long-poll wait; default 20s.
	PullWait time.Duration
	// AdmitCacheTTL reuses a successful validation of the same token and
	// request for this long; 0 (the default) validates every upgrade.
	AdmitCacheTTL time.Duration
	Logger        *slog.Logger
}

// Relay routes envelopes between daemon and client connections. It is an
// http.Handler for the upgrade path ({relay_url}/ws); Run drives presence,
// the bus and keepalive.
type Relay struct {
	opts   Options
	ctl    Control
	log    *slog.Logger
	tag    string // short, random: makes channel ids unique across instances
	seq    atomic.Uint64
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	daemons map[target]*conn
	chans   map[string]*channel
	conns   map[*conn]struct{}
	closed  bool

	bus      chan sdk.RelayBusMessage
	buffered atomic.Int64           // bytes queued for peers and for the bus
	presence chan sdk.RelayPresence // removals to report
	admit    *admitCache
	m        counters
	wg       sync.WaitGroup
}

type target struct{ workspace, runtime string }

// New builds a relay.
func New(opts Options) (*Relay, error) {
	if opts.Control == nil {
		return nil, errors.New("relay: a control plane (Options.Control) is required")
	}
	if opts.InstanceID == "" {
		opts.InstanceID = ulid.Make().String()
	}
	if opts.QueueFrames <= 0 {
		opts.QueueFrames = 1024
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = 4 << 20
	}
	if opts.MaxBufferedBytes <= 0 {
		opts.MaxBufferedBytes = 256 << 20
	}
	if opts.SlowTimeout <= 0 {
		opts.SlowTimeout = 5 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 5 * time.Second
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 30 * time.Second
	}
	if opts.PresenceInterval <= 0 {
		opts.PresenceInterval = 10 * time.Second
	}
	if opts.PullWait <= 0 {
		opts.PullWait = 20 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	var tb [5]byte
	if _, err := rand.Read(tb[:]); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Relay{
		opts: opts, ctl: opts.Control, log: opts.Logger,
		tag: strings.ToLower(strconv.FormatUint(uint64(tb[0])<<32|uint64(tb[1])<<24|uint64(tb[2])<<16|uint64(tb[3])<<8|uint64(tb[4]), 36)),
		ctx: ctx, cancel: cancel,
		daemons: map[target]*conn{}, chans: map[string]*channel{}, conns: map[*conn]struct{}{},
		bus:      make(chan sdk.RelayBusMessage, 8192),
		presence: make(chan sdk.RelayPresence, 4096),
		admit:    newAdmitCache(opts.AdmitCacheTTL),
	}
	return r, nil
}

// InstanceID names this instance on the bus.
func (r *Relay) InstanceID() string { return r.opts.InstanceID }

// Run drives presence refreshes, the bus and keepalive until ctx ends or
// Close is called.
func (r *Relay) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.ctx.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){r.pullLoop, r.publishLoop, r.presenceLoop, r.pingLoop} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(ctx)
		}()
	}
	wg.Wait()
	return nil
}

// Close disconnects every peer with "going away" and stops Run.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	all := make([]*conn, 0, len(r.conns))
	for c := range r.conns {
		all = append(all, c)
	}
	r.mu.Unlock()
	for _, c := range all {
		c.kill(CloseGoingAway, "the relay is shutting down")
	}
	r.cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	return nil
}

// ServeHTTP admits and serves one relay connection:
// GET /ws?role=workspace-daemon|client&workspaceId=&runtimeTargetId=.
func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		httpError(w, http.StatusMethodNotAllowed, "the relay upgrade is a GET")
		return
	}
	q := req.URL.Query()
	role, ws, rt := q.Get("role"), q.Get("workspaceId"), q.Get("runtimeTargetId")
	if role != RoleDaemon && role != RoleClient {
		r.m.refused.Add(1)
		httpError(w, http.StatusBadRequest, "role must be workspace-daemon or client")
		return
	}
	if ws == "" {
		r.m.refused.Add(1)
		httpError(w, http.StatusBadRequest, "workspaceId is required")
		return
	}
	tok := requestToken(req)
	if tok == "" {
		r.m.refused.Add(1)
		w.Header().Set("WWW-Authenticate", `Bearer realm="reeve-relay"`)
		httpError(w, http.StatusUnauthorized, "a relay JWT is required (Authorization: Bearer, Sec-WebSocket-Protocol reeve.jwt.<token>, or ?token=)")
		return
	}
	vreq := sdk.RelayValidateRequest{WorkspaceID: ws, RuntimeTargetID: rt, Role: role}
	adm, err := r.validate(req.Context(), tok, vreq)
	if err != nil {
		r.m.refused.Add(1)
		st := http.StatusServiceUnavailable
		var ae *AdmissionError
		if errors.As(err, &ae) {
			st = ae.Status
		}
		if st == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="reeve-relay", error="invalid_token"`)
		}
		msg := err.Error()
		if ae != nil {
			msg = ae.Message
		}
		httpError(w, st, msg)
		return
	}
	if adm.RuntimeTargetID == "" {
		adm.RuntimeTargetID = rt
	}
	if adm.RuntimeTargetID == "" {
		r.m.refused.Add(1)
		httpError(w, http.StatusBadRequest, "runtimeTargetId is required")
		return
	}
	// The connection joins the routing before the upgrade completes, so
	// that once a daemon's upgrade succeeds its clients find it (here and,
	// through presence, on other instances). Its writer is held until the
	// socket exists.
	c := r.newConn(adm.Role, target{adm.WorkspaceID, adm.RuntimeTargetID})
	if !r.register(c) {
		httpError(w, http.StatusServiceUnavailable, "the relay is shutting down")
		return
	}
	r.wg.Add(1)
	if c.role == RoleDaemon {
		r.attachDaemon(c)
	} else {
		r.attachClient(c)
	}
	wsc, err := websocket.Accept(w, req, &websocket.AcceptOptions{
		Subprotocols: []string{Subprotocol},
		// Admission is by an explicit token, never an ambient cookie, so a
		// page on another origin (the app) may connect.
		InsecureSkipVerify: true,
	})
	if err != nil {
		r.m.refused.Add(1)
		r.detach(c) // Accept has answered
		r.wg.Done()
		return
	}
	// One limit for every peer (relaywire.MaxEnvelope): a client over it
	// loses its own connection, which is its channel, and nothing else.
	wsc.SetReadLimit(relaywire.MaxEnvelope)
	r.m.admitted.Add(1)
	c.start(wsc)
	// Read on a fresh goroutine and let the HTTP handler return: the
	// server's per-request state and the deep stack of the upgrade are
	// freed, which is most of what an idle connection would otherwise
	// hold beyond its socket buffers.
	go func() {
		defer r.wg.Done()
		c.readLoop()
		r.detach(c)
	}()
}

func (r *Relay) validate(ctx context.Context, tok string, req sdk.RelayValidateRequest) (sdk.RelayAdmission, error) {
	key := tok + "\x00" + req.Role + "\x00" + req.WorkspaceID + "\x00" + req.RuntimeTargetID
	if a, ok := r.admit.get(key); ok {
		return a, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a, err := r.ctl.Validate(ctx, tok, req)
	if err != nil {
		return a, err
	}
	// The control plane is the authority; the relay still refuses an
	// answer for another connection than the one asked for.
	if a.WorkspaceID != req.WorkspaceID || a.Role != req.Role || (req.RuntimeTargetID != "" && a.RuntimeTargetID != "" && a.RuntimeTargetID != req.RuntimeTargetID) {
		return a, &AdmissionError{Status: http.StatusForbidden, Message: "the relay token does not admit this connection"}
	}
	r.admit.put(key, a)
	return a, nil
}

// requestToken finds the JWT: Authorization header, then subprotocol, then
// the token query parameter.
func requestToken(req *http.Request) string {
	if h := req.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	for _, v := range req.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); strings.HasPrefix(p, TokenSubprotocolPrefix) {
				return strings.TrimPrefix(p, TokenSubprotocolPrefix)
			}
		}
	}
	return req.URL.Query().Get("token")
}

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": http.StatusText(status), "message": msg}})
	w.Write(b)
}

// register records a live connection for Close and keepalive.
func (r *Relay) register(c *conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	if c.role == RoleDaemon {
		r.m.daemons.Add(1)
	} else {
		r.m.clients.Add(1)
	}
	return true
}

func (r *Relay) newChannelID() string {
	return strconv.FormatUint(r.seq.Add(1), 36) + "." + r.tag
}

// ---- admission cache ----

type admitCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]admitEntry
}

type admitEntry struct {
	a     sdk.RelayAdmission
	until time.Time
}

func newAdmitCache(ttl time.Duration) *admitCache {
	return &admitCache{ttl: ttl, m: map[string]admitEntry{}}
}

func (ac *admitCache) get(key string) (sdk.RelayAdmission, bool) {
	if ac.ttl <= 0 {
		return sdk.RelayAdmission{}, false
	}
	ac.mu.Lock()
	defer ac.mu.Unlock()
	e, ok := ac.m[key]
	if !ok || time.Now().After(e.until) {
		return sdk.RelayAdmission{}, false
	}
	return e.a, true
}

func (ac *admitCache) put(key string, a sdk.RelayAdmission) {
	if ac.ttl <= 0 {
		return
	}
	ac.mu.Lock()
	defer ac.mu.Unlock()
	if len(ac.m) > 10000 {
		clear(ac.m)
	}
	ac.m[key] = admitEntry{a: a, until: time.Now().Add(ac.ttl)}
}
