package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/internal/syncbuf"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/e2e"
	"reeve.dev/reeve/server/servertest"
)

var approveLine = regexp.MustCompile(`approve it at (\S+/pair\?code=([A-Z0-9]{8}))`)

// startPair runs `reeve pair` in the background and returns its streams
// and the code it prints.
func startPair(t *testing.T, args ...string) (code string, out, errb *syncbuf.Buffer, done chan int) {
	t.Helper()
	out, errb = &syncbuf.Buffer{}, &syncbuf.Buffer{}
	env := &Env{In: strings.NewReader(""), Out: out, Err: errb, Getenv: func(string) string { return "" }, Programs: testPrograms()}
	done = make(chan int, 1)
	go func() { done <- Execute(context.Background(), env, args) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := approveLine.FindStringSubmatch(errb.String()); m != nil {
			return m[2], out, errb, done
		}
		select {
		case c := <-done:
			t.Fatalf("pair exited %d early\n%s", c, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no approval URL printed:\n%s", errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wait(t *testing.T, done chan int) int {
	t.Helper()
	select {
	case c := <-done:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("pair did not finish")
		return -1
	}
}

func TestPairMintsWaitsAndKeepsTheCredential(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("owner@example.com")
	dir := home.Dir(filepath.Join(t.TempDir(), "home"))
	code, out, errb, done := startPair(t, "--home", string(dir), "pair", "--server", s.URL, "--name", "ci-box", "--no-browser", "--auto-unlock", "--auto-unlock-ttl", "99999", "--json")

	// The page would show this machine's name and anchor fingerprint.
	pc, err := u.Client.GetPairingCode(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	key, err := dir.ReadAnchor()
	if err != nil {
		t.Fatal(err)
	}
	fp := e2e.Fingerprint(key.PublicKey().Bytes())
	if pc.Machine.Name != "ci-box" || pc.Machine.AnchorFingerprint != fp || !strings.Contains(errb.String(), fp) {
		t.Fatalf("machine %+v, want fingerprint %s\n%s", pc.Machine, fp, errb.String())
	}
	if _, err := u.Client.ApprovePairingCode(context.Background(), code, sdk.PairingDecisionRequest{Workspace: u.Workspace}); err != nil {
		t.Fatal(err)
	}
	if c := wait(t, done); c != ExitOK {
		t.Fatalf("exit %d\n%s", c, errb.String())
	}
	var res pairResult
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}
	rc, err := dir.ReadRelayCredentials()
	if err != nil {
		t.Fatal(err)
	}
	info, _ := os.Stat(dir.RelayFile())
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("relay.json mode %04o", info.Mode().Perm())
	}
	if rc.InstallID != res.InstallID || rc.WorkspaceID != u.Workspace || rc.ServerURL != s.URL || rc.RelayURL != s.URL || rc.AppURL != s.URL ||
		!rc.AutoUnlock || rc.AutoUnlockTTL != 3600 || rc.Transport != "relay" || rc.Worker || !strings.HasPrefix(rc.IssueToken, "rvi_") {
		t.Fatalf("credentials %+v", rc)
	}
	// The credential is shown nowhere, and it works.
	if strings.Contains(out.String()+errb.String(), rc.IssueToken) || strings.Contains(out.String()+errb.String(), "rvi_") {
		t.Fatalf("the issue token was printed:\n%s\n%s", out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "using 3600") {
		t.Fatalf("the clamp was not reported:\n%s", errb.String())
	}
	if _, err := s.Client(rc.IssueToken).RuntimeRelayToken(context.Background()); err != nil {
		t.Fatalf("the saved credential: %v", err)
	}

	// doctor reports the pairing, and then the detachment.
	env, dout, _ := testEnv()
	if c := Execute(context.Background(), env, []string{"--home", string(dir), "doctor", "--json"}); c != ExitOK {
		t.Fatalf("doctor exit %d: %s", c, dout.String())
	}
	var rep doctorReport
	json.Unmarshal(dout.Bytes(), &rep)
	if rep.Relay.State != "paired" || rep.Relay.Credential != "accepted" || rep.Relay.InstallID != rc.InstallID || rep.Relay.ServerURL != s.URL || strings.Contains(dout.String(), "rvi_") {
		t.Fatalf("doctor relay: %+v", rep.Relay)
	}
	if err := u.Client.DetachInstall(context.Background(), u.Workspace, rc.InstallID); err != nil {
		t.Fatal(err)
	}
	env, dout, _ = testEnv()
	if c := Execute(context.Background(), env, []string{"--home", string(dir), "doctor"}); c != ExitFailure || !strings.Contains(dout.String(), "credential refused") {
		t.Fatalf("doctor after detach: exit %d\n%s", c, dout.String())
	}
	env, dout, _ = testEnv()
	Execute(context.Background(), env, []string{"--home", string(dir), "doctor", "--json", "--offline"})
	rep = doctorReport{}
	json.Unmarshal(dout.Bytes(), &rep)
	if rep.Relay.Credential != "unchecked" {
		t.Fatalf("doctor --offline: %+v", rep.Relay)
	}

	// A denied pairing ends with the denied code and keeps nothing new.
	code, _, errb, done = startPair(t, "--home", string(dir), "pair", "--no-browser", "--worker")
	if _, err := u.Client.DenyPairingCode(context.Background(), code, sdk.PairingDecisionRequest{}); err != nil {
		t.Fatal(err)
	}
	if c := wait(t, done); c != ExitDenied || !strings.Contains(errb.String(), "denied") {
		t.Fatalf("denied: exit %d\n%s", c, errb.String())
	}
	if again, _ := dir.ReadRelayCredentials(); again.IssueToken != rc.IssueToken {
		t.Fatal("a denied pairing replaced the credentials")
	}
}

func TestPairRefusesBadFlagsAndCodes(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	dir := filepath.Join(t.TempDir(), "home")
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"pair", "--server", s.URL, "--auto-unlock", "--no-auto-unlock"}, ExitUsage, "contradict"},
		{[]string{"pair", "--server", s.URL, "--transport", "carrier-pigeon"}, ExitUsage, "polling or relay"},
		{[]string{"pair", "--server", s.URL, "ABC"}, ExitUsage, "not a pairing code"},
		{[]string{"pair", "--server", s.URL, "OOOOIIII"}, ExitUsage, "not a pairing code"},
		{[]string{"pair"}, ExitUsage, "--server"},
		{[]string{"pair", "--server", s.URL, "ABCD-EFGH"}, ExitNotFound, "no such code"},
		{[]string{"pair", "--server", s.URL, "a", "b"}, ExitUsage, ""},
	} {
		env, _, errb := testEnv()
		if c := Execute(context.Background(), env, append([]string{"--home", dir}, tc.args...)); c != tc.code || !strings.Contains(errb.String(), tc.says) {
			t.Errorf("%v: exit %d, want %d with %q\n%s", tc.args, c, tc.code, tc.says, errb.String())
		}
	}
}

func TestPairAnchorAndRotateToken(t *testing.T) {
	dir := home.Dir(filepath.Join(t.TempDir(), "home"))
	env, out, _ := testEnv()
	if c := Execute(context.Background(), env, []string{"--home", string(dir), "pair", "anchor"}); c != ExitOK {
		t.Fatalf("exit %d", c)
	}
	key, err := dir.ReadAnchor()
	if err != nil {
		t.Fatal(err)
	}
	fp := e2e.Fingerprint(key.PublicKey().Bytes())
	if strings.TrimSpace(out.String()) != fp {
		t.Fatalf("pair anchor printed %q, want %q", out.String(), fp)
	}
	env, out, _ = testEnv()
	Execute(context.Background(), env, []string{"--home", string(dir), "pair", "anchor", "--json"})
	var a map[string]string
	if err := json.Unmarshal(out.Bytes(), &a); err != nil || a["fingerprint"] != fp {
		t.Fatalf("pair anchor --json: %s", out.String())
	}

	before, _ := dir.EnsureToken()
	env, out, errb := testEnv()
	if c := Execute(context.Background(), env, []string{"--home", string(dir), "pair", "rotate-token"}); c != ExitOK {
		t.Fatalf("exit %d: %s", c, errb.String())
	}
	after, _ := dir.ReadToken()
	if after == before || strings.Contains(out.String()+errb.String(), after) || !strings.Contains(errb.String(), "starts") {
		t.Fatalf("rotate-token: %q -> %q\n%s%s", before, after, out.String(), errb.String())
	}
}
