// Package claude is the adapter for Claude Code run headless: one
// `claude -p --input-format stream-json --output-format stream-json`
// process per turn, whose permission requests reeve answers in-band
// (control.go), its JSON events mapped onto session updates, and
// `--resume <session_id>` for the next turn.
package claude

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/ptyrun"
)

// ID is the adapter id.
const ID = "claude"

// EnvPath overrides the executable (default: claude on PATH).
const EnvPath = "REEVE_CLAUDE_PATH"

// HookEvents are the Claude Code hook events a governed turn installs.
// PreToolUse decides through the gate and PermissionRequest denies when
// reeve cannot be reached: a second layer behind the in-band channel.
var HookEvents = []string{"PreToolUse", "PermissionRequest", "PostToolUse", "Notification", "UserPromptSubmit", "Stop", "SessionStart"}

// Options configures the adapter.
type Options struct {
	// Getenv reads EnvPath; default os.Getenv.
	Getenv func(string) string
	// LookPath finds claude on PATH; default exec.LookPath.
	LookPath func(string) (string, error)
	// InitTimeout bounds the control channel's handshake at the start of
	// a turn; default DefaultInitTimeout.
	InitTimeout time.Duration
}

// Adapter runs Claude Code.
type Adapter struct {
	o        Options
	versions ptyrun.VersionCache
}

var _ agents.Adapter = (*Adapter)(nil)

// New returns the Claude Code adapter.
func New(o Options) *Adapter {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	return &Adapter{o: o}
}

// ID is "claude".
func (a *Adapter) ID() string { return ID }

// Describe finds the executable and asks it for its version (once per
// executable file).
func (a *Adapter) Describe(ctx context.Context) agents.Info {
	return a.program().Describe(ctx, agents.Info{ID: ID, Provider: "anthropic", Structured: true, Resumable: true})
}

func (a *Adapter) program() ptyrun.Program {
	return ptyrun.Program{Name: "claude", EnvPath: EnvPath, Getenv: a.o.Getenv, LookPath: a.o.LookPath, Versions: &a.versions}
}

// Args is the command line (after the program name) for a turn. The
// prompt is not on it: it goes on stdin, through the control protocol.
// settings is the settings file of a governed turn, "" for an unguarded
// one.
func Args(t agents.Turn, settings string) []string {
	args := []string{"-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"}
	if t.Model != "" {
		args = append(args, "--model", t.Model)
	}
	if t.Resume != "" {
		args = append(args, "--resume", t.Resume)
	}
	if t.Context != "" {
		// The system prompt is not kept with a resumed session: every turn
		// appends the context again.
		args = append(args, "--append-system-prompt", t.Context)
	}
	if settings != "" {
		// Every permission Claude Code would ask a person for comes to
		// reeve as a can_use_tool request on stdout; the settings make
		// every tool use ask (permissions.ask "*") and install the hooks.
		args = append(args, "--permission-prompt-tool", "stdio", "--settings", settings)
	} else {
		args = append(args, "--dangerously-skip-permissions")
	}
	return args
}

// writeSettings writes the per-session settings file that installs the
// hooks of a governed turn.
func writeSettings(t agents.Turn) (string, error) {
	type command struct {
		Type    string `json:"type"`
		Command string `json:"command"`
		Timeout int    `json:"timeout"` // seconds
	}
	type matcher struct {
		Matcher string    `json:"matcher"`
		Hooks   []command `json:"hooks"`
	}
	hooks := map[string][]matcher{}
	for _, ev := range HookEvents {
		timeout := 30
		if ev == "PreToolUse" || ev == "PermissionRequest" {
			timeout = int(t.Hook.Timeout.Seconds()) + 1
		}
		hooks[ev] = []matcher{{Matcher: "*", Hooks: []command{{Type: "command", Command: t.Hook.Command(ev), Timeout: timeout}}}}
	}
	// An ask rule for every tool: without it Claude Code lets read-only
	// tools (Read, ls, ...) run without asking, and a hook that failed to
	// start would leave them undecided. With it, even a hook allow is
	// followed by a can_use_tool request, which reeve answers.
	b, err := json.MarshalIndent(map[string]any{"hooks": hooks, "permissions": map[string]any{"ask": []string{"*"}}}, "", "  ")
	if err != nil {
		return "", err
	}
	if t.StateDir == "" {
		return "", errors.New("claude: a governed turn needs a state directory for its settings")
	}
	path := filepath.Join(t.StateDir, "claude-settings.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", fmt.Errorf("claude: write hook settings: %w", err)
	}
	return path, nil
}

// StartTurn runs one Claude Code process for the turn. Stdout is a pipe
// of stream-json lines, each kept in <StateDir>/claude-<start-unix-nanos>.jsonl
// and mapped onto events; stdin carries the control protocol. Before the
// prompt is sent, the control channel must answer its handshake: a turn
// whose decision channel does not work does not start.
func (a *Adapter) StartTurn(ctx context.Context, t agents.Turn, emit agents.Emit) (agents.Process, error) {
	path, err := a.program().Find()
	if err != nil {
		return nil, err
	}
	settings := ""
	var decide func(context.Context, agents.ToolUse) agents.Verdict
	if t.Hook != nil {
		if t.Hook.Decide == nil {
			return nil, errors.New("claude: a governed turn needs an in-band decision function")
		}
		decide = t.Hook.Decide
		if settings, err = writeSettings(t); err != nil {
			return nil, err
		}
	}
	env := t.Env
	if env == nil {
		env = os.Environ()
	}
	// As root, Claude Code refuses to bypass permissions unless it believes
	// it runs in a sandbox.
	if os.Geteuid() == 0 && !hasKey(env, "IS_SANDBOX") {
		env = append(env[:len(env):len(env)], "IS_SANDBOX=1")
	}

	evidence, err := ptyrun.OpenEvidence(t.StateDir, ID, "jsonl")
	if err != nil {
		return nil, err
	}
	ctl := newControl(decide)
	m := &mapper{emit: emit, control: ctl, stateDir: t.StateDir}
	p, err := ptyrun.StartPipe(ctx, ptyrun.PipeOptions{
		Path: path, Args: Args(t, settings), Dir: t.Dir, Env: env,
		Line:  m.line,
		Raw:   evidence.Writer(),
		Stdin: true,
	})
	if err != nil {
		evidence.Close()
		return nil, fmt.Errorf("claude: %w", err)
	}
	ctl.attach(p.Stdin())
	fail := func(err error) (agents.Process, error) {
		_ = p.Kill()
		r := p.Wait()
		ctl.shutdown()
		evidence.Close()
		return nil, fmt.Errorf("claude: the permission channel is not working, so the turn does not start: %w%s", err, ptyrun.StderrNote(r.Stderr, false, ""))
	}
	if err := ctl.initialize(a.initTimeout(), p.Done()); err != nil {
		return fail(err)
	}
	if err := ctl.prompt(t.Prompt); err != nil {
		return fail(fmt.Errorf("send the prompt: %w", err))
	}
	return &ptyrun.Turn{Proc: p, Evidence: evidence, Spec: t, Result: func(r ptyrun.Result) agents.TurnResult {
		ctl.shutdown()
		return result(m, t.Resume, r)
	}}, nil
}

func (a *Adapter) initTimeout() time.Duration {
	if a.o.InitTimeout > 0 {
		return a.o.InitTimeout
	}
	return DefaultInitTimeout
}

func hasKey(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// result decides how the turn ended. The mapper's state is final: every
// line was handled before Wait returned.
func result(m *mapper, resume string, r ptyrun.Result) agents.TurnResult {
	res := agents.TurnResult{ExitCode: ptyrun.ExitCode(r), AgentSessionID: m.sessionID, Resume: m.sessionID}
	if res.Resume == "" {
		// It died before saying which session it was; the previous token
		// still continues the conversation.
		res.Resume, res.AgentSessionID = resume, resume
	}
	switch {
	case r.Killed:
		res.Err = fmt.Errorf("claude: %w", ptyrun.ErrKilled)
	case m.failure != nil:
		res.Err = m.failure
	case r.Err != nil:
		res.Err = fmt.Errorf("claude %s%s", r.Err, ptyrun.StderrNote(r.Stderr, m.sessionID == "", "session"))
	case !m.gotResult:
		res.Err = fmt.Errorf("claude ended without a result%s", ptyrun.StderrNote(r.Stderr, m.sessionID == "", "session"))
	}
	return res
}
