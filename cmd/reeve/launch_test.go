package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/home"
)

func (h *daemonHome) launch() home.Launch {
	h.t.Helper()
	l, err := home.Dir(h.dir).ReadLaunch()
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

// One persisted launch configuration decides how the daemon starts,
// whoever starts it: a plain start keeps the saved relay profile and
// listen address, a flag changes them and says so, and run never changes
// them silently.
func TestLaunchSettingsStay(t *testing.T) {
	h := newHome(t)
	sock := filepath.Join(t.TempDir(), "d.sock")
	h.must("start", "--listen", sock, "--profile", "relay", "--default-mode", "bypass")
	h.must("stop")

	// A plain start keeps everything.
	r := h.must("start")
	if l := h.launch(); l.Profile != "relay" || l.Listen != sock || l.DefaultMode != "bypass" {
		t.Fatalf("plain start dropped saved settings: %+v", l)
	}
	if strings.Contains(r.stderr, "launch settings changed") {
		t.Fatalf("plain start claims a change: %s", r.stderr)
	}
	if st, _ := h.status(); st.Reachability.Address != sock {
		t.Fatalf("listening on %s, want %s", st.Reachability.Address, sock)
	}
	h.must("stop")

	// A flag changes one setting, says so, and keeps the others.
	r = h.must("start", "--profile", "local")
	if !strings.Contains(r.stderr, "profile relay -> local (--profile)") {
		t.Fatalf("start did not say what it changed: %s", r.stderr)
	}
	if l := h.launch(); l.Profile != "local" || l.Listen != sock {
		t.Fatalf("after --profile local: %+v", l)
	}
	h.must("stop")

	// run with a different REEVE_LISTEN starts the saved settings and says
	// what it did not apply.
	work := t.TempDir()
	other := filepath.Join(t.TempDir(), "other.sock")
	cmd := exec.Command(reeveBin, "run", work, "--prompt", "true", "--agent", "shell")
	cmd.Env = append(h.baseEnv(), "REEVE_HOME="+h.dir, "REEVE_LISTEN="+other)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "not applied: listen "+sock+" -> "+other+" (REEVE_LISTEN)") {
		t.Fatalf("run did not say it kept the saved settings:\n%s", out)
	}
	if l := h.launch(); l.Listen != sock {
		t.Fatalf("run changed the saved listen: %+v", l)
	}
	if st, _ := h.status(); st.Reachability.Address != sock {
		t.Fatalf("run's daemon listens on %s, want %s", st.Reachability.Address, sock)
	}

	// restart --listen changes it and says so.
	sock2 := filepath.Join(t.TempDir(), "d2.sock")
	r = h.must("restart", "--listen", sock2)
	if !strings.Contains(r.stderr, "listen "+sock+" -> "+sock2) {
		t.Fatalf("restart did not say what it changed: %s", r.stderr)
	}
	if l := h.launch(); l.Listen != sock2 || l.Profile != "local" {
		t.Fatalf("after restart --listen: %+v", l)
	}
}

// doctor reports a machine paired for the relay whose daemon launches with
// another profile, because such a machine is silently offline.
func TestDoctorReportsPairedMachineOffTheRelay(t *testing.T) {
	h := newHome(t)
	h.start()
	h.must("stop")
	creds := home.RelayCredentials{InstallID: "ins_1", WorkspaceID: "ws_1", IssueToken: "rvi_x", ServerURL: "http://127.0.0.1:1", RelayURL: "ws://127.0.0.1:1/ws", Transport: "relay", PairedAt: time.Now()}
	if err := home.Dir(h.dir).WriteRelayCredentials(creds); err != nil {
		t.Fatal(err)
	}
	r := h.run("doctor", "--offline", "--json")
	var rep struct {
		Checks []struct {
			Name   string
			OK     bool
			Detail string
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err, r.stdout)
	}
	found := false
	for _, c := range rep.Checks {
		if c.Name == "relay profile" {
			found = true
			if c.OK || !strings.Contains(c.Detail, "profile local") {
				t.Fatalf("relay profile check: %+v", c)
			}
		}
	}
	if !found || r.code != 1 {
		t.Fatalf("doctor exit %d, checks %+v", r.code, rep.Checks)
	}

	// Once the profile is relay, the check passes.
	l := h.launch()
	l.Profile = "relay"
	if err := home.Dir(h.dir).WriteLaunch(l); err != nil {
		t.Fatal(err)
	}
	r = h.run("doctor", "--offline")
	if !strings.Contains(r.stdout, "check relay profile") || strings.Contains(r.stdout, "relay profile: FAIL") || r.code != 0 {
		t.Fatalf("doctor with relay profile: exit %d\n%s", r.code, r.stdout)
	}
}
