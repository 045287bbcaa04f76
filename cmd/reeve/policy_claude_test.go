package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/wire"
)

// The same through the real Claude Code, in bypass mode: Write to .env and
// rm by its path are denied by the policy, and a command whose program is
// only known at run time (x=rm; $x) is asked about, never let through by
// the mode; the human's deny stands.
func TestClaudeCannotDodgeThePolicy(t *testing.T) {
	work := t.TempDir()
	for _, f := range []string{"victim1.txt", "victim2.txt"} {
		if err := os.WriteFile(filepath.Join(work, f), []byte("keep\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(work, ".reeve"), 0o755)
	os.WriteFile(filepath.Join(work, ".reeve", "policy.yaml"), []byte(`version: 1
deny:
  - name: secrets
    paths: [".env"]
  - name: no-rm
    commands: ["rm *"]
`), 0o644)
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "Trying.", Calls: []agenttest.ToolCall{
			{Name: "Write", Input: map[string]any{"file_path": filepath.Join(work, ".env"), "content": "TOKEN=stolen\n"}},
			agenttest.Bash("command rm -f victim1.txt"),
			agenttest.Bash("x=rm; $x -f victim2.txt"),
			agenttest.Bash("touch harmless.txt"),
		}},
		{Text: "Done."},
	}})
	h := claudeHome(t, srv)
	sid := strings.TrimSpace(h.must("run", work, "--agent", "claude", "--mode", "bypass", "--prompt", "try everything").stdout)
	var req wire.PermissionRequest
	waitFor(t, "the opaque command to be asked about", 120*time.Second, func() bool {
		p := h.pending()
		if len(p) == 1 {
			req = p[0]
		}
		return len(p) == 1
	})
	if req.SessionID != sid || !strings.Contains(string(req.Input), "$x") || !strings.Contains(req.Reason, "cannot tell what this command runs") {
		t.Fatalf("request: %+v", req)
	}
	h.must("permit", "deny", req.ID, "--reason", "no variables as commands")
	if r := h.run("wait", sid, "--timeout", "120"); r.code != 0 {
		t.Fatalf("wait: %d %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(work, "harmless.txt")); err != nil {
		t.Fatalf("the harmless command did not run, so the turn proves nothing: %v", err)
	}
	if _, err := os.Stat(filepath.Join(work, ".env")); err == nil {
		t.Error(".env was written despite the policy")
	}
	for _, f := range []string{"victim1.txt", "victim2.txt"} {
		if _, err := os.Stat(filepath.Join(work, f)); err != nil {
			t.Errorf("%s was removed: %v", f, err)
		}
	}
	by := map[string]int{}
	for _, d := range decisions(h.logEvents(sid)) {
		by[d.Decision+" "+d.DecidedBy]++
	}
	for _, want := range []string{"deny policy:secrets", "deny policy:no-rm", "deny human", "allow mode:bypass"} {
		if by[want] == 0 {
			t.Errorf("no %q on the record: %v", want, by)
		}
	}
}
