package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// smallDisk mounts a tmpfs of size bytes for the test, or skips saying why
// it cannot (mounting needs root, or CAP_SYS_ADMIN).
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill (needs root or CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file until the file system has no space left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{'x'}, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			// Then the last few bytes a partial write left.
			for _, n := range []int{4096, 512, 1} {
				for {
					if _, err := f.Write(chunk[:n]); err != nil {
						break
					}
				}
			}
			return
		}
	}
}

// On a real, full file system: appends fail, the end is kept (in memory
// and in the file allocated beforehand), readers see it, and it is written
// once space returns, or by the next Open if the process ends first.
func TestDiskFullOnTmpfs(t *testing.T) {
	fastSettle(t)
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			ctx := context.Background()
			disk := smallDisk(t, 4<<20)
			path := filepath.Join(disk, "reeve.db")
			s, err := Open(ctx, Options{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			sess := newSession(t, s)
			if _, err := s.UpdateSessionStatus(ctx, sess.ID, StatusRunning, ""); err != nil {
				t.Fatal(err)
			}
			filler := filepath.Join(disk, "filler")
			fill(t, filler)

			// Appends fail once SQLite needs a page it cannot get (the WAL
			// may still have room at first).
			chunk := []byte(`{"text":"` + strings.Repeat("y", 4000) + `"}`)
			var appendErr error
			for i := 0; i < 5000 && appendErr == nil; i++ {
				_, appendErr = s.Append(ctx, sess.ID, "terminal-output", chunk)
			}
			if appendErr == nil {
				t.Fatal("5000 appends of 4 KB succeeded on a full 4 MiB disk")
			}
			t.Logf("append on a full disk: %v", appendErr)

			// The status update may find room in the WAL; the end must
			// hold either way, and the test cares about the case where it
			// does not, so it is forced by more appends first.
			_, err = s.UpdateSessionStatus(ctx, sess.ID, StatusFailed, "could not record the end")
			pending := errors.Is(err, ErrEndPending)
			if err != nil && !pending {
				t.Fatalf("end on a full disk: %v", err)
			}
			t.Logf("end on a full disk pending: %v (%v)", pending, err)
			if r, _ := s.Session(ctx, sess.ID); r.Status != StatusFailed {
				t.Fatalf("session reads %s", r.Status)
			}
			if pending {
				raw, err := os.ReadFile(path + ".ends")
				if err != nil || !bytes.Contains(raw, []byte(sess.ID)) {
					t.Fatalf("the pending end is not in the allocated file on a full disk: %v", err)
				}
			}
			if restart {
				s.Close()
			}
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			if restart {
				again, err := Open(ctx, Options{Path: path})
				if err != nil {
					t.Fatal(err)
				}
				defer again.Close()
				if pending && len(again.RecoveredEnds()) != 1 {
					t.Fatalf("recovered %v", again.RecoveredEnds())
				}
				s = again
			} else {
				deadline := time.Now().Add(30 * time.Second)
				for s.PendingEnds() > 0 {
					if time.Now().After(deadline) {
						t.Fatal("the end was not written once space returned")
					}
					time.Sleep(10 * time.Millisecond)
				}
				s.Close()
				s, err = Open(ctx, Options{Path: path})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
			}
			if r, _ := s.Session(ctx, sess.ID); r.Status != StatusFailed || r.StatusReason != "could not record the end" {
				t.Fatalf("stored session %s %q", r.Status, r.StatusReason)
			}
			if _, err := s.Append(ctx, sess.ID, "terminal-output", chunk); err != nil {
				t.Fatalf("append after space returned: %v", err)
			}
		})
	}
}
