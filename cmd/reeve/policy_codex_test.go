package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/agents/agenttest"
)

// The breaks of the attack run, driven through the real Codex CLI in
// bypass mode, where whatever the policy misses runs: apply_patch creating
// .env, a command run with workdir /etc, and rm dodged by a path and by
// find -delete. Each is stopped by the policy; a harmless command runs, so
// the turn really executed its calls.
func TestCodexCannotDodgeThePolicy(t *testing.T) {
	exe := agenttest.Codex(t)
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
  - name: outside
    outside_workdir: true
  - name: no-rm
    commands: ["rm *"]
`), 0o644)
	patch := "*** Begin Patch\n*** Add File: .env\n+TOKEN=stolen\n*** End Patch\n"
	srv := agenttest.NewOpenAIServer(t, agenttest.OpenAIOptions{Turns: []agenttest.Turn{
		{Text: "Trying.", Calls: []agenttest.ToolCall{
			agenttest.ExecCommand("apply_patch <<'EOF'\n" + patch + "EOF"),
			{Name: "exec_command", Input: map[string]any{"cmd": "cat hostname > " + filepath.Join(work, "leak.txt"), "workdir": "/etc"}},
			agenttest.ExecCommand("/bin/rm -f victim1.txt"),
			agenttest.ExecCommand("find . -name victim2.txt -delete"),
			agenttest.ExecCommand("touch harmless.txt"),
		}},
		{Text: "Done."},
	}})
	codexHome := agenttest.CodexHome(t, agenttest.CodexHomeOptions{BaseURL: srv.URL})
	h := newHome(t)
	h.env = append(agenttest.CodexEnv(codexHome, t.TempDir()), "REEVE_CODEX_PATH="+exe)
	h.start()
	r := h.must("run", work, "--agent", "codex", "--mode", "bypass", "--prompt", "try everything", "--wait", "--timeout", "180", "--json")
	si := h.sessionInfo(r.stdout)
	if _, err := os.Stat(filepath.Join(work, "harmless.txt")); err != nil {
		t.Fatalf("the harmless command did not run, so the turn proves nothing (%s %s): %v", si.Status, si.StatusReason, err)
	}
	for _, f := range []string{".env", "leak.txt"} {
		if _, err := os.Stat(filepath.Join(work, f)); err == nil {
			t.Errorf("%s was written despite the policy", f)
		}
	}
	for _, f := range []string{"victim1.txt", "victim2.txt"} {
		if _, err := os.Stat(filepath.Join(work, f)); err != nil {
			t.Errorf("%s was removed despite the policy: %v", f, err)
		}
	}
	by := map[string]int{}
	for _, d := range decisions(h.logEvents(si.ID)) {
		by[d.Decision+" "+d.DecidedBy]++
	}
	for _, want := range []string{"deny policy:secrets", "deny policy:outside", "deny policy:no-rm"} {
		if by[want] == 0 {
			t.Errorf("no %q on the record: %v", want, by)
		}
	}
	if by["deny policy:no-rm"] < 2 {
		t.Errorf("both rm dodges should be denied by no-rm: %v", by)
	}
	if !strings.Contains(strings.Join(keys(by), " "), "allow mode:bypass") {
		t.Errorf("the harmless command was not allowed by the mode: %v", by)
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
