package relaylink

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/control"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/syncbuf"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/remote"
	"reeve.dev/reeve/server/servertest"
)

func TestRenewalPoint(t *testing.T) {
	got := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		life time.Duration
		// the renewal must leave at least minLeft and at most maxLeft
		// of the lifetime, whatever the jitter.
		minLeft, maxLeft time.Duration
	}{
		{10 * time.Second, 3 * time.Second, 5 * time.Second},
		{20 * time.Second, 6 * time.Second, 9 * time.Second},
		{10 * time.Minute, 3 * time.Minute, 5 * time.Minute},
		{24 * time.Hour, 8 * time.Hour, 11 * time.Hour},
	} {
		for _, j := range []float64{0, 0.5, 0.999} {
			at := renewalPoint(got, got.Add(tc.life), j)
			left := got.Add(tc.life).Sub(at)
			if left < tc.minLeft || left > tc.maxLeft {
				t.Errorf("a %s token (jitter %.3f) is renewed %s before expiry, want %s..%s", tc.life, j, left, tc.minLeft, tc.maxLeft)
			}
		}
	}
	// A token that looks expired here (a clock far ahead of the server's)
	// still waits the floor, so the refresher cannot spin.
	for _, exp := range []time.Time{got, got.Add(-time.Hour), got.Add(100 * time.Millisecond)} {
		if at := renewalPoint(got, exp, 0.5); at.Sub(got) < minRenewWait {
			t.Errorf("a token expiring at %s is renewed after %s, under the floor %s", exp, at.Sub(got), minRenewWait)
		}
	}
	// Jitter spreads the point.
	if renewalPoint(got, got.Add(time.Hour), 0).Equal(renewalPoint(got, got.Add(time.Hour), 0.9)) {
		t.Error("jitter does not move the renewal point")
	}
}

// exchangeCounter counts the link's relay-token exchanges with the real
// server, and fails them (as a network outage would) while failing is set.
type exchangeCounter struct {
	base    http.RoundTripper
	failing atomic.Bool

	mu       sync.Mutex
	ok, fail []time.Time
}

func (c *exchangeCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path != "/api/runtime/relay-token" {
		return c.base.RoundTrip(req)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failing.Load() {
		c.fail = append(c.fail, time.Now())
		return nil, errors.New("simulated network outage")
	}
	c.ok = append(c.ok, time.Now())
	return c.base.RoundTrip(req)
}

func (c *exchangeCounter) counts() (ok, fail int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ok), len(c.fail)
}

// paired is a machine paired with a real server, its relay link running.
type paired struct {
	link   *Link
	user   servertest.User
	anchor *ecdh.PrivateKey
	creds  home.RelayCredentials
}

// pairedLink pairs a machine with a real server and runs its relay link,
// serving channels with serve.
func pairedLink(t *testing.T, s *servertest.Server, rt http.RoundTripper, log *syncbuf.Buffer, serve func(context.Context, control.FrameConn)) paired {
	t.Helper()
	ctx := context.Background()
	u := s.NewUser("renew@example.com")
	anchor, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	daemon := s.Client("")
	pc, err := daemon.MintPairingCode(ctx, sdk.PairingMachineRequest{Name: "renew-box", AnchorPublicKey: base64.StdEncoding.EncodeToString(anchor.PublicKey().Bytes())})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Client.ApprovePairingCode(ctx, pc.Code, sdk.PairingDecisionRequest{Workspace: u.Workspace}); err != nil {
		t.Fatal(err)
	}
	st, err := daemon.PairingStatus(ctx, pc.Code, pc.StatusToken)
	if err != nil || st.RelayCredentials == nil {
		t.Fatalf("collect the credential: %+v %v", st, err)
	}
	rc := st.RelayCredentials
	creds := home.RelayCredentials{
		InstallID: rc.InstallID, WorkspaceID: rc.WorkspaceID, IssueToken: rc.IssueToken,
		ServerURL: rc.ServerURL, RelayURL: rc.RelayURL, AutoUnlock: true,
	}
	l, err := New(Options{
		Credentials: creds,
		Anchor:      anchor, Serve: serve, DaemonID: "D1", Log: log,
		HTTPClient: &http.Client{Transport: rt, Timeout: 30 * time.Second},
		MinBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 20*time.Second, log, "the link to connect", func() bool { return l.Status().Link == wire.RelayConnected })
	return paired{link: l, user: u, anchor: anchor, creds: creds}
}

func waitFor(t *testing.T, within time.Duration, log *syncbuf.Buffer, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; log:\n%s", what, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With the shortest token the server issues (10 s), the link renews about
// every 6 s on one relay connection, and a renewal that fails backs off
// instead of retrying at once, then recovers.
func TestShortRelayTokensRenewAtTheirCadence(t *testing.T) {
	if testing.Short() {
		t.Skip("waits through several token lifetimes")
	}
	const ttl = 10 * time.Second
	s := servertest.Start(t, servertest.Options{RelayTokenTTL: ttl})
	counter := &exchangeCounter{base: http.DefaultTransport}
	log := &syncbuf.Buffer{}
	l := pairedLink(t, s, counter, log, ackServer).link

	// Cadence: count the exchanges over a window that spans about two
	// renewals. Renewing at 2/3 of the life (less up to a tenth of jitter)
	// means one exchange per 5.7–6.7 s; the bounds below allow a loaded
	// machine plenty of slack either way but catch both a busy loop and a
	// link that lets its token lapse.
	start := time.Now()
	first, _ := counter.counts()
	waitFor(t, 30*time.Second, log, "two renewals", func() bool { n, _ := counter.counts(); return n >= first+2 })
	elapsed := time.Since(start)
	n, _ := counter.counts()
	renewals := n - first
	if most := int(elapsed/(5*time.Second)) + 1; renewals > most {
		t.Fatalf("%d renewals in %s: renewing too often for a %s token; log:\n%s", renewals, elapsed, ttl, log.String())
	}
	if elapsed < 2*5*time.Second {
		t.Fatalf("two renewals of a %s token within %s: earlier than 2/3 of its life; log:\n%s", ttl, elapsed, log.String())
	}
	counter.mu.Lock()
	for i := 1; i < len(counter.ok); i++ {
		t.Logf("exchange %d came %s after the one before", i+1, counter.ok[i].Sub(counter.ok[i-1]).Round(time.Millisecond))
	}
	counter.mu.Unlock()
	if s := l.Status(); s.Link != wire.RelayConnected || !s.TokenExpiresAt.After(time.Now()) {
		t.Fatalf("after renewals the link is %+v", s)
	}
	if c := strings.Count(log.String(), "connected to "); c != 1 {
		t.Fatalf("renewing reconnected the link (%d connections); log:\n%s", c, log.String())
	}

	// A failing renewal backs off: from the first failure, attempts at
	// 0.1 s doubling to 2 s (jittered down to half) make at most about 7
	// in 3 s; a retry loop without backoff would make 30 or more.
	counter.failing.Store(true)
	waitFor(t, 15*time.Second, log, "a renewal to fail", func() bool { _, f := counter.counts(); return f >= 1 })
	time.Sleep(3 * time.Second)
	_, failed := counter.counts()
	t.Logf("%d renewal attempts in the 3 s after the first failure", failed)
	if failed < 3 || failed > 10 {
		t.Fatalf("%d renewal attempts in the 3 s after the first failure, want 3..10 (an exponential backoff); log:\n%s", failed, log.String())
	}
	if !strings.Contains(log.String(), "renewing the relay token failed (attempt 2): ") ||
		!strings.Contains(log.String(), "simulated network outage") {
		t.Fatalf("the failures were not logged clearly:\n%s", log.String())
	}

	counter.failing.Store(false)
	waitFor(t, 20*time.Second, log, "the renewal to recover", func() bool {
		return strings.Contains(log.String(), "renewed the relay token after ") && l.Status().Link == wire.RelayConnected &&
			l.Status().TokenExpiresAt.After(time.Now())
	})
}

// helloRecorder serves channels like ackServer and keeps the access token
// of every hello each channel receives.
type helloRecorder struct {
	mu       sync.Mutex
	channels int
	hellos   []string // access tokens, in order, of every channel
}

func (h *helloRecorder) serve(ctx context.Context, fc control.FrameConn) {
	h.mu.Lock()
	h.channels++
	h.mu.Unlock()
	if fc.WriteFrame(ctx, []byte(`{"type":"hello","protocol_version":1,"version":"test","daemon_id":"D1"}`)) != nil {
		return
	}
	for {
		f, err := fc.ReadFrame(ctx)
		if err != nil {
			return
		}
		var env struct {
			Type, ID    string
			AccessToken string `json:"access_token"`
		}
		if json.Unmarshal(f, &env) != nil {
			continue
		}
		if env.Type == "hello" {
			h.mu.Lock()
			h.hellos = append(h.hellos, env.AccessToken)
			h.mu.Unlock()
			continue
		}
		ack, _ := json.Marshal(map[string]any{"type": "ack", "id": env.ID, "ok": true, "result": json.RawMessage(f)})
		if fc.WriteFrame(ctx, ack) != nil {
			return
		}
	}
}

func (h *helloRecorder) seen() (channels int, hellos []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.channels, append([]string(nil), h.hellos...)
}

// The Go client keeps a live channel past its first access token: with
// 10-second tokens it presents fresh ones in new hellos on the same
// channel, as the web page does, instead of being closed at expiry and
// reconnecting.
func TestRemoteClientRefreshesAccessOnItsChannel(t *testing.T) {
	if testing.Short() {
		t.Skip("waits through several token lifetimes")
	}
	s := servertest.Start(t, servertest.Options{RelayTokenTTL: 10 * time.Second})
	log := &syncbuf.Buffer{}
	rec := &helloRecorder{}
	p := pairedLink(t, s, http.DefaultTransport, log, rec.serve)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := remote.Dial(ctx, remote.Options{
		RelayURL: p.creds.RelayURL, WorkspaceID: p.creds.WorkspaceID, RuntimeTargetID: p.creds.InstallID,
		Anchor: p.anchor.PublicKey().Bytes(), Token: remote.WorkspaceToken(p.user.Client, p.user.Workspace),
		Logf: func(format string, args ...any) { fmt.Fprintf(log, format+"\n", args...) },
	})
	if err != nil {
		t.Fatalf("dial: %v; log:\n%s", err, log.String())
	}
	defer c.Close()
	waitFor(t, 30*time.Second, log, "two access refreshes", func() bool { _, h := rec.seen(); return len(h) >= 3 })
	channels, hellos := rec.seen()
	if channels != 1 {
		t.Fatalf("the client reconnected instead of refreshing: %d channels; log:\n%s", channels, log.String())
	}
	seen := map[string]bool{}
	for i, tok := range hellos {
		if tok == "" || seen[tok] {
			t.Fatalf("hello %d presented an empty or repeated access token", i)
		}
		seen[tok] = true
	}
	if n := c.Refreshes(); n < 2 {
		t.Fatalf("the client counts %d refreshes", n)
	}
	// The channel still answers after the first token has expired.
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if _, err := c.Launch(rctx, wire.LaunchRequest{Directory: "/work", Prompt: "after refreshes"}); err != nil {
		t.Fatalf("request after the refreshes: %v; log:\n%s", err, log.String())
	}
}
