// Package keystoretest gives tests a real Secret Service: Debian's
// gnome-keyring on a private D-Bus session (dbus-run-session), installed
// from Debian's packages when missing and the test may.
package keystoretest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/internal/aptget"
)

// PrivateDir is a 0700 temporary directory (an XDG_RUNTIME_DIR).
func PrivateDir(t *testing.T) string {
	d := t.TempDir()
	if err := os.Chmod(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// SecretService finds gnome-keyring-daemon and dbus-run-session, installing
// them from Debian's packages when missing and this process may (root).
// Without them the test skips, unless REEVE_REQUIRE_AGENTS=1.
func SecretService(t *testing.T) (daemon, runSession string) {
	t.Helper()
	find := func() (string, string) {
		d, _ := exec.LookPath("gnome-keyring-daemon")
		r, _ := exec.LookPath("dbus-run-session")
		return d, r
	}
	if d, r := find(); d != "" && r != "" {
		return d, r
	}
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("REEVE_REQUIRE_AGENTS") == "1" {
			t.Fatalf("gnome-keyring is required (REEVE_REQUIRE_AGENTS=1) but unavailable: "+format, args...)
		}
		t.Skipf("skipping the Secret Service test: "+format, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	present := func() bool { d, r := find(); return d != "" && r != "" }
	if err := aptget.Install(ctx, present, "gnome-keyring", "dbus-daemon"); err != nil {
		unavailable("gnome-keyring: %v", err)
	}
	return find()
}

// RunInSession runs the calling test binary's test named test inside a
// fresh Secret Service session, with childEnv=1 in its environment, and
// fails unless that test passes there.
func RunInSession(t *testing.T, test, childEnv string) {
	t.Helper()
	daemon, runSession := SecretService(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	script := `printf 'reeve-test' | "$1" --unlock --components=secrets >/dev/null && exec "$2" -test.run "^$3\$" -test.v`
	cmd := exec.CommandContext(ctx, runSession, "--", "sh", "-c", script, "sh", daemon, exe, test)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), childEnv+"=1", "HOME="+home, "XDG_DATA_HOME="+filepath.Join(home, "data"), "XDG_RUNTIME_DIR="+PrivateDir(t))
	out, err := cmd.CombinedOutput()
	t.Logf("inside dbus-run-session:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: "+test) {
		t.Fatalf("%s inside the Secret Service session failed: %v", test, err)
	}
}
