// Package gemini is the adapter for Google's Gemini CLI run headless: one
// `gemini -p --output-format stream-json` process per turn, its JSON events
// mapped onto session updates, `--resume <session_id>` for the next turn,
// and BeforeTool hooks through which reeve decides every tool use.
package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/ptyrun"
)

// ID is the adapter id.
const ID = "gemini"

// EnvPath overrides the executable (default: gemini on PATH).
const EnvPath = "REEVE_GEMINI_PATH"

// HookEvents are the Gemini CLI hook events a governed turn installs.
// BeforeTool decides; the others are recorded.
var HookEvents = []string{"BeforeTool", "AfterTool", "BeforeAgent", "AfterAgent"}

// Options configures the adapter.
type Options struct {
	// Getenv reads EnvPath and HOME; default os.Getenv.
	Getenv func(string) string
	// LookPath finds gemini on PATH; default exec.LookPath.
	LookPath func(string) (string, error)
}

// Adapter runs Gemini CLI.
type Adapter struct {
	o        Options
	versions ptyrun.VersionCache
}

var _ agents.Adapter = (*Adapter)(nil)

// New returns the Gemini CLI adapter.
func New(o Options) *Adapter {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	// Node.js loads a large bundle before it answers --version.
	return &Adapter{o: o, versions: ptyrun.VersionCache{Timeout: 60 * time.Second}}
}

// ID is "gemini".
func (a *Adapter) ID() string { return ID }

// Describe finds the executable and asks it for its version.
func (a *Adapter) Describe(ctx context.Context) agents.Info {
	return a.program().Describe(ctx, agents.Info{ID: ID, Provider: "google", Structured: true, Resumable: true,
		Governance: "each tool use passes Gemini CLI's BeforeTool hook to reeve; Gemini CLI lets a tool run when a hook times out, so reeve's hook always answers (deny) before Gemini's hook timeout"})
}

func (a *Adapter) program() ptyrun.Program {
	return ptyrun.Program{Name: "gemini", EnvPath: EnvPath, Getenv: a.o.Getenv, LookPath: a.o.LookPath, Versions: &a.versions}
}

// Args is the command line (after the program name) for a turn. Gemini
// CLI asks for nothing headless: a tool that needs approval is either left
// out of the model's tools (default mode) or runs (yolo). A governed turn
// runs in yolo mode with reeve's BeforeTool hook deciding every tool use;
// an unguarded one runs in yolo mode alone.
func Args(t agents.Turn) []string {
	// --skip-trust: an untrusted folder would drop the workspace settings
	// and refuse headless runs; reeve chose the directory.
	args := []string{"-o", "stream-json", "--skip-trust", "--approval-mode", "yolo"}
	if t.Model != "" {
		args = append(args, "-m", t.Model)
	}
	if t.Resume != "" {
		args = append(args, "--resume", t.Resume)
	}
	prompt := t.Prompt
	if t.Context != "" {
		// Gemini CLI has no flag for extra system instructions; the context
		// leads the prompt of every turn.
		prompt = "<context>\n" + t.Context + "\n</context>\n\n" + prompt
	}
	// -p=PROMPT so that a prompt starting with "-" is not taken for a flag.
	return append(args, "--prompt="+prompt)
}

// StartTurn runs one `gemini -p` process. Stdout is a pipe of stream-json
// lines, each kept in <StateDir>/gemini-<start-unix-nanos>.jsonl and mapped
// onto events; stderr is kept for the error of a failed run.
func (a *Adapter) StartTurn(ctx context.Context, t agents.Turn, emit agents.Emit) (agents.Process, error) {
	path, err := a.program().Find()
	if err != nil {
		return nil, err
	}
	env := t.Env
	if env == nil {
		env = os.Environ()
	}
	if t.Hook != nil {
		home, err := a.governedHome(t, env)
		if err != nil {
			return nil, err
		}
		env = append(withoutKey(env, "GEMINI_CLI_HOME"), "GEMINI_CLI_HOME="+home)
	}
	evidence, err := ptyrun.OpenEvidence(t.StateDir, ID, "jsonl")
	if err != nil {
		return nil, err
	}
	m := &mapper{emit: emit}
	p, err := ptyrun.StartPipe(ctx, ptyrun.PipeOptions{
		Path: path, Args: Args(t), Dir: t.Dir, Env: env,
		Line: m.line,
		Raw:  evidence.Writer(),
	})
	if err != nil {
		evidence.Close()
		return nil, fmt.Errorf("gemini: %w", err)
	}
	return &ptyrun.Turn{Proc: p, Evidence: evidence, Spec: t, Result: func(r ptyrun.Result) agents.TurnResult { return result(m, t.Resume, r) }}, nil
}

// governedHome prepares the Gemini CLI home of a governed session,
// <StateDir>/gemini-home (GEMINI_CLI_HOME), and returns it. Gemini CLI
// reads hooks from settings files only, and of those only the user's
// settings are both outside the worktree and accepted for any owner (the
// system settings file must sit in root-owned directories); so the
// session gets its own home: the user's settings.json with reeve's hooks
// added, and links to the user's credentials. The session's transcripts
// stay in it, which is where --resume finds them.
func (a *Adapter) governedHome(t agents.Turn, env []string) (string, error) {
	if t.StateDir == "" {
		return "", errors.New("gemini: a governed turn needs a state directory for its settings")
	}
	home := filepath.Join(t.StateDir, "gemini-home")
	dir := filepath.Join(home, ".gemini")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("gemini: %w", err)
	}
	userDir := filepath.Join(userHome(env), ".gemini")
	if h := envValue(env, "GEMINI_CLI_HOME"); h != "" && h != home {
		userDir = filepath.Join(h, ".gemini") // the user's own relocated home
	}
	settings := map[string]any{}
	if b, err := os.ReadFile(filepath.Join(userDir, "settings.json")); err == nil {
		if err := json.Unmarshal(b, &settings); err != nil {
			return "", fmt.Errorf("gemini: read %s: %w", filepath.Join(userDir, "settings.json"), err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("gemini: %w", err)
	}
	hooks, _ := settings["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
	}
	for _, ev := range HookEvents {
		timeout := 30_000
		if ev == "BeforeTool" {
			timeout = int(t.Hook.Timeout.Milliseconds()) + 1000
		}
		hooks[ev] = []any{map[string]any{"matcher": "*", "hooks": []any{map[string]any{
			"type": "command", "name": "reeve", "command": failClosed(t.Hook.Command(ev)), "timeout": timeout,
		}}}}
	}
	settings["hooks"] = hooks
	b, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return "", fmt.Errorf("gemini: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "settings.json"), b, 0o600); err != nil {
		return "", fmt.Errorf("gemini: write hook settings: %w", err)
	}
	// The user's sign-in, so a governed session runs as the user.
	for _, name := range []string{"oauth_creds.json", "google_accounts.json", "installation_id", "user_id", "trustedFolders.json"} {
		src, dst := filepath.Join(userDir, name), filepath.Join(dir, name)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		if err := os.Symlink(src, dst); err != nil {
			return "", fmt.Errorf("gemini: link %s: %w", name, err)
		}
	}
	return home, nil
}

// failClosed wraps a hook command so that whatever becomes of it, Gemini
// CLI reads a deny: it takes exit status 1 with text for a warning that
// allows, and an answer that is not JSON for plain text. A command that
// fails (or is missing) prints a deny and exits 2.
func failClosed(cmd string) string {
	return `out=$(` + cmd + `) && printf '%s\n' "$out" || { echo '{"decision":"deny","reason":"the reeve hook failed, so the tool use is denied"}'; exit 2; }`
}

func userHome(env []string) string {
	if h := envValue(env, "HOME"); h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := cut(env[i]); ok && k == key {
			return v
		}
	}
	return ""
}

func cut(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return "", "", false
}

func withoutKey(env []string, key string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if k, _, _ := cut(kv); k != key {
			out = append(out, kv)
		}
	}
	return out
}

// result decides how the turn ended; every line has been mapped by now.
func result(m *mapper, resume string, r ptyrun.Result) agents.TurnResult {
	res := agents.TurnResult{ExitCode: ptyrun.ExitCode(r), AgentSessionID: m.sessionID, Resume: m.sessionID}
	if res.Resume == "" {
		res.Resume, res.AgentSessionID = resume, resume
	}
	switch {
	case r.Killed:
		res.Err = fmt.Errorf("gemini: %w", ptyrun.ErrKilled)
	case m.failure != nil:
		res.Err = m.failure
	case r.Err != nil:
		res.Err = fmt.Errorf("gemini %s%s", r.Err, ptyrun.StderrNote(r.Stderr, m.sessionID == "", "session"))
	case !m.gotResult:
		res.Err = fmt.Errorf("gemini ended without a result%s", ptyrun.StderrNote(r.Stderr, m.sessionID == "", "session"))
	}
	return res
}
