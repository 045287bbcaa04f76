package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// reeveBin is the binary under test, built once per test run exactly as a
// user would build it.
var reeveBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "reeve-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	reeveBin = filepath.Join(dir, "reeve")
	build := goBuild("-o", reeveBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build reeve:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// goBuild returns `go build ARGS` the way the README builds reeve: without
// cgo, so the binary is static and its start skips the dynamic loader and
// libc (nothing reeve links needs cgo on Linux: DNS and user lookups have
// pure-Go forms, the keychain is D-Bus). The start-up benchmark's baselines
// are built the same way.
func goBuild(args ...string) *exec.Cmd {
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

// result is one finished invocation of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// daemonHome is an isolated daemon home for one test.
type daemonHome struct {
	t   *testing.T
	dir string
	// env, when set, replaces the test process's environment for every
	// command (and so for the daemon and its agents).
	env []string
	// bin, when set, is the reeve binary run instead of reeveBin.
	bin string
}

func newHome(t *testing.T) *daemonHome {
	t.Helper()
	h := &daemonHome{t: t, dir: filepath.Join(t.TempDir(), "home")}
	t.Cleanup(func() {
		// Never leave a daemon behind, whatever the test did.
		h.run("stop", "--force", "--timeout", "10")
	})
	return h
}

// run invokes reeve with this home and a bounded time.
func (h *daemonHome) run(args ...string) result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	bin := reeveBin
	if h.bin != "" {
		bin = h.bin
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(h.baseEnv(), "REEVE_HOME="+h.dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		h.t.Fatalf("run reeve %v: %v", args, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// must runs reeve and fails the test unless it exits 0.
func (h *daemonHome) must(args ...string) result {
	h.t.Helper()
	r := h.run(args...)
	if r.code != 0 {
		h.t.Fatalf("reeve %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// start launches a background daemon on a free loopback port.
func (h *daemonHome) start(extra ...string) result {
	h.t.Helper()
	args := append([]string{"start", "--listen", "127.0.0.1:0"}, extra...)
	return h.must(args...)
}

type statusJSON struct {
	State     string `json:"state"`
	Lifecycle struct {
		SupervisorAlive bool `json:"supervisor_alive"`
		SupervisorPID   int  `json:"supervisor_pid"`
		WorkerAlive     bool `json:"worker_alive"`
		WorkerPID       int  `json:"worker_pid"`
	} `json:"lifecycle"`
	Reachability struct {
		Network   string `json:"network"`
		Address   string `json:"address"`
		Reachable bool   `json:"reachable"`
	} `json:"reachability"`
	Health *struct {
		Status        string `json:"status"`
		Version       string `json:"version"`
		WorkerPID     int    `json:"worker_pid"`
		SupervisorPID int    `json:"supervisor_pid"`
		Sessions      int    `json:"sessions"`
	} `json:"health"`
}

func (h *daemonHome) status() (statusJSON, int) {
	h.t.Helper()
	r := h.run("status", "--json")
	var st statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		h.t.Fatalf("status --json: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	return st, r.code
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *daemonHome) file(name string) string { return filepath.Join(h.dir, name) }

// processRuns reports whether pid is a live process; a zombie waiting for
// its reaper has already exited.
func processRuns(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

func (h *daemonHome) baseEnv() []string {
	if h.env != nil {
		return h.env
	}
	return os.Environ()
}
