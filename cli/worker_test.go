package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/worker"
)

// pair --worker saves the worker profile with the pairing's server and
// workspace, the workdirs and the runner credential (0600, never printed).
func TestPairWorkerSavesTheProfile(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("owner@example.com")
	dir := home.Dir(filepath.Join(t.TempDir(), "home"))
	work := t.TempDir()
	cred := filepath.Join(t.TempDir(), "runner.cred")
	os.WriteFile(cred, []byte("rwc_pairsecret\n"), 0o600)
	code, out, errb, done := startPair(t, "--home", string(dir), "pair", "--worker", "--transport", "polling", "--server", s.URL, "--no-browser",
		"--workdir", work, "--credential-file", cred, "--agents", "shell,claude", "--executor", "mex_1", "--json")
	if _, err := u.Client.ApprovePairingCode(context.Background(), code, sdk.PairingDecisionRequest{Workspace: u.Workspace}); err != nil {
		t.Fatal(err)
	}
	if c := wait(t, done); c != ExitOK {
		t.Fatalf("exit %d\n%s", c, errb.String())
	}
	var res pairResult
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		t.Fatal(err)
	}
	h := worker.Home{Base: string(dir)}
	if res.WorkerProfile != h.ProfileFile() || res.WorkerCredentialSource != "file" || res.Transport != "polling" || !res.Worker {
		t.Fatalf("result %+v", res)
	}
	p, err := worker.ReadProfile(h.ProfileFile())
	if err != nil {
		t.Fatal(err)
	}
	if p.ServerURL != s.URL || p.WorkspaceID != u.Workspace || p.InstallID != res.InstallID || p.Transport != "polling" || p.Credential != "rwc_pairsecret" ||
		len(p.Workdirs) != 1 || p.Workdirs[0] != work || strings.Join(p.Agents, ",") != "shell,claude" || p.ExecutorID != "mex_1" {
		t.Fatalf("profile %+v", p)
	}
	if fi, _ := os.Stat(h.ProfileFile()); fi.Mode().Perm() != 0o600 {
		t.Fatalf("profile mode %v", fi.Mode())
	}
	if strings.Contains(out.String()+errb.String(), "rwc_pairsecret") {
		t.Fatal("pair printed the runner credential")
	}

	// worker doctor reads that profile (source home, credential from the
	// profile) without a daemon: it says what is missing.
	env, dout, _ := testEnv()
	c := Execute(context.Background(), env, []string{"--home", string(dir), "worker", "doctor", "--json"})
	var rep worker.DoctorReport
	if err := json.Unmarshal(dout.Bytes(), &rep); err != nil {
		t.Fatalf("doctor: %v\n%s", err, dout.String())
	}
	if c != ExitFailure || rep.Profile.Source != "home" || rep.CredentialSource != "profile" || rep.ProcessLock != "absent" || rep.Server != s.URL ||
		strings.Contains(dout.String(), "rwc_pairsecret") {
		t.Fatalf("doctor exit %d: %s", c, dout.String())
	}
	// reset clears it; a second reset has nothing to do.
	env, rout, _ := testEnv()
	if c := Execute(context.Background(), env, []string{"--home", string(dir), "worker", "reset", "--json"}); c != ExitOK || !strings.Contains(rout.String(), "profile.json") {
		t.Fatalf("reset: %d %s", c, rout.String())
	}
	if _, err := os.Stat(h.ProfileFile()); !os.IsNotExist(err) {
		t.Fatal("profile survived reset")
	}
}

func TestWorkerFlagsRefusedEarly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home")
	bad := filepath.Join(t.TempDir(), "bad.cred")
	os.WriteFile(bad, []byte("not-a-runner-credential"), 0o600)
	good := filepath.Join(t.TempDir(), "good.cred")
	os.WriteFile(good, []byte("rwc_good"), 0o600)
	var held *worker.ProcessLock
	var err error
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"pair", "--server", "http://127.0.0.1:1", "--workdir", t.TempDir()}, ExitUsage, "go with --worker"},
		{[]string{"pair", "--worker", "--server", "http://127.0.0.1:1", "--workdir", filepath.Join(dir, "nope")}, ExitNotFound, "does not exist"},
		{[]string{"pair", "--worker", "--server", "http://127.0.0.1:1", "--credential-file", bad}, ExitUsage, "rwc_"},
		{[]string{"worker", "start", "--mode", "ephemeral", "--server", "http://x"}, ExitUsage, "persistent"},
		{[]string{"worker", "start", "--server", "http://x", "--transport", "relay"}, ExitUsage, "not implemented"},
		{[]string{"worker", "start", "--server", "http://x"}, ExitUsage, "no runner credential"},
		{[]string{"worker", "start"}, ExitUsage, "no server: pass --server URL, set REEVE_SERVER, or pair with `reeve --home " + shellWord(dir) + " pair --worker`"},
		{[]string{"worker", "start", "--worker-profile", "team b"}, ExitUsage, "`reeve --home " + shellWord(dir) + " pair --worker --worker-profile 'team b'`"},
		{[]string{"worker", "start", "--worker-profile", "held", "--server", "http://127.0.0.1:1", "--credential-file", good}, ExitConflict, "stop it with `reeve --home " + shellWord(dir) + " worker stop --worker-profile held`"},
		{[]string{"worker", "run-once"}, ExitUsage, "--lease"},
		{[]string{"worker", "run-once", "--lease", "abc"}, ExitUsage, "rwl_"},
		{[]string{"worker", "start", "--registration-profile", filepath.Join(dir, "missing.json")}, ExitUsage, "registration-profile"},
		{[]string{"worker", "stop"}, ExitNotRunning, ""},
		{[]string{"worker", "start", "--server", "http://127.0.0.1:1", "--credential-file", good, "--workdir", t.TempDir()}, ExitNotRunning, "no daemon is running"},
	} {
		if tc.code == ExitConflict && held == nil {
			// A worker of the profile "held" runs.
			if held, err = (worker.Home{Base: dir, Profile: "held"}).AcquireLock(); err != nil {
				t.Fatal(err)
			}
			defer held.Release()
		}
		env, _, errb := testEnv()
		c := Execute(context.Background(), env, append([]string{"--home", dir}, tc.args...))
		if c != tc.code || !strings.Contains(errb.String(), tc.msg) {
			t.Errorf("%v: exit %d, want %d with %q\n%s", tc.args, c, tc.code, tc.msg, errb.String())
		}
	}
}

// pair --worker's notes about what the worker still lacks name the
// home and the worker profile it paired.
func TestPairWorkerNotesNameHomeAndProfile(t *testing.T) {
	cmd, _, errb := testCmd(t, &fakeDaemon{})
	cmd.homeFlag = homeFlag(cmd.home)
	o := &pairOptions{daemonCmd: cmd, workerProfile: "team b"}
	if _, err := o.saveWorkerProfile(worker.Profile{}, worker.Credential{}, home.RelayCredentials{ServerURL: "http://127.0.0.1:1", WorkspaceID: "W1"}); err != nil {
		t.Fatal(err)
	}
	start := "reeve --home " + shellWord(string(cmd.home)) + " worker start"
	for _, want := range []string{"`" + start + " --credential-file FILE --worker-profile 'team b'`", "(pass --workdir to `" + start + " --worker-profile 'team b'`"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("want %s in:\n%s", want, errb)
		}
	}
}
