package store

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The kill -9 test re-executes this test binary; TestMain turns the child into
// an appender that reports each acknowledged event on stdout.
const (
	crashChildEnv   = "REEVE_STORE_CRASH_CHILD_DB"
	crashSessionEnv = "REEVE_STORE_CRASH_CHILD_SESSION"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		os.Exit(crashChild(path, os.Getenv(crashSessionEnv)))
	}
	os.Exit(m.Run())
}

// crashChild appends forever from several goroutines and prints
// "seq producer index" for every Append that returned success. A line is
// written only after the acknowledgement, so the parent's set of lines is a
// subset of what the store promised to keep.
func crashChild(path, sessionID string) int {
	ctx := context.Background()
	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var mu sync.Mutex
	for p := range 16 {
		go func() {
			for i := 0; ; i++ {
				e, err := s.Append(ctx, sessionID, "terminal-output", json.RawMessage(fmt.Sprintf(`{"p":%d,"i":%d}`, p, i)))
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "%d %d %d\n", e.Seq, p, i)
				mu.Unlock()
			}
		}()
	}
	// Never expected to get here: the parent kills us. The bound keeps an
	// orphan from running forever if the parent dies first.
	time.Sleep(60 * time.Second)
	return 3
}

func TestAcknowledgedEventsSurviveKill9(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "reeve.db")
	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	sess := newSession(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path, crashSessionEnv+"="+sess.ID)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[int64]string{}
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			t.Fatalf("child printed %q", sc.Text())
		}
		seq, _ := strconv.ParseInt(f[0], 10, 64)
		acked[seq] = fmt.Sprintf(`{"p":%s,"i":%s}`, f[1], f[2])
		if !killed && len(acked) >= 3000 {
			// Mid-stream: producers are blocked inside Append, a batch is
			// being written, and more lines are still in the pipe.
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("child exited before the kill: %v\n%s", err, stderr.String())
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed by SIGKILL: %v\n%s", cmd.ProcessState, stderr.String())
	}

	s = openAt(t, path)
	evs, err := s.Events(ctx, sess.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("stored log has seq %d at position %d: not gap-free", e.Seq, i)
		}
	}
	for seq, data := range acked {
		if seq > int64(len(evs)) {
			t.Fatalf("acknowledged seq %d lost: the log ends at %d", seq, len(evs))
		}
		if got := string(evs[seq-1].Data); got != data {
			t.Fatalf("seq %d: stored %s, acknowledged %s", seq, got, data)
		}
	}
	t.Logf("%d acknowledged before the kill, %d on disk after it", len(acked), len(evs))
	// The log continues where the crash left it.
	e, err := s.Append(ctx, sess.ID, "status", nil)
	if err != nil || e.Seq != int64(len(evs))+1 {
		t.Fatalf("append after recovery: %+v %v", e, err)
	}
	// The kill came after several seals (seal.go) and mid-tail: every
	// event is in exactly one of event_seqs and the tail.
	if sealed, tail := sealCounts(t, s); sealed+tail != len(evs)+1 || sealed == 0 {
		t.Fatalf("after recovery %d events are sealed and %d in the tail, want %d in all, some sealed", sealed, tail, len(evs)+1)
	}
}
