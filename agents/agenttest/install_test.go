package agenttest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestInstalledVersions checks that the cached executables are the pinned
// versions, so a stale or hand-edited cache folder cannot pass for them.
func TestInstalledVersions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		path    func(testing.TB) string
		version string
	}{
		{"claude", Claude, ClaudeVersion},
		{"codex", Codex, CodexVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe := tc.path(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, exe, "--version")
			cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s --version: %v: %s", exe, err, out)
			}
			if !strings.Contains(string(out), tc.version) {
				t.Fatalf("%s --version = %q, want it to mention %s", exe, out, tc.version)
			}
		})
	}
}

// TestInstallConcurrent installs a tiny real package from several
// goroutines at once into a fresh cache: exactly one npm install must win
// and every caller must get the same, complete folder.
func TestInstallConcurrent(t *testing.T) {
	if _, err := exec.LookPath("npm"); err != nil {
		Unavailable(t, "npm not found: %v", err)
	}
	cache := t.TempDir()
	a := Agent{
		Name:    "semver",
		Package: "semver",
		Version: "7.6.3",
		Executable: func(string, string) []string {
			return []string{filepath.Join("node_modules", "semver", "bin", "semver.js")}
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	paths := make([]string, 4)
	errs := make([]error, 4)
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = Install(ctx, InstallOptions{Agent: a, CacheDir: cache})
		}()
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil {
			Unavailable(t, "install semver from npm: %v", errs[i])
		}
		if paths[i] != paths[0] {
			t.Fatalf("install %d returned %s, install 0 returned %s", i, paths[i], paths[0])
		}
	}
	want := filepath.Join(cache, "semver@7.6.3", "node_modules", "semver", "bin", "semver.js")
	if paths[0] != want {
		t.Fatalf("path = %s, want %s", paths[0], want)
	}
	ents, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), "-tmp-") {
			t.Errorf("temp folder %s left behind", e.Name())
		}
	}
}

// TestInstallRepairsIncomplete: a cache folder without the marker (an
// interrupted install from before atomic renames, or a hand-made one) must
// be replaced, not trusted.
func TestInstallRepairsIncomplete(t *testing.T) {
	cache := t.TempDir()
	a := Agent{
		Name: "fake", Package: "fake", Version: "1.0.0",
		Executable: func(string, string) []string { return []string{"bin"} },
	}
	dir := filepath.Join(cache, "fake@1.0.0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// An npm that always fails proves Install tried to reinstall.
	npm := filepath.Join(t.TempDir(), "npm")
	if err := os.WriteFile(npm, []byte("#!/bin/sh\necho registry says no >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Install(context.Background(), InstallOptions{Agent: a, CacheDir: cache, NPM: npm})
	if err == nil || !strings.Contains(err.Error(), "registry says no") {
		t.Fatalf("Install over an unmarked folder: err = %v, want the npm failure", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("incomplete folder still present: %v", err)
	}
}
