package hookprog

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestInstallCopiesAndVerifies(t *testing.T) {
	home := t.TempDir()
	src := filepath.Join(t.TempDir(), "reeve")
	os.WriteFile(src, []byte("#!/bin/sh\necho hook-ran \"$@\"\n"), 0o755)
	p, err := InstallFrom(home, src)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(p.Path, filepath.Join(home, Dir)+"/reeve-hook-") || len(p.Digest) != 64 {
		t.Fatalf("program %+v", p)
	}
	st, _ := os.Stat(p.Path)
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v", st.Mode())
	}
	// Break 1: the daemon's own binary is moved away; the copy still runs.
	if err := os.Rename(src, src+".moved"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(p.Path, "PreToolUse").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "hook-ran PreToolUse" {
		t.Fatalf("copy does not run: %v %s", err, out)
	}
	if err := p.Verify(); err != nil {
		t.Fatal(err)
	}
	// Idempotent: the same content installs to the same path.
	again, err := InstallFrom(home, src+".moved")
	if err != nil || again != p {
		t.Fatalf("reinstall %+v %v", again, err)
	}
	if l, _ := Installed(home); len(l) != 1 || l[0] != p.Path {
		t.Fatalf("installed %v", l)
	}
}

func TestVerifyRefusesTamperedOrMissing(t *testing.T) {
	home := t.TempDir()
	src := filepath.Join(t.TempDir(), "reeve")
	os.WriteFile(src, []byte("#!/bin/sh\nexit 0\n"), 0o755)
	p, err := InstallFrom(home, src)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p.Path, []byte("#!/bin/sh\necho allow\n"), 0o700)
	if err := p.Verify(); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Fatalf("tampered copy verified: %v", err)
	}
	// Reinstalling repairs it.
	if p2, err := InstallFrom(home, src); err != nil || p2.Verify() != nil {
		t.Fatalf("repair: %v", err)
	}
	os.Chmod(p.Path, 0o600)
	if err := p.Verify(); err == nil || !strings.Contains(err.Error(), "not executable") {
		t.Fatalf("non-executable copy verified: %v", err)
	}
	os.Remove(p.Path)
	if err := p.Verify(); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing copy verified: %v", err)
	}
	os.Mkdir(p.Path, 0o700)
	if err := p.Verify(); err == nil {
		t.Fatal("a directory verified")
	}
	if err := (Program{}).Verify(); err == nil {
		t.Fatal("empty program verified")
	}
	if _, err := InstallFrom(home, t.TempDir()); err == nil {
		t.Fatal("installed a directory")
	}
	if _, err := InstallFrom(home, filepath.Join(home, "nope")); err == nil {
		t.Fatal("installed a missing file")
	}
}

func TestInstallSelfConcurrent(t *testing.T) {
	home := t.TempDir()
	var wg sync.WaitGroup
	progs := make([]Program, 8)
	errs := make([]error, 8)
	for i := range progs {
		wg.Add(1)
		go func(i int) { defer wg.Done(); progs[i], errs[i] = Install(home) }(i)
	}
	wg.Wait()
	for i := range progs {
		if errs[i] != nil || progs[i] != progs[0] {
			t.Fatalf("install %d: %+v %v", i, progs[i], errs[i])
		}
	}
	if err := progs[0].Verify(); err != nil {
		t.Fatal(err)
	}
	// No temporary file is left behind.
	entries, _ := os.ReadDir(filepath.Join(home, Dir))
	if len(entries) != 1 {
		t.Fatalf("entries %v", entries)
	}
}
