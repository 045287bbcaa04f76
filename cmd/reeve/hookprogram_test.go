package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/wire"
)

// Break 1 of issue 10: the daemon is started from a binary that is then
// moved away, as a versioned install or `go run` does. Hooks used to name
// that binary, failed to start, and Claude Code ran Read and ls with no
// decision while the manifest said guarded. The hooks now run a copy in
// the home, so the policy still decides every tool use.
func TestMovedBinaryStillGoverns(t *testing.T) {
	work := t.TempDir()
	os.WriteFile(filepath.Join(work, "notes.txt"), []byte("secret notes\n"), 0o644)
	os.MkdirAll(filepath.Join(work, ".reeve"), 0o755)
	os.WriteFile(filepath.Join(work, ".reeve", "policy.yaml"), []byte(`version: 1
deny:
  - name: no-reading
    tools: [Read, Bash]
    reason: reading is not allowed here
`), 0o644)
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "looking", Calls: []agenttest.ToolCall{
			agenttest.Bash("ls"),
			{Name: "Read", Input: map[string]any{"file_path": filepath.Join(work, "notes.txt")}},
		}},
		{Text: "done"},
	}})
	h := claudeHome(t, srv)
	h.must("stop", "--force", "--timeout", "10")

	// A versioned install: the daemon runs from versions/1/reeve, which is
	// then moved away.
	versioned := filepath.Join(t.TempDir(), "versions", "1", "reeve")
	os.MkdirAll(filepath.Dir(versioned), 0o755)
	b, err := os.ReadFile(reeveBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(versioned, b, 0o755); err != nil {
		t.Fatal(err)
	}
	h.bin = versioned
	h.start()
	if err := os.Rename(filepath.Dir(versioned), filepath.Dir(versioned)+".old"); err != nil {
		t.Fatal(err)
	}
	h.bin = ""

	r := h.run("run", work, "--agent", "claude", "--prompt", "look around", "--wait", "--timeout", "120", "--json")
	si := h.sessionInfo(r.stdout)
	ds := decisions(h.logEvents(si.ID))
	if len(ds) != 2 {
		t.Fatalf("decisions after the binary moved: %+v\n%s", ds, r.stderr)
	}
	for _, d := range ds {
		if d.Decision != "deny" || d.DecidedBy != "policy:no-reading" {
			t.Fatalf("decision %+v", d)
		}
	}
	sent := toolResultsSent(t, srv)
	if strings.Contains(sent, "secret notes") || strings.Contains(sent, "notes.txt\n") || strings.Count(sent, "reading is not allowed here") != 2 {
		t.Fatalf("what the model was told: %s", sent)
	}
	m := h.manifest(si.ID)
	if !m.Guarded || len(m.Approvals) != 2 {
		t.Fatalf("manifest %+v", m)
	}
}

// Durable pending requests against the real Claude Code: the worker is
// killed (kill -9) while a request waits for a human. The tool does not
// run, the supervisor's next worker denies the request on the record, and
// a human's late allow is refused with a reason.
func TestPendingRequestAcrossWorkerKill(t *testing.T) {
	work := t.TempDir()
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "asking", Calls: []agenttest.ToolCall{agenttest.Bash("touch after-crash.txt")}},
		{Text: "done"},
	}})
	h := claudeHome(t, srv)
	sid := strings.TrimSpace(h.must("run", work, "--agent", "claude", "--prompt", "make it").stdout)
	var req wire.PermissionRequest
	waitFor(t, "a pending request", 60*time.Second, func() bool {
		p := h.pending()
		if len(p) == 1 {
			req = p[0]
		}
		return len(p) == 1
	})
	st, _ := h.status()
	old := st.Lifecycle.WorkerPID
	if old == 0 {
		t.Fatalf("no worker pid: %+v", st)
	}
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new worker", 90*time.Second, func() bool {
		st, _ := h.status()
		return st.Health != nil && st.Lifecycle.WorkerPID != 0 && st.Lifecycle.WorkerPID != old
	})
	r := h.run("permit", "allow", req.ID)
	if r.code == 0 || !strings.Contains(r.stderr, "no such permission request") {
		t.Fatalf("late allow: exit %d %q", r.code, r.stderr)
	}
	var d wire.PermissionDecision
	for _, dd := range decisions(h.logEvents(sid)) {
		if dd.RequestID == req.ID {
			d = dd
		}
	}
	if d.Decision != "deny" || d.DecidedBy != "daemon" || d.ToolUseID == "" || !strings.Contains(d.Command, "after-crash.txt") {
		t.Fatalf("the request after the worker died: %+v", d)
	}
	time.Sleep(2 * time.Second)
	if _, err := os.Stat(filepath.Join(work, "after-crash.txt")); err == nil {
		t.Fatal("the tool ran after reeve's side crashed")
	}
}
