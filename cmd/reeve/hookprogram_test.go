package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/agents/agenttest"
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
