package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/syncbuf"
)

func newHome(t *testing.T) home.Dir {
	d := home.Dir(t.TempDir())
	if err := d.Prepare(); err != nil {
		t.Fatal(err)
	}
	return d
}

// A worker that reports ready and then dies at once is restarted with a
// growing backoff, and every restart is logged with its reason.
func TestRestartsWithGrowingBackoff(t *testing.T) {
	dir := newHome(t)
	log := &syncbuf.Buffer{}
	statusR, statusW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Home:       dir,
			Executable: "/bin/sh",
			WorkerArgs: []string{"-c", `echo '{"ready":true,"pid":1}' >&3; echo crashing; exit 7`},
			Log:        log, Status: statusW,
			MinBackoff: 20 * time.Millisecond, MaxBackoff: 80 * time.Millisecond,
		})
	}()
	line, err := bufio.NewReader(statusR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var r wire.Readiness
	if json.Unmarshal([]byte(line), &r); !r.Ready {
		t.Fatalf("first readiness not relayed: %q", line)
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(log.String(), "restarting in") < 5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	waits := regexp.MustCompile(`exited: exit status 7; restarting in (\S+)`).FindAllStringSubmatch(log.String(), -1)
	if len(waits) < 5 {
		t.Fatalf("want at least 5 logged restarts, got:\n%s", log)
	}
	want := []string{"20ms", "40ms", "80ms", "80ms"}
	for i, w := range want {
		if waits[i][1] != w {
			t.Errorf("restart %d waited %s, want %s", i+1, waits[i][1], w)
		}
	}
	if !strings.Contains(log.String(), "crashing") {
		t.Error("worker output is not in the log")
	}
	if _, err := os.Stat(dir.SupervisorPIDFile()); err == nil {
		t.Error("pidfile left after Run returned")
	}
}

// A first worker that fails before it is ready ends the supervisor with the
// worker's reason instead of a restart loop.
func TestFirstFailureIsNotRetried(t *testing.T) {
	dir := newHome(t)
	log := &syncbuf.Buffer{}
	err := Run(context.Background(), Options{
		Home:       dir,
		Executable: "/bin/sh",
		WorkerArgs: []string{"-c", `echo '{"error":"listen 127.0.0.1:1: port 1 is already in use","fatal":true}' >&3; exit 20`},
		Log:        log, MinBackoff: time.Millisecond,
	})
	if err == nil || !strings.Contains(err.Error(), "port 1 is already in use") {
		t.Fatalf("Run: %v", err)
	}
	if strings.Contains(log.String(), "restarting") {
		t.Errorf("retried a fatal first failure:\n%s", log)
	}
}

// A second supervisor on the same home refuses to run.
func TestOneSupervisorPerHome(t *testing.T) {
	dir := newHome(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	statusR, statusW := io.Pipe()
	go Run(ctx, Options{Home: dir, Executable: "/bin/sh", WorkerArgs: []string{"-c", `echo '{"ready":true}' >&3; exec sleep 60`}, Status: statusW})
	bufio.NewReader(statusR).ReadString('\n')
	err := Run(context.Background(), Options{Home: dir, Executable: "/bin/true"})
	if err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second supervisor: %v", err)
	}
}

// Stopping drains a worker that ignores SIGTERM by killing it after the
// drain timeout.
func TestDrainKillsStubbornWorker(t *testing.T) {
	dir := newHome(t)
	log := &syncbuf.Buffer{}
	statusR, statusW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Home: dir, Executable: "/bin/sh",
			WorkerArgs: []string{"-c", `trap '' TERM; echo '{"ready":true}' >&3; while :; do sleep 0.05; done`},
			Log:        log, Status: statusW, DrainTimeout: 300 * time.Millisecond,
		})
	}()
	bufio.NewReader(statusR).ReadString('\n')
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("supervisor did not finish draining")
	}
	if !strings.Contains(log.String(), "did not stop within") {
		t.Errorf("log does not report the kill:\n%s", log)
	}
}
