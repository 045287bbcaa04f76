package registry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/agents/custom"
)

// fakeMachine has the executables named in bin (as real files, so that
// version probes run them) and nothing else on PATH.
type fakeMachine struct {
	env map[string]string
	bin map[string]string // name -> path
}

func (m fakeMachine) getenv(k string) string { return m.env[k] }

func (m fakeMachine) lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(name); err != nil {
			return "", err
		}
		return name, nil
	}
	if p, ok := m.bin[name]; ok {
		return p, nil
	}
	return "", errors.New("executable file not found in $PATH")
}

func (m fakeMachine) registry() *Registry {
	return New(Options{Getenv: m.getenv, LookPath: m.lookPath})
}

// script writes an executable that prints out.
func script(t *testing.T, name, out string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho '"+out+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLookupUnknownListsAvailable(t *testing.T) {
	r := fakeMachine{env: map[string]string{custom.EnvCommand: "/bin/cat", custom.EnvID: "cat"}}.registry()
	_, err := r.Lookup("aider")
	if err == nil {
		t.Fatal("unknown agent found")
	}
	want := `unknown agent "aider" (available: ` + strings.Join(r.IDs(), ", ") + ")"
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	for _, id := range []string{"shell", "cat"} {
		if !strings.Contains(err.Error(), id) {
			t.Errorf("error %q does not list %s", err, id)
		}
		if a, err := r.Lookup(id); err != nil || a.ID() != id {
			t.Errorf("Lookup(%s) = %v, %v", id, a, err)
		}
	}
}

func TestCustomAgentRegistration(t *testing.T) {
	ctx := context.Background()
	if ids := (fakeMachine{}).registry().IDs(); strings.Contains(strings.Join(ids, ","), custom.DefaultID) {
		t.Fatalf("custom registered without %s: %v", custom.EnvCommand, ids)
	}
	r := fakeMachine{env: map[string]string{custom.EnvCommand: "/bin/cat"}}.registry()
	ids := r.IDs()
	if ids[len(ids)-1] != custom.DefaultID {
		t.Fatalf("ids %v: custom should come last", ids)
	}
	// An id that collides with a built-in cannot shadow it.
	r = fakeMachine{env: map[string]string{custom.EnvCommand: "/bin/cat", custom.EnvID: "shell"}}.registry()
	a, err := r.Lookup(custom.DefaultID)
	if err != nil {
		t.Fatal(err)
	}
	if info := a.Describe(ctx); !strings.Contains(info.Problem, "built-in") {
		t.Fatalf("collision problem %q", info.Problem)
	}
	if sh, _ := r.Lookup("shell"); sh.Describe(ctx).Path == "/bin/cat" {
		t.Fatal("custom agent shadowed shell")
	}
}

// Default is the first installed of claude and codex, otherwise shell; an
// agent that is installed but broken is passed over.
func TestDefaultSelection(t *testing.T) {
	ctx := context.Background()
	claudeExe := script(t, "claude", "2.1.329 (Claude Code)")
	codexExe := script(t, "codex", "codex-cli 0.169.0")
	brokenExe := filepath.Join(t.TempDir(), "claude")
	if err := os.WriteFile(brokenExe, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		m    fakeMachine
		want string
	}{
		{"nothing installed", fakeMachine{}, "shell"},
		{"codex only", fakeMachine{bin: map[string]string{"codex": codexExe}}, "codex"},
		{"both", fakeMachine{bin: map[string]string{"codex": codexExe, "claude": claudeExe}}, "claude"},
		{"claude via REEVE_CLAUDE_PATH", fakeMachine{env: map[string]string{"REEVE_CLAUDE_PATH": claudeExe}}, "claude"},
		{"claude broken, codex fine", fakeMachine{bin: map[string]string{"codex": codexExe, "claude": brokenExe}}, "codex"},
		{"custom agent is never the default", fakeMachine{env: map[string]string{custom.EnvCommand: "/bin/cat"}}, "shell"},
	}
	for _, c := range cases {
		a, err := c.m.registry().Default(ctx)
		if err != nil || a.ID() != c.want {
			t.Errorf("%s: Default = %v, %v; want %s", c.name, a, err, c.want)
		}
	}

	r := fakeMachine{bin: map[string]string{"codex": codexExe}}.registry()
	infos := r.List(ctx)
	var ids []string
	for _, in := range infos {
		ids = append(ids, in.ID)
	}
	if strings.Join(ids, ",") != "claude,codex,gemini,shell" {
		t.Fatalf("List ids %v", ids)
	}
	if infos[0].Installed || infos[0].Problem == "" {
		t.Errorf("claude %+v: want not installed, with a problem", infos[0])
	}
	if !infos[1].Installed || infos[1].Version != "0.169.0" || infos[1].Path != codexExe {
		t.Errorf("codex %+v", infos[1])
	}
}
