package worker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"reeve.dev/reeve/internal/atomicfile"
)

// States of the process lock, as `worker doctor` reports them.
const (
	LockActive = "active" // a live worker holds the lock
	LockStale  = "stale"  // a pidfile is left by a worker that died (kill -9, a crash)
	LockAbsent = "absent" // no worker ran from this home, or it stopped cleanly
)

// ErrRunning means a worker already runs from the home.
var ErrRunning = errors.New("a worker is already running from this home")

// ProcessLock is a running worker's exclusive hold on its home: an flock
// the kernel drops when the process dies, so a held lock means a live
// worker whatever the pidfile says (even after pid reuse), plus the
// pidfile that `worker stop` signals.
type ProcessLock struct {
	f   *os.File
	pid string
}

// LockInfo is the state of a home's lock.
type LockInfo struct {
	State string `json:"state"`
	PID   int    `json:"pid,omitempty"`
	File  string `json:"file"`
}

// AcquireLock takes the lock without waiting and writes the pidfile.
func (h Home) AcquireLock() (*ProcessLock, error) {
	if err := h.Prepare(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(h.LockFile(), os.O_RDWR|os.O_CREATE, atomicfile.PrivateFile)
	if err != nil {
		return nil, fmt.Errorf("open worker lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid, _ := readPID(h.PIDFile())
			return nil, fmt.Errorf("%w (pid %d)", ErrRunning, pid)
		}
		return nil, fmt.Errorf("lock %s: %w", h.LockFile(), err)
	}
	if err := atomicfile.WriteFile(h.PIDFile(), []byte(strconv.Itoa(os.Getpid())+"\n"), atomicfile.PrivateFile); err != nil {
		f.Close()
		return nil, err
	}
	return &ProcessLock{f: f, pid: h.PIDFile()}, nil
}

// Release removes the pidfile and drops the lock: a clean stop leaves the
// lock absent, not stale.
func (l *ProcessLock) Release() error {
	os.Remove(l.pid)
	return l.f.Close()
}

// LockState reads the lock without taking it.
func (h Home) LockState() (LockInfo, error) {
	info := LockInfo{State: LockAbsent, File: h.LockFile()}
	pid, perr := readPID(h.PIDFile())
	f, err := os.Open(h.LockFile())
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return info, fmt.Errorf("open worker lock: %w", err)
	default:
		defer f.Close()
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			info.State, info.PID = LockActive, pid
			return info, nil
		}
		if err != nil {
			return info, fmt.Errorf("probe worker lock: %w", err)
		}
	}
	if perr == nil {
		info.State, info.PID = LockStale, pid
	}
	return info, nil
}

// ClearStale removes a stale pidfile; it refuses an active lock.
func (h Home) ClearStale() (LockInfo, error) {
	st, err := h.LockState()
	if err != nil {
		return st, err
	}
	switch st.State {
	case LockActive:
		return st, fmt.Errorf("%w (pid %d)", ErrRunning, st.PID)
	case LockStale:
		if err := os.Remove(h.PIDFile()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return st, err
		}
	}
	return st, nil
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pidfile %s: not a pid", path)
	}
	return pid, nil
}
