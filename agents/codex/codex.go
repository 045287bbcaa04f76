// Package codex is the adapter for OpenAI's Codex CLI run headless: one
// `codex exec --json` process per turn (`codex exec resume <thread_id>` for
// the next ones), its JSONL events mapped onto session updates.
package codex

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/ptyrun"
)

// ID is the adapter id.
const ID = "codex"

// EnvPath overrides the executable (default: codex on PATH).
const EnvPath = "REEVE_CODEX_PATH"

// HookEvents are the Codex hook events a governed turn installs. codex exec
// runs with approval policy "never" whatever its config says, so these
// hooks, PreToolUse above all, are its only per-command decision point.
var HookEvents = []string{"PreToolUse", "PostToolUse", "SessionStart", "UserPromptSubmit", "Stop"}

// Sandbox is the sandbox every turn runs in: the agent may write in its
// working directory and nowhere else.
const Sandbox = "workspace-write"

// Options configures the adapter.
type Options struct {
	// Getenv reads EnvPath; default os.Getenv.
	Getenv func(string) string
	// LookPath finds codex on PATH; default exec.LookPath.
	LookPath func(string) (string, error)
}

// Adapter runs Codex.
type Adapter struct {
	o        Options
	versions ptyrun.VersionCache
}

var _ agents.Adapter = (*Adapter)(nil)

// New returns the Codex adapter.
func New(o Options) *Adapter {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	// "codex-cli 0.169.0"
	return &Adapter{o: o, versions: ptyrun.VersionCache{Parse: func(out string) string {
		f := strings.Fields(out)
		if len(f) == 0 {
			return ""
		}
		return f[len(f)-1]
	}}}
}

// ID is "codex".
func (a *Adapter) ID() string { return ID }

// Describe finds the executable and asks it for its version (once per
// executable file).
func (a *Adapter) Describe(ctx context.Context) agents.Info {
	return a.program().Describe(ctx, agents.Info{ID: ID, Provider: "openai", Structured: true, Resumable: true,
		Governance: "each shell command passes Codex's PreToolUse hook to reeve (codex exec itself never asks); tools Codex does not route through that hook are confined by its workspace-write sandbox only"})
}

func (a *Adapter) program() ptyrun.Program {
	return ptyrun.Program{Name: "codex", EnvPath: EnvPath, Getenv: a.o.Getenv, LookPath: a.o.LookPath, Versions: &a.versions}
}

// Args is the command line (after the program name) for a turn.
func Args(t agents.Turn) []string {
	var args []string
	if t.Resume == "" {
		args = []string{"exec", "--json", "--skip-git-repo-check", "-s", Sandbox}
	} else {
		// exec resume has no -s; the sandbox is a config override there.
		args = []string{"exec", "resume", "--json", "--skip-git-repo-check", "-c", fmt.Sprintf("sandbox_mode=%q", Sandbox)}
	}
	if t.Model != "" {
		args = append(args, "-m", t.Model)
	}
	if t.Hook != nil {
		args = append(args, hookArgs(t.Hook)...)
	}
	if t.Context != "" {
		args = append(args, "-c", "developer_instructions="+tomlString(t.Context))
	}
	// "--" so that a prompt starting with "-" is not taken for a flag.
	args = append(args, "--")
	if t.Resume != "" {
		args = append(args, t.Resume)
	}
	return append(args, t.Prompt)
}

// StartTurn runs one `codex exec` process. Stdout is a pipe of JSONL
// events, each kept in <StateDir>/codex-<start-unix-nanos>.jsonl and mapped
// onto events; stderr is kept for the error of a failed run.
func (a *Adapter) StartTurn(ctx context.Context, t agents.Turn, emit agents.Emit) (agents.Process, error) {
	path, err := a.program().Find()
	if err != nil {
		return nil, err
	}
	evidence, err := ptyrun.OpenEvidence(t.StateDir, ID, "jsonl")
	if err != nil {
		return nil, err
	}
	m := &mapper{emit: emit, model: t.Model, home: codexHome(t.Env)}
	if t.Resume != "" {
		m.base, m.baseErr = threadTotals(m.home, t.Resume)
		m.rolloutStart = rolloutSize(m.home, t.Resume)
	}
	p, err := ptyrun.StartPipe(ctx, ptyrun.PipeOptions{
		Path: path, Args: Args(t), Dir: t.Dir, Env: t.Env,
		Line: m.line,
		Raw:  evidence.Writer(),
	})
	if err != nil {
		if evidence != nil {
			evidence.Close()
		}
		return nil, fmt.Errorf("codex: %w", err)
	}
	return &ptyrun.Turn{Proc: p, Evidence: evidence, Result: func(r ptyrun.Result) agents.TurnResult { return result(m, t.Resume, r) }}, nil
}

// result decides how the turn ended; every line has been mapped by now.
func result(m *mapper, resume string, r ptyrun.Result) agents.TurnResult {
	res := agents.TurnResult{ExitCode: ptyrun.ExitCode(r), AgentSessionID: m.threadID, Resume: m.threadID}
	if res.Resume == "" {
		res.Resume, res.AgentSessionID = resume, resume
	}
	switch {
	case r.Killed:
		res.Err = fmt.Errorf("codex: %w", ptyrun.ErrKilled)
	case m.failure != nil:
		res.Err = m.failure
	case r.Err != nil:
		res.Err = fmt.Errorf("codex %s%s", r.Err, ptyrun.StderrNote(r.Stderr, m.threadID == "", "thread"))
	case !m.completed && m.lastError != "":
		res.Err = fmt.Errorf("codex: %s", m.lastError)
	case !m.completed:
		res.Err = fmt.Errorf("codex ended without completing the turn%s", ptyrun.StderrNote(r.Stderr, m.threadID == "", "thread"))
	}
	return res
}

// hookArgs installs reeve's hooks for one invocation through -c config
// overrides (TOML inline tables), leaving the user's CODEX_HOME untouched.
// Codex skips hooks nobody has reviewed unless told to trust them; reeve
// wrote these itself. A PreToolUse hook that Codex kills for taking too
// long lets the command run, so its timeout is the hook's own plus margin.
func hookArgs(h *agents.Hook) []string {
	args := []string{"--dangerously-bypass-hook-trust"}
	for _, ev := range HookEvents {
		timeout := 30
		if ev == "PreToolUse" {
			timeout = int(h.Timeout.Seconds()) + 1
		}
		args = append(args, "-c", fmt.Sprintf(`hooks.%s=[{matcher="*",hooks=[{type="command",command=%s,timeout=%d}]}]`,
			ev, tomlString(h.Command(ev)), timeout))
	}
	return args
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
