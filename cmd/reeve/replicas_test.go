package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store/storetest"
)

// Two `reeve server` replicas on one PostgreSQL database, each with its
// embedded relay instance. 200 daemons each keep a session log that grows
// by a frame every frameEvery; each daemon's client, on the other
// replica's relay, follows the log: on every (re)connection it asks for
// the frames after the last one it holds, as the pages do with a session
// log. One replica is killed (SIGKILL) while they stream and started
// again; daemons and clients reconnect to whichever replica answers.
// Every client must end with every frame of its log exactly once, in
// order.
func TestRelayReplicaKilledMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("long: 200 daemon/client pairs across two server processes")
	}
	const (
		pairs      = 200
		frames     = 100
		frameEvery = 50 * time.Millisecond
	)
	pg := storetest.PostgresURL(t)
	dir := filepath.Join(t.TempDir(), "data")
	reps := []*replica{newReplica(t, pg, dir), newReplica(t, pg, dir)}
	for _, r := range reps {
		r.start(t)
	}
	t.Cleanup(func() {
		for _, r := range reps {
			r.kill()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// An owner's token (the operator path), a workspace with 200 machines,
	// the daemons' and the client's relay JWTs.
	out, err := exec.Command(reeveBin, "server", "token", "create", "--database-url", pg, "--data-dir", dir, "--user", "ops@example.com").Output()
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	owner := &sdk.Client{BaseURL: reps[0].url(), Token: strings.TrimSpace(string(out)), HTTP: &http.Client{Timeout: 30 * time.Second}}
	wss, err := owner.ListWorkspaces(ctx)
	if err != nil || len(wss) == 0 {
		t.Fatalf("workspaces: %v %v", wss, err)
	}
	ws := wss[0].ID
	var clientTok sdk.RelayTokenResponse
	if _, err := owner.Do(ctx, http.MethodPost, "/api/workspaces/"+ws+"/relay-token", map[string]any{}, &clientTok); err != nil {
		t.Fatal(err)
	}
	type machine struct{ id, token string }
	machines := make([]machine, pairs)
	for i := range machines {
		in, err := owner.CreateInstall(ctx, ws, fmt.Sprintf("m%03d", i))
		if err != nil {
			t.Fatal(err)
		}
		rt, err := (&sdk.Client{BaseURL: reps[i%2].url(), Token: in.IssueToken, HTTP: owner.HTTP}).RuntimeRelayToken(ctx)
		if err != nil {
			t.Fatal(err)
		}
		machines[i] = machine{in.ID, rt.Token}
	}

	var (
		received   atomic.Int64 // frames clients accepted
		reconnects atomic.Int64 // client connections after the first
		wg         sync.WaitGroup
		failMu     sync.Mutex
		failure    string
	)
	fail := func(format string, args ...any) {
		failMu.Lock()
		defer failMu.Unlock()
		if failure == "" {
			failure = fmt.Sprintf(format, args...)
			cancel()
		}
	}
	start := time.Now()
	for i, m := range machines {
		log := &sessionLog{name: m.id, start: start, every: frameEvery, n: frames}
		dURL := func(r int) string { return relayURL(t, reps[r].url(), "workspace-daemon", ws, m.id) }
		cURL := func(r int) string { return relayURL(t, reps[r].url(), "client", ws, m.id) }
		dctx, dcancel := context.WithCancel(ctx)
		go runDaemon(dctx, dURL, i%2, m.token, log)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer dcancel()
			got, err := runClient(ctx, cURL, (i+1)%2, clientTok.Data.Token, m.id, frames, &received, &reconnects)
			if err != nil {
				fail("pair %d: %v", i, err)
			} else if got != frames {
				fail("pair %d: %d frames", i, got)
			}
		}()
	}

	// Kill replica 0 while the logs stream, once a fifth has arrived.
	for received.Load() < pairs*frames/5 {
		if ctx.Err() != nil {
			t.Fatalf("streams did not start: %d frames; %s", received.Load(), failure)
		}
		time.Sleep(10 * time.Millisecond)
	}
	atKill := received.Load()
	reps[0].kill()
	time.Sleep(time.Second)
	reps[0].start(t)
	wg.Wait()
	if failure != "" {
		t.Fatal(failure)
	}
	if got := received.Load(); got != pairs*frames {
		t.Fatalf("%d frames received, want %d", got, pairs*frames)
	}
	if reconnects.Load() == 0 {
		t.Fatal("no client had to reconnect: the kill hit no stream")
	}
	t.Logf("reconnection causes: %v", clientEnds)
	t.Logf("%d pairs, %d frames each; replica killed after %d frames; %d client reconnections; %v in all",
		pairs, frames, atKill, reconnects.Load(), time.Since(start).Round(time.Millisecond))
}

// replica is one `reeve server` process on a fixed port.
type replica struct {
	pg, dir string
	port    int
	cmd     *exec.Cmd
	done    chan struct{}
}

func newReplica(t *testing.T, pg, dir string) *replica {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return &replica{pg: pg, dir: dir, port: port}
}

func (r *replica) url() string { return "http://127.0.0.1:" + strconv.Itoa(r.port) }

func (r *replica) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(reeveBin, "server", "--listen", "127.0.0.1:"+strconv.Itoa(r.port), "--database-url", r.pg,
		"--data-dir", r.dir, "--public-url", "http://replicas.test")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.cmd, r.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(r.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := http.Get(r.url() + "/api/health")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica on %d did not become healthy: %v", r.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill ends the process at once, as a crash would.
func (r *replica) kill() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
	r.cmd = nil
}

func relayURL(t *testing.T, base, role, ws, target string) string {
	u, err := sdk.RelayWSURL(base, role, ws, target)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// sessionLog is a daemon's log: frame k (1-based) exists from
// start+k*every.
type sessionLog struct {
	name  string
	start time.Time
	every time.Duration
	n     int
}

func (l *sessionLog) at(k int) time.Time { return l.start.Add(time.Duration(k) * l.every) }

type envelope struct {
	Type    string `json:"t"`
	Channel string `json:"ch,omitempty"`
	Payload string `json:"p,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

func dialRelay(ctx context.Context, url, token string) (*websocket.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	return c, err
}

func writeEnv(ctx context.Context, c *websocket.Conn, e envelope) error {
	b, _ := json.Marshal(e)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.Write(wctx, websocket.MessageText, b)
}

// runDaemon keeps a daemon connection up (starting on replica first, then
// whichever answers) and serves each channel the frames its client asks
// for: after "from:N", frames N+1… as they come to exist.
func runDaemon(ctx context.Context, url func(int) string, first int, token string, log *sessionLog) {
	r := first
	for ctx.Err() == nil {
		c, err := dialRelay(ctx, url(r), token)
		if err != nil {
			r = 1 - r
			time.Sleep(100 * time.Millisecond)
			continue
		}
		serveDaemon(ctx, c, log)
		c.CloseNow()
		r = 1 - r // the relay went away or refused: try the other replica
	}
}

func serveDaemon(ctx context.Context, c *websocket.Conn, log *sessionLog) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex // one writer at a time
	streams := map[string]context.CancelFunc{}
	defer func() {
		for _, stop := range streams {
			stop()
		}
	}()
	for {
		_, b, err := c.Read(cctx)
		if err != nil {
			return
		}
		var e envelope
		if json.Unmarshal(b, &e) != nil {
			return
		}
		switch e.Type {
		case "data":
			from, err := strconv.Atoi(strings.TrimPrefix(e.Payload, "from:"))
			if err != nil || streams[e.Channel] != nil {
				continue
			}
			sctx, stop := context.WithCancel(cctx)
			streams[e.Channel] = stop
			go func(ch string) {
				for k := from + 1; k <= log.n; k++ {
					if d := time.Until(log.at(k)); d > 0 {
						select {
						case <-time.After(d):
						case <-sctx.Done():
							return
						}
					}
					mu.Lock()
					err := writeEnv(sctx, c, envelope{Type: "data", Channel: ch, Payload: "seq:" + strconv.Itoa(k) + ":" + log.name})
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}(e.Channel)
		case "close", "error":
			if stop := streams[e.Channel]; stop != nil {
				stop()
				delete(streams, e.Channel)
			}
		}
	}
}

// runClient follows a daemon's log until it holds all n frames, each
// exactly once and in order, reconnecting (to the first replica, then
// whichever answers) when its channel ends or stays silent.
var (
	clientEndsMu sync.Mutex
	clientEnds   = map[string]int{}
)

func runClient(ctx context.Context, url func(int) string, first int, token, log string, n int, received, reconnects *atomic.Int64) (int, error) {
	last, r, tries := 0, first, 0
	for last < n {
		if ctx.Err() != nil {
			return last, fmt.Errorf("gave up at frame %d: %v", last, ctx.Err())
		}
		if tries > 0 {
			reconnects.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
		tries++
		c, err := dialRelay(ctx, url(r), token)
		if err != nil {
			clientEndsMu.Lock()
			clientEnds["dial"]++
			clientEndsMu.Unlock()
			r = 1 - r
			continue
		}
		if err := writeEnv(ctx, c, envelope{Type: "data", Payload: "from:" + strconv.Itoa(last)}); err != nil {
			c.CloseNow()
			r = 1 - r
			continue
		}
		for last < n {
			// A channel to a daemon connection that died with its replica
			// says nothing: silence is the end of it.
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, b, err := c.Read(rctx)
			cancel()
			if err != nil {
				clientEndsMu.Lock()
				clientEnds[fmt.Sprint("read: ", websocket.CloseStatus(err), rctx.Err())]++
				clientEndsMu.Unlock()
				break
			}
			var e envelope
			if err := json.Unmarshal(b, &e); err != nil {
				c.CloseNow()
				return last, fmt.Errorf("bad envelope %q", b)
			}
			if e.Type != "data" {
				clientEndsMu.Lock()
				clientEnds[e.Type+": "+e.Reason]++
				clientEndsMu.Unlock()
				break // the channel ended; reconnect
			}
			seq, name, _ := strings.Cut(strings.TrimPrefix(e.Payload, "seq:"), ":")
			k, err := strconv.Atoi(seq)
			if err != nil || k != last+1 || name != log {
				c.CloseNow()
				return last, fmt.Errorf("after frame %d got %q: lost or duplicated", last, e.Payload)
			}
			last = k
			received.Add(1)
		}
		c.CloseNow()
	}
	return last, nil
}
