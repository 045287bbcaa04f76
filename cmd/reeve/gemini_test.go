package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/agents/agenttest"
)

// geminiHome starts a daemon whose gemini agent is the pinned Gemini CLI
// talking to srv.
func geminiHome(t *testing.T, srv *agenttest.GeminiServer) *daemonHome {
	t.Helper()
	exe := agenttest.Gemini(t)
	userHome := t.TempDir()
	if err := agenttest.GeminiHome(userHome, nil); err != nil {
		t.Fatal(err)
	}
	h := newHome(t)
	h.env = append(agenttest.GeminiEnv(srv.URL, userHome), "REEVE_GEMINI_PATH="+exe)
	h.start()
	return h
}

// Gemini CLI through the daemon, governed: each tool use reaches reeve's
// gate through its BeforeTool hook; the project policy denies one command
// (the agent is told why) and allows another, a third waits for a human,
// and the decisions are on the record. The session resumes Gemini's own
// session on a follow-up.
func TestGeminiSessionGoverned(t *testing.T) {
	srv := agenttest.NewGeminiServer(t, agenttest.GeminiOptions{Turns: []agenttest.Turn{
		{Text: "first", Calls: []agenttest.ToolCall{agenttest.RunShell("touch denied.txt")}},
		{Text: "second", Calls: []agenttest.ToolCall{agenttest.RunShell("touch allowed.txt")}},
		{Text: "done"},
		{Text: "asking", Calls: []agenttest.ToolCall{agenttest.RunShell("touch by-human.txt")}},
		{Text: "all done"},
	}})
	h := geminiHome(t, srv)
	work := t.TempDir()
	os.MkdirAll(filepath.Join(work, ".reeve"), 0o755)
	os.WriteFile(filepath.Join(work, ".reeve", "policy.yaml"), []byte(`version: 1
deny:
  - name: no-denied-files
    tools: [run_shell_command]
    commands: ["touch denied*"]
    reason: denied files are off limits here
allow:
  - name: allowed-files
    tools: [run_shell_command]
    commands: ["touch allowed*"]
`), 0o644)
	r := h.must("run", work, "--agent", "gemini", "--model", "gemini-2.5-pro", "--prompt", "make files", "--wait", "--timeout", "180", "--json")
	si := h.sessionInfo(r.stdout)
	if si.Status != "completed" {
		t.Fatalf("session ended %s: %s", si.Status, si.StatusReason)
	}
	if _, err := os.Stat(filepath.Join(work, "denied.txt")); err == nil {
		t.Fatal("the policy deny did not block the tool")
	}
	if _, err := os.Stat(filepath.Join(work, "allowed.txt")); err != nil {
		t.Fatal("the policy allow did not let the tool run")
	}
	var told bool
	for _, req := range srv.MainRequests() {
		told = told || strings.Contains(string(req.Body), "denied files are off limits here")
	}
	if !told {
		t.Fatal("the model was not told why its call was denied")
	}
	ds := decisions(h.logEvents(si.ID))
	if len(ds) != 2 || ds[0].Decision != "deny" || ds[0].DecidedBy != "policy:no-denied-files" ||
		ds[1].Decision != "allow" || ds[1].DecidedBy != "policy:allowed-files" {
		t.Fatalf("decisions on the record: %+v", ds)
	}
	m := h.manifest(si.ID)
	if !m.Guarded || m.Agent != "gemini" || m.Provider != "google" || m.AgentSessionID == "" || !m.Resumable || len(m.Approvals) != 2 {
		t.Fatalf("manifest: %+v", m)
	}

	// A follow-up resumes Gemini's session; its call waits for a human.
	h.must("send", si.ID, "--prompt", "one more")
	var id string
	waitFor(t, "a pending request", 90*time.Second, func() bool {
		p := h.pending()
		if len(p) == 1 {
			id = p[0].ID
		}
		return len(p) == 1
	})
	if _, err := os.Stat(filepath.Join(work, "by-human.txt")); err == nil {
		t.Fatal("the tool ran before anyone decided")
	}
	h.must("permit", "allow", id)
	if r := h.run("wait", si.ID, "--timeout", "120"); r.code != 0 {
		t.Fatalf("wait: %d %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(work, "by-human.txt")); err != nil {
		t.Fatal("the human's allow did not let the tool run")
	}
	if m2 := h.manifest(si.ID); m2.AgentSessionID != m.AgentSessionID {
		t.Fatalf("the follow-up did not resume: %s then %s", m.AgentSessionID, m2.AgentSessionID)
	}
	if p := srv.Problems(); len(p) > 0 {
		t.Fatalf("server problems: %v", p)
	}
}
