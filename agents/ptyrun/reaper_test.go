package ptyrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// escapee is a shell line that starts a process out of the agent's reach
// by its process group and session: a double fork into a new session,
// whose parent exits at once, so the process is an orphan. It prints
// "escapee=<pid>" and, after a while, writes the file.
func escapee(file string) string {
	// The agent goes on only once the escapee runs, however loaded the
	// machine is.
	return fmt.Sprintf(`(setsid sh -c 'echo "escapee=$$"; touch %[1]s.started; sleep 2; echo late > %[1]s' &) ; while [ ! -e %[1]s.started ]; do sleep 0.05; done`, file)
}

// startEscapee runs script (which must start escapee(file)) with StartPipe
// or Start, and returns the process and the escapee's pid.
func startEscapee(t *testing.T, ctx context.Context, pty bool, script string) (*Process, int) {
	t.Helper()
	pids := make(chan int, 4)
	parse := func(line string) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "escapee="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				pids <- n
			}
		}
	}
	var p *Process
	var err error
	if pty {
		var buf strings.Builder
		p, err = Start(ctx, Options{Path: "/bin/sh", Args: []string{"-c", script}, Emit: func(ev agents.Event) {
			buf.WriteString(ev.Data.(wire.TerminalOutput).Text)
			for _, l := range strings.Split(buf.String(), "\n") {
				parse(l)
			}
		}})
	} else {
		p, err = StartPipe(ctx, PipeOptions{Path: "/bin/sh", Args: []string{"-c", script}, Line: func(b []byte) { parse(string(b)) }})
	}
	if err != nil {
		t.Fatal(err)
	}
	select {
	case pid := <-pids:
		if !alive(pid) {
			t.Fatalf("escapee %d is not running", pid)
		}
		if pgid, _ := syscall.Getpgid(pid); pgid == p.Pid() {
			t.Fatalf("escapee %d is in the agent's process group: the test proves nothing", pid)
		}
		return p, pid
	case <-time.After(20 * time.Second):
		_ = p.Kill()
		t.Fatal("the escapee did not start")
		return nil, 0
	}
}

// noLateWrite checks that file is never written: its writer was due 2 s
// after it started.
func noLateWrite(t *testing.T, file string) {
	t.Helper()
	time.Sleep(3 * time.Second)
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s was written after the turn ended (stat: %v)", file, err)
	}
}

// Kill ends a process that left the agent's process group and session,
// and Wait returns only once it is dead: it never writes its file.
func TestKillEndsEscapedDescendants(t *testing.T) {
	for _, pty := range []bool{false, true} {
		t.Run(fmt.Sprintf("pty=%v", pty), func(t *testing.T) {
			ctx := testContext(t)
			file := filepath.Join(t.TempDir(), "late")
			p, pid := startEscapee(t, ctx, pty, escapee(file)+`; echo up; sleep 300`)
			if err := p.Kill(); err != nil {
				t.Fatal(err)
			}
			res := waitDone(t, p, 20*time.Second)
			if !res.Killed || !errors.Is(res.Err, ErrKilled) || res.Signal != syscall.SIGKILL {
				t.Fatalf("result %+v, want killed by SIGKILL", res)
			}
			if alive(pid) {
				t.Fatalf("escapee %d survived the kill", pid)
			}
			if left := Descendants(p.Pid()); len(left) > 0 {
				t.Fatalf("processes %v survived", left)
			}
			noLateWrite(t, file)
		})
	}
}

// When the agent exits on its own, what it left running ends with it.
func TestExitEndsEscapedDescendants(t *testing.T) {
	ctx := testContext(t)
	file := filepath.Join(t.TempDir(), "late")
	p, pid := startEscapee(t, ctx, false, escapee(file)+`; exit 4`)
	res := waitDone(t, p, 20*time.Second)
	if res.Killed || res.ExitCode != 4 {
		t.Fatalf("result %+v, want the agent's own exit status 4", res)
	}
	if alive(pid) {
		t.Fatalf("escapee %d outlived the turn", pid)
	}
	noLateWrite(t, file)
}

// A turn's kill touches only that turn's processes.
func TestKillIsPerTurn(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	p1, pid1 := startEscapee(t, ctx, false, escapee(filepath.Join(dir, "one"))+`; sleep 300`)
	p2, pid2 := startEscapee(t, ctx, false, escapee(filepath.Join(dir, "two"))+`; sleep 300`)
	defer p2.Kill()
	if err := p1.Kill(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, p1, 20*time.Second)
	if alive(pid1) || !alive(pid2) {
		t.Fatalf("after killing turn 1: escapee 1 alive=%v, escapee 2 alive=%v", alive(pid1), alive(pid2))
	}
}

// A fork loop does not outrun the kill.
func TestKillEndsForkLoop(t *testing.T) {
	ctx := testContext(t)
	p, err := StartPipe(ctx, PipeOptions{Path: "/bin/sh", Args: []string{"-c",
		`(setsid sh -c 'for i in $(seq 1 5000); do (sleep 5 &) ; done' &); echo up; sleep 300`}, Line: func([]byte) {}})
	if err != nil {
		t.Fatal(err)
	}
	reaper := p.Pid()
	for deadline := time.Now().Add(20 * time.Second); len(Descendants(reaper)) < 10; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = p.Kill()
			t.Fatalf("the fork loop did not start: %v", Descendants(reaper))
		}
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, p, 30*time.Second)
	if left := Descendants(reaper); len(left) > 0 {
		t.Fatalf("processes %v survived", left)
	}
}

// The daemon worker killed outright (kill -9): its agents' reapers see
// their control pipes close and end everything below them.
func TestWorkerDeathEndsTree(t *testing.T) {
	if os.Getenv("PTYRUN_TEST_WORKER") != "" {
		worker()
		return
	}
	file := filepath.Join(t.TempDir(), "late")
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerDeathEndsTree$")
	cmd.Env = append(os.Environ(), "PTYRUN_TEST_WORKER="+file)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	pid := 0
	deadline := time.AfterFunc(20*time.Second, func() { _ = cmd.Process.Kill() })
	for pid == 0 && sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "escapee="); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	deadline.Stop()
	if pid == 0 || !alive(pid) {
		t.Fatalf("the worker did not report a running escapee (%d)", pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitDead(t, pid)
	noLateWrite(t, file)
}

// worker is the test's stand-in for a daemon worker: it starts a turn and
// waits to be killed.
func worker() {
	file := os.Getenv("PTYRUN_TEST_WORKER")
	_, err := StartPipe(context.Background(), PipeOptions{Path: "/bin/sh", Args: []string{"-c", escapee(file) + `; sleep 300`},
		Line: func(b []byte) { fmt.Println(string(b)) }})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	time.Sleep(time.Minute)
	os.Exit(0)
}

// The agent does not see the reaper's marker or its pipes.
func TestAgentSeesNoReaper(t *testing.T) {
	ctx := testContext(t)
	var lines []string
	p, err := StartPipe(ctx, PipeOptions{Path: "/bin/sh", Args: []string{"-c",
		`env | grep -c REAPER; readlink /proc/$$/fd/3 /proc/$$/fd/4; echo "fds=$?"; echo "ppid=$PPID"`},
		Line: func(b []byte) { lines = append(lines, string(b)) }})
	if err != nil {
		t.Fatal(err)
	}
	if res := waitDone(t, p, 20*time.Second); res.ExitCode != 0 {
		t.Fatalf("result %+v, lines %q", res, lines)
	}
	if len(lines) != 3 || lines[0] != "0" || lines[1] != "fds=1" {
		t.Fatalf("lines %q: want no marker and no fds 3 or 4", lines)
	}
	if lines[2] != fmt.Sprintf("ppid=%d", p.Pid()) {
		t.Fatalf("%s, want the reaper %d as the parent", lines[2], p.Pid())
	}
}

// The reaper's cost per turn: starting and waiting for /bin/true under
// StartPipe (reaper, pipes, drainers) against a bare exec of it.
func BenchmarkStartUnderReaper(b *testing.B) {
	b.Run("baseline-exec", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("startpipe-reaper", func(b *testing.B) {
		for b.Loop() {
			p, err := StartPipe(context.Background(), PipeOptions{Path: "/bin/true"})
			if err != nil {
				b.Fatal(err)
			}
			if r := p.Wait(); r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	})
}
