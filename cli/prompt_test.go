package cli

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/syncbuf"
)

// attachRig follows a fake session with stdin on a real terminal (a PTY):
// the test plays the person at the keyboard through the PTY's master.
type attachRig struct {
	t       *testing.T
	ptmx    *os.File
	tty     *os.File
	stream  *fakeStream
	daemon  *fakeDaemon
	errb    *syncbuf.Buffer
	out     *syncbuf.Buffer
	done    chan error
	decided chan wire.RespondPermissionRequest
}

func newAttachRig(t *testing.T, noInput bool) *attachRig {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	r := &attachRig{t: t, ptmx: ptmx, tty: tty, stream: newStream(), done: make(chan error, 1), decided: make(chan wire.RespondPermissionRequest, 8)}
	var mu sync.Mutex
	r.daemon = &fakeDaemon{
		session:   func(string) (wire.SessionInfo, error) { return wire.SessionInfo{ID: "S1"}, nil },
		subscribe: func(string, int64) (Stream, error) { return r.stream, nil },
		respond: func(req wire.RespondPermissionRequest) (wire.PermissionDecision, error) {
			mu.Lock()
			defer mu.Unlock()
			r.decided <- req
			return wire.PermissionDecision{RequestID: req.RequestID, Decision: req.Decision, DecidedBy: "human", Tool: "Bash"}, nil
		},
	}
	cmd, out, errb := testCmd(t, r.daemon)
	cmd.env.In = tty
	r.out, r.errb = out, errb
	go func() {
		r.done <- runLogs(context.Background(), &logsOptions{daemonCmd: cmd, sessionID: "S1", follow: true, noInput: noInput})
	}()
	return r
}

func (r *attachRig) request(seq int64, id, cmd string) {
	r.stream.send("S1", seq, wire.KindPermissionRequest, wire.PermissionRequest{ID: id, SessionID: "S1", Tool: "Bash", Input: json.RawMessage(`{"command":"` + cmd + `"}`)})
}

func (r *attachRig) waitErr(what string) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(r.errb.String(), what) {
		if time.Now().After(deadline) {
			r.t.Fatalf("stderr never said %q:\n%s", what, r.errb)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *attachRig) key(k string) { r.ptmx.Write([]byte(k)) }

func (r *attachRig) decision() wire.RespondPermissionRequest {
	r.t.Helper()
	select {
	case d := <-r.decided:
		return d
	case <-time.After(10 * time.Second):
		r.t.Fatal("no decision was sent")
		return wire.RespondPermissionRequest{}
	}
}

func (r *attachRig) finish() error {
	r.stream.end(&wire.SessionEnded{SessionID: "S1", Status: "completed"}, nil)
	select {
	case err := <-r.done:
		return err
	case <-time.After(10 * time.Second):
		r.t.Fatal("attach did not end")
		return nil
	}
}

// On a terminal, attach asks about each permission request with one key:
// y allows, n denies, s leaves it waiting; keys pressed while nothing is
// asked do nothing; a request decided elsewhere leaves the prompt; the
// terminal is as it was afterwards.
func TestAttachPromptDecidesWithOneKey(t *testing.T) {
	r := newAttachRig(t, false)
	before, err := unix.IoctlGetTermios(int(r.tty.Fd()), ioctlGetTermios)
	if err != nil {
		t.Fatal(err)
	}

	r.request(1, "R1", "make build")
	r.waitErr("Bash {\"command\":\"make build\"} — allow? [y] allow  [n] deny  [s] skip")
	if strings.Contains(r.errb.String(), "reeve permit allow R1    deny it") {
		t.Fatal("the terminal hint replaced the prompt")
	}
	r.key("y")
	if d := r.decision(); d.RequestID != "R1" || d.Decision != "allow" {
		t.Fatalf("decision %+v", d)
	}
	r.waitErr("allowed request R1")
	r.stream.send("S1", 2, wire.KindPermissionDecision, wire.PermissionDecision{RequestID: "R1", Decision: "allow", DecidedBy: "human"})

	r.request(3, "R2", "rm -rf /")
	r.waitErr("rm -rf /\"} — allow?")
	r.key("x") // not an answer
	r.key("n")
	if d := r.decision(); d.RequestID != "R2" || d.Decision != "deny" || !strings.Contains(d.Reason, "denied at the terminal") {
		t.Fatalf("decision %+v", d)
	}
	r.waitErr("denied request R2")

	r.request(4, "R3", "ls")
	r.waitErr("\"ls\"} — allow?")
	r.key("s")
	r.waitErr("request R3 still waits: reeve permit allow R3")

	r.request(5, "R4", "pwd")
	r.waitErr("\"pwd\"} — allow?")
	r.stream.send("S1", 6, wire.KindPermissionDecision, wire.PermissionDecision{RequestID: "R4", Decision: "deny", DecidedBy: "timeout"})
	r.waitErr("request R4 was decided: deny by timeout")
	r.key("y") // too late: nothing is asked
	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-r.decided:
		t.Fatalf("a decision after the prompt was gone: %+v", d)
	default:
	}
	after, _ := unix.IoctlGetTermios(int(r.tty.Fd()), ioctlGetTermios)
	if after.Lflag != before.Lflag {
		t.Fatalf("terminal modes %x, were %x", after.Lflag, before.Lflag)
	}
}

// With --no-input (or when stdin is not a terminal) nothing is asked: the
// request is announced with the commands that decide it.
func TestAttachNoInput(t *testing.T) {
	r := newAttachRig(t, true)
	r.request(1, "R1", "make")
	r.waitErr("reeve permit allow R1    deny it: reeve permit deny R1")
	r.key("y")
	time.Sleep(50 * time.Millisecond)
	if err := r.finish(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.errb.String(), "allow?") || len(r.decided) != 0 {
		t.Fatalf("asked anyway:\n%s", r.errb)
	}
}
