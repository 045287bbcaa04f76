package home

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"reeve.dev/reeve/internal/atomicfile"
)

// Lock is the supervisor's exclusive hold on a home. The kernel drops it when
// the process dies, so a held lock means a live supervisor, whatever the
// pidfile says and even after pid reuse.
type Lock struct{ f *os.File }

// ErrLocked means another supervisor holds the home.
var ErrLocked = errors.New("daemon home is locked by a running supervisor")

// AcquireLock takes the supervisor lock without waiting.
func (d Dir) AcquireLock() (*Lock, error) {
	f, err := os.OpenFile(d.SupervisorLockFile(), os.O_RDWR|os.O_CREATE, atomicfile.PrivateFile)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("lock %s: %w", d.SupervisorLockFile(), err)
	}
	return &Lock{f: f}, nil
}

// Release drops the lock.
func (l *Lock) Release() error { return l.f.Close() }

// Locked reports whether a live supervisor holds the home. It only reads:
// a home without a lock file has no supervisor.
func (d Dir) Locked() (bool, error) {
	f, err := os.Open(d.SupervisorLockFile())
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open lock: %w", err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("probe lock: %w", err)
	}
	return false, nil
}
