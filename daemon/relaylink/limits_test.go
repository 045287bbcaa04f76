package relaylink

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/syncbuf"
	"reeve.dev/reeve/server/relay"
	"reeve.dev/reeve/server/relay/relaywire"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/remote"
)

// openControl admits every connection for the test workspace and has no
// other instances.
type openControl struct{}

func (openControl) Validate(_ context.Context, tok string, req sdk.RelayValidateRequest) (sdk.RelayAdmission, error) {
	rt := req.RuntimeTargetID
	if rt == "" {
		rt = testInstall
	}
	return sdk.RelayAdmission{WorkspaceID: req.WorkspaceID, RuntimeTargetID: rt, Role: req.Role}, nil
}

func (openControl) Upsert(context.Context, sdk.RelayPresenceUpsertRequest) (sdk.RelayPresenceUpsertResult, error) {
	return sdk.RelayPresenceUpsertResult{}, nil
}

func (openControl) Resolve(context.Context, sdk.RelayPresenceResolveRequest) (sdk.RelayPresenceResolveResult, error) {
	return sdk.RelayPresenceResolveResult{}, nil
}

func (openControl) Publish(_ context.Context, req sdk.RelayBusPublishRequest) (sdk.RelayBusPublishResult, error) {
	return sdk.RelayBusPublishResult{Accepted: len(req.Messages)}, nil
}

func (openControl) Pull(ctx context.Context, _ sdk.RelayBusPullRequest) (sdk.RelayBusPullResult, error) {
	<-ctx.Done()
	return sdk.RelayBusPullResult{}, ctx.Err()
}

// realRelay is the daemon's link to the real relay server.
type realRelay struct {
	t      *testing.T
	relay  *relay.Relay
	url    string
	link   *Link
	anchor *ecdh.PrivateKey
	log    *syncbuf.Buffer
}

func startRealRelay(t *testing.T) *realRelay {
	t.Helper()
	rl, err := relay.New(relay.Options{Control: openControl{}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ws", rl)
	srv := httptest.NewServer(mux)
	rctx, rcancel := context.WithCancel(context.Background())
	go rl.Run(rctx)
	t.Cleanup(func() { rl.Close(); rcancel(); srv.Close() })

	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"token": "daemon-jwt", "expires_at": time.Now().Add(time.Hour)}})
	}))
	t.Cleanup(api.Close)
	r := &realRelay{t: t, relay: rl, url: srv.URL, log: &syncbuf.Buffer{}}
	if r.anchor, err = ecdh.X25519().GenerateKey(rand.Reader); err != nil {
		t.Fatal(err)
	}
	r.link, err = New(Options{
		Credentials: home.RelayCredentials{InstallID: testInstall, WorkspaceID: testWorkspace, IssueToken: issueToken,
			ServerURL: api.URL, RelayURL: srv.URL, AutoUnlock: true},
		Anchor: r.anchor, Serve: ackServer, DaemonID: "D1", Log: r.log,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.link.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(20 * time.Second)
	for rl.Metrics().DaemonConns != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the link never connected; log:\n%s", r.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r
}

func (r *realRelay) client() *remote.Client {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := remote.Dial(ctx, remote.Options{
		RelayURL: r.url, WorkspaceID: testWorkspace, RuntimeTargetID: testInstall,
		Anchor: r.anchor.PublicKey().Bytes(), Token: remote.StaticToken("client-jwt"),
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	})
	if err != nil {
		r.t.Fatalf("dial: %v\nlink log:\n%s", err, r.log.String())
	}
	r.t.Cleanup(func() { c.Close() })
	return c
}

// connections is how many times the link connected to the relay.
func (r *realRelay) connections() int { return strings.Count(r.log.String(), "connected to ") }

// A client message the daemon could not read (70 KB, 2 MB) never reaches
// it: the relay ends that client's channel alone, and the daemon's link and
// its other clients carry on. Large protocol messages cross in both
// directions, cut into end-to-end frames.
func TestOversizeClientFramesLeaveTheLinkUp(t *testing.T) {
	r := startRealRelay(t)
	good := r.client()
	launch(t, good, "before")

	u, err := remote.WSURL(r.url, relaywire.RoleClient, testWorkspace, testInstall)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{70 << 10, 2 << 20} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		ws, err := remote.DialRelay(ctx, nil, u, "client-jwt")
		if err != nil {
			t.Fatal(err)
		}
		frame := fmt.Sprintf(`{"t":"data","p":"%s"}`, strings.Repeat("A", size))
		_ = ws.Write(ctx, websocket.MessageText, []byte(frame))
		for err == nil {
			_, _, err = ws.Read(ctx)
		}
		cancel()
		if code := websocket.CloseStatus(err); code != websocket.StatusMessageTooBig {
			t.Fatalf("%d-byte frame: the sender's connection ended with %v, want 1009", size, err)
		}
		// The good client's requests still go through, on the same link.
		launch(t, good, fmt.Sprintf("after %d bytes", size))
	}
	if n := r.connections(); n != 1 {
		t.Fatalf("the link connected %d times; log:\n%s", n, r.log.String())
	}
	if s := r.link.Status(); s.Link != wire.RelayConnected {
		t.Fatalf("link status %+v", s)
	}

	// A 700 KB request and its 700 KB answer cross as many small frames.
	big := strings.Repeat("diff line\n", 70<<10)
	if si := launch(t, good, big); si.Prompt != big {
		t.Fatalf("a %d-byte request came back as %d bytes", len(big), len(si.Prompt))
	}
	// A control frame over the daemon's bound (1 MiB) ends that client's
	// channel only.
	over := r.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := over.Launch(ctx, wire.LaunchRequest{Directory: "/work", Prompt: strings.Repeat("x", 2<<20)}); err == nil {
		t.Fatal("a 2 MB control frame was accepted")
	}
	launch(t, good, "still fine")
	if n := r.connections(); n != 1 {
		t.Fatalf("the link connected %d times; log:\n%s", n, r.log.String())
	}
	if m := r.relay.Metrics(); m.DaemonConns != 1 {
		t.Fatalf("relay metrics %+v", m)
	}
}
