package main

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLifecycleRestartsKilledWorker(t *testing.T) {
	h := newHome(t)
	r := h.start()
	if !strings.Contains(r.stderr, "daemon started") {
		t.Fatalf("start did not report success on stderr: %q", r.stderr)
	}
	st, code := h.status()
	if code != 0 || st.State != "running" || st.Health == nil || st.Health.Status != "ok" {
		t.Fatalf("status after start: code %d %+v", code, st)
	}
	if st.Health.WorkerPID == st.Health.SupervisorPID || st.Health.SupervisorPID == 0 {
		t.Fatalf("want two processes, got supervisor %d worker %d", st.Health.SupervisorPID, st.Health.WorkerPID)
	}
	oldWorker := st.Health.WorkerPID

	if err := syscall.Kill(oldWorker, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new worker", 30*time.Second, func() bool {
		st, code := h.status()
		return code == 0 && st.State == "running" && st.Health.WorkerPID != oldWorker
	})
	log, _ := os.ReadFile(h.file("daemon.log"))
	if !strings.Contains(string(log), "restarting in") || !strings.Contains(string(log), "killed") {
		t.Errorf("supervisor log does not say why it restarted the worker:\n%s", log)
	}

	r = h.must("stop", "--json")
	var stopped struct {
		State         string `json:"state"`
		SupervisorPID int    `json:"supervisor_pid"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &stopped); err != nil || stopped.State != "stopped" || stopped.SupervisorPID != st.Health.SupervisorPID {
		t.Fatalf("stop --json: %v %q", err, r.stdout)
	}
	st, code = h.status()
	if st.State != "stopped" || code != 3 {
		t.Fatalf("status after stop: code %d %+v", code, st)
	}
	for _, pid := range []int{stopped.SupervisorPID, oldWorker} {
		if processRuns(pid) {
			t.Errorf("process %d still alive after stop", pid)
		}
	}
	for _, f := range []string{"supervisor.pid", "worker.pid", "endpoint.json"} {
		if _, err := os.Stat(h.file(f)); err == nil {
			t.Errorf("%s left behind after stop", f)
		}
	}
}

func TestStatusUnresponsiveWhenWorkerStopped(t *testing.T) {
	h := newHome(t)
	h.start()
	st, _ := h.status()
	worker := st.Health.WorkerPID
	if err := syscall.Kill(worker, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(worker, syscall.SIGCONT)
	st, code := h.status()
	if st.State != "unresponsive" || code != 9 {
		t.Fatalf("want unresponsive/9, got %s/%d", st.State, code)
	}
	if !st.Lifecycle.SupervisorAlive || !st.Lifecycle.WorkerAlive || st.Reachability.Reachable {
		t.Errorf("lifecycle and reachability should disagree: %+v", st)
	}
	r := h.run("status")
	if !strings.Contains(r.stdout, "unresponsive") {
		t.Errorf("human status: %q", r.stdout)
	}
	syscall.Kill(worker, syscall.SIGCONT)
	waitFor(t, "running again", 10*time.Second, func() bool { st, _ := h.status(); return st.State == "running" })
}

func TestUnixSocketListener(t *testing.T) {
	h := newHome(t)
	sock := filepath.Join(t.TempDir(), "reeve.sock")
	h.must("start", "--listen", sock)
	st, code := h.status()
	if code != 0 || st.Reachability.Network != "unix" || st.Reachability.Address != sock {
		t.Fatalf("status over unix socket: %d %+v", code, st)
	}
	info, err := os.Stat(sock)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", info, err)
	}
	// The directory commands work over the socket.
	work := t.TempDir()
	h.must("add", work)
	r := h.must("list", "--json")
	if !strings.Contains(r.stdout, work) {
		t.Fatalf("list does not show %s: %s", work, r.stdout)
	}
	// restart reuses the persisted launch configuration: the same socket.
	h.must("restart")
	st, _ = h.status()
	if st.State != "running" || st.Reachability.Address != sock {
		t.Fatalf("after restart: %+v", st)
	}
	h.must("stop")
	if _, err := os.Stat(sock); err == nil {
		t.Error("socket file left after stop")
	}
}

func TestForegroundStopsOnSignal(t *testing.T) {
	h := newHome(t)
	cmd := exec.Command(reeveBin, "start", "--foreground", "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "REEVE_HOME="+h.dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "foreground daemon", 30*time.Second, func() bool { st, _ := h.status(); return st.State == "running" })
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("foreground exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("foreground daemon did not stop on SIGTERM")
	}
	if st, _ := h.status(); st.State != "stopped" {
		t.Fatalf("after SIGTERM: %+v", st)
	}
}

func TestStopForce(t *testing.T) {
	h := newHome(t)
	h.start()
	st, _ := h.status()
	r := h.must("stop", "--force", "--json")
	if !strings.Contains(r.stdout, `"forced": true`) {
		t.Fatalf("stop --force --json: %s", r.stdout)
	}
	for _, pid := range []int{st.Health.SupervisorPID, st.Health.WorkerPID} {
		waitFor(t, "process gone", 5*time.Second, func() bool { return !processRuns(pid) })
	}
	if st, code := h.status(); st.State != "stopped" || code != 3 {
		t.Fatalf("after force stop: %d %+v", code, st)
	}
}

// raw sends one request to the running daemon with full control of headers.
func raw(t *testing.T, addr, path string, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		body.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, body.String()
}

func TestLocalAPIGuards(t *testing.T) {
	h := newHome(t)
	h.start("--auth", "--allowed-origins", "https://ok.example")
	st, _ := h.status() // status itself must work under --auth: /health is open
	if st.State != "running" {
		t.Fatalf("status under --auth: %+v", st)
	}
	addr := st.Reachability.Address
	tokenBytes, err := os.ReadFile(h.file("auth-token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tokenBytes))
	bearer := "Bearer " + token

	cases := []struct {
		name string
		path string
		hdr  map[string]string
		want int
	}{
		{"forged Host", "/api/directories", map[string]string{"Host": "attacker.example:80", "Authorization": bearer}, 403},
		{"forged Host on health", "/health", map[string]string{"Host": "attacker.example"}, 403},
		{"foreign Origin", "/api/directories", map[string]string{"Origin": "https://evil.example", "Authorization": bearer}, 403},
		{"allowed Origin", "/api/directories", map[string]string{"Origin": "https://ok.example", "Authorization": bearer}, 200},
		{"missing token", "/api/directories", nil, 401},
		{"bad token", "/api/directories", map[string]string{"Authorization": "Bearer nope"}, 401},
		{"health without token", "/health", nil, 200},
		{"good token", "/api/directories", map[string]string{"Authorization": bearer}, 200},
	}
	for _, c := range cases {
		code, body := raw(t, addr, c.path, c.hdr)
		if code != c.want {
			t.Errorf("%s: got %d, want %d: %s", c.name, code, c.want, body)
		}
		if strings.Contains(body, token) {
			t.Errorf("%s: response echoes the token", c.name)
		}
	}
	// The command line uses the token from the home.
	h.must("add", t.TempDir())
	h.must("list")
}

func TestHomeAndFileModes(t *testing.T) {
	h := newHome(t)
	h.start("--auth")
	h.must("add", t.TempDir())
	info, err := os.Stat(h.dir)
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("home mode: %v %v", info.Mode(), err)
	}
	want := []string{"launch.json", "supervisor.pid", "worker.pid", "endpoint.json", "identity.json", "auth-token", "reeve.db", "daemon.log"}
	for _, name := range want {
		info, err := os.Stat(h.file(name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %04o, want 0600", name, info.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(h.dir)
	for _, e := range entries {
		info, _ := e.Info()
		if !e.IsDir() && info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is readable by others: %04o", e.Name(), info.Mode().Perm())
		}
	}
	// A pre-existing loose home is tightened to 0700.
	h.must("stop")
	os.Chmod(h.dir, 0o755)
	h.start()
	if info, _ := os.Stat(h.dir); info.Mode().Perm() != 0o700 {
		t.Errorf("loose home not tightened: %04o", info.Mode().Perm())
	}
}

func TestStartBadInput(t *testing.T) {
	t.Run("invalid listen", func(t *testing.T) {
		h := newHome(t)
		for _, l := range []string{"abc", "127.0.0.1:99999", "host:"} {
			r := h.run("start", "--listen", l)
			if r.code != 2 || !strings.Contains(r.stderr, "listen") {
				t.Errorf("--listen %s: exit %d, %q", l, r.code, r.stderr)
			}
		}
		assertNothingStarted(t, h)
	})
	t.Run("lan without auth on a network address", func(t *testing.T) {
		h := newHome(t)
		r := h.run("start", "--profile", "lan", "--listen", "0.0.0.0:0")
		if r.code != 2 || !strings.Contains(r.stderr, "--auth") {
			t.Errorf("exit %d, %q", r.code, r.stderr)
		}
		r = h.run("start", "--listen", "0.0.0.0:0")
		if r.code != 2 || !strings.Contains(r.stderr, "loopback") {
			t.Errorf("profile local on 0.0.0.0: exit %d, %q", r.code, r.stderr)
		}
		assertNothingStarted(t, h)
	})
	t.Run("port in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		h := newHome(t)
		r := h.run("start", "--listen", ln.Addr().String())
		if r.code == 0 || !strings.Contains(r.stderr, port) || !strings.Contains(r.stderr, "in use") {
			t.Fatalf("exit %d, %q", r.code, r.stderr)
		}
		assertNothingStarted(t, h)
		log, _ := os.ReadFile(h.file("daemon.log"))
		if strings.Contains(string(log), "restarting") {
			t.Errorf("supervisor retried a port that is in use:\n%s", log)
		}
	})
	t.Run("home cannot be written", func(t *testing.T) {
		blocker := filepath.Join(t.TempDir(), "file")
		os.WriteFile(blocker, nil, 0o600)
		h := newHome(t)
		r := h.run("start", "--home", filepath.Join(blocker, "home"))
		if r.code == 0 || !strings.Contains(r.stderr, "home") {
			t.Fatalf("exit %d, %q", r.code, r.stderr)
		}
	})
	t.Run("second start", func(t *testing.T) {
		h := newHome(t)
		h.start()
		r := h.run("start", "--listen", "127.0.0.1:0")
		if r.code != 5 || !strings.Contains(r.stderr, "already running") {
			t.Fatalf("exit %d, %q", r.code, r.stderr)
		}
		if st, _ := h.status(); st.State != "running" {
			t.Fatalf("the first daemon suffered: %+v", st)
		}
	})
	t.Run("stop when nothing runs", func(t *testing.T) {
		h := newHome(t)
		r := h.run("stop")
		if r.code != 3 || !strings.Contains(r.stderr, "no daemon") {
			t.Fatalf("exit %d, %q", r.code, r.stderr)
		}
		r = h.run("restart")
		if r.code != 3 {
			t.Fatalf("restart with no launch config: exit %d, %q", r.code, r.stderr)
		}
	})
}

// assertNothingStarted checks that a refused start left no process and no
// runtime files.
func assertNothingStarted(t *testing.T, h *daemonHome) {
	t.Helper()
	for _, f := range []string{"supervisor.pid", "worker.pid", "endpoint.json"} {
		if _, err := os.Stat(h.file(f)); err == nil {
			t.Errorf("%s exists after a refused start", f)
		}
	}
	if st, code := h.status(); st.State != "stopped" || code != 3 {
		t.Errorf("status after a refused start: %d %+v", code, st)
	}
}

func TestDoctorIsReadOnly(t *testing.T) {
	h := newHome(t)
	r := h.run("doctor", "--json")
	if _, err := os.Stat(h.dir); err == nil {
		t.Fatal("doctor created the home")
	}
	h.start()
	before := snapshot(t, h.dir)
	r = h.must("doctor", "--json")
	var rep struct {
		Identity struct {
			DaemonID string `json:"daemon_id"`
			Home     string `json:"home"`
		} `json:"identity"`
		Config struct {
			File string `json:"file"`
		} `json:"config"`
		Endpoints struct {
			State string `json:"state"`
			Bound string `json:"bound"`
		} `json:"endpoints"`
		Relay struct {
			State string `json:"state"`
		} `json:"relay"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, r.stdout)
	}
	if rep.Identity.DaemonID == "" || rep.Identity.Home != h.dir || rep.Config.File != h.file("config.yaml") ||
		rep.Endpoints.State != "running" || rep.Endpoints.Bound == "" || rep.Relay.State != "not paired" {
		t.Fatalf("doctor report: %+v", rep)
	}
	if after := snapshot(t, h.dir); after != before {
		t.Errorf("doctor changed the home:\nbefore %s\nafter  %s", before, after)
	}
	r = h.must("doctor")
	if !strings.Contains(r.stdout, "not paired") {
		t.Errorf("human doctor: %s", r.stdout)
	}
}

// snapshot lists the home's file names and modes (not contents: the log and
// the store may grow on their own).
func snapshot(t *testing.T, dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		info, _ := e.Info()
		if strings.HasPrefix(e.Name(), "reeve.db") {
			continue
		}
		b.WriteString(e.Name() + ":" + info.Mode().String() + " ")
	}
	return b.String()
}

func TestVersion(t *testing.T) {
	h := newHome(t)
	r := h.must("--version")
	if !strings.HasPrefix(r.stdout, "reeve ") {
		t.Errorf("--version: %q", r.stdout)
	}
	r = h.must("version", "--json")
	var v struct{ Version string }
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Version == "" || !strings.Contains(h.must("--version").stdout, v.Version) {
		t.Errorf("version --json: %q %v", r.stdout, err)
	}
	if r := h.run("no-such-command"); r.code != 2 {
		t.Errorf("unknown command: exit %d", r.code)
	}
}

func TestConfigPrecedenceThroughStart(t *testing.T) {
	h := newHome(t)
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fileSock := filepath.Join(t.TempDir(), "file.sock")
	envSock := filepath.Join(t.TempDir(), "env.sock")
	flagSock := filepath.Join(t.TempDir(), "flag.sock")
	os.WriteFile(h.file("config.yaml"), []byte("version: 1\nlisten: "+fileSock+"\n"), 0o600)

	listenOf := func() string {
		st, _ := h.status()
		return st.Reachability.Address
	}
	h.must("start")
	if got := listenOf(); got != fileSock {
		t.Errorf("file value: listening on %s, want %s", got, fileSock)
	}
	h.must("stop")

	startEnv := func(args ...string) {
		cmd := exec.Command(reeveBin, args...)
		cmd.Env = append(os.Environ(), "REEVE_HOME="+h.dir, "REEVE_LISTEN="+envSock)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("start %v: %v\n%s", args, err, out)
		}
	}
	startEnv("start")
	if got := listenOf(); got != envSock {
		t.Errorf("env beats file: listening on %s, want %s", got, envSock)
	}
	h.must("stop")
	startEnv("start", "--listen", flagSock)
	if got := listenOf(); got != flagSock {
		t.Errorf("flag beats env: listening on %s, want %s", got, flagSock)
	}
	h.must("stop")

	// An invalid config file stops start before anything runs.
	os.WriteFile(h.file("config.yaml"), []byte("version: 1\nprofile: everywhere\n"), 0o600)
	r := h.run("start")
	if r.code != 8 || !strings.Contains(r.stderr, "config.yaml:2") {
		t.Fatalf("invalid config: exit %d %q", r.code, r.stderr)
	}
	assertNothingStarted(t, h)
	r = h.run("validate")
	if r.code != 8 || !strings.Contains(r.stdout, "config.yaml:2:10") || !strings.Contains(r.stdout, "/profile") {
		t.Fatalf("validate: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}
