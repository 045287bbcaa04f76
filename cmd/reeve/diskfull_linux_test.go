package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The disk of the daemon home fills while a session writes output, and the
// agent then exits: `wait` returns at once with the session failed (it used
// to hang on a session "running" for ever), and once there is space again
// the log holds a marker of the lost output and the end. Mounting a small
// tmpfs needs root; scripts/attack.sh runs it (REEVE_ATTACK=1).
func TestDiskFullSessionEnds(t *testing.T) {
	if os.Getenv("REEVE_ATTACK") == "" {
		t.Skip("an attack test: run by scripts/attack.sh (REEVE_ATTACK=1)")
	}
	h := newHome(t)
	// The home holds a copy of the binary (the hook program), so the
	// tmpfs is sized for it and then filled.
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", h.dir, "tmpfs", 0, "size=160m,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs for the home (needs root or CAP_SYS_ADMIN): %v", err)
	}
	// Registered before newHome's stop runs (cleanups run last-first), so
	// the daemon is gone before the unmount.
	t.Cleanup(func() { syscall.Unmount(h.dir, syscall.MNT_DETACH) })
	t.Cleanup(func() { h.run("stop", "--force", "--timeout", "10") })
	h.start()

	flag := filepath.Join(t.TempDir(), "finish")
	prompt := fmt.Sprintf(`echo before-the-disk-filled; while [ ! -e %s ]; do echo some-output-that-is-lost-when-the-disk-is-full; sleep 0.02; done; echo after`, flag)
	sid := strings.TrimSpace(h.must("run", t.TempDir(), "--agent", "shell", "--prompt", prompt).stdout)
	waitFor(t, "the session's first output", 60*time.Second, func() bool {
		return strings.Contains(h.run("logs", sid).stdout, "before-the-disk-filled")
	})

	filler := filepath.Join(h.dir, "filler")
	fillDisk(t, filler)
	time.Sleep(2 * time.Second) // the agent goes on writing into a full disk
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	r := h.run("wait", sid, "--timeout", "60")
	if time.Since(start) > 50*time.Second || !strings.Contains(r.stderr, "failed") ||
		!strings.Contains(r.stderr, "could not record it") {
		t.Fatalf("wait on a full disk took %s: exit %d\n%s%s", time.Since(start), r.code, r.stdout, r.stderr)
	}
	t.Logf("wait: exit %d after %s: %s", r.code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(r.stderr))
	var list struct {
		Sessions []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"sessions"`
	}
	ls := h.must("ls", "--json")
	if err := json.Unmarshal([]byte(ls.stdout), &list); err != nil || len(list.Sessions) != 1 || list.Sessions[0].Status != "failed" {
		t.Fatalf("ls on a full disk: %v %s", err, ls.stdout)
	}
	if r := h.run("session", "stop", sid); r.code == 0 {
		t.Fatalf("stop of an ended session succeeded: %s", r.stderr)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var logs string
	waitFor(t, "the lost-output marker and the end in the log", 60*time.Second, func() bool {
		logs = h.run("logs", sid, "--json").stdout
		return strings.Contains(logs, `"output-lost"`) && strings.Contains(logs, `"status":"failed"`)
	})
	if i, j := strings.Index(logs, `"output-lost"`), strings.LastIndex(logs, `"status":"failed"`); i > j {
		t.Fatalf("the end precedes the marker:\n%s", logs)
	}
	t.Logf("marker: %s", lineWith(logs, `"output-lost"`))
	// The daemon works on: a new session runs and ends.
	if r := h.run("run", t.TempDir(), "--agent", "shell", "--prompt", "echo fine", "--wait"); r.code != 0 {
		t.Fatalf("a session after space returned: exit %d %s", r.code, r.stderr)
	}
}

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// fillDisk writes path until its file system has no space left.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{'x'}, 1<<20)
	for _, n := range []int{1 << 20, 4096, 1} {
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("fill: %v", err)
				}
				break
			}
		}
	}
}
