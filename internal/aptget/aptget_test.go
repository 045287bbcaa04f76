package aptget

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fakeAptGet puts an apt-get on PATH that logs its arguments and fails
// its first `install` when failFirst is set.
func fakeAptGet(t *testing.T, failFirst bool) (log string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("Install runs apt-get only as root")
	}
	dir := t.TempDir()
	log = filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$*\" >> " + log + "\n"
	if failFirst {
		script += "case \"$*\" in *install*) [ -e " + log + ".failed ] || { touch " + log + ".failed; echo 'failed to read archive' >&2; exit 100; } ;; esac\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "apt-get"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	lockPath = filepath.Join(dir, "apt.lock")
	return log
}

func calls(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// A caller that waited for the lock while another installed the same thing
// must not run apt-get again: that second run is the race this package
// exists to stop.
func TestInstalledWhileWaitingSkipsAptGet(t *testing.T) {
	log := fakeAptGet(t, false)
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var installed atomic.Bool
	done := make(chan error, 1)
	go func() { done <- Install(context.Background(), installed.Load, "chromium") }()
	select {
	case err := <-done:
		t.Fatalf("Install returned %v while another held the lock", err)
	case <-time.After(200 * time.Millisecond):
	}
	installed.Store(true) // the lock holder installed it
	syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c := calls(t, log); len(c) != 0 {
		t.Fatalf("apt-get ran after the package appeared: %q", c)
	}
}

// A failed install refreshes the package lists and tries once more.
func TestFailedInstallUpdatesAndRetries(t *testing.T) {
	log := fakeAptGet(t, true)
	runs := 0
	present := func() bool { runs++; return runs > 2 } // missing until apt-get has run
	if err := Install(context.Background(), present, "gnome-keyring", "dbus-daemon"); err != nil {
		t.Fatal(err)
	}
	c := calls(t, log)
	want := []string{"install -y --no-install-recommends gnome-keyring dbus-daemon", "update", "install -y --no-install-recommends gnome-keyring dbus-daemon"}
	if len(c) != len(want) {
		t.Fatalf("apt-get calls %q, want %q", c, want)
	}
	for i := range want {
		if !strings.HasSuffix(c[i], want[i]) {
			t.Fatalf("apt-get call %d is %q, want it to end in %q", i, c[i], want[i])
		}
	}
}

// What apt-get said is kept in the error when it fails twice.
func TestInstallFailureNamesTheCause(t *testing.T) {
	fakeAptGet(t, false)
	dir := filepath.Dir(lockPath)
	os.WriteFile(filepath.Join(dir, "apt-get"), []byte("#!/bin/sh\necho 'E: Unable to locate package nosuch' >&2\nexit 100\n"), 0o755)
	err := Install(context.Background(), func() bool { return false }, "nosuch")
	if err == nil || !strings.Contains(err.Error(), "Unable to locate package nosuch") {
		t.Fatalf("Install = %v", err)
	}
}
