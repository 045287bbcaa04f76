package control

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/accesstoken"
)

// pipeConn is a relayed channel in memory: frames in and out, and an
// access gate that knows a fixed set of tokens.
type pipeConn struct {
	in     chan []byte
	out    chan []byte
	tokens map[string]*accesstoken.Claims

	mu     sync.Mutex
	closed chan struct{}
	reason string
}

func newPipe(tokens map[string]*accesstoken.Claims) *pipeConn {
	return &pipeConn{in: make(chan []byte, 16), out: make(chan []byte, 256), tokens: tokens, closed: make(chan struct{})}
}

func (p *pipeConn) ReadFrame(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.in:
		return b, nil
	case <-p.closed:
		return nil, errors.New("closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pipeConn) WriteFrame(ctx context.Context, b []byte) error {
	select {
	case p.out <- append([]byte(nil), b...):
		return nil
	case <-p.closed:
		return errors.New("closed")
	}
}

func (p *pipeConn) Close(reason string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
	default:
		p.reason = reason
		close(p.closed)
	}
	return nil
}

func (p *pipeConn) VerifyAccess(token string) (*accesstoken.Claims, error) {
	if c, ok := p.tokens[token]; ok {
		cp := *c
		return &cp, nil
	}
	return nil, errors.New("unknown token")
}

func (p *pipeConn) Refused(Refusal) {}

func (p *pipeConn) send(t *testing.T, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	p.in <- b
}

// next reads frames until one of type typ (skipping others).
func (p *pipeConn) next(t *testing.T, typ string) json.RawMessage {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case b := <-p.out:
			var env wire.Envelope
			json.Unmarshal(b, &env)
			if env.Type == typ {
				return b
			}
		case <-deadline:
			t.Fatalf("no %s frame", typ)
		}
	}
}

// none checks that no frame of type typ arrives within d.
func (p *pipeConn) none(t *testing.T, typ string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case b := <-p.out:
			var env wire.Envelope
			json.Unmarshal(b, &env)
			if env.Type == typ {
				t.Fatalf("unexpected %s frame: %s", typ, b)
			}
		case <-deadline:
			return
		}
	}
}

// listedSessions is a session manager with a fixed list, each session in
// its directory.
type listedSessions struct {
	*fakeSessions
	list []wire.SessionInfo
}

func (l listedSessions) List(context.Context, wire.ListRequest) ([]wire.SessionInfo, error) {
	return l.list, nil
}

func (l listedSessions) Session(ctx context.Context, id string) (wire.SessionInfo, error) {
	for _, s := range l.list {
		if s.ID == id {
			si, err := l.fakeSessions.Session(ctx, id)
			if err == nil {
				s.LastSeq = si.LastSeq
			}
			return s, nil
		}
	}
	return wire.SessionInfo{}, &frameError{code: wire.CodeNotFound, msg: "no session " + id}
}

// pendingPermissions has a fixed set of waiting requests.
type pendingPermissions struct {
	fakePermissions
	pending []wire.PermissionRequest
}

func (p pendingPermissions) Pending(string) []wire.PermissionRequest { return p.pending }

type accessFixture struct {
	api      *API
	sessions listedSessions
	a, b, c  string // sessions: a and b in an open project, c in one whose access.yaml makes members viewers
}

func newAccessFixture(t *testing.T) *accessFixture {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{Path: filepath.Join(t.TempDir(), "reeve.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	open, _ := filepath.EvalSymlinks(t.TempDir())
	capped, _ := filepath.EvalSymlinks(t.TempDir())
	os.MkdirAll(filepath.Join(capped, ".reeve"), 0o755)
	os.WriteFile(filepath.Join(capped, ".reeve", "access.yaml"), []byte("version: 1\ndefault_role: none\nmembers:\n  - user: dana@example.com\n    role: viewer\n"), 0o644)
	var ids []string
	for range 3 {
		d, _, _ := st.AddDirectory(ctx, t.TempDir())
		s, err := st.CreateSession(ctx, store.NewSession{DirectoryID: d.ID, Agent: "shell", Status: store.StatusRunning})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	ls := listedSessions{fakeSessions: &fakeSessions{st: st}, list: []wire.SessionInfo{
		{ID: ids[0], Directory: open, Status: "running"},
		{ID: ids[1], Directory: open, Status: "running"},
		{ID: ids[2], Directory: capped, Status: "running"},
	}}
	perms := pendingPermissions{pending: []wire.PermissionRequest{
		{ID: "p-a", SessionID: ids[0], Tool: "Bash"},
		{ID: "p-b", SessionID: ids[1], Tool: "Bash"},
	}}
	api := New(Options{Directories: st, Sessions: ls, Log: st, Permissions: perms,
		Discover: func(context.Context) ([]wire.DiscoveredInfo, error) {
			return []wire.DiscoveredInfo{{Agent: "claude"}}, nil
		},
		Health: func(context.Context) wire.Health { return wire.Health{Status: "ok"} },
	})
	return &accessFixture{api: api, sessions: ls, a: ids[0], b: ids[1], c: ids[2]}
}

func claimsFor(email, def string, roles map[string]string, ttl time.Duration) *accesstoken.Claims {
	c := &accesstoken.Claims{Email: email, DefaultSessionRole: def, Sessions: roles}
	c.Subject = "user:" + email
	c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(ttl))
	return c
}

// serve runs one relayed connection and says hello with token.
func (f *accessFixture) serve(t *testing.T, p *pipeConn, token string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.api.ServeControl(ctx, p); close(done) }()
	t.Cleanup(func() { cancel(); p.Close("test over"); <-done })
	p.next(t, wire.TypeHello)
	p.send(t, wire.Hello{Type: wire.TypeHello, ProtocolVersion: 1, AccessToken: token})
}

// A member's list names only the sessions they may view: not a private
// one (none in their token), not one the project's access.yaml closes to
// them; sessions discovered on disk only for the machine's owners.
func TestListShowsOnlyWhatTheClientMayView(t *testing.T) {
	f := newAccessFixture(t)
	list := func(p *pipeConn) (ids []string, discovered int) {
		t.Helper()
		p.send(t, wire.ListRequest{Type: wire.TypeList, ID: "l", Scope: wire.ScopeAll})
		deadline := time.After(10 * time.Second)
		for {
			select {
			case b := <-p.out:
				var env wire.Envelope
				json.Unmarshal(b, &env)
				switch env.Type {
				case wire.TypeDiscoveredSession:
					discovered++
				case wire.TypeAck:
					var a wire.Ack
					json.Unmarshal(b, &a)
					if !a.OK {
						t.Fatalf("list refused: %+v", a.Error)
					}
					var r wire.ListResult
					json.Unmarshal(a.Result, &r)
					for _, s := range r.Sessions {
						ids = append(ids, s.ID)
					}
					return ids, discovered
				}
			case <-deadline:
				t.Fatal("no list ack")
			}
		}
	}
	tokens := map[string]*accesstoken.Claims{
		"member": claimsFor("mel@example.com", sdk.SessionViewer, map[string]string{f.b: sdk.SessionNone}, time.Hour),
		"dana":   claimsFor("dana@example.com", sdk.SessionViewer, nil, time.Hour),
		"admin":  claimsFor("boss@example.com", sdk.SessionOwner, nil, time.Hour),
	}
	for name, want := range map[string]struct {
		ids        string
		discovered int
	}{
		"member": {f.a, 0},                         // b is private to others, c's file gives mel nothing
		"dana":   {f.a + "," + f.b + "," + f.c, 0}, // the file makes dana a viewer of c
		"admin":  {f.a + "," + f.b, 1},             // the file caps even an admin: not listed in c's file
	} {
		p := newPipe(tokens)
		f.serve(t, p, name)
		ids, disc := list(p)
		if strings.Join(ids, ",") != want.ids || disc != want.discovered {
			t.Errorf("%s: listed %v and %d discovered, want %s and %d", name, ids, disc, want.ids, want.discovered)
		}
	}
}

// Permission requests reach every client that may decide them, followed
// or not, and nobody else: on the hello (those waiting) and as they come;
// their decisions too. session-started only to those who may view it.
func TestNoticesReachWhoMayDecide(t *testing.T) {
	f := newAccessFixture(t)
	tokens := map[string]*accesstoken.Claims{
		"approver": claimsFor("ann@example.com", sdk.SessionViewer, map[string]string{f.a: sdk.SessionApprover, f.b: sdk.SessionNone}, time.Hour),
		"viewer":   claimsFor("vic@example.com", sdk.SessionViewer, map[string]string{f.b: sdk.SessionNone}, time.Hour),
	}
	ann, vic := newPipe(tokens), newPipe(tokens)
	f.serve(t, ann, "approver")
	f.serve(t, vic, "viewer")
	var got wire.HookPermissionRequest
	json.Unmarshal(ann.next(t, wire.TypeHookPermissionRequest), &got)
	if got.Request.ID != "p-a" {
		t.Fatalf("the approver was sent %+v", got.Request)
	}
	ann.none(t, wire.TypeHookPermissionRequest, 200*time.Millisecond) // not p-b: private to others
	vic.none(t, wire.TypeHookPermissionRequest, 200*time.Millisecond)

	for _, n := range []Notice{
		{SessionID: f.b, Frame: wire.HookPermissionRequest{Type: wire.TypeHookPermissionRequest, Request: wire.PermissionRequest{ID: "p-b2", SessionID: f.b}}},
		{SessionID: f.a, Frame: wire.HookPermissionRequest{Type: wire.TypeHookPermissionRequest, Request: wire.PermissionRequest{ID: "p-a2", SessionID: f.a}}},
		{SessionID: f.a, Frame: wire.HookPermissionResolved{Type: wire.TypeHookPermissionResolved, Decision: wire.PermissionDecision{RequestID: "p-a2", SessionID: f.a}}},
		{Frame: wire.SessionStarted{Type: wire.TypeSessionStarted, Session: wire.SessionInfo{ID: f.b}}},
		{Frame: wire.SessionStarted{Type: wire.TypeSessionStarted, Session: wire.SessionInfo{ID: f.a}}},
	} {
		f.sessions.notify(n)
	}
	json.Unmarshal(ann.next(t, wire.TypeHookPermissionRequest), &got)
	if got.Request.ID != "p-a2" {
		t.Fatalf("the approver was sent %s", got.Request.ID)
	}
	ann.next(t, wire.TypeHookPermissionResolved)
	var st wire.SessionStarted
	json.Unmarshal(ann.next(t, wire.TypeSessionStarted), &st)
	if st.Session.ID != f.a {
		t.Fatalf("the approver was told of session %s starting", st.Session.ID)
	}
	json.Unmarshal(vic.next(t, wire.TypeSessionStarted), &st)
	if st.Session.ID != f.a {
		t.Fatalf("the viewer was told of session %s starting (private to others)", st.Session.ID)
	}
	vic.none(t, wire.TypeHookPermissionRequest, 200*time.Millisecond)
	vic.none(t, wire.TypeHookPermissionResolved, 10*time.Millisecond)
}

// A refreshed token takes effect at once: a subscription it no longer
// allows ends and says why; a token that expires without a refresh
// closes the channel.
func TestRefreshAndExpiry(t *testing.T) {
	f := newAccessFixture(t)
	tokens := map[string]*accesstoken.Claims{
		"first":   claimsFor("mel@example.com", sdk.SessionViewer, nil, time.Hour),
		"revoked": claimsFor("mel@example.com", sdk.SessionViewer, map[string]string{f.a: sdk.SessionNone}, time.Hour),
		"short":   claimsFor("mel@example.com", sdk.SessionViewer, nil, 2*time.Second),
	}
	p := newPipe(tokens)
	f.serve(t, p, "first")
	p.send(t, wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "s", SessionID: f.a})
	var a wire.Ack
	json.Unmarshal(p.next(t, wire.TypeAck), &a)
	if !a.OK {
		t.Fatalf("subscribe: %+v", a.Error)
	}
	// The same token again changes nothing.
	p.send(t, wire.Hello{Type: wire.TypeHello, ProtocolVersion: 1, AccessToken: "first"})
	p.none(t, wire.TypeSessionEnded, 200*time.Millisecond)
	// A refresh that no longer lets the client view the session ends it.
	p.send(t, wire.Hello{Type: wire.TypeHello, ProtocolVersion: 1, AccessToken: "revoked"})
	var end wire.SessionEnded
	json.Unmarshal(p.next(t, wire.TypeSessionEnded), &end)
	if end.SessionID != f.a || !strings.Contains(end.Reason, "access to this session ended") {
		t.Fatalf("session-ended: %+v", end)
	}
	p.send(t, wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "s2", SessionID: f.a})
	json.Unmarshal(p.next(t, wire.TypeAck), &a)
	if a.OK || a.Error.Code != wire.CodeForbidden {
		t.Fatalf("subscribe after the refresh: %+v", a)
	}
	// A token that runs out closes the channel, saying why.
	p.send(t, wire.Hello{Type: wire.TypeHello, ProtocolVersion: 1, AccessToken: "short"})
	select {
	case <-p.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the channel outlived its access token")
	}
	if p.reason != accessExpired {
		t.Fatalf("closed with %q", p.reason)
	}
	// A refresh before the expiry keeps it open.
	tokens["short2"] = claimsFor("mel@example.com", sdk.SessionViewer, nil, 2*time.Second)
	q := newPipe(tokens)
	f.serve(t, q, "short2")
	time.Sleep(500 * time.Millisecond)
	q.send(t, wire.Hello{Type: wire.TypeHello, ProtocolVersion: 1, AccessToken: "first"})
	select {
	case <-q.closed:
		t.Fatalf("a refreshed channel was closed: %s", q.reason)
	case <-time.After(3 * time.Second):
	}
}
