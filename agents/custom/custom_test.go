package custom

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// events records what an adapter emits.
type events struct {
	mu  sync.Mutex
	all []agents.Event
}

func (e *events) emit(ev agents.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

// output is the terminal output so far; it fails on any other kind.
func (e *events) output(t *testing.T) string {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, ev := range e.all {
		out, ok := ev.Data.(wire.TerminalOutput)
		if ev.Kind != wire.KindTerminalOutput || !ok {
			t.Fatalf("custom agent emitted %s %T, want terminal-output only", ev.Kind, ev.Data)
		}
		if out.Base64 != "" {
			raw, _ := base64.StdEncoding.DecodeString(out.Base64)
			b.Write(raw)
		}
		b.WriteString(out.Text)
	}
	return b.String()
}

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func waitTurn(t *testing.T, p agents.Process) agents.TurnResult {
	t.Helper()
	ch := make(chan agents.TurnResult, 1)
	go func() { ch <- p.Wait() }()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		_ = p.Kill()
		t.Fatal("turn did not end")
		return agents.TurnResult{}
	}
}

func TestFromEnv(t *testing.T) {
	if _, ok := FromEnv(envOf(nil)); ok {
		t.Fatal("no command configured, but FromEnv found an agent")
	}
	o, ok := FromEnv(envOf(map[string]string{EnvCommand: "aider", EnvArgs: `["--yes", "--model", "x y"]`, EnvID: "aider"}))
	if !ok || o.ID != "aider" || o.Command != "aider" || o.Problem != "" || strings.Join(o.Args, "|") != "--yes|--model|x y" {
		t.Fatalf("options %+v", o)
	}
	o, _ = FromEnv(envOf(map[string]string{EnvCommand: "aider"}))
	if o.ID != DefaultID || o.Args != nil {
		t.Fatalf("defaults %+v", o)
	}
	o, _ = FromEnv(envOf(map[string]string{EnvCommand: "aider", EnvID: "Bad Id!"}))
	if o.ID != DefaultID || !strings.Contains(o.Problem, EnvID) {
		t.Fatalf("bad id: %+v", o)
	}
}

// A bad REEVE_CUSTOM_AGENT_ARGS makes the agent refuse to start, and says
// what is wrong both in Describe and in the start error.
func TestBadArgsRefusesToStart(t *testing.T) {
	for _, raw := range []string{`--yes`, `{"a":1}`, `["ok", 3]`} {
		o, ok := FromEnv(envOf(map[string]string{EnvCommand: "/bin/cat", EnvArgs: raw}))
		if !ok {
			t.Fatal("agent hidden by bad args")
		}
		a := New(o)
		info := a.Describe(context.Background())
		if !strings.Contains(info.Problem, EnvArgs) || !strings.Contains(info.Problem, "JSON array of strings") {
			t.Errorf("args %s: problem %q", raw, info.Problem)
		}
		var ev events
		p, err := a.StartTurn(testContext(t), agents.Turn{Prompt: "hi", Dir: t.TempDir()}, ev.emit)
		if err == nil {
			p.Kill()
			p.Wait()
			t.Fatalf("args %s: started anyway", raw)
		}
		if !strings.Contains(err.Error(), EnvArgs) || !strings.Contains(err.Error(), "misconfigured") {
			t.Errorf("args %s: start error %q", raw, err)
		}
	}
}

// The prompt is typed into the program's terminal; its output is recorded
// as terminal output (and as raw evidence); the exit code comes back.
func TestCustomTypesPromptIntoTerminal(t *testing.T) {
	o, _ := FromEnv(envOf(map[string]string{
		EnvCommand: "sh",
		EnvID:      "toy-repl",
		EnvArgs:    `["-c", "printf 'ready> '; read line; echo \"you said: [$line] in $(pwd)\"; read more; echo \"then: [$more]\"; exit 4"]`,
	}))
	a := New(o)
	info := a.Describe(context.Background())
	if !info.Installed || info.ID != "toy-repl" || info.Structured || info.Resumable || info.Provider != "" || !filepath.IsAbs(info.Path) {
		t.Fatalf("info %+v", info)
	}
	dir, state := t.TempDir(), t.TempDir()
	var ev events
	p, err := a.StartTurn(testContext(t), agents.Turn{Prompt: "make it so", Dir: dir, StateDir: state}, ev.emit)
	if err != nil {
		t.Fatal(err)
	}
	// A further prompt to the running session goes through Input.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(ev.output(t), "you said") {
		if time.Now().After(deadline) {
			t.Fatalf("prompt never answered: %q", ev.output(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.Input([]byte("second\r")); err != nil {
		t.Fatal(err)
	}
	res := waitTurn(t, p)
	out := ev.output(t)
	if !strings.Contains(out, "you said: [make it so] in "+dir) || !strings.Contains(out, "then: [second]") {
		t.Fatalf("output %q", out)
	}
	if res.ExitCode != 4 || res.Err == nil || !strings.Contains(res.Err.Error(), "exit status 4") || res.Resume != "" {
		t.Fatalf("result %+v", res)
	}
	files, _ := filepath.Glob(filepath.Join(state, "toy-repl-*.pty"))
	if len(files) != 1 {
		t.Fatalf("evidence files %v", files)
	}
	st, err := os.Stat(files[0])
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("evidence file mode %v, %v", st.Mode(), err)
	}
	raw, _ := os.ReadFile(files[0])
	if string(raw) != out {
		t.Errorf("evidence %q differs from the emitted output %q", raw, out)
	}
}

// A program that prints nothing before reading still gets the prompt.
func TestCustomSilentProgramGetsPrompt(t *testing.T) {
	a := New(Options{Command: "/bin/sh", Args: []string{"-c", `read line; echo "got:$line"`}, TypeDelay: 100 * time.Millisecond})
	var ev events
	p, err := a.StartTurn(testContext(t), agents.Turn{Prompt: "quiet", Dir: t.TempDir()}, ev.emit)
	if err != nil {
		t.Fatal(err)
	}
	if res := waitTurn(t, p); res.Err != nil || res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(ev.output(t), "got:quiet") {
		t.Fatalf("output %q", ev.output(t))
	}
}

func TestCustomMissingCommand(t *testing.T) {
	a := New(Options{ID: "ghost", Command: "reeve-no-such-agent"})
	info := a.Describe(context.Background())
	if info.Installed || !strings.Contains(info.Problem, "reeve-no-such-agent not found") {
		t.Fatalf("info %+v", info)
	}
	var ev events
	if _, err := a.StartTurn(testContext(t), agents.Turn{Prompt: "x", Dir: t.TempDir()}, ev.emit); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("start: %v", err)
	}
}

func TestCustomKill(t *testing.T) {
	a := New(Options{Command: "/bin/sh", Args: []string{"-c", "echo up; sleep 300"}})
	var ev events
	p, err := a.StartTurn(testContext(t), agents.Turn{Dir: t.TempDir()}, ev.emit)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(ev.output(t), "up") {
		if time.Now().After(deadline) {
			p.Kill()
			t.Fatalf("no output: %q", ev.output(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	res := waitTurn(t, p)
	if res.Err == nil || res.ExitCode != 128+9 {
		t.Fatalf("result %+v", res)
	}
}
