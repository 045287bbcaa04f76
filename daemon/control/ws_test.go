package control

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
)

// fakeSessions serves the protocol from a real store, with the session
// manager's decisions replaced by func fields.
type fakeSessions struct {
	st     *store.Store
	launch func(wire.LaunchRequest) (wire.SessionInfo, error)

	mu       sync.Mutex
	noticeFn []func(Notice)
}

func (f *fakeSessions) notify(n Notice) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fn := range f.noticeFn {
		fn(n)
	}
}

func (f *fakeSessions) Launch(_ context.Context, req wire.LaunchRequest) (wire.SessionInfo, error) {
	return f.launch(req)
}
func (f *fakeSessions) Prompt(context.Context, wire.PromptRequest) error { return nil }
func (f *fakeSessions) Kill(context.Context, wire.KillRequest) error     { return nil }
func (f *fakeSessions) List(context.Context, wire.ListRequest) ([]wire.SessionInfo, error) {
	return []wire.SessionInfo{}, nil
}
func (f *fakeSessions) Session(ctx context.Context, id string) (wire.SessionInfo, error) {
	s, err := f.st.Session(ctx, id)
	if err != nil {
		return wire.SessionInfo{}, &frameError{code: wire.CodeNotFound, msg: "no session " + id}
	}
	last, _ := f.st.LastSeq(ctx, id)
	return wire.SessionInfo{ID: s.ID, Status: string(s.Status), StatusReason: s.StatusReason, LastSeq: last}, nil
}
func (f *fakeSessions) Manifest(context.Context, string) (wire.Manifest, error) {
	return wire.Manifest{}, nil
}
func (f *fakeSessions) OnNotice(fn func(Notice)) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noticeFn = append(f.noticeFn, fn)
	return func() {}
}

// fakePermissions answers the hook bridge's requests: a decision echoes
// the request it was given.
type fakePermissions struct{}

func (fakePermissions) Hook(context.Context, string, []byte) (wire.HookAnswer, error) {
	return wire.HookAnswer{}, nil
}
func (fakePermissions) Pending(string) []wire.PermissionRequest { return nil }
func (fakePermissions) RespondPermission(_ context.Context, req wire.RespondPermissionRequest) (wire.PermissionDecision, error) {
	return wire.PermissionDecision{RequestID: req.RequestID, Decision: req.Decision, DecidedBy: "human", Reason: req.Reason}, nil
}
func (fakePermissions) SetMode(context.Context, wire.SetModeRequest) error { return nil }

type wsFixture struct {
	api      *API
	st       *store.Store
	url      string
	sid      string
	sessions *fakeSessions
}

func newWSFixture(t testing.TB) *wsFixture {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{Path: filepath.Join(t.TempDir(), "reeve.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	d, _, err := st.AddDirectory(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sess, err := st.CreateSession(ctx, store.NewSession{DirectoryID: d.ID, Agent: "shell", Status: store.StatusRunning})
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeSessions{st: st, launch: func(wire.LaunchRequest) (wire.SessionInfo, error) {
		return wire.SessionInfo{}, &frameError{code: wire.CodeUnknownAgent, msg: "no agent"}
	}}
	api := New(Options{
		Directories: st, Sessions: fs, Log: st, Permissions: fakePermissions{},
		Health: func(context.Context) wire.Health { return wire.Health{Status: "ok"} },
	})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	// The test server's port is random; let its Host pass the guard.
	_, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")
	api.opts.BoundPort = port
	*api = *New(api.opts)
	return &wsFixture{api: api, st: st, url: "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws", sid: sess.ID, sessions: fs}
}

type testConn struct {
	t testing.TB
	c *websocket.Conn
}

func (f *wsFixture) dial(t testing.TB, hello bool) *testConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, f.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 22)
	tc := &testConn{t: t, c: c}
	var h wire.Hello
	tc.read(&h)
	if h.Type != wire.TypeHello || h.ProtocolVersion != wire.ProtocolVersion {
		t.Fatalf("server hello: %+v", h)
	}
	if hello {
		tc.send(wire.Hello{Type: wire.TypeHello, ProtocolVersion: 1, Version: "test"})
	}
	return tc
}

func (tc *testConn) sendRaw(typ websocket.MessageType, b []byte) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tc.c.Write(ctx, typ, b); err != nil {
		tc.t.Fatal(err)
	}
}

func (tc *testConn) send(v any) {
	b, _ := json.Marshal(v)
	tc.sendRaw(websocket.MessageText, b)
}

func (tc *testConn) readRaw() []byte {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := tc.c.Read(ctx)
	if err != nil {
		tc.t.Fatalf("read: %v", err)
	}
	return b
}

func (tc *testConn) read(v any) {
	tc.t.Helper()
	if err := json.Unmarshal(tc.readRaw(), v); err != nil {
		tc.t.Fatal(err)
	}
}

func (tc *testConn) ack() wire.Ack {
	tc.t.Helper()
	var a wire.Ack
	tc.read(&a)
	if a.Type != wire.TypeAck {
		tc.t.Fatalf("want an ack, got %+v", a)
	}
	return a
}

func TestProtocolErrorsKeepConnectionOpen(t *testing.T) {
	f := newWSFixture(t)
	tc := f.dial(t, false)
	tc.send(wire.ListRequest{Type: wire.TypeList, ID: "1"})
	if a := tc.ack(); a.OK || a.ID != "1" || a.Error.Code != wire.CodeHelloRequired {
		t.Fatalf("request before hello: %+v", a)
	}
	tc.send(wire.Hello{Type: wire.TypeHello, ProtocolVersion: 1})

	cases := []struct {
		name string
		typ  websocket.MessageType
		raw  string
		id   string
		code string
	}{
		{"not json", websocket.MessageText, `{nope`, "", wire.CodeBadFrame},
		{"array", websocket.MessageText, `[1,2]`, "", wire.CodeBadFrame},
		{"type not a string", websocket.MessageText, `{"type":7,"id":"x"}`, "", wire.CodeBadFrame},
		{"binary", websocket.MessageBinary, `{"type":"list","id":"b"}`, "", wire.CodeBadFrame},
		{"unknown type", websocket.MessageText, `{"type":"teleport","id":"u1"}`, "u1", wire.CodeUnknownType},
		{"wrong field type", websocket.MessageText, `{"type":"subscribe","id":"w1","session_id":5}`, "w1", wire.CodeBadFrame},
		{"negative after_seq", websocket.MessageText, `{"type":"subscribe","id":"n1","session_id":"` + f.sid + `","after_seq":-1}`, "n1", wire.CodeBadFrame},
		{"unknown session", websocket.MessageText, `{"type":"subscribe","id":"s1","session_id":"nope"}`, "s1", wire.CodeNotFound},
		{"launch refused", websocket.MessageText, `{"type":"launch","id":"l1","directory":"/x","prompt":"p"}`, "l1", wire.CodeUnknownAgent},
		{"bad scope", websocket.MessageText, `{"type":"list","id":"sc","scope":"SOME"}`, "sc", wire.CodeBadFrame},
		{"unsubscribe not subscribed", websocket.MessageText, `{"type":"unsubscribe","id":"us","session_id":"` + f.sid + `"}`, "us", wire.CodeNotSubscribed},
	}
	for _, c := range cases {
		tc.sendRaw(c.typ, []byte(c.raw))
		a := tc.ack()
		if a.OK || a.ID != c.id || a.Error == nil || a.Error.Code != c.code {
			t.Errorf("%s: ack %+v", c.name, a)
		}
	}
	// Still open and answering: exactly one ack for a good request.
	tc.send(wire.ListRequest{Type: wire.TypeList, ID: "ok", Scope: wire.ScopeActive})
	if a := tc.ack(); !a.OK || a.ID != "ok" {
		t.Fatalf("after errors: %+v", a)
	}
}

// appendN appends n events with payload {"n": i} for i in [from, from+n).
func appendN(t testing.TB, st *store.Store, sid string, from, n int) {
	for i := from; i < from+n; i++ {
		if _, err := st.Append(context.Background(), sid, wire.KindAgentMessage, json.RawMessage(fmt.Sprintf(`{"text":"event %d"}`, i))); err != nil {
			t.Error(err)
			return
		}
	}
}

// readUpdates reads frames until the session-ended frame, checking that
// seqs continue from after without gap or duplicate.
func readUpdates(t *testing.T, tc *testConn, after int64) (last int64) {
	t.Helper()
	last = after
	for {
		raw := tc.readRaw()
		var env wire.Envelope
		json.Unmarshal(raw, &env)
		switch env.Type {
		case wire.TypeSessionUpdate:
			var u wire.SessionUpdate
			json.Unmarshal(raw, &u)
			if u.Seq != last+1 {
				t.Fatalf("seq %d after %d", u.Seq, last)
			}
			last = u.Seq
		case wire.TypeSessionEnded:
			return last
		default:
			t.Fatalf("unexpected frame %s", raw)
		}
	}
}

func TestSubscribeReplaysThenFollowsLive(t *testing.T) {
	f := newWSFixture(t)
	appendN(t, f.st, f.sid, 1, 100)
	tc := f.dial(t, true)
	tc.send(wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "s", SessionID: f.sid, AfterSeq: 50})
	if a := tc.ack(); !a.OK {
		t.Fatalf("subscribe: %+v", a)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		appendN(t, f.st, f.sid, 101, 400)
		f.st.UpdateSessionStatus(context.Background(), f.sid, store.StatusCompleted, "")
	}()
	if last := readUpdates(t, tc, 50); last != 500 {
		t.Fatalf("followed to %d, want 500", last)
	}
	wg.Wait()

	// A second subscription to the same session on one connection is refused.
	tc2 := f.dial(t, true)
	tc2.send(wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "a", SessionID: f.sid, AfterSeq: 499})
	tc2.ack()
	if last := readUpdates(t, tc2, 499); last != 500 {
		t.Fatalf("ended session replay to %d", last)
	}
}

// A follower that disconnects and reconnects many times while events pour
// in, resuming each time from the last seq it saw, sees every event exactly
// once.
func TestReconnectingFollowerLosesNothing(t *testing.T) {
	f := newWSFixture(t)
	const total = 6000
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ { // concurrent producers, as tool output and status can be
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				appendN(t, f.st, f.sid, w*total/4, total/4)
			}(w)
		}
		wg.Wait()
		f.st.UpdateSessionStatus(context.Background(), f.sid, store.StatusCompleted, "")
	}()
	rng := rand.New(rand.NewSource(1))
	var last int64
	reconnects := 0
	for {
		tc := f.dial(t, true)
		tc.send(wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "s", SessionID: f.sid, AfterSeq: last})
		if a := tc.ack(); !a.OK {
			t.Fatalf("subscribe: %+v", a)
		}
		budget := 1 + rng.Intn(400)
		ended := false
		for i := 0; i < budget; i++ {
			raw := tc.readRaw()
			var u wire.SessionUpdate
			json.Unmarshal(raw, &u)
			if u.Type == wire.TypeSessionEnded {
				ended = true
				break
			}
			if u.Seq != last+1 {
				t.Fatalf("reconnect %d: seq %d after %d", reconnects, u.Seq, last)
			}
			last = u.Seq
		}
		tc.c.CloseNow() // abrupt, mid-stream
		if ended {
			break
		}
		reconnects++
	}
	<-done
	if last != total || reconnects < 10 {
		t.Fatalf("saw up to %d of %d with %d reconnects", last, total, reconnects)
	}
}

func TestUnsubscribeStopsTheStream(t *testing.T) {
	f := newWSFixture(t)
	appendN(t, f.st, f.sid, 1, 10)
	tc := f.dial(t, true)
	tc.send(wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "s", SessionID: f.sid})
	tc.ack()
	for i := 0; i < 10; i++ {
		tc.readRaw()
	}
	tc.send(wire.UnsubscribeRequest{Type: wire.TypeUnsubscribe, ID: "u", SessionID: f.sid})
	if a := tc.ack(); !a.OK || a.ID != "u" {
		t.Fatalf("unsubscribe: %+v", a)
	}
	appendN(t, f.st, f.sid, 11, 5)
	tc.send(wire.ListRequest{Type: wire.TypeList, ID: "l", Scope: wire.ScopeActive})
	// The next frame must be the list ack, not an event of the old stream.
	if a := tc.ack(); a.ID != "l" {
		t.Fatalf("after unsubscribe: %+v", a)
	}
}

// The hand-written session-update frame decodes to exactly what the
// encoding/json form of wire.SessionUpdate would.
func TestUpdateFrameMatchesWireType(t *testing.T) {
	e := store.Event{SessionID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Seq: 42, TS: time.Date(2026, 11, 21, 5, 6, 7, 891, time.UTC),
		Kind: wire.KindToolCall, Data: json.RawMessage(`{"id":"t\u00e9\"1","input":{"a":[1,2]}}`)}
	var got, want wire.SessionUpdate
	if err := json.Unmarshal(updateFrame(nil, e), &got); err != nil {
		t.Fatal(err)
	}
	ref, _ := json.Marshal(wire.SessionUpdate{Type: wire.TypeSessionUpdate, SessionID: e.SessionID, Seq: e.Seq, TS: e.TS, Kind: e.Kind, Data: e.Data})
	json.Unmarshal(ref, &want)
	if !got.TS.Equal(want.TS) || got.Type != want.Type || got.SessionID != want.SessionID || got.Seq != want.Seq || got.Kind != want.Kind || string(got.Data) != string(want.Data) {
		t.Fatalf("hand-written frame %+v, encoding/json %+v", got, want)
	}
	if err := json.Unmarshal(updateFrame(nil, store.Event{SessionID: "s", Seq: 1, Kind: "k"}), &got); err != nil || string(got.Data) != "null" {
		t.Fatalf("empty data: %v %s", err, got.Data)
	}
}

// Notices reach every connection, or only the followers of their session;
// a request of the table answers with one ack carrying its result.
func TestNoticesAndCommands(t *testing.T) {
	f := newWSFixture(t)
	follower := f.dial(t, true)
	follower.send(wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "s", SessionID: f.sid})
	follower.ack()
	other := f.dial(t, true)
	other.send(wire.ListRequest{Type: wire.TypeList, ID: "l", Scope: wire.ScopeActive})
	other.ack() // both connections have registered by now

	f.sessions.notify(Notice{SessionID: f.sid, Frame: map[string]string{"type": "for-followers"}})
	f.sessions.notify(Notice{Frame: map[string]string{"type": "for-all"}})
	var a, b wire.Envelope
	follower.read(&a)
	follower.read(&b)
	if a.Type != "for-followers" || b.Type != "for-all" {
		t.Fatalf("follower got %q then %q", a.Type, b.Type)
	}
	other.read(&a)
	if a.Type != "for-all" {
		t.Fatalf("the other connection got %q", a.Type)
	}
	other.sendRaw(websocket.MessageText, []byte(`{"type":"respond-permission","id":"e1","request_id":"r7","decision":"allow","reason":"x1"}`))
	if ack := other.ack(); !ack.OK || ack.ID != "e1" || !strings.Contains(string(ack.Result), `"request_id":"r7"`) || !strings.Contains(string(ack.Result), `"reason":"x1"`) {
		t.Fatalf("request ack: %+v", ack)
	}
}

// When the daemon stops, every connection — a follower mid-stream, one
// idle — gets a daemon-stopping frame with the reason and a going-away
// close; a connection made afterwards gets its hello and the same.
func TestStopSaysGoodbye(t *testing.T) {
	f := newWSFixture(t)
	appendN(t, f.st, f.sid, 1, 5)
	follower := f.dial(t, true)
	follower.send(wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "s", SessionID: f.sid})
	follower.ack()
	for i := 0; i < 5; i++ {
		follower.readRaw()
	}
	idle := f.dial(t, true)
	idle.send(wire.ListRequest{Type: wire.TypeList, ID: "l"})
	idle.ack()

	f.api.Stop("the daemon is stopping")
	for _, tc := range []*testConn{follower, idle} {
		var d wire.DaemonStopping
		tc.read(&d)
		if d.Type != wire.TypeDaemonStopping || d.Reason != "the daemon is stopping" {
			t.Fatalf("goodbye %+v", d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := tc.c.Read(ctx)
		cancel()
		if websocket.CloseStatus(err) != websocket.StatusGoingAway {
			t.Fatalf("close: %v", err)
		}
	}
	late := f.dial(t, false)
	var d wire.DaemonStopping
	late.read(&d)
	if d.Type != wire.TypeDaemonStopping {
		t.Fatalf("late connection got %+v", d)
	}
}
