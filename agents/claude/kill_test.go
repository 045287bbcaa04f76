package claude

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/agents/ptyrun"
	"reeve.dev/reeve/daemon/wire"
)

// processesIn lists the living processes whose working directory is dir:
// what a turn run in dir started.
func processesIn(dir string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && cwd == dir {
			if b, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && !zombie(b) {
				out = append(out, pid)
			}
		}
	}
	return out
}

func zombie(stat []byte) bool {
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' {
			return i+2 < len(stat) && stat[i+2] == 'Z'
		}
	}
	return false
}

// Killing a real Claude Code turn while its Bash command runs ends that
// command and one it sent off into its own session: no process of the
// turn survives, and what they would have written never appears.
func TestClaudeKillEndsBashCommands(t *testing.T) {
	exe := agenttest.Claude(t)
	cmd := `(setsid sh -c 'sleep 4; echo late > escaped.txt' &); echo started > started.txt; sleep 4; echo late > late.txt`
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "Running it.", Calls: []agenttest.ToolCall{agenttest.Bash(cmd)}},
		{Text: "Done."},
	}})
	dir, home := t.TempDir(), t.TempDir()
	dir, _ = filepath.EvalSymlinks(dir)
	var rec recorder
	p, err := adapterFor(exe).StartTurn(testContext(t), agents.Turn{
		Prompt: "run it", Model: model, Dir: dir, StateDir: t.TempDir(), Env: env(srv.URL, home),
	}, rec.Emit)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := os.Stat(filepath.Join(dir, "started.txt"))
		if err == nil && len(processesIn(dir)) >= 2 {
			break // the command runs, and so does its escapee
		}
		if time.Now().After(deadline) {
			_ = p.Kill()
			t.Fatalf("the Bash command did not start; events %v", rec.Kinds())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	res := waitTurn(t, p, 30*time.Second)
	if !errors.Is(res.Err, ptyrun.ErrKilled) {
		t.Fatalf("result %+v, want killed", res)
	}
	if left := processesIn(dir); len(left) > 0 {
		t.Fatalf("processes %v of the killed turn survive", left)
	}
	time.Sleep(5 * time.Second) // past the moment they would have written
	for _, f := range []string{"late.txt", "escaped.txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s was written after the turn was killed", f)
		}
	}
	if len(rec.Of(wire.KindToolCall)) != 1 {
		t.Errorf("events %v, want the Bash call recorded", rec.Kinds())
	}
}
