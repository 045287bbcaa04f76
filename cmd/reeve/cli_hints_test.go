package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/agents/agenttest"
)

// `run --wait` off a terminal says on stderr that the session waits for a
// permission decision and how to give it, and the command it prints works
// as printed: with the home chosen by --home (no REEVE_HOME), a person
// who pastes the hint decides the request of this daemon, and the run
// then completes.
func TestRunWaitHintDecidesAsPrinted(t *testing.T) {
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "asking", Calls: []agenttest.ToolCall{agenttest.Bash("touch hinted.txt")}},
		{Text: "done"},
	}})
	h := claudeHome(t, srv)
	var env []string
	for _, kv := range h.env {
		if !strings.HasPrefix(kv, "REEVE_HOME=") {
			env = append(env, kv)
		}
	}
	// `reeve` on PATH is the binary under test, as a person's shell finds it.
	bin := t.TempDir()
	if err := os.Symlink(reeveBin, filepath.Join(bin, "reeve")); err != nil {
		t.Fatal(err)
	}
	env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+t.TempDir())

	work := t.TempDir()
	p := &bg{cmd: exec.Command(reeveBin, "--home", h.dir, "run", work, "--agent", "claude", "--prompt", "make a file", "--wait", "--timeout", "120"), done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errb
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })

	var hint string
	waitFor(t, "the permission hint", 90*time.Second, func() bool {
		e := p.errb.String()
		i := strings.Index(e, "allow it: ")
		if i < 0 {
			return false
		}
		rest := e[i+len("allow it: "):]
		j := strings.Index(rest, "    deny it:")
		if j < 0 {
			return false
		}
		hint = rest[:j]
		return true
	})
	if e := p.errb.String(); !strings.Contains(e, "waits for a permission decision: Bash") || !strings.Contains(hint, "--home") {
		t.Fatalf("run --wait said:\n%s", e)
	}
	sh := exec.Command("sh", "-c", hint)
	sh.Env = env
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the hint %q failed: %v\n%s", hint, err, out)
	}
	if code := p.wait(t, 90*time.Second); code != 0 {
		t.Fatalf("run --wait: exit %d\n%s", code, p.errb.String())
	}
	if _, err := os.Stat(filepath.Join(work, "hinted.txt")); err != nil {
		t.Fatalf("the allowed tool did not run:\n%s", p.errb.String())
	}
	if e := p.errb.String(); !strings.Contains(e, "was decided: allow by human") {
		t.Errorf("run --wait did not report the decision:\n%s", e)
	}
}
