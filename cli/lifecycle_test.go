package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
)

// fakeSupervisor holds a home's lock for a real process (sleep): a
// SIGTERM to it ends the process, which releases the lock, as a
// supervisor's exit does.
func fakeSupervisor(t *testing.T, dir home.Dir) (exited <-chan struct{}) {
	t.Helper()
	if err := dir.Prepare(); err != nil {
		t.Fatal(err)
	}
	lock, err := dir.AcquireLock()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := home.WritePID(dir.SupervisorPIDFile(), home.PIDFile{PID: cmd.Process.Pid, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); lock.Release(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill() })
	return done
}

func stillRuns(exited <-chan struct{}) bool {
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// status reports stopped, running and unresponsive, in human form and
// --json, with its exit codes.
func TestStatusOutput(t *testing.T) {
	f := &fakeDaemon{health: func() (wire.Health, error) {
		return wire.Health{Status: "ok", Version: "1.2.3", WorkerPID: 42, SupervisorPID: 41, UptimeSeconds: 61, Sessions: 2}, nil
	}}
	cmd, out, _ := testCmd(t, f)
	err := runStatus(context.Background(), &statusOptions{daemonCmd: cmd})
	if exitCode(err) != ExitNotRunning || !strings.HasPrefix(out.String(), "stopped (home ") {
		t.Fatalf("stopped: %v %q", err, out)
	}

	fakeSupervisor(t, cmd.home)
	out.Reset()
	err = runStatus(context.Background(), &statusOptions{daemonCmd: cmd})
	if exitCode(err) != ExitUnhealthy || !strings.Contains(out.String(), "has not recorded an endpoint") {
		t.Fatalf("no endpoint: %v %q", err, out)
	}

	cmd.home.WriteEndpoint(home.Endpoint{Network: "tcp", Address: "127.0.0.1:7070", PID: 42})
	out.Reset()
	if err := runStatus(context.Background(), &statusOptions{daemonCmd: cmd}); err != nil {
		t.Fatal(err)
	}
	if want := "running: 127.0.0.1:7070, supervisor pid 41, worker pid 42, up 1m1s, 2 active sessions, version 1.2.3\n"; out.String() != want {
		t.Fatalf("got %q, want %q", out, want)
	}
	out.Reset()
	if err := runStatus(context.Background(), &statusOptions{daemonCmd: cmd, json: true}); err != nil {
		t.Fatal(err)
	}
	var st daemonStatus
	if err := json.Unmarshal([]byte(out.String()), &st); err != nil || st.State != stateRunning || !st.Reachability.Reachable || st.Health.Sessions != 2 || !st.Lifecycle.SupervisorAlive {
		t.Fatalf("--json: %v %s", err, out)
	}

	f.health = func() (wire.Health, error) { return wire.Health{}, context.DeadlineExceeded }
	out.Reset()
	if err := runStatus(context.Background(), &statusOptions{daemonCmd: cmd}); exitCode(err) != ExitUnhealthy || !strings.HasPrefix(out.String(), "unresponsive:") {
		t.Fatalf("unresponsive: %v %q", err, out)
	}
}

// stop names the sessions it interrupts; on a terminal it asks first
// (no keeps the daemon, exit 5), unless --yes; elsewhere it goes on.
func TestStopNamesAndAsks(t *testing.T) {
	running := wire.SessionInfo{ID: "01RUN", Agent: "claude", Status: "running", Prompt: "long job"}
	f := &fakeDaemon{list: func(req wire.ListRequest) (wire.ListResult, []wire.DiscoveredInfo, error) {
		if req.Scope != wire.ScopeActive {
			t.Errorf("scope %s", req.Scope)
		}
		return wire.ListResult{Sessions: []wire.SessionInfo{running}}, nil, nil
	}}

	t.Run("declined on a terminal", func(t *testing.T) {
		cmd, _, errb := testCmd(t, f)
		sup := fakeSupervisor(t, cmd.home)
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Skipf("no pty: %v", err)
		}
		defer ptmx.Close()
		defer tty.Close()
		cmd.env.In = tty
		ptmx.Write([]byte("n\n"))
		err = runStop(context.Background(), &stopOptions{daemonCmd: cmd, timeout: 5})
		if exitCode(err) != ExitConflict || !strings.Contains(err.Error(), "not stopped: 1 sessions are running (pass --yes") {
			t.Fatalf("declined: %v", err)
		}
		for _, want := range []string{"stopping the daemon interrupts 1 running session:", "01RUN  claude  running  long job", "stop the daemon and interrupt them? [y/N]"} {
			if !strings.Contains(errb.String(), want) {
				t.Fatalf("stderr lacks %q:\n%s", want, errb)
			}
		}
		if !stillRuns(sup) {
			t.Fatal("the daemon was stopped anyway")
		}

		ptmx.Write([]byte("y\n"))
		if err := runStop(context.Background(), &stopOptions{daemonCmd: cmd, timeout: 5}); err != nil {
			t.Fatalf("confirmed: %v\n%s", err, errb)
		}
		if locked, _ := cmd.home.Locked(); locked {
			t.Fatal("still locked after stop")
		}
	})

	t.Run("--yes on a terminal", func(t *testing.T) {
		cmd, out, errb := testCmd(t, f)
		fakeSupervisor(t, cmd.home)
		_, tty, err := pty.Open()
		if err != nil {
			t.Skipf("no pty: %v", err)
		}
		defer tty.Close()
		cmd.env.In = tty
		if err := runStop(context.Background(), &stopOptions{daemonCmd: cmd, timeout: 5, yes: true, json: true}); err != nil {
			t.Fatal(err)
		}
		var res stopResult
		if err := json.Unmarshal([]byte(out.String()), &res); err != nil || res.State != "stopped" {
			t.Fatalf("--json %v %s", err, out)
		}
		if strings.Contains(errb.String(), "[y/N]") || !strings.Contains(errb.String(), "01RUN") {
			t.Fatalf("stderr:\n%s", errb)
		}
	})

	t.Run("not a terminal", func(t *testing.T) {
		cmd, _, errb := testCmd(t, f)
		fakeSupervisor(t, cmd.home)
		if err := runStop(context.Background(), &stopOptions{daemonCmd: cmd, timeout: 5}); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(errb.String(), "[y/N]") || !strings.Contains(errb.String(), "interrupts 1 running session") || !strings.Contains(errb.String(), "daemon stopped") {
			t.Fatalf("stderr:\n%s", errb)
		}
	})

	t.Run("no daemon", func(t *testing.T) {
		cmd, _, _ := testCmd(t, &fakeDaemon{})
		if err := runStop(context.Background(), &stopOptions{daemonCmd: cmd, timeout: 5}); exitCode(err) != ExitNotRunning {
			t.Fatalf("no daemon: %v", err)
		}
	})

	t.Run("daemon that does not answer", func(t *testing.T) {
		g := &fakeDaemon{list: func(wire.ListRequest) (wire.ListResult, []wire.DiscoveredInfo, error) {
			return wire.ListResult{}, nil, errors.New("connection refused")
		}}
		cmd, _, errb := testCmd(t, g)
		fakeSupervisor(t, cmd.home)
		if err := runStop(context.Background(), &stopOptions{daemonCmd: cmd, timeout: 5}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(errb.String(), "cannot list the running sessions") {
			t.Fatalf("stderr:\n%s", errb)
		}
	})
}

// restart names the sessions it interrupts, and refuses a bad --listen
// before stopping anything.
func TestRestartRefusesBadListen(t *testing.T) {
	cmd, _, _ := testCmd(t, &fakeDaemon{})
	cmd.home.Prepare()
	cmd.home.WriteLaunch(home.Launch{Home: string(cmd.home), Listen: "127.0.0.1:0", Profile: "local"})
	sup := fakeSupervisor(t, cmd.home)
	err := runRestart(context.Background(), &restartOptions{daemonCmd: cmd, timeout: 5, listen: "not an address:99999"})
	if exitCode(err) != ExitUsage {
		t.Fatalf("bad --listen: %v", err)
	}
	if !stillRuns(sup) {
		t.Fatal("stopped the daemon before refusing")
	}
	if _, err := os.Stat(cmd.home.SupervisorPIDFile()); err != nil {
		t.Fatal(err)
	}
}

// A restart that finds its port taken says how to pick another in the
// terms of the command that restarted: restart's own --listen, or, for
// update --yes, which has none, `reeve restart --listen` (with the home
// that --home chose).
func TestRestartPortInUseHint(t *testing.T) {
	// The supervisor reports the port taken, as the real one does.
	script := filepath.Join(t.TempDir(), "reeve")
	os.WriteFile(script, []byte("#!/bin/sh\necho '{\"ready\":false,\"fatal\":true,\"reason\":\"address_in_use\",\"error\":\"listen tcp 127.0.0.1:7070: bind: address already in use\"}' >&3\n"), 0o755)
	for _, c := range []struct {
		name string
		opts func(daemonCmd) *restartOptions
		want string
	}{
		{"restart", func(d daemonCmd) *restartOptions { return &restartOptions{daemonCmd: d, timeout: 5} }, "pass --listen with another port"},
		{"update --yes", func(d daemonCmd) *restartOptions { return (&updateOptions{daemonCmd: d}).restartOptions() }, "`reeve --home HOME restart --listen ADDR`"},
	} {
		cmd, _, _ := testCmd(t, &fakeDaemon{})
		cmd.homeFlag = homeFlag(cmd.home)
		cmd.env.Executable = func() (string, error) { return script, nil }
		cmd.home.Prepare()
		cmd.home.WriteLaunch(home.Launch{Home: string(cmd.home), Listen: "127.0.0.1:7070", Profile: "local"})
		err := runRestart(context.Background(), c.opts(cmd))
		want := strings.ReplaceAll(c.want, "HOME", string(cmd.home))
		if exitCode(err) != ExitConflict || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: exit %d: %v (want it to say %s)", c.name, exitCode(err), err, want)
		}
	}
}

// A daemon that has not reported ready when start stops waiting is left
// starting, not killed: the first open after an upgrade migrates the
// event log, and killing it would make every later start begin again.
func TestSlowStartIsLeftStarting(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	script := filepath.Join(dir, "reeve")
	os.WriteFile(script, []byte("#!/bin/sh\necho $$ > "+pidFile+"\nexec sleep 30\n"), 0o755)
	cmd, _, errb := testCmd(t, &fakeDaemon{})
	cmd.env.Executable = func() (string, error) { return script, nil }
	cmd.env.readyWithin = 300 * time.Millisecond
	err := cmd.startDaemon(context.Background(), home.Launch{Home: string(cmd.home), Listen: "127.0.0.1:0", Profile: "local"}, false, "")
	if exitCode(err) != ExitTimeout || !strings.Contains(err.Error(), "is left starting") || !strings.Contains(err.Error(), "stop --force") {
		t.Fatalf("exit %d: %v\n%s", exitCode(err), err, errb)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatalf("the supervisor never ran: %q", b)
	}
	p, _ := os.FindProcess(pid)
	defer p.Kill()
	if err := p.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the starting daemon was stopped: %v", err)
	}
}
