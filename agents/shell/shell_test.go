package shell

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

func run(t *testing.T, a agents.Adapter, turn agents.Turn) (string, agents.TurnResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var out strings.Builder
	p, err := a.StartTurn(ctx, turn, func(ev agents.Event) {
		mu.Lock()
		defer mu.Unlock()
		if ev.Kind != wire.KindTerminalOutput {
			t.Errorf("shell emitted %s", ev.Kind)
		}
		out.WriteString(ev.Data.(wire.TerminalOutput).Text)
	})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Wait()
	mu.Lock()
	defer mu.Unlock()
	return out.String(), res
}

// The prompt is a command line run by $SHELL in the session directory; a
// further prompt runs another command there.
func TestShellRunsPromptInDir(t *testing.T) {
	a := New(Options{Getenv: func(k string) string {
		if k == "SHELL" {
			return "/bin/bash"
		}
		return ""
	}})
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("no /bin/bash")
	}
	info := a.Describe(context.Background())
	if info.ID != ID || !info.Installed || info.Path != "/bin/bash" || !info.Resumable || info.Structured {
		t.Fatalf("info %+v", info)
	}
	dir := t.TempDir()
	out, res := run(t, a, agents.Turn{Prompt: `touch made-by-shell.txt && echo "shell=$BASH_VERSION in $(pwd)"`, Dir: dir})
	if res.Err != nil || res.ExitCode != 0 || res.Resume != ResumeToken {
		t.Fatalf("result %+v", res)
	}
	if _, err := os.Stat(filepath.Join(dir, "made-by-shell.txt")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "shell=") || strings.Contains(out, "shell= ") || !strings.Contains(out, "in "+dir) {
		t.Fatalf("output %q: want bash's version and the directory", out)
	}

	out, res = run(t, a, agents.Turn{Prompt: `ls; exit 3`, Dir: dir, Resume: res.Resume})
	if !strings.Contains(out, "made-by-shell.txt") || res.ExitCode != 3 || res.Err == nil || res.Resume != ResumeToken {
		t.Fatalf("second turn: output %q, result %+v", out, res)
	}
}

func TestShellFallsBackToSh(t *testing.T) {
	a := New(Options{Getenv: func(string) string { return "" }})
	if info := a.Describe(context.Background()); info.Path != FallbackShell || !info.Installed {
		t.Fatalf("info %+v", info)
	}
	out, res := run(t, a, agents.Turn{Prompt: `echo "$0"`, Dir: t.TempDir()})
	if res.Err != nil || !strings.Contains(out, FallbackShell) {
		t.Fatalf("output %q result %+v", out, res)
	}
}
