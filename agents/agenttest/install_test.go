package agenttest

import (
	"context"
	"fmt"
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

// fakeNPM writes an npm stand-in that counts its runs, takes a while (so
// racing installers really overlap), and lays out what `npm install
// --prefix DIR` of the fake package would.
func fakeNPM(t *testing.T) (npm, counter string) {
	t.Helper()
	dir := t.TempDir()
	npm, counter = filepath.Join(dir, "npm"), filepath.Join(dir, "runs")
	script := `#!/bin/sh
echo run >> "` + counter + `"
prefix=
while [ $# -gt 0 ]; do
  if [ "$1" = --prefix ]; then prefix=$2; fi
  shift
done
sleep 0.5
mkdir -p "$prefix/node_modules/fake/bin"
printf '#!/bin/sh\necho fake 1.0.0\n' > "$prefix/node_modules/fake/bin/fake"
chmod +x "$prefix/node_modules/fake/bin/fake"
`
	if err := os.WriteFile(npm, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return npm, counter
}

var fakeAgent = Agent{
	Name: "fake", Package: "fake", Version: "1.0.0",
	Executable: func(string, string) []string {
		return []string{filepath.Join("node_modules", "fake", "bin", "fake")}
	},
}

// TestInstallHelperProcess is not a real test: TestInstallConcurrent runs
// the test binary as extra installer processes through it.
func TestInstallHelperProcess(t *testing.T) {
	if os.Getenv("AGENTTEST_INSTALL_HELPER") != "1" {
		t.Skip("helper process for TestInstallConcurrent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := Install(ctx, InstallOptions{Agent: fakeAgent, CacheDir: os.Getenv("AGENTTEST_CACHE"), NPM: os.Getenv("AGENTTEST_NPM")})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("INSTALLED %s\n", p)
}

// TestInstallConcurrent races installers in separate processes and in
// goroutines on one fresh cache: npm must run exactly once, and everyone
// must get the same complete folder.
func TestInstallConcurrent(t *testing.T) {
	cache := t.TempDir()
	npm, counter := fakeNPM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const procs, routines = 3, 3
	var wg sync.WaitGroup
	paths := make([]string, procs+routines)
	errs := make([]error, procs+routines)
	for i := 0; i < procs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestInstallHelperProcess$", "-test.v")
			cmd.Env = append(os.Environ(), "AGENTTEST_INSTALL_HELPER=1", "AGENTTEST_CACHE="+cache, "AGENTTEST_NPM="+npm)
			out, err := cmd.CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("%v: %s", err, out)
				return
			}
			for _, line := range strings.Split(string(out), "\n") {
				if p, ok := strings.CutPrefix(line, "INSTALLED "); ok {
					paths[i] = p
				}
			}
		}()
	}
	for i := procs; i < procs+routines; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = Install(ctx, InstallOptions{Agent: fakeAgent, CacheDir: cache, NPM: npm})
		}()
	}
	wg.Wait()
	want := filepath.Join(cache, "fake@1.0.0", "node_modules", "fake", "bin", "fake")
	for i := range paths {
		if errs[i] != nil {
			t.Fatalf("installer %d: %v", i, errs[i])
		}
		if paths[i] != want {
			t.Fatalf("installer %d got %q, want %q", i, paths[i], want)
		}
	}
	runs, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(runs), "run"); n != 1 {
		t.Fatalf("npm ran %d times, want 1", n)
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
	if fi, err := os.Stat(filepath.Join(cache, "fake@1.0.0")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("installed folder mode = %v, %v; want 0755", fi, err)
	}
}

// TestInstallNoNPM: with no npm the install fails with a message naming
// the problem, which Claude/Codex turn into a skip.
func TestInstallNoNPM(t *testing.T) {
	_, err := Install(context.Background(), InstallOptions{Agent: fakeAgent, CacheDir: t.TempDir(), NPM: filepath.Join(t.TempDir(), "no-such-npm")})
	if err == nil || !strings.Contains(err.Error(), "npm not found") {
		t.Fatalf("err = %v, want npm not found", err)
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

// recordTB captures Skipf/Fatalf so Unavailable's choice can be checked
// without ending this test.
type recordTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordTB) Helper()                           {}
func (r *recordTB) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recordTB) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestUnavailableSkipsOrFails(t *testing.T) {
	t.Setenv(RequireEnv, "")
	r := &recordTB{TB: t}
	Unavailable(r, "claude missing")
	if r.failed != "" || !strings.Contains(r.skipped, "claude missing") || !strings.Contains(r.skipped, RequireEnv+"=1") {
		t.Errorf("without %s: skipped %q, failed %q", RequireEnv, r.skipped, r.failed)
	}
	t.Setenv(RequireEnv, "1")
	r = &recordTB{TB: t}
	Unavailable(r, "claude missing")
	if r.skipped != "" || !strings.Contains(r.failed, "claude missing") {
		t.Errorf("with %s=1: skipped %q, failed %q", RequireEnv, r.skipped, r.failed)
	}
}
