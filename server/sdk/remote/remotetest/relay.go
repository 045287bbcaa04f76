// Package remotetest is a minimal forwarding relay for tests of remote
// control: it speaks the relay envelope format (server/relay/relaywire), admits
// connections through a pluggable check (or the control plane's validate
// route), routes channels between one daemon and its clients, and records
// every byte it forwards so tests can prove it never saw plaintext. Tests
// can drop every connection (a relay restart), refuse new ones, and
// rewrite or duplicate envelopes in flight.
package remotetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"reeve.dev/reeve/server/relay/relaywire"
	"reeve.dev/reeve/server/sdk"
)

// Options configure a Relay. The zero value admits every connection.
type Options struct {
	// Validate admits an upgrade; an error refuses it with 403.
	Validate func(ctx context.Context, token, role, workspaceID, targetID string) error
	// Intercept sees each envelope on its way to a connection of role to
	// and returns what to deliver instead (nil drops it; two copies
	// replays it).
	Intercept func(to string, env relaywire.Envelope) []relaywire.Envelope
}

// Relay is a running test relay.
type Relay struct {
	opts Options
	ln   net.Listener
	srv  *http.Server

	mu       sync.Mutex
	refusing bool
	daemons  map[string]*daemonConn // by workspace/target
	clients  map[string]*websocket.Conn
	all      map[*websocket.Conn]struct{}
	recorded [][]byte
	accepted map[string]int // by role
}

type daemonConn struct {
	ws       *websocket.Conn
	channels map[string]*websocket.Conn
}

// Start listens on a loopback port.
func Start(opts Options) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Relay{opts: opts, ln: ln, daemons: map[string]*daemonConn{}, clients: map[string]*websocket.Conn{}, all: map[*websocket.Conn]struct{}{}, accepted: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", r.serveWS)
	r.srv = &http.Server{Handler: mux}
	go r.srv.Serve(ln)
	return r, nil
}

// URL is the relay's origin (http://127.0.0.1:port).
func (r *Relay) URL() string { return "http://" + r.ln.Addr().String() }

// Close stops the relay.
func (r *Relay) Close() error {
	r.DropAll()
	return r.srv.Close()
}

// DropAll closes every connection, as a relay restart would.
func (r *Relay) DropAll() {
	r.mu.Lock()
	conns := make([]*websocket.Conn, 0, len(r.all))
	for c := range r.all {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	for _, c := range conns {
		c.Close(websocket.StatusGoingAway, "relay restarting")
	}
}

// Refuse makes the relay answer new upgrades with 503 (or admit them
// again).
func (r *Relay) Refuse(on bool) {
	r.mu.Lock()
	r.refusing = on
	r.mu.Unlock()
}

// Recorded returns every message the relay read or wrote, raw.
func (r *Relay) Recorded() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.recorded...)
}

// Accepted counts the admitted connections of a role.
func (r *Relay) Accepted(role string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted[role]
}

// DaemonOnline reports whether a daemon for the workspace and target is
// connected.
func (r *Relay) DaemonOnline(workspaceID, targetID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.daemons[workspaceID+"/"+targetID]
	return ok
}

func (r *Relay) record(b []byte) {
	r.mu.Lock()
	r.recorded = append(r.recorded, append([]byte(nil), b...))
	r.mu.Unlock()
}

func bearerToken(req *http.Request) string {
	if h := req.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		return strings.TrimPrefix(h, "Bearer ")
	}
	return req.URL.Query().Get("token")
}

func (r *Relay) serveWS(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	role, wsID, target := q.Get("role"), q.Get("workspaceId"), q.Get("runtimeTargetId")
	r.mu.Lock()
	refusing := r.refusing
	r.mu.Unlock()
	if refusing {
		http.Error(w, "relay unavailable", http.StatusServiceUnavailable)
		return
	}
	if (role != relaywire.RoleDaemon && role != relaywire.RoleClient) || wsID == "" || target == "" {
		http.Error(w, "role, workspaceId and runtimeTargetId are required", http.StatusBadRequest)
		return
	}
	tok := bearerToken(req)
	if tok == "" {
		http.Error(w, "a relay token is required", http.StatusUnauthorized)
		return
	}
	if r.opts.Validate != nil {
		if err := r.opts.Validate(req.Context(), tok, role, wsID, target); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
	}
	ws, err := websocket.Accept(w, req, nil)
	if err != nil {
		return
	}
	ws.SetReadLimit(1 << 20)
	r.mu.Lock()
	r.all[ws] = struct{}{}
	r.accepted[role]++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.all, ws)
		r.mu.Unlock()
		ws.CloseNow()
	}()
	ctx := context.Background()
	if role == relaywire.RoleDaemon {
		r.serveDaemon(ctx, ws, wsID+"/"+target)
	} else {
		r.serveClient(ctx, ws, wsID+"/"+target)
	}
}

func (r *Relay) send(ctx context.Context, to string, ws *websocket.Conn, env relaywire.Envelope) {
	envs := []relaywire.Envelope{env}
	if r.opts.Intercept != nil {
		envs = r.opts.Intercept(to, env)
	}
	for _, e := range envs {
		b, _ := json.Marshal(e)
		r.record(b)
		ws.Write(ctx, websocket.MessageText, b)
	}
}

func (r *Relay) serveDaemon(ctx context.Context, ws *websocket.Conn, key string) {
	d := &daemonConn{ws: ws, channels: map[string]*websocket.Conn{}}
	r.mu.Lock()
	old := r.daemons[key]
	r.daemons[key] = d
	r.mu.Unlock()
	if old != nil {
		old.ws.Close(websocket.StatusPolicyViolation, "replaced by a newer connection")
	}
	defer func() {
		r.mu.Lock()
		if r.daemons[key] == d {
			delete(r.daemons, key)
		}
		chans := d.channels
		d.channels = map[string]*websocket.Conn{}
		r.mu.Unlock()
		for _, c := range chans {
			r.send(ctx, relaywire.RoleClient, c, relaywire.Envelope{Type: relaywire.TypeError, Reason: "the daemon went away"})
			c.Close(websocket.StatusGoingAway, "the daemon went away")
		}
	}()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		r.record(b)
		var env relaywire.Envelope
		if json.Unmarshal(b, &env) != nil {
			continue
		}
		r.mu.Lock()
		c := d.channels[env.Channel]
		if env.Type == relaywire.TypeClose {
			delete(d.channels, env.Channel)
		}
		r.mu.Unlock()
		if c == nil {
			continue
		}
		switch env.Type {
		case relaywire.TypeData:
			r.send(ctx, relaywire.RoleClient, c, relaywire.Envelope{Type: relaywire.TypeData, Payload: env.Payload})
		case relaywire.TypeClose:
			r.send(ctx, relaywire.RoleClient, c, relaywire.Envelope{Type: relaywire.TypeClose, Reason: env.Reason})
			c.Close(websocket.StatusNormalClosure, truncate(env.Reason))
		}
	}
}

func (r *Relay) serveClient(ctx context.Context, ws *websocket.Conn, key string) {
	r.mu.Lock()
	d := r.daemons[key]
	r.mu.Unlock()
	if d == nil {
		r.send(ctx, relaywire.RoleClient, ws, relaywire.Envelope{Type: relaywire.TypeError, Reason: "no daemon is online for that runtime target"})
		ws.Close(websocket.StatusNormalClosure, "no daemon")
		return
	}
	ch := newChannelID()
	r.mu.Lock()
	d.channels[ch] = ws
	r.clients[ch] = ws
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		_, open := d.channels[ch]
		delete(d.channels, ch)
		delete(r.clients, ch)
		r.mu.Unlock()
		if open {
			r.send(ctx, relaywire.RoleDaemon, d.ws, relaywire.Envelope{Type: relaywire.TypeClose, Channel: ch, Reason: "the client left"})
		}
	}()
	r.send(ctx, relaywire.RoleDaemon, d.ws, relaywire.Envelope{Type: relaywire.TypeOpen, Channel: ch})
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		r.record(b)
		var env relaywire.Envelope
		if json.Unmarshal(b, &env) != nil || env.Type != relaywire.TypeData {
			continue
		}
		r.send(ctx, relaywire.RoleDaemon, d.ws, relaywire.Envelope{Type: relaywire.TypeData, Channel: ch, Payload: env.Payload})
	}
}

func newChannelID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// WebSocket close reasons are limited to 123 bytes.
func truncate(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}

// ServerValidate admits upgrades the way the real relay does: by asking the
// control plane at serverURL (POST /api/runtime/internal/relay/validate with
// the presented JWT).
func ServerValidate(serverURL string) func(ctx context.Context, token, role, workspaceID, targetID string) error {
	return func(ctx context.Context, token, role, workspaceID, targetID string) error {
		c := &sdk.Client{BaseURL: serverURL, Token: token}
		var out struct {
			Data struct {
				Valid bool `json:"valid"`
			} `json:"data"`
		}
		_, err := c.Do(ctx, http.MethodPost, "/api/runtime/internal/relay/validate", map[string]any{"workspace_id": workspaceID, "role": role, "runtime_target_id": targetID}, &out)
		if err != nil {
			return err
		}
		if !out.Data.Valid {
			return errors.New("the control plane did not validate the token")
		}
		return nil
	}
}

// String describes the relay for test logs.
func (r *Relay) String() string { return fmt.Sprintf("test relay at %s", r.URL()) }
