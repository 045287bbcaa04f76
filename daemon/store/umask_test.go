//go:build unix

package store

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func setUmask(m int) int { return syscall.Umask(m) }

func TestFileModes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "reeve.db")
	// A permissive umask would otherwise leak into the files SQLite creates.
	old := setUmask(0)
	defer setUmask(old)
	s := openAt(t, path)
	if _, _, err := s.AddDirectory(ctx, "/x"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", filepath.Base(p), fi.Mode().Perm())
		}
	}
	s.Close()

	// A pre-existing world-readable file is tightened on open.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	openAt(t, path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("reopened file has mode %v, want 0600", fi.Mode().Perm())
	}
}
