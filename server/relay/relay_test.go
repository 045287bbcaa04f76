package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/relay"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// fixture is a real server (with its embedded relay on /ws), a user with a
// workspace, and a paired install with relay JWTs for both roles.
type fixture struct {
	s         *servertest.Server
	u         servertest.User
	install   sdk.Install
	daemonTok string
	clientTok string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return fixtureOn(t, servertest.Start(t, servertest.Options{}))
}

func fixtureOn(t testing.TB, s *servertest.Server) *fixture {
	t.Helper()
	f := &fixture{s: s, u: s.NewUser("relay@example.com")}
	ctx := context.Background()
	in, err := f.u.Client.CreateInstall(ctx, f.u.Workspace, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	f.install = in
	f.daemonTok = f.runtimeToken(t, in.IssueToken)
	f.clientTok = f.clientToken(t, f.u)
	return f
}

func (f *fixture) runtimeToken(t testing.TB, issue string) string {
	t.Helper()
	rt, err := f.s.Client(issue).RuntimeRelayToken(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rt.Token
}

func (f *fixture) clientToken(t testing.TB, u servertest.User) string {
	t.Helper()
	var r sdk.RelayTokenResponse
	if _, err := u.Client.Do(context.Background(), http.MethodPost, "/api/workspaces/"+u.Workspace+"/relay-token", map[string]any{}, &r); err != nil {
		t.Fatal(err)
	}
	return r.Data.Token
}

// wsURL is the upgrade URL on a relay base URL.
func wsURL(t testing.TB, base, role, ws, rt string) string {
	t.Helper()
	u, err := sdk.RelayWSURL(base, role, ws, rt)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

type how int

const (
	byHeader how = iota
	bySubprotocol
	byQuery
)

func dial(ctx context.Context, url, token string, h how) (*websocket.Conn, *http.Response, error) {
	o := &websocket.DialOptions{HTTPHeader: http.Header{}}
	switch h {
	case byHeader:
		o.HTTPHeader.Set("Authorization", "Bearer "+token)
	case bySubprotocol:
		o.Subprotocols = []string{relay.Subprotocol, relay.TokenSubprotocolPrefix + token}
	case byQuery:
		url += "&token=" + token
	}
	c, resp, err := websocket.Dial(ctx, url, o)
	if c != nil {
		c.SetReadLimit(4 << 20)
	}
	return c, resp, err
}

func mustDial(t *testing.T, url, token string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := dial(ctx, url, token, byHeader)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func (f *fixture) daemon(t *testing.T, base string) *websocket.Conn {
	return mustDial(t, wsURL(t, base, relay.RoleDaemon, f.u.Workspace, f.install.ID), f.daemonTok)
}

func (f *fixture) client(t *testing.T, base string) *websocket.Conn {
	return mustDial(t, wsURL(t, base, relay.RoleClient, f.u.Workspace, f.install.ID), f.clientTok)
}

// waitMetrics waits for the relay's counters to satisfy ok: connections
// are counted out once their close handshake has finished.
func waitMetrics(t *testing.T, r *relay.Relay, ok func(relay.Metrics) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(r.Metrics()) {
		if time.Now().After(deadline) {
			t.Fatalf("metrics %+v", r.Metrics())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readRaw(t *testing.T, c *websocket.Conn) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		t.Fatalf("read a %v frame", typ)
	}
	return b
}

func read(t *testing.T, c *websocket.Conn) relay.Envelope {
	t.Helper()
	var e relay.Envelope
	b := readRaw(t, c)
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("read %s: %v", b, err)
	}
	return e
}

func write(t *testing.T, c *websocket.Conn, v any) {
	t.Helper()
	b, ok := v.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// closeCode reads until the connection ends and returns its close code.
func closeCode(t *testing.T, c *websocket.Conn) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		_, _, err := c.Read(ctx)
		if err != nil {
			return websocket.CloseStatus(err)
		}
	}
}

func TestRelayRoutesChannelsBetweenDaemonAndClients(t *testing.T) {
	f := newFixture(t)
	d := f.daemon(t, f.s.URL)
	const n = 3
	clients := make([]*websocket.Conn, n)
	chans := map[string]int{}
	for i := range clients {
		clients[i] = f.client(t, f.s.URL)
		open := read(t, d)
		if open.Type != relay.TypeOpen || open.Channel == "" {
			t.Fatalf("daemon got %+v, want an open", open)
		}
		if _, dup := chans[open.Channel]; dup {
			t.Fatalf("channel %s opened twice", open.Channel)
		}
		chans[open.Channel] = i
	}
	for i, c := range clients {
		write(t, c, relay.Envelope{Type: relay.TypeData, Payload: fmt.Sprintf("from-client-%d", i)})
	}
	byClient := map[int]string{}
	for range clients {
		e := read(t, d)
		i, ok := chans[e.Channel]
		if e.Type != relay.TypeData || !ok {
			t.Fatalf("daemon got %+v", e)
		}
		if want := fmt.Sprintf("from-client-%d", i); e.Payload != want {
			t.Fatalf("channel %s carried %q, want %q", e.Channel, e.Payload, want)
		}
		byClient[i] = e.Channel
	}
	// Answers go to their own channel only.
	for i := n - 1; i >= 0; i-- {
		write(t, d, relay.Envelope{Type: relay.TypeData, Channel: byClient[i], Payload: fmt.Sprintf("to-client-%d", i)})
	}
	for i, c := range clients {
		e := read(t, c)
		if e.Type != relay.TypeData || e.Payload != fmt.Sprintf("to-client-%d", i) || e.Channel != "" {
			t.Fatalf("client %d got %+v", i, e)
		}
	}
	// A client's close reaches the daemon; the daemon's close ends a client.
	write(t, clients[0], relay.Envelope{Type: relay.TypeClose, Reason: "bye"})
	if e := read(t, d); e.Type != relay.TypeClose || e.Channel != byClient[0] || e.Reason != "bye" {
		t.Fatalf("daemon got %+v, want close of %s", e, byClient[0])
	}
	if code := closeCode(t, clients[0]); code != websocket.StatusNormalClosure {
		t.Fatalf("client 0 closed with %v after its close", code)
	}
	write(t, d, relay.Envelope{Type: relay.TypeClose, Channel: byClient[1], Reason: "done"})
	if e := read(t, clients[1]); e.Type != relay.TypeClose || e.Reason != "done" {
		t.Fatalf("client 1 got %+v", e)
	}
	if code := closeCode(t, clients[1]); code != websocket.StatusNormalClosure {
		t.Fatalf("client 1 closed with %v", code)
	}
	// A client that drops its socket is a close to the daemon.
	clients[2].CloseNow()
	if e := read(t, d); e.Type != relay.TypeClose || e.Channel != byClient[2] {
		t.Fatalf("daemon got %+v, want close of %s", e, byClient[2])
	}
	// Data on an ended channel is answered with its close.
	write(t, d, relay.Envelope{Type: relay.TypeData, Channel: byClient[0], Payload: "late"})
	if e := read(t, d); e.Type != relay.TypeClose || e.Channel != byClient[0] {
		t.Fatalf("daemon got %+v for a dead channel", e)
	}
	waitMetrics(t, f.s.Host.Relay(), func(m relay.Metrics) bool { return m.DaemonConns == 1 && m.ClientConns == 0 && m.Channels == 0 })
}

func TestRelayAdmission(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	other := f.s.NewUser("other@example.com")
	otherTok := f.clientToken(t, other)
	otherInstall, err := other.Client.CreateInstall(ctx, other.Workspace, "desk")
	if err != nil {
		t.Fatal(err)
	}
	second, err := f.u.Client.CreateInstall(ctx, f.u.Workspace, "second")
	if err != nil {
		t.Fatal(err)
	}
	key, err := f.s.Store().Secret(ctx, "relay-jwt-hs256", func() ([]byte, error) { return nil, errors.New("the key exists") })
	if err != nil {
		t.Fatal(err)
	}
	expired := (&auth.RelaySigner{Key: key, Issuer: f.s.URL, TTL: time.Minute, Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	expiredTok, _, err := expired.Sign(f.install.ID, f.u.Workspace, auth.RelayRoleDaemon, f.install.ID)
	if err != nil {
		t.Fatal(err)
	}
	forged := &auth.RelaySigner{Key: []byte(strings.Repeat("k", 32)), Issuer: f.s.URL}
	forgedTok, _, err := forged.Sign(f.install.ID, f.u.Workspace, auth.RelayRoleDaemon, f.install.ID)
	if err != nil {
		t.Fatal(err)
	}
	// A JWT whose payload was edited keeps its signature and fails it.
	parts := strings.Split(f.clientTok, ".")
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(f.clientTok, claims); err != nil {
		t.Fatal(err)
	}
	claims["wid"] = other.Workspace
	tamperedTok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SigningString()
	if err != nil {
		t.Fatal(err)
	}
	tamperedTok += "." + parts[2]

	ws, rt := f.u.Workspace, f.install.ID
	cases := []struct {
		name       string
		role       string
		ws, rt     string
		tok        string
		want       int
		wantSubstr string
	}{
		{"no token", relay.RoleDaemon, ws, rt, "", 401, "required"},
		{"garbage token", relay.RoleDaemon, ws, rt, "not-a-jwt", 401, ""},
		{"forged JWT", relay.RoleDaemon, ws, rt, forgedTok, 401, ""},
		{"tampered JWT", relay.RoleClient, other.Workspace, otherInstall.ID, tamperedTok, 401, ""},
		{"expired JWT", relay.RoleDaemon, ws, rt, expiredTok, 401, ""},
		{"user API token", relay.RoleClient, ws, rt, f.u.Token, 401, ""},
		{"daemon JWT, wrong workspace", relay.RoleDaemon, other.Workspace, rt, f.daemonTok, 403, "workspace"},
		{"client JWT, wrong workspace", relay.RoleClient, other.Workspace, otherInstall.ID, f.clientTok, 403, "workspace"},
		{"client JWT of another workspace", relay.RoleClient, ws, rt, otherTok, 403, "workspace"},
		{"daemon JWT, wrong runtime target", relay.RoleDaemon, ws, second.ID, f.daemonTok, 403, "runtime target"},
		{"client JWT, unknown runtime target", relay.RoleClient, ws, otherInstall.ID, f.clientTok, 403, "runtime target"},
		{"daemon JWT as client", relay.RoleClient, ws, rt, f.daemonTok, 403, "role"},
		{"client JWT as daemon", relay.RoleDaemon, ws, rt, f.clientTok, 403, "role"},
		{"bad role", "admin", ws, rt, f.daemonTok, 400, "role"},
		{"no workspace", relay.RoleDaemon, "", rt, f.daemonTok, 400, "workspaceId"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			c, resp, err := dial(cctx, wsURL(t, f.s.URL, tc.role, tc.ws, tc.rt), tc.tok, byHeader)
			if err == nil {
				c.CloseNow()
				t.Fatalf("admitted")
			}
			if resp == nil {
				t.Fatalf("no HTTP answer: %v", err)
			}
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
			var body struct {
				Error struct{ Message string } `json:"error"`
			}
			json.NewDecoder(resp.Body).Decode(&body)
			if !strings.Contains(body.Error.Message, tc.wantSubstr) {
				t.Fatalf("message %q does not mention %q", body.Error.Message, tc.wantSubstr)
			}
			if tc.want == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Fatalf("401 without WWW-Authenticate")
			}
		})
	}

	// Each way of carrying the token admits; the subprotocol is echoed.
	for _, h := range []how{byHeader, bySubprotocol, byQuery} {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, _, err := dial(cctx, wsURL(t, f.s.URL, relay.RoleDaemon, ws, rt), f.daemonTok, h)
		cancel()
		if err != nil {
			t.Fatalf("token way %d: %v", h, err)
		}
		if h == bySubprotocol && c.Subprotocol() != relay.Subprotocol {
			t.Fatalf("subprotocol %q echoed", c.Subprotocol())
		}
		c.Close(websocket.StatusNormalClosure, "")
	}
	// Without runtimeTargetId, a daemon's target is its own install.
	d := mustDial(t, wsURL(t, f.s.URL, relay.RoleDaemon, ws, ""), f.daemonTok)
	c := f.client(t, f.s.URL)
	if e := read(t, d); e.Type != relay.TypeOpen {
		t.Fatalf("daemon without runtimeTargetId got %+v", e)
	}
	c.CloseNow()
	if m := f.s.Host.Relay().Metrics(); m.Refused < uint64(len(cases)) {
		t.Fatalf("refused %d, want at least %d", m.Refused, len(cases))
	}
}

func TestRelayDetachedInstallIsRevoked(t *testing.T) {
	f := newFixture(t)
	r, base := startRelay(t, f.s, relay.Options{PresenceInterval: 200 * time.Millisecond})
	d := f.daemon(t, base)
	c := f.client(t, base)
	read(t, d)
	if _, err := f.u.Client.Do(context.Background(), http.MethodDelete, "/api/workspaces/"+f.u.Workspace+"/installs/"+f.install.ID, nil, nil); err != nil {
		t.Fatal(err)
	}
	// The live connection is dropped at the next presence report, its
	// client told, and its JWT admits no new connection.
	if code := closeCode(t, d); code != relay.CloseRevoked {
		t.Fatalf("the detached daemon closed with %v, want %v", code, relay.CloseRevoked)
	}
	if e := read(t, c); e.Type != relay.TypeError || !strings.Contains(e.Reason, "revoked") {
		t.Fatalf("its client got %+v", e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := dial(ctx, wsURL(t, base, relay.RoleDaemon, f.u.Workspace, f.install.ID), f.daemonTok, byHeader)
	if err == nil || resp == nil || (resp.StatusCode != 401 && resp.StatusCode != 403) {
		t.Fatalf("a detached install's JWT was not refused: %v", err)
	}
	if m := r.Metrics(); m.Revoked != 1 {
		t.Fatalf("metrics %+v", m)
	}
}

func TestRelayClientBeforeDaemonGetsError(t *testing.T) {
	f := newFixture(t)
	c := f.client(t, f.s.URL)
	e := read(t, c)
	if e.Type != relay.TypeError || !strings.Contains(e.Reason, "no daemon") {
		t.Fatalf("client got %+v, want an error envelope", e)
	}
	if code := closeCode(t, c); code != relay.CloseNoDaemon {
		t.Fatalf("close code %v, want %v", code, relay.CloseNoDaemon)
	}
	// Once the daemon is there, a new client gets through.
	d := f.daemon(t, f.s.URL)
	f.client(t, f.s.URL)
	if e := read(t, d); e.Type != relay.TypeOpen {
		t.Fatalf("daemon got %+v", e)
	}
}

func TestRelayDaemonReplacement(t *testing.T) {
	f := newFixture(t)
	d1 := f.daemon(t, f.s.URL)
	c1 := f.client(t, f.s.URL)
	read(t, d1)
	d2 := f.daemon(t, f.s.URL)
	if code := closeCode(t, d1); code != relay.CloseReplaced {
		t.Fatalf("old daemon closed with %v, want %v", code, relay.CloseReplaced)
	}
	if e := read(t, c1); e.Type != relay.TypeError || !strings.Contains(e.Reason, "replaced") {
		t.Fatalf("client of the old daemon got %+v", e)
	}
	if code := closeCode(t, c1); code != relay.CloseNoDaemon {
		t.Fatalf("client of the old daemon closed with %v", code)
	}
	c2 := f.client(t, f.s.URL)
	open := read(t, d2)
	write(t, d2, relay.Envelope{Type: relay.TypeData, Channel: open.Channel, Payload: "new"})
	if e := read(t, c2); e.Payload != "new" {
		t.Fatalf("client got %+v from the new daemon", e)
	}
	waitMetrics(t, f.s.Host.Relay(), func(m relay.Metrics) bool { return m.Replaced == 1 && m.DaemonConns == 1 && m.ClientConns == 1 })
}

func TestRelayNeverDecodesPayloads(t *testing.T) {
	f := newFixture(t)
	d := f.daemon(t, f.s.URL)
	c := f.client(t, f.s.URL)
	ch := read(t, d).Channel
	// Not base64, with escapes and non-ASCII: it arrives as the same bytes.
	payload := `"%%% not base64 !!! \u00e9\n\"quoted\" \/ ü ` + strings.Repeat("=", 7) + `"`
	write(t, c, []byte(`{"t":"data","p":`+payload+`}`))
	got := readRaw(t, d)
	if want := `{"t":"data","ch":"` + ch + `","p":` + payload + `}`; string(got) != want {
		t.Fatalf("daemon got\n%s\nwant\n%s", got, want)
	}
	write(t, d, []byte(`{"ch":"`+ch+`","p":`+payload+`,"t":"data"}`))
	if got := readRaw(t, c); string(got) != `{"t":"data","p":`+payload+`}` {
		t.Fatalf("client got %s", got)
	}
	// A payload that is not a string is not an envelope.
	write(t, c, []byte(`{"t":"data","p":{"x":1}}`))
	if code := closeCode(t, c); code != relay.CloseBadEnvelope {
		t.Fatalf("close code %v, want %v", code, relay.CloseBadEnvelope)
	}
}

// startRelay runs a separate relay instance against the server, as
// `reeve relay` does, on its own 127.0.0.1 listener.
func startRelay(t testing.TB, s *servertest.Server, o relay.Options) (*relay.Relay, string) {
	t.Helper()
	o.Control = &relay.HTTPControl{ServerURL: s.URL, Credential: s.Host.RelayServiceCredential()}
	r, err := relay.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ws", r)
	srv := &http.Server{Handler: mux}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go srv.Serve(ln)
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() {
		r.Close()
		cancel()
		<-done
		srv.Close()
	})
	return r, "http://" + ln.Addr().String()
}

func TestRelaySlowPeerIsDisconnected(t *testing.T) {
	f := newFixture(t)
	r, base := startRelay(t, f.s, relay.Options{QueueFrames: 8, SlowTimeout: 300 * time.Millisecond})
	d := f.daemon(t, base)
	c := f.client(t, base) // never reads until the relay gives up on it
	ch := read(t, d).Channel
	frame, _ := json.Marshal(relay.Envelope{Type: relay.TypeData, Channel: ch, Payload: strings.Repeat("A", 32<<10)})
	var stop atomic.Bool
	defer stop.Store(true)
	go func() {
		for !stop.Load() {
			// A cancelled write context would close the daemon's socket.
			if d.Write(context.Background(), websocket.MessageText, frame) != nil {
				return
			}
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for r.Metrics().SlowDisconnects == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the slow client was never disconnected: %+v", r.Metrics())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop.Store(true)
	if code := closeCode(t, c); code != relay.CloseTooSlow {
		t.Fatalf("slow client closed with %v, want %v", code, relay.CloseTooSlow)
	}
	// The daemon stays connected and learns that the channel ended.
	for {
		e := read(t, d)
		if e.Type == relay.TypeClose && e.Channel == ch {
			break
		}
	}
	waitMetrics(t, r, func(m relay.Metrics) bool { return m.DaemonConns == 1 && m.ClientConns == 0 })
}

// Two instances meet through presence and the bus: a daemon on one, its
// clients on the other, in both directions; a daemon that reconnects to
// the other instance replaces its old connection there.
func TestRelayTwoInstances(t *testing.T) {
	f := newFixture(t)
	rb, b := startRelay(t, f.s, relay.Options{PresenceInterval: time.Second})
	// a is the server's embedded relay.
	testTwoInstances(t, f, f.s.URL, b, rb)
}

// testTwoInstances runs the meeting of a daemon and its clients across
// relay instances a and b (rb is b's relay).
func testTwoInstances(t *testing.T, f *fixture, a, b string, rb *relay.Relay) {
	d := f.daemon(t, a)
	clients := []*websocket.Conn{f.client(t, b), f.client(t, b)}
	chans := map[string]*websocket.Conn{}
	for i, c := range clients {
		open := read(t, d)
		if open.Type != relay.TypeOpen {
			t.Fatalf("daemon got %+v", open)
		}
		chans[open.Channel] = c
		// Not base64, escapes included: the value crosses the bus intact.
		write(t, c, relay.Envelope{Type: relay.TypeData, Payload: fmt.Sprintf("¿remote %d? \"%%%%\"", i)})
	}
	for range clients {
		e := read(t, d)
		c := chans[e.Channel]
		if e.Type != relay.TypeData || c == nil || !strings.HasPrefix(e.Payload, "¿remote ") {
			t.Fatalf("daemon got %+v", e)
		}
		write(t, d, relay.Envelope{Type: relay.TypeData, Channel: e.Channel, Payload: "back:" + e.Payload})
		if got := read(t, c); got.Payload != "back:"+e.Payload {
			t.Fatalf("client got %+v, want back:%s", got, e.Payload)
		}
	}
	// The daemon closes one remote channel; the client sees the close.
	var first string
	for ch := range chans {
		first = ch
		break
	}
	write(t, d, relay.Envelope{Type: relay.TypeClose, Channel: first, Reason: "enough"})
	if e := read(t, chans[first]); e.Type != relay.TypeClose || e.Reason != "enough" {
		t.Fatalf("remote client got %+v", e)
	}
	if code := closeCode(t, chans[first]); code != websocket.StatusNormalClosure {
		t.Fatalf("remote client closed with %v", code)
	}
	if m := rb.Metrics(); m.RemoteChannels != 2 || m.BusOut == 0 || m.BusIn == 0 {
		t.Fatalf("instance b metrics %+v", m)
	}

	// The daemon moves to instance b: a's connection is replaced, the
	// remaining remote client is told, and a client on a reaches the
	// daemon on b.
	d2 := f.daemon(t, b)
	if code := closeCode(t, d); code != relay.CloseReplaced {
		t.Fatalf("the daemon on a closed with %v, want %v", code, relay.CloseReplaced)
	}
	for ch, c := range chans {
		if ch == first {
			continue
		}
		if e := read(t, c); e.Type != relay.TypeError {
			t.Fatalf("client of the replaced daemon got %+v", e)
		}
	}
	ca := f.client(t, a)
	open := read(t, d2)
	write(t, ca, relay.Envelope{Type: relay.TypeData, Payload: "to b"})
	if e := read(t, d2); e.Channel != open.Channel || e.Payload != "to b" {
		t.Fatalf("daemon on b got %+v", e)
	}
	write(t, d2, relay.Envelope{Type: relay.TypeData, Channel: open.Channel, Payload: "from b"})
	if e := read(t, ca); e.Payload != "from b" {
		t.Fatalf("client on a got %+v", e)
	}
	// The client on a leaves: the daemon on b gets the close.
	ca.Close(websocket.StatusNormalClosure, "")
	if e := read(t, d2); e.Type != relay.TypeClose || e.Channel != open.Channel {
		t.Fatalf("daemon on b got %+v", e)
	}
}

// partitionable is a Control that can be cut off, as a relay instance
// whose server was killed is: nothing it says reaches anyone any more.
type partitionable struct {
	relay.Control
	cut atomic.Bool
}

var errCut = errors.New("partitioned")

func (p *partitionable) Upsert(ctx context.Context, req sdk.RelayPresenceUpsertRequest) (sdk.RelayPresenceUpsertResult, error) {
	if p.cut.Load() {
		return sdk.RelayPresenceUpsertResult{}, errCut
	}
	return p.Control.Upsert(ctx, req)
}

func (p *partitionable) Publish(ctx context.Context, req sdk.RelayBusPublishRequest) (sdk.RelayBusPublishResult, error) {
	if p.cut.Load() {
		return sdk.RelayBusPublishResult{}, errCut
	}
	return p.Control.Publish(ctx, req)
}

// A client whose channel leads to an instance that died without a word
// (its daemon's presence lapses, its close never comes) gets an error
// within a few presence intervals, instead of waiting forever.
func TestRelayRemoteChannelOfADeadInstanceEnds(t *testing.T) {
	f := newFixture(t)
	ctl := &partitionable{Control: &relay.HTTPControl{ServerURL: f.s.URL, Credential: f.s.Host.RelayServiceCredential()}}
	ra, err := relay.New(relay.Options{Control: ctl, PresenceInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ws", ra)
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ra.Run(ctx); close(done) }()
	defer func() { cancel(); <-done; srv.Close() }()
	a := "http://" + ln.Addr().String()
	_, b := startRelay(t, f.s, relay.Options{PresenceInterval: time.Second})

	d := f.daemon(t, a)
	c := f.client(t, b)
	open := read(t, d)
	write(t, c, relay.Envelope{Type: relay.TypeData, Payload: "hello"})
	if e := read(t, d); e.Channel != open.Channel || e.Payload != "hello" {
		t.Fatalf("daemon got %+v", e)
	}
	// Instance a dies: cut off, then its connections drop; nothing it
	// would say about them arrives.
	ctl.cut.Store(true)
	ra.Close()
	start := time.Now()
	if e := read(t, c); e.Type != relay.TypeError {
		t.Fatalf("client of the dead instance got %+v", e)
	}
	t.Logf("the client learned after %v", time.Since(start).Round(time.Millisecond))
}
