package relaylink

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/syncbuf"
	"reeve.dev/reeve/server/sdk/remote"
	"reeve.dev/reeve/server/servertest"
)

// refreshFaults fails the control plane's relay-token answers to a
// remote client, as many times as told: a network error, then a 503.
type refreshFaults struct {
	base http.RoundTripper

	mu             sync.Mutex
	armed          bool
	failures, left int
}

func (f *refreshFaults) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(req.URL.Path, "/relay-token") {
		return f.base.RoundTrip(req)
	}
	f.mu.Lock()
	fail := f.armed && f.left > 0
	if fail {
		f.left--
		f.failures++
	}
	n := f.failures
	f.mu.Unlock()
	switch {
	case fail && n%2 == 1:
		return nil, errors.New("simulated network outage")
	case fail:
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Header: http.Header{"Content-Type": {"application/json"}},
			Body: http.NoBody, Request: req}, nil
	}
	return f.base.RoundTrip(req)
}

func (f *refreshFaults) arm(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed, f.left = true, n
}

func (f *refreshFaults) failed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failures
}

// dialAsMember pairs a machine, adds a member to its workspace and dials
// the machine as that member with 10-second tokens, the member's HTTP
// going through rt.
func dialAsMember(t *testing.T, rt http.RoundTripper) (*remote.Client, paired, servertest.User, *servertest.Server, *syncbuf.Buffer, *helloRecorder) {
	t.Helper()
	s := servertest.Start(t, servertest.Options{RelayTokenTTL: 10 * time.Second})
	log := &syncbuf.Buffer{}
	rec := &helloRecorder{}
	p := pairedLink(t, s, http.DefaultTransport, log, rec.serve)
	m := s.AddMember(p.user.Workspace, "member@example.com", "member")
	m.Client.HTTP = &http.Client{Transport: rt, Timeout: 30 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := remote.Dial(ctx, remote.Options{
		RelayURL: p.creds.RelayURL, WorkspaceID: p.creds.WorkspaceID, RuntimeTargetID: p.creds.InstallID,
		Anchor: p.anchor.PublicKey().Bytes(), Token: remote.WorkspaceToken(m.Client, m.Workspace),
		MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second,
		Logf: func(format string, args ...any) { fmt.Fprintf(log, format+"\n", args...) },
	})
	if err != nil {
		t.Fatalf("dial: %v; log:\n%s", err, log.String())
	}
	t.Cleanup(func() { c.Close() })
	return c, p, m, s, log, rec
}

// A member removed from the workspace while their client is connected:
// the next refresh is refused (403), and the client stops there, before
// its token would have run out, with an error that says to sign in
// again, instead of retrying until the daemon closes the channel. A
// request after it fails with the same error at once.
func TestRemoteClientStopsWhenRefreshIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a token refresh")
	}
	c, p, m, _, log, rec := dialAsMember(t, http.DefaultTransport)
	if err := p.user.Client.RemoveMember(context.Background(), p.user.Workspace, m.ID); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	waitFor(t, 15*time.Second, log, "the client to end", func() bool { return c.Err() != nil })
	if err := c.Err(); !errors.Is(err, remote.ErrSignInAgain) || !strings.Contains(err.Error(), "sign in again") {
		t.Fatalf("the client ended with %v; log:\n%s", err, log.String())
	}
	if waited := time.Since(removed); waited > 9*time.Second {
		t.Errorf("the client ended %s after the removal: later than a refresh of a 10 s token", waited)
	}
	if strings.Count(log.String(), "trying again") > 0 {
		t.Errorf("a refused refresh was retried; log:\n%s", log.String())
	}
	if channels, _ := rec.seen(); channels != 1 {
		t.Errorf("the client dialled again after the refusal: %d channels", channels)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Launch(ctx, wire.LaunchRequest{Directory: "/work", Prompt: "after removal"}); !errors.Is(err, remote.ErrSignInAgain) {
		t.Fatalf("request after the refusal: %v", err)
	}
	// Dialling again with the same credentials is refused at once.
	began := time.Now()
	_, err := remote.Dial(ctx, remote.Options{
		RelayURL: p.creds.RelayURL, WorkspaceID: p.creds.WorkspaceID, RuntimeTargetID: p.creds.InstallID,
		Anchor: p.anchor.PublicKey().Bytes(), Token: remote.WorkspaceToken(m.Client, m.Workspace),
	})
	if !errors.Is(err, remote.ErrSignInAgain) || time.Since(began) > 3*time.Second {
		t.Fatalf("a new dial after the removal: %v after %s", err, time.Since(began))
	}
}

// Transient failures of the refresh (the network, a 503) are tried again
// with backoff, and the channel lives on with the next token.
func TestRemoteClientRetriesTransientRefreshFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for token refreshes")
	}
	faults := &refreshFaults{base: http.DefaultTransport}
	c, _, _, _, log, rec := dialAsMember(t, faults)
	faults.arm(2)
	waitFor(t, 25*time.Second, log, "a refresh after two failures", func() bool { return c.Refreshes() >= 1 })
	if n := faults.failed(); n != 2 {
		t.Fatalf("%d failed refreshes, want 2", n)
	}
	if got := strings.Count(log.String(), "trying again"); got != 2 {
		t.Errorf("%d retries logged, want 2; log:\n%s", got, log.String())
	}
	if err := c.Err(); err != nil {
		t.Fatalf("the client ended: %v", err)
	}
	if channels, _ := rec.seen(); channels != 1 {
		t.Errorf("the client reconnected instead of refreshing: %d channels; log:\n%s", channels, log.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Launch(ctx, wire.LaunchRequest{Directory: "/work", Prompt: "after the outage"}); err != nil {
		t.Fatalf("request after the outage: %v; log:\n%s", err, log.String())
	}
}
