package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/internal/syncbuf"
)

// bg is a reeve process running in the background.
type bg struct {
	cmd  *exec.Cmd
	out  syncbuf.Buffer
	errb syncbuf.Buffer
	done chan struct{}
	code int
}

// background starts reeve with this home; extra environment is added.
func (h *daemonHome) background(env []string, args ...string) *bg {
	h.t.Helper()
	p := &bg{cmd: exec.Command(reeveBin, args...), done: make(chan struct{})}
	p.cmd.Env = append(append(h.baseEnv(), "REEVE_HOME="+h.dir), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errb
	if err := p.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	h.t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })
	return p
}

func (p *bg) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(within):
		t.Fatalf("%v still runs after %s\nstdout: %s\nstderr: %s", p.cmd.Args, within, p.out.String(), p.errb.String())
		return -1
	}
}

// Followers cut off by `reeve stop` say that the daemon stopped, and exit
// 3 — not with a raw WebSocket error.
func TestFollowersOfAStoppedDaemon(t *testing.T) {
	h := newHome(t)
	h.start()
	sid := strings.TrimSpace(h.must("run", t.TempDir(), "--agent", "shell", "--prompt", "echo follow-me; sleep 120").stdout)
	attach := h.background(nil, "attach", sid)
	waiter := h.background(nil, "wait", sid)
	runner := h.background(nil, "run", t.TempDir(), "--agent", "shell", "--prompt", "echo second; sleep 120", "--attach")
	waitFor(t, "the followers to follow", 30*time.Second, func() bool {
		return strings.Contains(attach.out.String(), "follow-me") && strings.Contains(runner.out.String(), "second")
	})
	time.Sleep(500 * time.Millisecond) // wait subscribes silently
	r := h.must("stop")
	if !strings.Contains(r.stderr, "stopping the daemon interrupts 2 running sessions") || !strings.Contains(r.stderr, sid) {
		t.Fatalf("stop did not name the sessions:\n%s", r.stderr)
	}
	for _, p := range []*bg{attach, waiter, runner} {
		if code := p.wait(t, 30*time.Second); code != 3 {
			t.Errorf("%v: exit %d\n%s", p.cmd.Args[1:], code, p.errb.String())
		}
		e := p.errb.String()
		if !strings.Contains(e, "the daemon stopped while following session") || !strings.Contains(e, "the daemon is stopping") || strings.Contains(strings.ToLower(e), "websocket") {
			t.Errorf("%v said:\n%s", p.cmd.Args[1:], e)
		}
	}
}

// A follower rides out a worker crash: it finds the restarted worker
// through the home (on a new port) and sees the session's end.
func TestFollowerResumesAcrossWorkerRestart(t *testing.T) {
	h := newHome(t)
	h.start()
	sid := strings.TrimSpace(h.must("run", t.TempDir(), "--agent", "shell", "--prompt", "echo before-crash; sleep 120").stdout)
	attach := h.background(nil, "attach", sid, "--json")
	waiter := h.background(nil, "wait", sid)
	waitFor(t, "the follower", 30*time.Second, func() bool { return strings.Contains(attach.out.String(), "before-crash") })
	time.Sleep(500 * time.Millisecond)
	st, _ := h.status()
	syscall.Kill(st.Health.WorkerPID, syscall.SIGKILL)
	if code := attach.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("attach: exit %d\n%s", code, attach.errb.String())
	}
	if code := waiter.wait(t, 60*time.Second); code != 10 || !strings.Contains(waiter.errb.String(), "interrupted") {
		t.Fatalf("wait: exit %d\n%s", code, waiter.errb.String())
	}
	evs := parseUpdates(t, strings.TrimSuffix(attach.out.String(), lastLine(attach.out.String())))
	checkSeqs(t, evs)
	logged := h.logEvents(sid)
	if len(evs) != len(logged) {
		t.Fatalf("the follower saw %d events across the restart, the log has %d", len(evs), len(logged))
	}
	if !strings.Contains(lastLine(attach.out.String()), `"type":"session-ended"`) || !strings.Contains(lastLine(attach.out.String()), "interrupted") {
		t.Fatalf("last line %q", lastLine(attach.out.String()))
	}
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:] + "\n"
}

// No command hangs on a frozen worker: each call gives up after the call
// timeout and says the daemon does not answer (exit 9).
func TestFrozenWorkerDoesNotHangCommands(t *testing.T) {
	h := newHome(t)
	h.start()
	sid := strings.TrimSpace(h.must("run", t.TempDir(), "--agent", "shell", "--prompt", "echo frozen; sleep 120").stdout)
	env := []string{"REEVE_DAEMON_TIMEOUT=2"}
	attach := h.background(env, "attach", sid)
	waitFor(t, "the follower", 30*time.Second, func() bool { return strings.Contains(attach.out.String(), "frozen") })
	st, _ := h.status()
	syscall.Kill(st.Health.WorkerPID, syscall.SIGSTOP)
	defer syscall.Kill(st.Health.WorkerPID, syscall.SIGCONT)
	for _, args := range [][]string{{"ls"}, {"wait", sid}, {"logs", sid}, {"session", "stop", sid}, {"worktree", "ls"}, {"list"}} {
		p := h.background(env, args...)
		if code := p.wait(t, 30*time.Second); code != 9 {
			t.Errorf("%v: exit %d\n%s", args, code, p.errb.String())
		} else if !strings.Contains(p.errb.String(), "did not answer in time") {
			t.Errorf("%v said: %s", args, p.errb.String())
		}
	}
	if code := attach.wait(t, 60*time.Second); code != 9 || !strings.Contains(attach.errb.String(), "does not answer") {
		t.Errorf("attach: exit %d\n%s", code, attach.errb.String())
	}
}

// A port in use fails the start with a hint in the terms of the command
// that started the daemon: a flag it accepts, or the setting it reads.
func TestPortInUseNamesAFlagOfTheCommand(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	h := newHome(t)
	r := h.run("start", "--listen", busy)
	if r.code != 5 || !strings.Contains(r.stderr, "already in use") || !strings.Contains(r.stderr, "pass --listen with another port") {
		t.Fatalf("start: exit %d %q", r.code, r.stderr)
	}
	h.env = append(os.Environ(), "REEVE_LISTEN="+busy)
	r = h.run("run", t.TempDir(), "--prompt", "true", "--agent", "shell")
	if r.code != 5 || !strings.Contains(r.stderr, "already in use") || !strings.Contains(r.stderr, "REEVE_LISTEN") || !strings.Contains(r.stderr, "--config") {
		t.Fatalf("run: exit %d %q", r.code, r.stderr)
	}
	h.env = nil

	h.start()
	launch, err := home.Dir(h.dir).ReadLaunch()
	if err != nil {
		t.Fatal(err)
	}
	launch.Listen = busy
	home.Dir(h.dir).WriteLaunch(launch)
	r = h.run("restart")
	if r.code != 5 || !strings.Contains(r.stderr, "pass --listen with another port") {
		t.Fatalf("restart: exit %d %q", r.code, r.stderr)
	}
	h.must("restart", "--listen", "127.0.0.1:0")
	if st, code := h.status(); code != 0 || st.State != "running" {
		t.Fatalf("after restart --listen: %+v", st)
	}
	if l, _ := home.Dir(h.dir).ReadLaunch(); l.Listen != "127.0.0.1:0" {
		t.Fatalf("the new address was not saved: %q", l.Listen)
	}
}

// term is reeve running on a terminal (a PTY), as a person would run it.
type term struct {
	t    *testing.T
	ptmx *os.File
	cmd  *exec.Cmd
	out  syncbuf.Buffer
	done chan struct{}
	code int
}

func (h *daemonHome) onTerminal(args ...string) *term {
	h.t.Helper()
	tm := &term{t: h.t, cmd: exec.Command(reeveBin, args...), done: make(chan struct{})}
	tm.cmd.Env = append(h.baseEnv(), "REEVE_HOME="+h.dir)
	ptmx, err := pty.Start(tm.cmd)
	if err != nil {
		h.t.Skipf("no pty: %v", err)
	}
	tm.ptmx = ptmx
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			tm.out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	go func() {
		tm.cmd.Wait()
		tm.code = tm.cmd.ProcessState.ExitCode()
		select {
		case <-copied:
		case <-time.After(2 * time.Second):
		}
		close(tm.done)
	}()
	h.t.Cleanup(func() { tm.cmd.Process.Kill(); <-tm.done; ptmx.Close() })
	return tm
}

func (tm *term) expect(what string, within time.Duration) {
	tm.t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(tm.out.String(), what) {
		if time.Now().After(deadline) {
			tm.t.Fatalf("the terminal never showed %q:\n%s", what, tm.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (tm *term) send(s string) { tm.ptmx.Write([]byte(s)) }

func (tm *term) exit(within time.Duration) int {
	tm.t.Helper()
	select {
	case <-tm.done:
		return tm.code
	case <-time.After(within):
		tm.t.Fatalf("still running:\n%s", tm.out.String())
		return -1
	}
}

// On a terminal stop asks before it interrupts running sessions; --yes
// does not ask.
func TestStopAsksOnATerminal(t *testing.T) {
	h := newHome(t)
	h.start()
	sid := strings.TrimSpace(h.must("run", t.TempDir(), "--agent", "shell", "--prompt", "sleep 120").stdout)
	tm := h.onTerminal("stop")
	tm.expect("reeve: stop the daemon and interrupt them? [y/N]", 20*time.Second)
	if !strings.Contains(tm.out.String(), sid) {
		t.Fatalf("the question did not name the session:\n%s", tm.out.String())
	}
	tm.send("n\r")
	if code := tm.exit(20 * time.Second); code != 5 {
		t.Fatalf("declined: exit %d\n%s", code, tm.out.String())
	}
	if st, code := h.status(); code != 0 || st.State != "running" {
		t.Fatalf("the daemon stopped although declined: %+v", st)
	}
	// restart names what it interrupts too.
	if r := h.must("restart"); !strings.Contains(r.stderr, "restarting the daemon interrupts 1 running session") || !strings.Contains(r.stderr, sid) {
		t.Fatalf("restart:\n%s", r.stderr)
	}
	h.must("run", t.TempDir(), "--agent", "shell", "--prompt", "sleep 120")
	tm = h.onTerminal("stop", "--yes")
	if code := tm.exit(30 * time.Second); code != 0 || strings.Contains(tm.out.String(), "[y/N]") {
		t.Fatalf("--yes: exit %d\n%s", code, tm.out.String())
	}
	if _, code := h.status(); code != 3 {
		t.Fatalf("status after stop --yes: %d", code)
	}
}

// `run --attach` on a terminal offers each permission request with one
// key, and the key decides it; a governed Claude Code session then runs
// the tool, or not.
func TestAttachDecidesOnTheTerminal(t *testing.T) {
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "asking", Calls: []agenttest.ToolCall{agenttest.Bash("touch key-allowed.txt")}},
		{Text: "asking again", Calls: []agenttest.ToolCall{agenttest.Bash("touch key-denied.txt")}},
		{Text: "done"},
	}})
	h := claudeHome(t, srv)
	work := t.TempDir()
	tm := h.onTerminal("run", work, "--agent", "claude", "--prompt", "make files", "--attach", "--timeout", "120")
	tm.expect("touch key-allowed.txt\"} — allow? [y] allow  [n] deny  [s] skip", 90*time.Second)
	tm.send("y")
	tm.expect("allowed request", 30*time.Second)
	tm.expect("touch key-denied.txt\"} — allow?", 60*time.Second)
	tm.send("n")
	if code := tm.exit(90 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, tm.out.String())
	}
	if _, err := os.Stat(filepath.Join(work, "key-allowed.txt")); err != nil {
		t.Fatalf("the allowed tool did not run:\n%s", tm.out.String())
	}
	if _, err := os.Stat(filepath.Join(work, "key-denied.txt")); err == nil {
		t.Fatal("the denied tool ran")
	}
	var sid string
	for _, l := range strings.Split(tm.out.String(), "\n") {
		if i := strings.Index(l, "reeve: session "); i >= 0 && strings.Contains(l, " started:") {
			sid = strings.Fields(l[i+len("reeve: session "):])[0]
		}
	}
	ds := decisions(h.logEvents(sid))
	if len(ds) != 2 || ds[0].Decision != "allow" || ds[0].DecidedBy != "human" || ds[1].Decision != "deny" || !strings.Contains(ds[1].Reason, "denied at the terminal") {
		t.Fatalf("decisions: %+v", ds)
	}
}
