package ptyrun

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"reeve.dev/reeve/agents"
)

// Evidence is the file that keeps one turn's raw agent output, next to the
// events mapped from it. A nil *Evidence keeps nothing.
type Evidence struct{ f *os.File }

// OpenEvidence creates <stateDir>/<name>-<unix nanos>.<ext> (0600); nil when
// the turn has no state directory.
func OpenEvidence(stateDir, name, ext string) (*Evidence, error) {
	if stateDir == "" {
		return nil, nil
	}
	path := filepath.Join(stateDir, fmt.Sprintf("%s-%d.%s", name, time.Now().UnixNano(), ext))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: create evidence file: %w", name, err)
	}
	return &Evidence{f: f}, nil
}

// Writer is where raw output goes; nil (not a nil *os.File inside an
// interface) when nothing is kept.
func (e *Evidence) Writer() io.Writer {
	if e == nil {
		return nil
	}
	return e.f
}

// Close closes the file.
func (e *Evidence) Close() {
	if e != nil {
		e.f.Close()
	}
}

// Turn is a running Process as an agents.Process: Wait decides the turn's
// result once, when the process has ended and its evidence is closed.
type Turn struct {
	Proc     *Process
	Evidence *Evidence
	// Result turns the process's end into the turn's result.
	Result func(Result) agents.TurnResult
	// Terminal says the program reads its PTY, so Input reaches it.
	Terminal bool
	// Spec is the turn the process runs, whose prompt and context Launch
	// keeps out of the recorded command line.
	Spec agents.Turn

	once sync.Once
	res  agents.TurnResult
}

var (
	_ agents.Process  = (*Turn)(nil)
	_ agents.Launcher = (*Turn)(nil)
)

// Launch is the command line the process was started with, secrets and
// the turn's prompt masked (agents.DescribeLaunch).
func (t *Turn) Launch() agents.Launch {
	argv, env := t.Proc.Launched()
	return agents.DescribeLaunch(argv, env, t.Spec)
}

// Wait blocks until the process has ended.
func (t *Turn) Wait() agents.TurnResult {
	r := t.Proc.Wait()
	t.once.Do(func() {
		t.Evidence.Close()
		t.res = t.Result(r)
	})
	return t.res
}

// Kill ends the process group.
func (t *Turn) Kill() error { return t.Proc.Kill() }

// Input types into the program's terminal.
func (t *Turn) Input(b []byte) error {
	if !t.Terminal {
		return agents.ErrNoInput
	}
	return t.Proc.Input(b)
}

// ExitCode reports a death by signal as shells do, 128+signal.
func ExitCode(r Result) int {
	if r.Signal != 0 {
		return 128 + int(r.Signal)
	}
	return r.ExitCode
}

// StderrNote adds the end of an agent's stderr to an error, which is where
// agents say why they could not start. beforeStart says the agent died
// before it named its session (its "what": a session, a thread).
func StderrNote(stderr string, beforeStart bool, what string) string {
	s := strings.TrimSpace(stderr)
	if s == "" {
		if beforeStart {
			return " before it started a " + what + " (no output)"
		}
		return ""
	}
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	if beforeStart {
		return " before it started a " + what + ": " + s
	}
	return ": " + s
}
