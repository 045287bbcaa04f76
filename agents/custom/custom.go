// Package custom is the adapter for any terminal program: it runs the
// program under a PTY, types the prompt into it and records what it prints
// as terminal output. It knows nothing of the program's tools, usage or
// permissions. The program is configured by environment variables (see
// FromEnv); the shell adapter is a preset of it.
package custom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/ptyrun"
)

// The environment variables that configure the custom agent.
const (
	EnvCommand = "REEVE_CUSTOM_AGENT_COMMAND" // the executable: a path, or a name on PATH
	EnvID      = "REEVE_CUSTOM_AGENT_ID"      // the adapter id; default DefaultID
	EnvArgs    = "REEVE_CUSTOM_AGENT_ARGS"    // a JSON array of strings
)

// DefaultID is the custom agent's id when EnvID is unset.
const DefaultID = "custom"

// DefaultTypeDelay is how long StartTurn waits for the program's first
// output before typing the prompt anyway.
const DefaultTypeDelay = 500 * time.Millisecond

// Options configures a terminal-program adapter.
type Options struct {
	// ID is the adapter id; default DefaultID.
	ID string
	// Command is the executable: a path, or a name looked up on PATH.
	Command string
	// Args come after the program name (and before the prompt, with
	// PromptArg).
	Args []string
	// Problem, when set, makes the adapter unusable: Describe reports it and
	// StartTurn refuses with it (e.g. a configuration error).
	Problem string
	// PromptArg passes the prompt as the last argument instead of typing it
	// into the terminal.
	PromptArg bool
	// Resume is the token every turn returns; "" means an ended session
	// cannot take another prompt.
	Resume string
	// TypeDelay: see DefaultTypeDelay.
	TypeDelay time.Duration
	// LookPath finds Command; default exec.LookPath.
	LookPath func(string) (string, error)
}

// Adapter runs a terminal program for each turn.
type Adapter struct {
	o Options
}

var _ agents.Adapter = (*Adapter)(nil)

// New returns an adapter for the program o describes.
func New(o Options) *Adapter {
	if o.ID == "" {
		o.ID = DefaultID
	}
	if o.TypeDelay <= 0 {
		o.TypeDelay = DefaultTypeDelay
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	return &Adapter{o: o}
}

// Compiled on first use: a counted repetition compiles into hundreds of
// allocations, which every start of the binary would pay in package init.
var idPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`) })

// FromEnv reads the custom agent's configuration from the environment
// variables above. ok is false when EnvCommand is unset: there is no custom
// agent. A bad id or bad arguments do not hide the agent; they become its
// Problem, so `reeve agents` can say what is wrong.
func FromEnv(getenv func(string) string) (o Options, ok bool) {
	o.Command = strings.TrimSpace(getenv(EnvCommand))
	if o.Command == "" {
		return o, false
	}
	o.ID = DefaultID
	var problems []string
	if id := strings.TrimSpace(getenv(EnvID)); id != "" {
		if idPattern().MatchString(id) {
			o.ID = id
		} else {
			problems = append(problems, fmt.Sprintf("%s=%q is not a valid agent id (lowercase letters, digits, '.', '_' and '-')", EnvID, id))
		}
	}
	if raw := strings.TrimSpace(getenv(EnvArgs)); raw != "" {
		if err := json.Unmarshal([]byte(raw), &o.Args); err != nil {
			o.Args = nil
			problems = append(problems, fmt.Sprintf("%s must be a JSON array of strings, like [\"--flag\",\"value\"]: %v", EnvArgs, err))
		}
	}
	o.Problem = strings.Join(problems, "; ")
	return o, true
}

// ID is the adapter id.
func (a *Adapter) ID() string { return a.o.ID }

// Describe finds the program. Terminal programs have no version we could
// ask for without knowing them.
func (a *Adapter) Describe(ctx context.Context) agents.Info {
	info := agents.Info{ID: a.o.ID, Resumable: a.o.Resume != "", Problem: a.o.Problem}
	path, err := a.find()
	if err != nil {
		if info.Problem == "" {
			info.Problem = err.Error()
		}
		return info
	}
	info.Installed, info.Path = true, path
	return info
}

func (a *Adapter) find() (string, error) {
	if a.o.Command == "" {
		return "", errors.New("no command configured")
	}
	path, err := a.o.LookPath(a.o.Command)
	if err != nil {
		return "", fmt.Errorf("%s not found: %w", a.o.Command, err)
	}
	return path, nil
}

// StartTurn runs the program in t.Dir under a PTY. Without PromptArg the
// prompt is typed once the program has printed something (or after
// TypeDelay), followed by a carriage return, which is what the Enter key
// sends and a terminal in line mode turns into a newline.
func (a *Adapter) StartTurn(ctx context.Context, t agents.Turn, emit agents.Emit) (agents.Process, error) {
	if a.o.Problem != "" {
		return nil, fmt.Errorf("agent %s is misconfigured: %s", a.o.ID, a.o.Problem)
	}
	path, err := a.find()
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", a.o.ID, err)
	}
	args := append([]string(nil), a.o.Args...)
	if a.o.PromptArg {
		args = append(args, t.Prompt)
	}

	evidence, err := ptyrun.OpenEvidence(t.StateDir, a.o.ID, "pty")
	if err != nil {
		return nil, err
	}
	firstOutput := make(chan struct{})
	var once sync.Once
	p, err := ptyrun.Start(ctx, ptyrun.Options{
		Path: path, Args: args, Dir: t.Dir, Env: t.Env,
		Emit: func(ev agents.Event) {
			once.Do(func() { close(firstOutput) })
			emit(ev)
		},
		Raw: evidence.Writer(),
	})
	if err != nil {
		evidence.Close()
		return nil, fmt.Errorf("agent %s: %w", a.o.ID, err)
	}
	id, resume := a.o.ID, a.o.Resume
	proc := &ptyrun.Turn{Proc: p, Evidence: evidence, Spec: t, Terminal: true, Result: func(r ptyrun.Result) agents.TurnResult {
		res := agents.TurnResult{ExitCode: ptyrun.ExitCode(r), Resume: resume}
		if r.Err != nil {
			res.Err = fmt.Errorf("%s: %w", id, r.Err)
		}
		return res
	}}
	if !a.o.PromptArg && t.Prompt != "" {
		go func() { // ends when the prompt is typed or the process ended
			timer := time.NewTimer(a.o.TypeDelay)
			defer timer.Stop()
			select {
			case <-firstOutput:
			case <-timer.C:
			case <-p.Done():
				return
			}
			_ = p.Input([]byte(t.Prompt + "\r"))
		}()
	}
	return proc, nil
}
