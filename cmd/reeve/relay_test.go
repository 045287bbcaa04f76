package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/relay"
	"reeve.dev/reeve/server/sdk"
)

// relayProc is a running reeve process whose stderr is collected.
type relayProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	stdout bytes.Buffer
}

func (p *relayProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String() + p.stderr.String()
}

// startReady starts reeve with args and returns once a stderr line
// contains marker, with the text after it up to the next space.
func startReady(t *testing.T, env []string, marker string, args ...string) (*relayProc, string) {
	t.Helper()
	p := &relayProc{cmd: exec.Command(reeveBin, args...)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout = &lockedWriter{mu: &p.mu, w: &p.stdout}
	errPipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
			<-done
		}
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if i := strings.Index(line, marker); i >= 0 {
				rest := line[i+len(marker):]
				if j := strings.IndexByte(rest, ' '); j >= 0 {
					rest = rest[:j]
				}
				select {
				case found <- rest:
				default:
				}
			}
		}
	}()
	select {
	case v := <-found:
		return p, v
	case <-time.After(60 * time.Second):
		t.Fatalf("reeve %v never said %q:\n%s", args, marker, p.output())
	}
	return nil, ""
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func reeveOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(reeveBin, args...).Output()
	if err != nil {
		t.Fatalf("reeve %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

func relayDial(t *testing.T, base, role, ws, rt, tok string) *websocket.Conn {
	t.Helper()
	u, err := sdk.RelayWSURL(base, role, ws, rt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	if err != nil {
		t.Fatalf("dial %s as %s: %v", base, role, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func relayRead(t *testing.T, c *websocket.Conn) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return b
}

func relayWrite(t *testing.T, c *websocket.Conn, s string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// A `reeve server` (with its embedded relay) and a second `reeve relay`
// process: a daemon on the server's relay and a client on the other
// process meet through presence and the bus, and the relay forwards
// payloads it could not even decode.
func TestRelayProcessesRouteThroughPresenceAndBus(t *testing.T) {
	dir := t.TempDir()
	data, serverURL, user, ws := ownedServer(t, "ops@example.com")
	ctx := context.Background()
	in, err := user.CreateInstall(ctx, ws, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	daemonJWT, err := (&sdk.Client{BaseURL: serverURL, Token: in.IssueToken}).RuntimeRelayToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var clientJWT sdk.RelayTokenResponse
	if _, err := user.Do(ctx, http.MethodPost, "/api/workspaces/"+ws+"/relay-token", map[string]any{}, &clientJWT); err != nil {
		t.Fatal(err)
	}

	cred := reeveOut(t, "server", "relay-credential", "--data-dir", data)
	if !strings.HasPrefix(cred, "rvr_") {
		t.Fatalf("relay credential %q", cred)
	}
	// A wrong credential fails at start, exit 6, without echoing it.
	bad := exec.Command(reeveBin, "relay", "--listen", "127.0.0.1:0", "--server", serverURL)
	bad.Env = append(os.Environ(), "REEVE_RELAY_CREDENTIAL=rvr_wrongwrongwrong")
	out, err := bad.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 6 || strings.Contains(string(out), "wrongwrong") {
		t.Fatalf("a wrong credential: %v\n%s", err, out)
	}

	credFile := filepath.Join(dir, "relay-credential")
	if err := os.WriteFile(credFile, []byte(cred+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	second, addr := startReady(t, nil, "reeve relay listening on ", "relay", "--listen", "127.0.0.1:0", "--server", serverURL, "--credential-file", credFile)
	relayURL := "http://" + addr

	// A forged JWT is refused by the relay process with 401.
	u, _ := sdk.RelayWSURL(relayURL, relay.RoleClient, ws, in.ID)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, resp, err := websocket.Dial(cctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer eyJhbGciOiJIUzI1NiJ9.e30.bm9wZQ"}}})
	cancel()
	if err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("a forged JWT on the relay process: %v", err)
	}

	d := relayDial(t, serverURL, relay.RoleDaemon, ws, in.ID, daemonJWT.Token)
	c := relayDial(t, relayURL, relay.RoleClient, ws, in.ID, clientJWT.Data.Token)
	var open relay.Envelope
	if err := json.Unmarshal(relayRead(t, d), &open); err != nil || open.Type != relay.TypeOpen {
		t.Fatalf("daemon got %+v (%v)", open, err)
	}
	const notBase64 = `"*** plainly not base64 ***"`
	for i := range 20 {
		relayWrite(t, c, fmt.Sprintf(`{"t":"data","p":%s}`, notBase64))
		if got, want := string(relayRead(t, d)), fmt.Sprintf(`{"t":"data","ch":"%s","p":%s}`, open.Channel, notBase64); got != want {
			t.Fatalf("frame %d: daemon got %s, want %s", i, got, want)
		}
		relayWrite(t, d, fmt.Sprintf(`{"t":"data","ch":"%s","p":"reply %d"}`, open.Channel, i))
		if got := string(relayRead(t, c)); got != fmt.Sprintf(`{"t":"data","p":"reply %d"}`, i) {
			t.Fatalf("frame %d: client got %s", i, got)
		}
	}
	// The second relay's /metrics, in the Prometheus text format.
	mresp, err := http.Get(relayURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(mresp.Body)
	mresp.Body.Close()
	if err != nil {
		t.Fatalf("the relay's /metrics: %v", err)
	}
	metric := func(name, label string) float64 {
		for _, m := range fams[name].GetMetric() {
			if len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() == label {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
		t.Fatalf("the relay's /metrics has no %s %s", name, label)
		return 0
	}
	if metric("reeve_relay_connections", "client") != 1 || metric("reeve_relay_remote_channels_opened_total", "") != 1 ||
		metric("reeve_relay_bus_messages_total", "out") < 20 || metric("reeve_relay_bus_messages_total", "in") < 20 {
		t.Fatalf("second relay's metrics %v", fams)
	}
	if strings.Contains(second.output(), cred) {
		t.Fatalf("reeve relay printed its credential")
	}
}

// ownedServer starts `reeve server` on a fresh data directory, with the
// extra flags given, and an owner with a token, and returns the server's
// origin, the owner's client and the owner's workspace.
func ownedServer(t *testing.T, email string, flags ...string) (data, serverURL string, user *sdk.Client, workspace string) {
	t.Helper()
	data = filepath.Join(t.TempDir(), "server")
	_, serverURL = startReady(t, nil, "(API ", append([]string{"server", "--listen", "127.0.0.1:0", "--data-dir", data}, flags...)...)
	serverURL = strings.TrimSuffix(serverURL, "/api)")
	user = operatorClient(t, data, serverURL, email)
	wss, err := user.ListWorkspaces(context.Background())
	if err != nil || len(wss) == 0 {
		t.Fatalf("workspaces: %v %v", wss, err)
	}
	return data, serverURL, user, wss[0].ID
}

// operatorClient is an API client of email (created when new) with a
// token the operator minted on the server's data directory.
func operatorClient(t *testing.T, data, serverURL, email string) *sdk.Client {
	t.Helper()
	var tok struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(reeveOut(t, "server", "token", "create", "--data-dir", data, "--user", email, "--json")), &tok); err != nil {
		t.Fatal(err)
	}
	return &sdk.Client{BaseURL: serverURL, Token: tok.Token}
}

// pairToServer pairs the home's daemon with the server's workspace, with
// auto-unlock, approved by user, and returns once the daemon, restarted
// into the relay profile, holds its relay link.
func pairToServer(t *testing.T, ctx context.Context, h *daemonHome, user *sdk.Client, serverURL, ws string) home.RelayCredentials {
	t.Helper()
	p, code := h.startPair("--server", serverURL, "--auto-unlock")
	if _, err := user.ApprovePairingCode(ctx, code, sdk.PairingDecisionRequest{Workspace: ws}); err != nil {
		t.Fatal(err)
	}
	if c, out, errs := p.wait(t); c != 0 {
		t.Fatalf("reeve pair: exit %d\n%s\n%s", c, out, errs)
	}
	creds := h.relayCredentials()
	local, _, err := controlclient.FromHome(home.Dir(h.dir), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the relay link", 60*time.Second, func() bool {
		hl, err := local.Health(ctx)
		return err == nil && hl.Relay != nil && hl.Relay.Link == wire.RelayConnected
	})
	return creds
}
