package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/daemon/wireclient"
	"reeve.dev/reeve/server/relay"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/e2e"
	"reeve.dev/reeve/server/sdk/remote"
	"reeve.dev/reeve/server/sdk/remote/remotetest"
)

// controlServer is a `reeve server` process.
type controlServer struct {
	url string
	cmd *exec.Cmd
}

// startControlServer runs `reeve server` on a free loopback port with its
// data in dir, advertising relayURL, and waits until it listens.
func startControlServer(t *testing.T, dir, relayURL string) *controlServer {
	t.Helper()
	cmd := exec.Command(reeveBin, "server", "--listen", "127.0.0.1:0", "--data-dir", dir, "--relay-url", relayURL)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if i := strings.Index(line, "(API "); i >= 0 && strings.HasSuffix(line, "/api)") {
				urls <- strings.TrimSuffix(line[i+len("(API "):], "/api)")
			}
		}
	}()
	select {
	case u := <-urls:
		return &controlServer{url: u, cmd: cmd}
	case <-time.After(60 * time.Second):
		t.Fatal("reeve server did not start listening")
	}
	return nil
}

// pairThroughAPI pairs the daemon home with the control plane the way
// `reeve pair` does — mint a code with the anchor, the user approves, the
// daemon's poll receives the credentials — and writes them to the home.
func pairThroughAPI(t *testing.T, ctx context.Context, dir home.Dir, serverURL string, user *sdk.Client, workspace string, autoUnlock bool) home.RelayCredentials {
	t.Helper()
	if err := dir.Prepare(); err != nil {
		t.Fatal(err)
	}
	anchor, err := dir.EnsureAnchor()
	if err != nil {
		t.Fatal(err)
	}
	daemon := &sdk.Client{BaseURL: serverURL}
	code, err := daemon.MintPairingCode(ctx, sdk.PairingMachineRequest{Name: "remote-test-machine", AnchorPublicKey: base64.StdEncoding.EncodeToString(anchor.PublicKey().Bytes()), Transport: "relay"})
	if err != nil {
		t.Fatalf("mint pairing code: %v", err)
	}
	if _, err := user.ApprovePairingCode(ctx, code.Code, sdk.PairingDecisionRequest{Workspace: workspace}); err != nil {
		t.Fatalf("approve: %v", err)
	}
	st, err := daemon.PairingStatus(ctx, code.Code, code.StatusToken)
	if err != nil || st.RelayCredentials == nil || st.RelayCredentials.IssueToken == "" {
		t.Fatalf("pairing status: %+v %v", st, err)
	}
	rc := st.RelayCredentials
	creds := home.RelayCredentials{
		InstallID: rc.InstallID, WorkspaceID: rc.WorkspaceID, IssueToken: rc.IssueToken,
		ServerURL: serverURL, RelayURL: rc.RelayURL, Transport: "relay", PairedAt: time.Now().UTC(),
		AutoUnlock: autoUnlock, AutoUnlockTTL: wire.UnlockTTLDefault,
	}
	if err := dir.WriteRelayCredentials(creds); err != nil {
		t.Fatal(err)
	}
	return creds
}

// tamper is what the test relay does to the next envelope for a side.
type tamper struct {
	mu   sync.Mutex
	to   string
	mode string // "", flip or replay
}

func (tp *tamper) set(to, mode string) {
	tp.mu.Lock()
	tp.to, tp.mode = to, mode
	tp.mu.Unlock()
}

func (tp *tamper) intercept(to string, env relay.Envelope) []relay.Envelope {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.mode == "" || to != tp.to || env.Type != relay.TypeData {
		return []relay.Envelope{env}
	}
	mode := tp.mode
	tp.mode = ""
	if mode == "replay" {
		return []relay.Envelope{env, env}
	}
	p, _ := base64.StdEncoding.DecodeString(env.Payload)
	p[len(p)/2] ^= 0x04
	env.Payload = base64.StdEncoding.EncodeToString(p)
	return []relay.Envelope{env}
}

// TestRemoteControlThroughRelay drives a real daemon (profile relay) from
// the remote client library through a relay, with a real control plane
// issuing and validating the JWTs: locked by default, unlocked by `reeve
// pair unlock`, a session launched and followed across a relay outage with
// no gap and no duplicate, nothing readable on the relay, tampered and
// replayed frames and a wrong anchor refused, and auto-unlock admitting
// without an unlock.
func TestRemoteControlThroughRelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	var serverURL atomic.Value
	tp := &tamper{}
	rl, err := remotetest.Start(remotetest.Options{
		Validate: func(ctx context.Context, token, role, ws, target string) error {
			return remotetest.ServerValidate(serverURL.Load().(string))(ctx, token, role, ws, target)
		},
		Intercept: tp.intercept,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()

	data := filepath.Join(t.TempDir(), "server")
	h := newHome(t)
	tok := strings.TrimSpace(h.must("server", "token", "create", "--data-dir", data, "--user", "owner@example.com").stdout)
	srv := startControlServer(t, data, rl.URL())
	serverURL.Store(srv.url)
	user := &sdk.Client{BaseURL: srv.url, Token: tok}
	wss, err := user.ListWorkspaces(ctx)
	if err != nil || len(wss) != 1 {
		t.Fatalf("workspaces: %v %v", wss, err)
	}
	ws := wss[0].ID

	creds := pairThroughAPI(t, ctx, home.Dir(h.dir), srv.url, user, ws, false)
	if creds.RelayURL != rl.URL() {
		t.Fatalf("pairing handed relay URL %q, want the relay's %q", creds.RelayURL, rl.URL())
	}
	h.start("--profile", "relay")
	local, _, err := controlclient.FromHome(home.Dir(h.dir), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the relay link to connect", 30*time.Second, func() bool {
		hl, err := local.Health(ctx)
		return err == nil && hl.Relay != nil && hl.Relay.Link == wire.RelayConnected
	})
	hl, _ := local.Health(ctx)
	if !hl.Relay.Locked || hl.Relay.InstallID != creds.InstallID || hl.Relay.AutoUnlock {
		t.Fatalf("health relay %+v", hl.Relay)
	}

	// The approval page's fingerprint is the one the client checks.
	in, err := user.GetInstall(ctx, ws, creds.InstallID)
	if err != nil {
		t.Fatal(err)
	}
	anchor, _ := home.Dir(h.dir).ReadAnchor()
	if in.AnchorFingerprint != e2e.Fingerprint(anchor.PublicKey().Bytes()) {
		t.Fatalf("install fingerprint %q is not the daemon's anchor", in.AnchorFingerprint)
	}
	opts := remote.Options{
		RelayURL: creds.RelayURL, WorkspaceID: ws, RuntimeTargetID: creds.InstallID,
		Fingerprint: in.AnchorFingerprint, Token: remote.WorkspaceToken(user, ws),
		MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, NoReconnect: true,
		Logf: t.Logf,
	}
	dial := func(o remote.Options) (*remote.Client, error) {
		dctx, done := context.WithTimeout(ctx, 20*time.Second)
		defer done()
		c, err := remote.Dial(dctx, o)
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}

	// Locked by default: a sealed refusal from the daemon itself.
	if _, err := dial(opts); !errors.Is(err, e2e.ErrRefused) || !strings.Contains(err.Error(), "reeve pair unlock") {
		t.Fatalf("locked daemon answered: %v", err)
	}
	// A wrong anchor never gets that far.
	other, _ := ecdh.X25519().GenerateKey(rand.Reader)
	wrong := opts
	wrong.Fingerprint, wrong.Anchor = "", other.PublicKey().Bytes()
	if _, err := dial(wrong); err == nil || !strings.Contains(err.Error(), "anchor") {
		t.Fatalf("wrong anchor: %v", err)
	}
	wrong.Anchor, wrong.Fingerprint = nil, e2e.Fingerprint(other.PublicKey().Bytes())
	if _, err := dial(wrong); !errors.Is(err, e2e.ErrFingerprint) {
		t.Fatalf("wrong fingerprint: %v", err)
	}

	// Unlock on the machine (the TTL is clamped to 300 s).
	var st wire.RemoteStatus
	r := h.must("pair", "unlock", "--ttl", "10", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("pair unlock --json: %v %q", err, r.stdout)
	}
	if st.Locked || time.Until(st.UnlockedUntil) < 290*time.Second || time.Until(st.UnlockedUntil) > 301*time.Second {
		t.Fatalf("after pair unlock --ttl 10: %+v", st)
	}

	// Launch and follow a session across a relay outage.
	follow := opts
	follow.NoReconnect = false
	c, err := dial(follow)
	if err != nil {
		t.Fatalf("dial after unlock: %v", err)
	}
	if c.Hello().DaemonID != hl.DaemonID || c.Hello().ProtocolVersion != wire.ProtocolVersion {
		t.Fatalf("hello %+v", c.Hello())
	}
	const marker = "RVMARK-9c1e"
	work := t.TempDir()
	h.must("add", work)
	si, err := c.Launch(ctx, wire.LaunchRequest{Directory: work, Agent: "shell",
		Prompt: "for i in $(seq 1 300); do echo " + marker + "-$i; sleep 0.01; done"})
	if err != nil {
		t.Fatalf("remote launch: %v", err)
	}
	sub, err := c.Subscribe(ctx, si.ID, 0)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	var got []wireclient.Update
	dropped := false
	for u := range sub.Updates() {
		got = append(got, u)
		if !dropped && u.Seq >= 15 {
			dropped = true
			rl.Refuse(true)
			rl.DropAll()
			time.Sleep(300 * time.Millisecond)
			rl.Refuse(false)
		}
	}
	if !dropped {
		t.Fatalf("the stream ended after %d events, before the relay drop", len(got))
	}
	end := sub.Ended()
	if end == nil {
		t.Fatalf("subscription ended without session-ended: %v", sub.Err())
	}
	for i, u := range got {
		if u.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: a gap or a duplicate across the reconnection", i, u.Seq)
		}
	}
	if end.LastSeq != int64(len(got)) || end.Status != "completed" {
		t.Fatalf("ended %+v after %d events", end, len(got))
	}
	if c.Connections() < 2 || rl.Accepted(relay.RoleDaemon) < 2 {
		t.Fatalf("no reconnection happened: client %d connections, daemon %d", c.Connections(), rl.Accepted(relay.RoleDaemon))
	}
	// The remote follower saw exactly the durable log.
	logged := h.logEvents(si.ID)
	if len(logged) != len(got) {
		t.Fatalf("remote follower saw %d events, the log has %d", len(got), len(logged))
	}
	var text strings.Builder
	for _, u := range got {
		if u.Kind == wire.KindTerminalOutput {
			var d wire.TerminalOutput
			json.Unmarshal(u.Data, &d)
			text.WriteString(d.Text)
		}
	}
	for _, want := range []string{marker + "-1\r\n", marker + "-150\r\n", marker + "-300"} {
		if !strings.Contains(text.String(), want) {
			t.Fatalf("terminal output lacks %q", want)
		}
	}

	// Prompt and kill through the relay too.
	if err := c.Prompt(ctx, wire.PromptRequest{SessionID: si.ID, Text: "echo " + marker + "-again; sleep 30"}); err != nil {
		t.Fatalf("remote prompt: %v", err)
	}
	waitFor(t, "the second turn to run", 20*time.Second, func() bool {
		l, _, err := c.List(ctx, wire.ListRequest{Scope: "ACTIVE"})
		return err == nil && len(l.Sessions) == 1 && l.Sessions[0].ID == si.ID
	})
	if err := c.Kill(ctx, wire.KillRequest{SessionID: si.ID}); err != nil {
		t.Fatalf("remote kill: %v", err)
	}
	waitFor(t, "the session to be killed", 20*time.Second, func() bool {
		s, err := local.Session(ctx, si.ID)
		return err == nil && s.Status == "killed"
	})

	// The relay never saw plaintext: not the marker, not a frame type.
	rec := rl.Recorded()
	if len(rec) < 50 {
		t.Fatalf("the relay recorded only %d messages", len(rec))
	}
	for _, b := range rec {
		var env relay.Envelope
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatalf("relayed bytes are not an envelope: %.80q", b)
		}
		p, _ := base64.StdEncoding.DecodeString(env.Payload)
		for _, s := range [][]byte{b, p} {
			if bytes.Contains(s, []byte(marker)) || bytes.Contains(s, []byte("session-update")) || bytes.Contains(s, []byte("seq 1 300")) {
				t.Fatalf("the relay saw plaintext: %.120q", s)
			}
		}
	}

	// Tampered and replayed frames close the channel, in both directions.
	for _, tc := range []struct{ to, mode, want string }{
		{relay.RoleDaemon, "flip", "failed authentication"},
		{relay.RoleDaemon, "replay", "not the next one"},
		{relay.RoleClient, "flip", "failed authentication"},
		{relay.RoleClient, "replay", "not the next one"},
	} {
		tc2, err := dial(opts)
		if err != nil {
			t.Fatalf("%s %s: dial: %v", tc.to, tc.mode, err)
		}
		tp.set(tc.to, tc.mode)
		lctx, done := context.WithTimeout(ctx, 10*time.Second)
		tc2.List(lctx, wire.ListRequest{})
		done()
		select {
		case <-tc2.Done():
		case <-time.After(15 * time.Second):
			t.Fatalf("%s %s: the channel survived", tc.to, tc.mode)
		}
		if err := tc2.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s %s: client saw %v, want %q", tc.to, tc.mode, err, tc.want)
		}
	}
	tp.set("", "")
	logText := h.readLog()
	for _, want := range []string{"failed authentication", "not the next one", "refused a remote client: remote control is locked", "relay connection lost"} {
		if !strings.Contains(logText, want) {
			t.Fatalf("daemon log lacks %q", want)
		}
	}

	// Auto-unlock: re-paired with it on, a restarted daemon (whose manual
	// unlock is gone) admits a client without `pair unlock`, for the TTL.
	creds.AutoUnlock, creds.AutoUnlockTTL = true, 300
	if err := home.Dir(h.dir).WriteRelayCredentials(creds); err != nil {
		t.Fatal(err)
	}
	h.must("restart")
	local, _, _ = controlclient.FromHome(home.Dir(h.dir), 5*time.Second)
	waitFor(t, "the relay link to reconnect after restart", 30*time.Second, func() bool {
		hl, err := local.Health(ctx)
		return err == nil && hl.Relay != nil && hl.Relay.Link == wire.RelayConnected
	})
	hl, _ = local.Health(ctx)
	if hl.Relay.Locked || !hl.Relay.AutoUnlock || !hl.Relay.UnlockedUntil.IsZero() {
		t.Fatalf("after restart with auto-unlock: %+v", hl.Relay)
	}
	ac, err := dial(opts)
	if err != nil {
		t.Fatalf("auto-unlock dial: %v", err)
	}
	if until := time.Until(ac.Admission().Until); until < 290*time.Second || until > 301*time.Second {
		t.Fatalf("auto-unlocked for %s, want 300s", until)
	}
	if _, _, err := ac.List(ctx, wire.ListRequest{}); err != nil {
		t.Fatalf("list through auto-unlock: %v", err)
	}
}

// readLog is the daemon's log file.
func (h *daemonHome) readLog() string {
	b, _ := os.ReadFile(h.file("daemon.log"))
	return string(b)
}
