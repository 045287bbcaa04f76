package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/server/sdk"
)

// pairProc is `reeve pair` running in the background, as a person leaves it
// while they approve in the browser.
type pairProc struct {
	mu          sync.Mutex
	stdout, err bytes.Buffer
	done        chan int
}

func (p *pairProc) streams() (string, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String(), p.err.String()
}

var approveAt = regexp.MustCompile(`approve it at (\S+)/pair\?code=([A-Z0-9]{8})`)

// startPair runs reeve pair for the home and returns once it printed the
// approval URL, with the code in it.
func (h *daemonHome) startPair(args ...string) (*pairProc, string) {
	h.t.Helper()
	p := &pairProc{done: make(chan int, 1)}
	cmd := exec.Command(reeveBin, append([]string{"pair", "--no-browser"}, args...)...)
	cmd.Env = append(h.baseEnv(), "REEVE_HOME="+h.dir)
	cmd.Stdout = &lockedWriter{mu: &p.mu, w: &p.stdout}
	cmd.Stderr = &lockedWriter{mu: &p.mu, w: &p.err}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	go func() {
		err := cmd.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		p.done <- code
	}()
	h.t.Cleanup(func() { cmd.Process.Kill() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, errs := p.streams()
		if m := approveAt.FindStringSubmatch(errs); m != nil {
			return p, m[2]
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("reeve pair printed no approval URL:\n%s", errs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *pairProc) wait(t *testing.T) (int, string, string) {
	t.Helper()
	select {
	case c := <-p.done:
		out, errs := p.streams()
		return c, out, errs
	case <-time.After(60 * time.Second):
		_, errs := p.streams()
		t.Fatalf("reeve pair did not finish:\n%s", errs)
	}
	return 0, "", ""
}

func (h *daemonHome) relayCredentials() home.RelayCredentials {
	h.t.Helper()
	info, err := os.Stat(h.file("relay.json"))
	if err != nil {
		h.t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		h.t.Fatalf("relay.json has mode %04o, want 0600", info.Mode().Perm())
	}
	rc, err := home.Dir(h.dir).ReadRelayCredentials()
	if err != nil {
		h.t.Fatal(err)
	}
	return rc
}

// Both initiations through the built binaries, against a `reeve server`
// process: the credential is kept at 0600 and printed nowhere, a second
// approval of the same machine retires the first install, a detached
// install is refused at once, and expired or reused codes are refused.
func TestPairThroughTheBinary(t *testing.T) {
	_, serverURL, user, ws := ownedServer(t, "owner@example.com")
	ctx := context.Background()

	h := newHome(t)
	h.start()
	before, _ := h.status()
	fingerprint := strings.TrimSpace(h.must("pair", "anchor").stdout)

	// Daemon-minted: the daemon mints, the user approves (here through the
	// API, as the page does).
	p, code := h.startPair("--server", serverURL, "--no-auto-unlock")
	shown, err := user.GetPairingCode(ctx, code)
	if err != nil || shown.Machine == nil || shown.Machine.AnchorFingerprint != fingerprint {
		t.Fatalf("the approval page would show %+v %v; pair anchor says %s", shown.Machine, err, fingerprint)
	}
	if _, err := user.ApprovePairingCode(ctx, code, sdk.PairingDecisionRequest{Workspace: ws}); err != nil {
		t.Fatal(err)
	}
	c, out, errs := p.wait(t)
	if c != 0 {
		t.Fatalf("reeve pair: exit %d\n%s\n%s", c, out, errs)
	}
	first := h.relayCredentials()
	if first.WorkspaceID != ws || first.ServerURL != serverURL || first.RelayURL == "" || first.AppURL != serverURL ||
		first.AutoUnlock || first.AutoUnlockTTL != 1800 || first.Transport != "relay" || !strings.HasPrefix(first.IssueToken, "rvi_") {
		t.Fatalf("credentials %+v", first)
	}
	if strings.Contains(out+errs, "rvi_") || strings.Contains(h.readLog(), first.IssueToken) {
		t.Fatalf("the issue token was printed:\n%s\n%s", out, errs)
	}
	// The running daemon was restarted to pick the credentials up.
	after, _ := h.status()
	if after.State != "running" || after.Lifecycle.SupervisorPID == before.Lifecycle.SupervisorPID || !strings.Contains(errs, "restarting the daemon") {
		t.Fatalf("daemon not restarted: before %+v after %+v\n%s", before.Lifecycle, after.Lifecycle, errs)
	}
	daemon := &sdk.Client{BaseURL: serverURL, Token: first.IssueToken}
	firstJWT, err := daemon.RuntimeRelayToken(ctx)
	if err != nil {
		t.Fatalf("the saved credential: %v", err)
	}
	var doc struct {
		Relay struct {
			State, Credential, InstallID string
		} `json:"relay"`
	}
	if err := json.Unmarshal([]byte(h.must("doctor", "--json").stdout), &doc); err != nil || doc.Relay.State != "paired" || doc.Relay.Credential != "accepted" {
		t.Fatalf("doctor: %+v %v", doc, err)
	}

	// Browser-minted: the user mints, the daemon claims with the code. The
	// same machine again, so the first install is retired.
	minted, err := user.CreateWorkspacePairingCode(ctx, ws, sdk.WorkspacePairingCodeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p, code = h.startPair(strings.ToLower(minted.Code[:4]+"-"+minted.Code[4:]), "--server", serverURL, "--auto-unlock", "--auto-unlock-ttl", "10")
	if code != minted.Code {
		t.Fatalf("claimed %s, minted %s", code, minted.Code)
	}
	if _, err := user.ApprovePairingCode(ctx, code, sdk.PairingDecisionRequest{}); err != nil {
		t.Fatal(err)
	}
	if c, out, errs := p.wait(t); c != 0 || strings.Contains(out+errs, "rvi_") {
		t.Fatalf("reeve pair CODE: exit %d\n%s\n%s", c, out, errs)
	}
	second := h.relayCredentials()
	if second.InstallID == first.InstallID || !second.AutoUnlock || second.AutoUnlockTTL != 300 {
		t.Fatalf("second credentials %+v (TTL 10 must clamp to 300)", second)
	}
	retired, err := (&sdk.Client{BaseURL: serverURL, Token: first.IssueToken}).RuntimeRelayToken(ctx)
	if !sdk.IsCode(err, sdk.CodeUnauthenticated) {
		t.Fatalf("the retired install still gets relay tokens: %+v %v", retired, err)
	}
	validate := map[string]any{"workspace_id": ws, "role": "workspace-daemon"}
	if _, err := (&sdk.Client{BaseURL: serverURL, Token: firstJWT.Token}).Do(ctx, "POST", "/api/runtime/internal/relay/validate", validate, nil); !sdk.IsCode(err, sdk.CodeUnauthenticated) {
		t.Fatalf("the retired install's JWT validates: %v", err)
	}
	list, err := user.ListInstalls(ctx, ws)
	if err != nil || len(list) != 1 || list[0].ID != second.InstallID || list[0].AnchorFingerprint != fingerprint {
		t.Fatalf("installs after re-pairing: %+v %v", list, err)
	}

	// Detach: refused at once, issue token and JWT alike.
	daemon2 := &sdk.Client{BaseURL: serverURL, Token: second.IssueToken}
	jwt2, err := daemon2.RuntimeRelayToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := user.DetachInstall(ctx, ws, second.InstallID); err != nil {
		t.Fatal(err)
	}
	if _, err := daemon2.Do(ctx, "POST", "/api/runtime/relay-token", map[string]any{}, nil); err == nil || err.(*sdk.APIError).Status != 401 {
		t.Fatalf("detached install's relay-token exchange: %v", err)
	}
	if _, err := (&sdk.Client{BaseURL: serverURL, Token: jwt2.Token}).Do(ctx, "POST", "/api/runtime/internal/relay/validate", validate, nil); err == nil || err.(*sdk.APIError).Status != 401 {
		t.Fatalf("detached install's JWT: %v", err)
	}
	if r := h.run("doctor"); r.code != 1 || !strings.Contains(r.stdout, "credential refused") {
		t.Fatalf("doctor after detach: exit %d\n%s", r.code, r.stdout)
	}

	// A reused code and an expired one are refused with their own codes.
	if r := h.run("pair", "--no-browser", "--server", serverURL, minted.Code); r.code != 5 || !strings.Contains(r.stderr, "single-use") {
		t.Fatalf("reused code: exit %d\n%s", r.code, r.stderr)
	}
	short, err := user.CreateWorkspacePairingCode(ctx, ws, sdk.WorkspacePairingCodeRequest{ExpiresInSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if r := h.run("pair", "--no-browser", "--server", serverURL, short.Code); r.code != 7 || !strings.Contains(r.stderr, "expired") {
		t.Fatalf("expired code: exit %d\n%s", r.code, r.stderr)
	}
	if r := h.run("pair", "--no-browser", "--server", serverURL, "ZZZZZZZZ"); r.code != 4 {
		t.Fatalf("unknown code: exit %d\n%s", r.code, r.stderr)
	}
	// The failed attempts changed nothing on disk.
	if now := h.relayCredentials(); now.InstallID != second.InstallID {
		t.Fatalf("a refused pairing rewrote the credentials: %+v", now)
	}
}
