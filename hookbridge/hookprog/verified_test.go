package hookprog

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// installed installs a small program and lets tests remember fresh files.
func installed(t *testing.T, settleFor time.Duration) Program {
	t.Helper()
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("no trusted change time on " + runtime.GOOS + ": every check hashes")
	}
	old := settle
	settle = settleFor
	t.Cleanup(func() { settle = old })
	src := filepath.Join(t.TempDir(), "reeve")
	os.WriteFile(src, []byte("#!/bin/sh\nexit 0 # deny\n"), 0o755)
	p, err := InstallFrom(t.TempDir(), src)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(); err != nil {
		t.Fatal(err)
	}
	return p
}

func remembered(p Program) bool {
	st, err := os.Stat(p.Path)
	return err == nil && alreadyVerified(p.Path, p.Digest, st)
}

// The tamper an attacker with the user's rights would try against a
// cache: rewrite the program in place, same size, and set its
// modification time back. The change time still moves, and Verify hashes
// again and refuses.
func TestRewriteWithRestoredModTimeIsCaught(t *testing.T) {
	p := installed(t, 0)
	if !remembered(p) {
		t.Fatal("a verified, settled program was not remembered")
	}
	st, _ := os.Stat(p.Path)
	orig, _ := os.ReadFile(p.Path)
	// File times move by clock ticks; let one pass so the rewrite's
	// change time differs from the install's.
	time.Sleep(30 * time.Millisecond)
	forged := bytes.Replace(orig, []byte("deny"), []byte("allw"), 1)
	if len(forged) != len(orig) {
		t.Fatal("the forgery must keep the size")
	}
	if err := os.WriteFile(p.Path, forged, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p.Path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("a rewritten program with its old mtime verified: %v", err)
	}
}

// Replacing the file (a new inode with the same size and mtime) is caught.
func TestReplacedProgramIsCaught(t *testing.T) {
	p := installed(t, 0)
	st, _ := os.Stat(p.Path)
	orig, _ := os.ReadFile(p.Path)
	tmp := p.Path + ".new"
	os.WriteFile(tmp, bytes.Replace(orig, []byte("deny"), []byte("allw"), 1), 0o700)
	os.Chtimes(tmp, st.ModTime(), st.ModTime())
	if err := os.Rename(tmp, p.Path); err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(); err == nil {
		t.Fatal("a replaced program verified")
	}
}

// A file changed within the settle window is hashed at every check: its
// times cannot yet tell it from a write in the same clock tick.
func TestFreshProgramIsNotRemembered(t *testing.T) {
	p := installed(t, time.Hour)
	if remembered(p) {
		t.Fatal("a program changed just now was remembered")
	}
	if err := p.Verify(); err != nil {
		t.Fatal(err)
	}
}

// A remembered program stays verified while it is untouched, and a
// program with another digest at the same path is not taken for it.
func TestRememberedOnlyForItsDigest(t *testing.T) {
	p := installed(t, 0)
	if err := p.Verify(); err != nil || !remembered(p) {
		t.Fatalf("second check: %v, remembered %v", err, remembered(p))
	}
	other := Program{Path: p.Path, Digest: strings.Repeat("0", 64)}
	if err := other.Verify(); err == nil {
		t.Fatal("a remembered file verified against another digest")
	}
}

// BenchmarkVerify: a program the size of the reeve binary, hashed at every
// check (the baseline) against remembered.
func BenchmarkVerify(b *testing.B) {
	src := filepath.Join(b.TempDir(), "reeve")
	os.WriteFile(src, bytes.Repeat([]byte("reeve"), 9<<20), 0o755) // 45 MB
	p, err := InstallFrom(b.TempDir(), src)
	if err != nil {
		b.Fatal(err)
	}
	old := settle
	defer func() { settle = old }()
	for _, c := range []struct {
		name   string
		settle time.Duration
	}{{"hashed", time.Hour}, {"remembered", 0}} {
		b.Run(c.name, func(b *testing.B) {
			settle = c.settle
			if err := p.Verify(); err != nil { // remembers, when it may
				b.Fatal(err)
			}
			for b.Loop() {
				if err := p.Verify(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
