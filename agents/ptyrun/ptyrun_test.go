package ptyrun

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// recorder collects terminal-output events.
type recorder struct {
	mu     sync.Mutex
	events []wire.TerminalOutput
	seen   chan struct{} // signalled on every event
}

func newRecorder() *recorder { return &recorder{seen: make(chan struct{}, 1)} }

func (r *recorder) emit(ev agents.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out, ok := ev.Data.(wire.TerminalOutput)
	if ev.Kind != wire.KindTerminalOutput || !ok {
		panic(fmt.Sprintf("unexpected event %s %T", ev.Kind, ev.Data))
	}
	r.events = append(r.events, out)
	select {
	case r.seen <- struct{}{}:
	default:
	}
}

// bytes rebuilds the exact output from Text and Base64 chunks.
func (r *recorder) bytes(t *testing.T) []byte {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var b []byte
	for _, e := range r.events {
		if (e.Text == "") == (e.Base64 == "") {
			t.Fatalf("event has both or neither of text and base64: %+v", e)
		}
		if e.Text != "" {
			if !utf8.ValidString(e.Text) {
				t.Fatalf("text chunk is not valid UTF-8: %q", e.Text)
			}
			b = append(b, e.Text...)
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(e.Base64)
		if err != nil {
			t.Fatalf("bad base64 %q: %v", e.Base64, err)
		}
		b = append(b, raw...)
	}
	return b
}

// waitFor waits until the output matches re.
func (r *recorder) waitFor(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if m := re.FindStringSubmatch(string(r.bytes(t))); m != nil {
			return m
		}
		select {
		case <-r.seen:
		case <-deadline:
			t.Fatalf("output never matched %s; got %q", re, r.bytes(t))
		}
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func startSh(t *testing.T, ctx context.Context, script string, rec *recorder) *Process {
	t.Helper()
	p, err := Start(ctx, Options{Path: "/bin/sh", Args: []string{"-c", script}, Dir: t.TempDir(), Emit: rec.emit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill(); p.Wait() })
	return p
}

// waitDone bounds Wait so that a hang fails the test instead of the run.
func waitDone(t *testing.T, p *Process, within time.Duration) Result {
	t.Helper()
	select {
	case <-p.Done():
		return p.Wait()
	case <-time.After(within):
		t.Fatalf("process %d did not end within %s", p.Pid(), within)
		return Result{}
	}
}

// A process that prints a lot and exits at once: every byte arrives,
// including the last ones written just before exit.
func TestPTYTailNotLostOnFastExit(t *testing.T) {
	ctx := testContext(t)
	for i := range 5 {
		rec := newRecorder()
		p := startSh(t, ctx, `seq 1 20000; printf 'THE-END'`, rec)
		res := waitDone(t, p, 20*time.Second)
		if res.Err != nil || res.ExitCode != 0 {
			t.Fatalf("run %d: result %+v", i, res)
		}
		out := strings.ReplaceAll(string(rec.bytes(t)), "\r\n", "\n")
		if !strings.HasSuffix(out, "19999\n20000\nTHE-END") {
			t.Fatalf("run %d: output tail lost: ends %q", i, out[max(0, len(out)-40):])
		}
		if strings.Count(out, "\n") != 20000 {
			t.Fatalf("run %d: want 20000 lines, got %d", i, strings.Count(out, "\n"))
		}
	}
}

// A character split across two writes (and so two reads) is never split
// across two Text chunks.
func TestPTYMultiByteCharacterAcrossReads(t *testing.T) {
	ctx := testContext(t)
	rec := newRecorder()
	// é is \303\251, 😀 is \360\237\230\200; each is cut in the middle, with
	// a pause so the reader sees the first half on its own.
	p := startSh(t, ctx, `printf 'caf\303'; sleep 0.3; printf '\251 \360\237'; sleep 0.3; printf '\230\200!'`, rec)
	if res := waitDone(t, p, 20*time.Second); res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	if got := string(rec.bytes(t)); got != "café 😀!" {
		t.Fatalf("output %q, want %q", got, "café 😀!")
	}
	for _, e := range rec.events {
		if e.Base64 != "" {
			t.Errorf("valid UTF-8 went to base64: %+v", rec.events)
		}
	}
	if len(rec.events) < 2 {
		t.Fatalf("want the output in several chunks (the pauses split it), got %+v", rec.events)
	}
}

func TestChunkerEverySplit(t *testing.T) {
	input := []byte("aé€😀b\xff\xfec😀")
	for i := 0; i <= len(input); i++ {
		for j := i; j <= len(input); j++ {
			var got []wire.TerminalOutput
			c := &utf8Chunker{emit: func(ev agents.Event) { got = append(got, ev.Data.(wire.TerminalOutput)) }}
			c.write(input[:i])
			c.write(input[i:j])
			c.write(input[j:])
			c.flush()
			var all []byte
			for _, e := range got {
				if e.Text != "" {
					if !utf8.ValidString(e.Text) {
						t.Fatalf("split %d,%d: invalid text chunk %q", i, j, e.Text)
					}
					all = append(all, e.Text...)
				} else {
					b, _ := base64.StdEncoding.DecodeString(e.Base64)
					if utf8.Valid(b) {
						t.Fatalf("split %d,%d: valid UTF-8 in base64: %q", i, j, b)
					}
					all = append(all, b...)
				}
			}
			if !bytes.Equal(all, input) {
				t.Fatalf("split %d,%d: rebuilt %q, want %q", i, j, all, input)
			}
		}
	}
	// A truncated character at the very end comes out at flush, as bytes.
	var got []wire.TerminalOutput
	c := &utf8Chunker{emit: func(ev agents.Event) { got = append(got, ev.Data.(wire.TerminalOutput)) }}
	c.write([]byte("ok\xe2\x82"))
	if len(got) != 1 || got[0].Text != "ok" {
		t.Fatalf("before flush: %+v", got)
	}
	c.flush()
	if len(got) != 2 || got[1].Base64 != base64.StdEncoding.EncodeToString([]byte("\xe2\x82")) {
		t.Fatalf("after flush: %+v", got)
	}
}

// Bytes that are not UTF-8 arrive exactly, in Base64.
func TestPTYInvalidUTF8GoesToBase64(t *testing.T) {
	ctx := testContext(t)
	rec := newRecorder()
	p := startSh(t, ctx, `printf '\377\376\000bin\300'`, rec)
	if res := waitDone(t, p, 20*time.Second); res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	want := []byte("\xff\xfe\x00bin\xc0")
	if got := rec.bytes(t); !bytes.Equal(got, want) {
		t.Fatalf("output %q, want %q", got, want)
	}
	b64 := false
	for _, e := range rec.events {
		b64 = b64 || e.Base64 != ""
	}
	if !b64 {
		t.Fatalf("no base64 chunk in %+v", rec.events)
	}
}

func TestPTYInputReachesProgram(t *testing.T) {
	ctx := testContext(t)
	rec := newRecorder()
	p := startSh(t, ctx, `printf 'ready\n'; read line; echo "got:[$line]"; [ -t 0 ] && echo on-a-tty; stty size`, rec)
	rec.waitFor(t, regexp.MustCompile(`ready`))
	if err := p.Input([]byte("hello there\n")); err != nil {
		t.Fatal(err)
	}
	res := waitDone(t, p, 20*time.Second)
	if res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	out := string(rec.bytes(t))
	for _, want := range []string{"got:[hello there]", "on-a-tty", "40 120"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
	if err := p.Input([]byte("late\n")); err == nil {
		t.Error("Input after the end succeeded")
	}
}

// Kill ends the whole process group: a grandchild dies too.
func TestPTYKillKillsProcessGroup(t *testing.T) {
	ctx := testContext(t)
	rec := newRecorder()
	p := startSh(t, ctx, `sleep 300 & echo "child=$!"; wait`, rec)
	m := rec.waitFor(t, regexp.MustCompile(`child=(\d+)`))
	child, _ := strconv.Atoi(m[1])
	if !alive(child) {
		t.Fatalf("grandchild %d not running before Kill", child)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	res := waitDone(t, p, 10*time.Second)
	if !res.Killed || res.Signal != syscall.SIGKILL || res.ExitCode != -1 || !errors.Is(res.Err, ErrKilled) {
		t.Fatalf("result %+v, want killed by SIGKILL", res)
	}
	waitDead(t, child)
	if err := p.Kill(); err != nil {
		t.Fatalf("Kill after the end: %v", err)
	}
}

func TestPTYContextEndKills(t *testing.T) {
	ctx, cancel := context.WithCancel(testContext(t))
	rec := newRecorder()
	p := startSh(t, ctx, `echo up; sleep 300`, rec)
	rec.waitFor(t, regexp.MustCompile(`up`))
	cancel()
	res := waitDone(t, p, 10*time.Second)
	if !res.Killed || res.Signal != syscall.SIGKILL {
		t.Fatalf("result %+v, want killed", res)
	}
}

func TestPTYTerminateIsGraceful(t *testing.T) {
	ctx := testContext(t)
	rec := newRecorder()
	p := startSh(t, ctx, `trap 'echo bye; exit 7' TERM; echo up; while :; do sleep 0.05; done`, rec)
	rec.waitFor(t, regexp.MustCompile(`up`))
	if err := p.Terminate(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	res := waitDone(t, p, 10*time.Second)
	if res.ExitCode != 7 || !res.Killed || !strings.Contains(string(rec.bytes(t)), "bye") {
		t.Fatalf("result %+v, output %q: want the trap to run and exit 7", res, rec.bytes(t))
	}

	// One that ignores SIGTERM gets SIGKILL after the grace period.
	rec = newRecorder()
	p = startSh(t, ctx, `trap '' TERM; echo up; while :; do sleep 0.05; done`, rec)
	rec.waitFor(t, regexp.MustCompile(`up`))
	if err := p.Terminate(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if res := waitDone(t, p, 10*time.Second); res.Signal != syscall.SIGKILL {
		t.Fatalf("result %+v, want SIGKILL after grace", res)
	}
}

func TestPTYExitCodesAndSignals(t *testing.T) {
	ctx := testContext(t)
	cases := []struct {
		script string
		code   int
		sig    syscall.Signal
		err    string
	}{
		{`exit 0`, 0, 0, ""},
		{`exit 3`, 3, 0, "exit status 3"},
		{`kill -TERM $$`, -1, syscall.SIGTERM, "killed by signal terminated"},
	}
	for _, c := range cases {
		p := startSh(t, ctx, c.script, newRecorder())
		res := waitDone(t, p, 10*time.Second)
		errText := ""
		if res.Err != nil {
			errText = res.Err.Error()
		}
		if res.ExitCode != c.code || res.Signal != c.sig || errText != c.err || res.Killed {
			t.Errorf("%s: result %+v, want code %d signal %v err %q", c.script, res, c.code, c.sig, c.err)
		}
	}
	if _, err := Start(ctx, Options{Path: "/nonexistent/agent"}); err == nil || !strings.Contains(err.Error(), "/nonexistent/agent") {
		t.Errorf("start of a missing executable: %v", err)
	}
}

// A background child that ignores SIGHUP keeps the terminal open after
// its parent exited; Wait still returns, and the child is gone.
func TestPTYLeftoverChildDoesNotHangWait(t *testing.T) {
	ctx := testContext(t)
	rec := newRecorder()
	p, err := Start(ctx, Options{
		Path: "/bin/sh", Args: []string{"-c", `trap '' HUP; sleep 300 & echo "child=$!"`},
		Emit: rec.emit, DrainTimeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	res := waitDone(t, p, 10*time.Second)
	if res.Err != nil || res.Killed {
		t.Fatalf("result %+v, want a clean exit", res)
	}
	m := regexp.MustCompile(`child=(\d+)`).FindStringSubmatch(string(rec.bytes(t)))
	if m == nil {
		t.Fatalf("output %q", rec.bytes(t))
	}
	child, _ := strconv.Atoi(m[1])
	waitDead(t, child)
}

func TestPipeLinesAndStderr(t *testing.T) {
	ctx := testContext(t)
	var lines []string
	var raw bytes.Buffer
	p, err := StartPipe(ctx, PipeOptions{
		Path: "/bin/sh",
		Args: []string{"-c", `printf 'one\ntwo\r\n\n'; echo oops >&2; seq 1 5000 | tr -d '\n'; printf '\nlast-without-newline'; exit 2`},
		Line: func(b []byte) { lines = append(lines, string(b)) },
		Raw:  &raw,
	})
	if err != nil {
		t.Fatal(err)
	}
	res := waitDone(t, p, 10*time.Second)
	if res.ExitCode != 2 || res.Err == nil || res.Err.Error() != "exit status 2" {
		t.Fatalf("result %+v", res)
	}
	if res.Stderr != "oops\n" {
		t.Errorf("stderr %q", res.Stderr)
	}
	if len(lines) != 5 || lines[0] != "one" || lines[1] != "two" || lines[2] != "" || !strings.HasSuffix(lines[3], "49995000") || lines[4] != "last-without-newline" {
		t.Fatalf("lines %q", lines)
	}
	if !strings.HasPrefix(raw.String(), "one\ntwo\r\n\n") || !strings.HasSuffix(raw.String(), "\nlast-without-newline") {
		t.Fatalf("raw %q", raw.String())
	}
	if err := p.Input([]byte("x")); !errors.Is(err, agents.ErrNoInput) {
		t.Errorf("Input on a pipe process: %v", err)
	}
}

func TestPipeLongLineIsBounded(t *testing.T) {
	ctx := testContext(t)
	var lines []string
	p, err := StartPipe(ctx, PipeOptions{
		Path:    "/bin/sh",
		Args:    []string{"-c", `head -c 100000 /dev/zero | tr '\0' x; echo; echo next`},
		Line:    func(b []byte) { lines = append(lines, string(b)) },
		MaxLine: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, p, 10*time.Second)
	if len(lines) != 2 || len(lines[0]) != 1000 || lines[1] != "next" {
		t.Fatalf("got %d lines, first %d bytes: %q", len(lines), len(lines[0]), lines[1:])
	}
}

// A background child holding stdout open does not keep Wait from
// returning, and is killed with the group.
func TestPipeLeftoverChild(t *testing.T) {
	ctx := testContext(t)
	var lines []string
	p, err := StartPipe(ctx, PipeOptions{
		Path:         "/bin/sh",
		Args:         []string{"-c", `sleep 300 & echo "child=$!"`},
		Line:         func(b []byte) { lines = append(lines, string(b)) },
		DrainTimeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	res := waitDone(t, p, 10*time.Second)
	if res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "child=") {
		t.Fatalf("lines %q", lines)
	}
	child, _ := strconv.Atoi(strings.TrimPrefix(lines[0], "child="))
	waitDead(t, child)
}

func TestPipeKillKillsGroup(t *testing.T) {
	ctx := testContext(t)
	got := make(chan string, 1)
	p, err := StartPipe(ctx, PipeOptions{
		Path: "/bin/sh",
		Args: []string{"-c", `sleep 300 & echo "$!"; wait`},
		Line: func(b []byte) { got <- string(b) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var child int
	select {
	case s := <-got:
		child, _ = strconv.Atoi(s)
	case <-time.After(10 * time.Second):
		t.Fatal("no child pid")
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if res := waitDone(t, p, 10*time.Second); !res.Killed || !errors.Is(res.Err, ErrKilled) {
		t.Fatalf("result %+v", res)
	}
	waitDead(t, child)
}

// alive reports whether pid runs (a zombie has already died).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A program that closes its terminal and then goes on running must not be
// hung up: bash closes its descriptors before its exit handlers run, and a
// PTY master closed at that moment killed it with SIGHUP now and then.
func TestClosedTerminalIsNotHungUp(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				p, err := Start(context.Background(), Options{Path: bash, Args: []string{"-c", "rm -f /nonexistent-reeve-file"}})
				if err != nil {
					t.Error(err)
					return
				}
				if r := p.Wait(); r.Err != nil {
					mu.Lock()
					failures = append(failures, r.Err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of 200 runs failed, e.g. %s", len(failures), failures[0])
	}
}
