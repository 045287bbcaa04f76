// Package codex is the adapter for OpenAI's Codex CLI driven through
// `codex app-server`, its JSON-RPC protocol on stdio: one app-server
// process per turn, which starts or resumes the session's thread, runs one
// turn and asks reeve (rpc.go) to approve every command, patch and
// permission Codex would ask a person about; its notifications are mapped
// onto session updates (events.go).
package codex

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/ptyrun"
)

// ID is the adapter id.
const ID = "codex"

// EnvPath overrides the executable (default: codex on PATH).
const EnvPath = "REEVE_CODEX_PATH"

// HookEvents are the Codex hook events a governed turn installs, a second
// layer behind the in-band approvals: PreToolUse decides every shell
// command and patch through the gate, read-only ones included.
var HookEvents = []string{"PreToolUse", "PostToolUse", "SessionStart", "UserPromptSubmit", "Stop"}

// Sandbox is the sandbox every turn runs in: the agent may write in its
// working directory and nowhere else.
const Sandbox = "workspace-write"

// Approval policies. A governed turn runs "untrusted": Codex asks before
// every command it does not know to be read-only and harmless, and before
// every patch; the rest pass the PreToolUse hook. An unguarded one never
// asks (the sandbox alone confines it).
const (
	governedApproval  = "untrusted"
	unguardedApproval = "never"
)

// Options configures the adapter.
type Options struct {
	// Getenv reads EnvPath; default os.Getenv.
	Getenv func(string) string
	// LookPath finds codex on PATH; default exec.LookPath.
	LookPath func(string) (string, error)
	// InitTimeout bounds the handshake and the thread's start; default
	// DefaultInitTimeout.
	InitTimeout time.Duration
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
		Governance: "commands and patches Codex asks approval for (every one but those it knows to be read-only) are decided in-band through codex app-server, and every shell command and patch also passes its PreToolUse hook; tools Codex routes through neither (web search, MCP tools) are confined by its workspace-write sandbox only"})
}

func (a *Adapter) program() ptyrun.Program {
	return ptyrun.Program{Name: "codex", EnvPath: EnvPath, Getenv: a.o.Getenv, LookPath: a.o.LookPath, Versions: &a.versions}
}

// Args is the command line (after the program name) for a turn: the
// app-server, with reeve's hooks as config overrides for a governed turn.
// The prompt, model, sandbox and approval policy go through the protocol.
func Args(t agents.Turn) []string {
	args := []string{"app-server"}
	if t.Hook != nil {
		args = append(args, hookArgs(t.Hook)...)
	}
	return append(args, "--listen", "stdio://")
}

// StartTurn runs one `codex app-server` process for the turn. Stdout is a
// pipe of JSON-RPC lines, each kept in <StateDir>/codex-<start-unix-nanos>.jsonl;
// stdin carries reeve's requests and answers. Before the prompt is sent
// the app-server must answer the handshake and start (or resume) the
// thread: a turn whose decision channel does not work does not start.
func (a *Adapter) StartTurn(ctx context.Context, t agents.Turn, emit agents.Emit) (agents.Process, error) {
	path, err := a.program().Find()
	if err != nil {
		return nil, err
	}
	if t.Hook != nil && t.Hook.Decide == nil {
		return nil, fmt.Errorf("codex: a governed turn needs an in-band decision function")
	}
	evidence, err := ptyrun.OpenEvidence(t.StateDir, ID, "jsonl")
	if err != nil {
		return nil, err
	}
	m := newMapper(emit, t.Model, t.StateDir, codexHome(t.Env))
	if t.Resume != "" {
		m.rolloutStart = rolloutSize(m.home, t.Resume)
	}
	var decide func(context.Context, agents.ToolUse) agents.Verdict
	if t.Hook != nil {
		decide = t.Hook.Decide
	}
	ch := newChannel(m, decide, t.Dir)
	p, err := ptyrun.StartPipe(ctx, ptyrun.PipeOptions{
		Path: path, Args: Args(t), Dir: t.Dir, Env: t.Env,
		Line:  ch.line,
		Raw:   evidence.Writer(),
		Stdin: true,
	})
	if err != nil {
		evidence.Close()
		return nil, fmt.Errorf("codex: %w", err)
	}
	ch.attach(p)
	fail := func(err error) (agents.Process, error) {
		_ = p.Kill()
		r := p.Wait()
		ch.shutdown()
		m.closeAll()
		evidence.Close()
		what := "the app-server did not start the turn"
		if t.Hook != nil {
			what = "the decision channel is not working, so the turn does not start"
		}
		return nil, fmt.Errorf("codex: %s: %w%s", what, err, ptyrun.StderrNote(r.Stderr, false, ""))
	}
	if err := ch.open(t, a.initTimeout(), p.Done()); err != nil {
		return fail(err)
	}
	return &ptyrun.Turn{Proc: p, Evidence: evidence, Spec: t, Result: func(r ptyrun.Result) agents.TurnResult {
		ch.shutdown()
		m.closeAll()
		return result(m, t.Resume, r)
	}}, nil
}

func (a *Adapter) initTimeout() time.Duration {
	if a.o.InitTimeout > 0 {
		return a.o.InitTimeout
	}
	return DefaultInitTimeout
}

// result decides how the turn ended; every line has been handled by now.
func result(m *mapper, resume string, r ptyrun.Result) agents.TurnResult {
	m.mu.Lock()
	thread := m.threadID
	m.mu.Unlock()
	res := agents.TurnResult{ExitCode: ptyrun.ExitCode(r), AgentSessionID: thread, Resume: thread}
	if res.Resume == "" {
		res.Resume, res.AgentSessionID = resume, resume
	}
	switch {
	case r.Killed:
		res.Err = fmt.Errorf("codex: %w", ptyrun.ErrKilled)
	case m.failure != nil:
		res.Err = m.failure
	case !m.ended && r.Err != nil:
		res.Err = fmt.Errorf("codex %s%s", r.Err, ptyrun.StderrNote(r.Stderr, thread == "", "thread"))
	case !m.completed && m.lastError != "":
		res.Err = fmt.Errorf("codex: %s", m.lastError)
	case !m.completed:
		res.Err = fmt.Errorf("codex ended without completing the turn%s", ptyrun.StderrNote(r.Stderr, thread == "", "thread"))
	}
	if m.completed {
		// The app-server is stopped by closing its stdin once the turn
		// completed; how it exits then is not the turn's outcome.
		res.ExitCode = 0
	}
	return res
}

// hookArgs installs reeve's hooks for one invocation through -c config
// overrides (TOML inline tables), leaving the user's CODEX_HOME untouched.
// (Codex runs hooks nobody reviewed only when the thread's config sets
// bypass_hook_trust, which reeve does: it wrote them.) A PreToolUse hook
// that Codex kills for taking too long lets the command run, so its
// timeout is the hook's own plus margin.
func hookArgs(h *agents.Hook) []string {
	var args []string
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
