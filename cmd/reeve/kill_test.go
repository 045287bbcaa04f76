package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/agents/agenttest"
)

// escapeePrompt starts, from a shell turn, a process that leaves the
// agent's process group and session (a double fork into setsid) and writes
// late.txt 3 s later, then keeps the turn busy.
const escapeePrompt = `(setsid sh -c 'echo "escapee=$$"; sleep 3; echo late > late.txt' &); echo early > early.txt; sleep 300`

var escapeeRe = regexp.MustCompile(`escapee=(\d+)`)

// escapeeOf waits for the session's output to name the escapee's pid.
func (h *daemonHome) escapeeOf(sid string) int {
	h.t.Helper()
	pid := 0
	waitFor(h.t, "the escapee to start", 30*time.Second, func() bool {
		var out strings.Builder
		for _, e := range h.logEvents(sid) {
			out.Write(e.Data)
		}
		if m := escapeeRe.FindStringSubmatch(out.String()); m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
		return pid != 0
	})
	if !processRuns(pid) {
		h.t.Fatalf("escapee %d is not running", pid)
	}
	return pid
}

// `session stop` ends every process of the turn, including one that left
// its process group and session; what it would have written never appears,
// in the worktree or in a later checkpoint.
func TestSessionStopKillsEscapedProcesses(t *testing.T) {
	repo := devRepo(t)
	h := newHome(t)
	h.start()
	sid := strings.TrimSpace(h.must("run", repo, "--agent", "shell", "--prompt", escapeePrompt).stdout)
	pid := h.escapeeOf(sid)
	h.must("session", "stop", sid)
	if r := h.run("wait", sid, "--timeout", "30"); r.code != 10 {
		t.Fatalf("wait on the stopped session: exit %d %s", r.code, r.stderr)
	}
	if processRuns(pid) {
		t.Fatalf("escapee %d survived session stop", pid)
	}
	time.Sleep(4 * time.Second) // past the moment it would have written
	wt := filepath.Join(h.dir, "worktrees", sid)
	if _, err := os.Stat(filepath.Join(wt, "early.txt")); err != nil {
		t.Fatalf("the turn did not run in the worktree: %v", err)
	}
	if _, err := os.Stat(filepath.Join(wt, "late.txt")); err == nil {
		t.Fatal("late.txt was written after the session was stopped")
	}
	h.sendShell(sid, "echo next > next.txt")
	for _, cp := range checkpointsOf(t, h.logEvents(sid)) {
		for _, f := range cp.Files {
			if f == "late.txt" {
				t.Fatalf("checkpoint %+v holds late.txt", cp)
			}
		}
	}
}

// Stopping the daemon ends every process of its running turns.
func TestDaemonStopKillsEscapedProcesses(t *testing.T) {
	for _, force := range []bool{false, true} {
		t.Run(fmt.Sprintf("force=%v", force), func(t *testing.T) {
			dir := t.TempDir()
			h := newHome(t)
			h.start()
			sid := strings.TrimSpace(h.must("run", dir, "--agent", "shell", "--prompt", escapeePrompt).stdout)
			pid := h.escapeeOf(sid)
			if force {
				// The worker is killed outright: its turns' reapers see it go.
				h.must("stop", "--force")
			} else {
				h.must("stop")
			}
			waitFor(t, "the escapee to end", 15*time.Second, func() bool { return !processRuns(pid) })
			time.Sleep(4 * time.Second)
			if _, err := os.Stat(filepath.Join(dir, "late.txt")); err == nil {
				t.Fatal("late.txt was written after the daemon stopped")
			}
		})
	}
}

// Break 5 through the daemon with the real Claude Code: `session stop`
// during a Bash command ends it and what it sent into its own session; the
// file they would have written appears neither in the worktree nor in the
// checkpoint of the next turn.
func TestClaudeSessionStopKillsBashCommands(t *testing.T) {
	cmd := `(setsid sh -c 'sleep 4; echo late > escaped.txt' &); echo early > early.txt; sleep 4; echo late > late.txt`
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "running", Calls: []agenttest.ToolCall{agenttest.Bash(cmd)}},
		{Text: "ran it"},
		{Text: "next", Calls: []agenttest.ToolCall{agenttest.Bash("echo next > next.txt")}},
		{Text: "done"},
	}})
	h := claudeHome(t, srv)
	repo := devRepo(t)
	sid := strings.TrimSpace(h.must("run", repo, "--agent", "claude", "--mode", "bypass", "--prompt", "run it").stdout)
	wt := filepath.Join(h.dir, "worktrees", sid)
	waitFor(t, "the Bash command to start", 90*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(wt, "early.txt"))
		return err == nil
	})
	time.Sleep(300 * time.Millisecond) // the escapee is on its way
	h.must("session", "stop", sid)
	if r := h.run("wait", sid, "--timeout", "60"); r.code != 10 {
		t.Fatalf("wait on the stopped session: exit %d %s", r.code, r.stderr)
	}
	time.Sleep(5 * time.Second) // past the moment they would have written
	for _, f := range []string{"late.txt", "escaped.txt"} {
		if _, err := os.Stat(filepath.Join(wt, f)); err == nil {
			t.Fatalf("%s was written after the session was stopped", f)
		}
	}
	h.must("send", sid, "--prompt", "next")
	if r := h.run("wait", sid, "--timeout", "120"); r.code != 0 {
		t.Fatalf("wait after send: %d %s", r.code, r.stderr)
	}
	cps := checkpointsOf(t, h.logEvents(sid))
	if len(cps) == 0 {
		t.Fatal("no checkpoint after the next turn")
	}
	for _, cp := range cps {
		for _, f := range cp.Files {
			if f == "late.txt" || f == "escaped.txt" {
				t.Fatalf("checkpoint %+v holds %s", cp, f)
			}
		}
	}
}
