package relaylink

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/control"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/syncbuf"
	"reeve.dev/reeve/server/relay"
	"reeve.dev/reeve/server/sdk/e2e"
	"reeve.dev/reeve/server/sdk/remote"
	"reeve.dev/reeve/server/sdk/remote/remotetest"
)

const (
	testWorkspace = "01WORKSPACE"
	testInstall   = "01INSTALL"
	issueToken    = "rvi_test-issue-token"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// ackServer stands in for the control protocol: it says hello, then acks
// every request with the request itself as the result.
func ackServer(ctx context.Context, fc control.FrameConn) {
	if fc.WriteFrame(ctx, []byte(`{"type":"hello","protocol_version":1,"version":"test","daemon_id":"D1"}`)) != nil {
		return
	}
	for {
		f, err := fc.ReadFrame(ctx)
		if err != nil {
			return
		}
		var env struct{ Type, ID string }
		if json.Unmarshal(f, &env) != nil || env.Type == "hello" {
			continue
		}
		ack, _ := json.Marshal(map[string]any{"type": "ack", "id": env.ID, "ok": true, "result": json.RawMessage(f)})
		if fc.WriteFrame(ctx, ack) != nil {
			return
		}
	}
}

type rig struct {
	t      *testing.T
	relay  *remotetest.Relay
	link   *Link
	anchor *ecdh.PrivateKey
	clock  *clock
	issued atomic.Int64
	log    *syncbuf.Buffer
	// refuse makes the token exchange answer 401, as for a detached
	// install.
	refuse atomic.Bool
}

type rigOptions struct {
	autoUnlock bool
	autoTTL    int
	tokenTTL   time.Duration
	intercept  func(to string, env relay.Envelope) []relay.Envelope
}

func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	if o.tokenTTL == 0 {
		o.tokenTTL = 10 * time.Minute
	}
	r := &rig{t: t, clock: &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}, log: &syncbuf.Buffer{}}
	var err error
	if r.anchor, err = ecdh.X25519().GenerateKey(rand.Reader); err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/api/runtime/relay-token" {
			http.NotFound(w, req)
			return
		}
		if r.refuse.Load() || req.Header.Get("Authorization") != "Bearer "+issueToken {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":{"code":"unauthenticated","message":"the issue token is not valid"}}`)
			return
		}
		n := r.issued.Add(1)
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"token": fmt.Sprintf("daemon-jwt-%d", n), "expires_at": time.Now().Add(o.tokenTTL)}})
	}))
	t.Cleanup(api.Close)
	r.relay, err = remotetest.Start(remotetest.Options{
		Validate: func(_ context.Context, tok, role, ws, target string) error {
			ok := (role == relay.RoleDaemon && strings.HasPrefix(tok, "daemon-jwt-") && target == testInstall) ||
				(role == relay.RoleClient && tok == "client-jwt")
			if !ok || ws != testWorkspace {
				return errors.New("bad token")
			}
			return nil
		},
		Intercept: o.intercept,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.relay.Close() })
	r.link, err = New(Options{
		Credentials: home.RelayCredentials{
			InstallID: testInstall, WorkspaceID: testWorkspace, IssueToken: issueToken,
			ServerURL: api.URL, RelayURL: r.relay.URL(), AutoUnlock: o.autoUnlock, AutoUnlockTTL: o.autoTTL,
		},
		Anchor: r.anchor, Serve: ackServer, DaemonID: "D1", Log: r.log, Now: r.clock.Now,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, LockCheck: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.link.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	r.waitOnline()
	return r
}

func (r *rig) waitOnline() {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !r.relay.DaemonOnline(testWorkspace, testInstall) {
		if time.Now().After(deadline) {
			r.t.Fatalf("the daemon never connected to the relay; log:\n%s", r.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *rig) options() remote.Options {
	return remote.Options{
		RelayURL: r.relay.URL(), WorkspaceID: testWorkspace, RuntimeTargetID: testInstall,
		Anchor: r.anchor.PublicKey().Bytes(), Token: remote.StaticToken("client-jwt"),
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	}
}

func (r *rig) dial(o remote.Options) (*remote.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := remote.Dial(ctx, o)
	if err == nil {
		r.t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func (r *rig) mustDial(o remote.Options) *remote.Client {
	r.t.Helper()
	c, err := r.dial(o)
	if err != nil {
		r.t.Fatalf("dial: %v\nlink log:\n%s", err, r.log.String())
	}
	return c
}

func launch(t *testing.T, c *remote.Client, prompt string) wire.SessionInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	si, err := c.Launch(ctx, wire.LaunchRequest{Directory: "/work", Prompt: prompt})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	return si
}

func TestRemoteRequestsAreSealedEndToEnd(t *testing.T) {
	r := newRig(t, rigOptions{autoUnlock: true})
	c := r.mustDial(r.options())
	if c.Hello().DaemonID != "D1" || c.Admission().DaemonID != "D1" || !c.Admission().Admitted {
		t.Fatalf("hello %+v admission %+v", c.Hello(), c.Admission())
	}
	marker := "PLAINTEXT-MARKER-7f3a"
	// Long enough to be split over several sealed frames.
	prompt := marker + strings.Repeat(" and more "+marker, 5000)
	si := launch(t, c, prompt)
	if si.Prompt != prompt || si.Directory != "/work" {
		t.Fatalf("round trip changed the request: %d bytes back", len(si.Prompt))
	}
	rec := r.relay.Recorded()
	if len(rec) < 6 {
		t.Fatalf("the relay recorded only %d messages", len(rec))
	}
	for _, b := range rec {
		if bytes.Contains(b, []byte(marker)) {
			t.Fatalf("the relay saw the plaintext marker: %.200s", b)
		}
		var env relay.Envelope
		if json.Unmarshal(b, &env) != nil {
			t.Fatalf("relay recorded a non-envelope: %.100s", b)
		}
		p, _ := base64.StdEncoding.DecodeString(env.Payload)
		if bytes.Contains(p, []byte(marker)) || bytes.Contains(p, []byte(`"type"`)) {
			t.Fatalf("a relayed payload holds plaintext: %.100q", p)
		}
	}
	if s := r.link.Status(); s.Link != wire.RelayConnected || s.Channels != 1 || s.Locked {
		t.Fatalf("status %+v", s)
	}
}

func TestLockedByDefaultUntilUnlockedOnTheMachine(t *testing.T) {
	r := newRig(t, rigOptions{})
	if s := r.link.Status(); !s.Locked || s.AutoUnlock {
		t.Fatalf("a fresh link is not locked: %+v", s)
	}
	o := r.options()
	o.NoReconnect = true
	_, err := r.dial(o)
	if !errors.Is(err, e2e.ErrRefused) || !strings.Contains(err.Error(), "reeve pair unlock") {
		t.Fatalf("locked daemon: %v", err)
	}
	st := r.link.Unlock(0)
	if st.Locked || !st.UnlockedUntil.Equal(r.clock.Now().Add(1800*time.Second)) {
		t.Fatalf("after unlock: %+v", st)
	}
	c := r.mustDial(o)
	if until := c.Admission().Until; !until.Equal(st.UnlockedUntil) {
		t.Fatalf("admitted until %s, want %s", until, st.UnlockedUntil)
	}
	launch(t, c, "x")
}

func TestUnlockExpiryClosesChannel(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.link.Unlock(60) // clamped to 300
	o := r.options()
	o.NoReconnect = true
	c := r.mustDial(o)
	r.clock.Advance(299 * time.Second)
	launch(t, c, "still unlocked")
	// The machine extends the unlock: the open channel lives on.
	r.link.Unlock(600)
	r.clock.Advance(10 * time.Second)
	launch(t, c, "extended")
	r.clock.Advance(600 * time.Second)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the channel outlived its unlock")
	}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "unlock expired") {
		t.Fatalf("closed with %v", err)
	}
	if _, err := r.dial(o); !errors.Is(err, e2e.ErrRefused) {
		t.Fatalf("after expiry a new client got: %v", err)
	}
}

func TestAutoUnlockLastsItsTTL(t *testing.T) {
	r := newRig(t, rigOptions{autoUnlock: true, autoTTL: 400})
	if s := r.link.Status(); s.Locked || !s.AutoUnlock || s.AutoUnlockTTLSeconds != 400 {
		t.Fatalf("status %+v", s)
	}
	o := r.options()
	o.NoReconnect = true
	c := r.mustDial(o)
	if want := r.clock.Now().Add(400 * time.Second); !c.Admission().Until.Equal(want) {
		t.Fatalf("auto-unlocked until %s, want %s", c.Admission().Until, want)
	}
	r.clock.Advance(399 * time.Second)
	launch(t, c, "within the TTL")
	r.clock.Advance(2 * time.Second)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the auto-unlocked channel outlived its TTL")
	}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "unlock expired") {
		t.Fatalf("closed with %v", err)
	}
	// A new channel gets a new TTL of its own.
	c2 := r.mustDial(o)
	launch(t, c2, "new channel")
}

func TestTTLClamp(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct{ in, want int }{{0, 1800}, {1, 300}, {299, 300}, {300, 300}, {1234, 1234}, {3600, 3600}, {3601, 3600}, {1 << 30, 3600}} {
		l := NewLock(true, tc.in, func() time.Time { return now })
		var s wire.RemoteStatus
		l.state(&s)
		if s.AutoUnlockTTLSeconds != tc.want {
			t.Errorf("auto-unlock TTL %d became %d, want %d", tc.in, s.AutoUnlockTTLSeconds, tc.want)
		}
		if got := NewLock(false, 0, func() time.Time { return now }).Unlock(tc.in); !got.Equal(now.Add(time.Duration(tc.want) * time.Second)) {
			t.Errorf("unlock %d ends %s, want +%ds", tc.in, got, tc.want)
		}
	}
	// A shorter unlock does not shorten a longer one.
	l := NewLock(false, 0, func() time.Time { return now })
	long := l.Unlock(3600)
	if got := l.Unlock(300); !got.Equal(long) {
		t.Fatalf("a shorter unlock moved the end to %s", got)
	}
}

func TestWrongAnchorRefused(t *testing.T) {
	r := newRig(t, rigOptions{autoUnlock: true})
	other, _ := ecdh.X25519().GenerateKey(rand.Reader)
	o := r.options()
	o.NoReconnect = true
	o.Anchor = other.PublicKey().Bytes()
	if _, err := r.dial(o); err == nil || !strings.Contains(err.Error(), "anchor") {
		t.Fatalf("wrong anchor: %v", err)
	}
	// By fingerprint: the right one is accepted, another refused.
	o.Anchor = nil
	o.Fingerprint = e2e.Fingerprint(other.PublicKey().Bytes())
	if _, err := r.dial(o); !errors.Is(err, e2e.ErrFingerprint) {
		t.Fatalf("wrong fingerprint: %v", err)
	}
	o.Fingerprint = e2e.Fingerprint(r.anchor.PublicKey().Bytes())
	c := r.mustDial(o)
	if !bytes.Equal(c.Anchor(), r.anchor.PublicKey().Bytes()) {
		t.Fatal("the client did not learn the anchor it verified")
	}
	launch(t, c, "by fingerprint")
}

// tamperer, once active, flips a bit in or repeats the next data envelope
// headed for one side.
type tamperer struct {
	mu     sync.Mutex
	to     string
	after  int // data envelopes to let through first
	seen   int
	mode   string // flip or replay
	active atomic.Bool
}

func (tp *tamperer) intercept(to string, env relay.Envelope) []relay.Envelope {
	if !tp.active.Load() || to != tp.to || env.Type != relay.TypeData {
		return []relay.Envelope{env}
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.seen++
	if tp.seen != tp.after+1 {
		return []relay.Envelope{env}
	}
	if tp.mode == "replay" {
		return []relay.Envelope{env, env}
	}
	p, _ := base64.StdEncoding.DecodeString(env.Payload)
	p[len(p)-3] ^= 0x01
	env.Payload = base64.StdEncoding.EncodeToString(p)
	return []relay.Envelope{env}
}

func TestTamperedAndReplayedFramesCloseTheChannel(t *testing.T) {
	for _, tc := range []struct {
		to, mode, want string
	}{
		{relay.RoleDaemon, "flip", "failed authentication"},
		{relay.RoleDaemon, "replay", "not the next one"},
		{relay.RoleClient, "flip", "failed authentication"},
		{relay.RoleClient, "replay", "not the next one"},
	} {
		t.Run(tc.to+"/"+tc.mode, func(t *testing.T) {
			tp := &tamperer{to: tc.to, mode: tc.mode}
			r := newRig(t, rigOptions{autoUnlock: true, intercept: tp.intercept})
			o := r.options()
			o.NoReconnect = true
			c := r.mustDial(o)
			launch(t, c, "clean")
			// The next data envelope that way: the launch request (to the
			// daemon) or its ack (to the client).
			tp.active.Store(true)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.Launch(ctx, wire.LaunchRequest{Directory: "/work", Prompt: "tampered"})
			// (A replayed request may be answered once before its copy
			// kills the channel, so err is not checked.)
			select {
			case <-c.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("the channel survived a %s frame (launch err %v)", tc.mode, err)
			}
			if tc.to == relay.RoleDaemon {
				if !strings.Contains(r.log.String(), tc.want) {
					t.Fatalf("daemon log lacks %q:\n%s", tc.want, r.log.String())
				}
				if !strings.Contains(c.Err().Error(), tc.want) {
					t.Fatalf("client was told %v, want the daemon's reason %q", c.Err(), tc.want)
				}
			} else if !strings.Contains(c.Err().Error(), tc.want) {
				t.Fatalf("client error %v, want %q", c.Err(), tc.want)
			}
		})
	}
}

func TestReconnectAfterRelayDrop(t *testing.T) {
	r := newRig(t, rigOptions{autoUnlock: true})
	c := r.mustDial(r.options())
	launch(t, c, "before")
	r.relay.Refuse(true)
	r.relay.DropAll()
	time.Sleep(100 * time.Millisecond)
	r.relay.Refuse(false)
	// The request waits for the reconnection rather than failing.
	launch(t, c, "after")
	if c.Connections() < 2 || r.relay.Accepted(relay.RoleDaemon) < 2 {
		t.Fatalf("connections: client %d, daemon %d", c.Connections(), r.relay.Accepted(relay.RoleDaemon))
	}
	if !strings.Contains(r.log.String(), "relay connection lost") || !strings.Contains(r.log.String(), "reconnecting in") {
		t.Fatalf("the link did not say why it reconnected:\n%s", r.log.String())
	}
}

func TestTokenRefreshedBeforeExpiry(t *testing.T) {
	r := newRig(t, rigOptions{autoUnlock: true, tokenTTL: 3 * time.Second})
	deadline := time.Now().Add(15 * time.Second)
	for r.issued.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d tokens issued; log:\n%s", r.issued.Load(), r.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := r.relay.Accepted(relay.RoleDaemon); n != 1 {
		t.Fatalf("refreshing reconnected: %d daemon connections", n)
	}
	if s := r.link.Status(); !s.TokenExpiresAt.After(time.Now()) {
		t.Fatalf("token in hand expires at %s", s.TokenExpiresAt)
	}
}

func TestDetachedInstallBacksOff(t *testing.T) {
	r := newRig(t, rigOptions{autoUnlock: true})
	r.refuse.Store(true)
	r.link.tokMu.Lock()
	r.link.tok.Token = "" // force an exchange on the next connection
	r.link.tokMu.Unlock()
	r.relay.DropAll()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := r.link.Status()
		if s.Link == wire.RelayBackoff && strings.Contains(s.LastError, "pair again") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %+v; log:\n%s", s, r.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
