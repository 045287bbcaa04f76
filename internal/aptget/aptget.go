// Package aptget installs the Debian packages the test suite needs
// (Chromium, gnome-keyring, bash-completion, man) when they are missing,
// one apt-get at a time across every test process of a run.
//
// dpkg's own lock is not enough: Debian's container images delete the
// downloaded archives after every dpkg run, so when two test packages ran
// apt-get at once, the second could find the archive it had just fetched
// already gone ("failed to read archive ... No such file or directory").
// A file lock shared by every caller in this repository serialises them,
// and each caller looks again for what it needs once it holds the lock,
// since another package may have installed it meanwhile.
package aptget

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrCannot means this process may not install packages: it is not root,
// or there is no apt-get.
var ErrCannot = errors.New("installing Debian packages needs root and apt-get")

// lockPath is shared by every test process of one machine.
var lockPath = filepath.Join(os.TempDir(), "reeve-apt.lock")

// Install makes sure present() holds, installing pkgs with apt-get when it
// does not. It holds the shared lock throughout; present is asked again
// once the lock is held, and after the install. When the install fails,
// the package lists are refreshed and it is tried once more (a list can
// name an archive the mirror no longer has).
func Install(ctx context.Context, present func() bool, pkgs ...string) error {
	if present() {
		return nil
	}
	if os.Geteuid() != 0 {
		return ErrCannot
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return ErrCannot
	}
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("apt lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("apt lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if present() {
		return nil
	}
	install := append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)
	err = run(ctx, install...)
	if err != nil {
		if uerr := run(ctx, "update"); uerr != nil {
			return fmt.Errorf("%w; then %w", err, uerr)
		}
		err = run(ctx, install...)
	}
	if err != nil {
		return err
	}
	if !present() {
		return fmt.Errorf("apt-get installed %s, but what it should provide is still missing", strings.Join(pkgs, " "))
	}
	return nil
}

// run runs one apt-get command. Programs outside this repository may hold
// dpkg's lock too (an unattended upgrade): apt-get waits for it.
func run(ctx context.Context, args ...string) error {
	args = append([]string{"-o", "DPkg::Lock::Timeout=600", "-q"}, args...)
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		if len(out) > 2000 {
			out = out[len(out)-2000:]
		}
		return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
