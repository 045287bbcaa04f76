package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/wire"
)

// A worker killed outright (kill -9) while Codex waits on an in-band
// approval: the channel dies with the worker and the command never runs;
// the next worker denies the request on the record, refuses a late
// decision for it, and marks the session interrupted; a further prompt
// resumes the thread through a new app-server channel whose approvals
// work again.
func TestCodexChannelAfterWorkerKill(t *testing.T) {
	exe := agenttest.Codex(t)
	srv := agenttest.NewOpenAIServer(t, agenttest.OpenAIOptions{Turns: []agenttest.Turn{
		{Text: "first", Calls: []agenttest.ToolCall{agenttest.ExecCommand("touch before-crash.txt")}},
		{Text: "again", Calls: []agenttest.ToolCall{agenttest.ExecCommand("touch after-crash.txt")}},
		{Text: "done"},
	}})
	codexHome := agenttest.CodexHome(t, agenttest.CodexHomeOptions{BaseURL: srv.URL})
	h := newHome(t)
	h.env = append(agenttest.CodexEnv(codexHome, t.TempDir()), "REEVE_CODEX_PATH="+exe)
	h.start()
	work := t.TempDir()
	sid := strings.TrimSpace(h.must("run", work, "--agent", "codex", "--prompt", "make it").stdout)
	var req wire.PermissionRequest
	waitFor(t, "a pending request", 90*time.Second, func() bool {
		p := h.pending()
		if len(p) == 1 {
			req = p[0]
		}
		return len(p) == 1
	})
	if !strings.Contains(string(req.Input), "before-crash.txt") {
		t.Fatalf("request %+v", req)
	}
	st, _ := h.status()
	syscall.Kill(st.Health.WorkerPID, syscall.SIGKILL)
	waitFor(t, "a new worker", 60*time.Second, func() bool {
		st2, code := h.status()
		return code == 0 && st2.Health.WorkerPID != 0 && st2.Health.WorkerPID != st.Health.WorkerPID
	})
	if info := h.sessionInfoOf(sid); info.Status != "interrupted" {
		t.Fatalf("after the crash: %+v", info)
	}
	denied := false
	for _, e := range h.logEvents(sid) {
		if e.Kind != wire.KindPermissionDecision {
			continue
		}
		var d wire.PermissionDecision
		json.Unmarshal(e.Data, &d)
		denied = denied || (d.RequestID == req.ID && d.Decision == "deny" && d.DecidedBy == "daemon" && d.ToolUseID == req.ToolUseID)
	}
	if !denied {
		t.Fatalf("the abandoned request was not denied on the record: %s", h.must("logs", sid, "--json").stdout)
	}
	if r := h.run("permit", "allow", req.ID); r.code != 4 {
		t.Fatalf("a late allow: exit %d %s", r.code, r.stderr)
	}
	if len(h.pending()) != 0 {
		t.Fatalf("still pending: %+v", h.pending())
	}
	// Codex died with the worker's channel: the command never ran.
	time.Sleep(2 * time.Second)
	if _, err := os.Stat(filepath.Join(work, "before-crash.txt")); err == nil {
		t.Fatal("the command whose approval was pending ran after the crash")
	}

	// A new prompt resumes the thread with a new channel.
	h.must("send", sid, "--prompt", "try again")
	waitFor(t, "a request on the new channel", 90*time.Second, func() bool {
		p := h.pending()
		if len(p) == 1 {
			req = p[0]
		}
		return len(p) == 1
	})
	if req.SessionID != sid || !strings.Contains(string(req.Input), "after-crash.txt") {
		t.Fatalf("request on the new channel %+v", req)
	}
	h.must("permit", "allow", req.ID)
	if r := h.run("wait", sid, "--timeout", "90"); r.code != 0 {
		t.Fatalf("wait: %d %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(work, "after-crash.txt")); err != nil {
		t.Fatalf("the allowed command did not run on the new channel: %v", err)
	}
	m := h.manifest(sid)
	if len(m.Approvals) != 2 || m.Approvals[0].DecidedBy != "daemon" || m.Approvals[1].DecidedBy != "human" || m.AgentSessionID == "" {
		t.Fatalf("manifest approvals %+v (agent session %q)", m.Approvals, m.AgentSessionID)
	}
}

// Codex's own apply_patch (the freeform tool, as the model calls it) goes
// through the daemon's decisions with its files: a patch creating .env
// or writing outside the working directory is denied by the policy and
// not applied, a harmless one is applied; each decision names the files
// and the call id that the patch's tool-call and tool-result carry.
func TestCodexFreeformPatchesAreDecidedByFile(t *testing.T) {
	exe := agenttest.Codex(t)
	work, outside := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(work, ".reeve"), 0o755)
	os.WriteFile(filepath.Join(work, ".reeve", "policy.yaml"), []byte("version: 1\ndeny:\n  - name: secrets\n    paths: [\".env\"]\n  - name: outside\n    outside_workdir: true\n"), 0o644)
	srv := agenttest.NewOpenAIServer(t, agenttest.OpenAIOptions{Turns: []agenttest.Turn{
		{Text: "Patching.", Calls: []agenttest.ToolCall{
			agenttest.ApplyPatch("*** Begin Patch\n*** Add File: .env\n+TOKEN=stolen\n*** End Patch\n"),
			agenttest.ApplyPatch("*** Begin Patch\n*** Add File: " + filepath.Join(outside, "planted.txt") + "\n+x\n*** End Patch\n"),
			agenttest.ApplyPatch("*** Begin Patch\n*** Add File: notes.txt\n+fine\n*** End Patch\n"),
		}},
		{Text: "Done."},
	}})
	codexHome := agenttest.CodexHome(t, agenttest.CodexHomeOptions{BaseURL: srv.URL})
	h := newHome(t)
	h.env = append(agenttest.CodexEnv(codexHome, t.TempDir()), "REEVE_CODEX_PATH="+exe)
	h.start()
	r := h.must("run", work, "--agent", "codex", "--mode", "bypass", "--prompt", "patch", "--wait", "--timeout", "180", "--json")
	si := h.sessionInfo(r.stdout)
	if _, err := os.Stat(filepath.Join(work, "notes.txt")); err != nil {
		t.Fatalf("the harmless patch was not applied (%s %s): %v", si.Status, si.StatusReason, err)
	}
	for _, f := range []string{filepath.Join(work, ".env"), filepath.Join(outside, "planted.txt")} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s was written despite the policy", f)
		}
	}
	evs := h.logEvents(si.ID)
	calls := map[string]bool{}
	for _, e := range evs {
		if e.Kind == wire.KindToolCall {
			var c wire.ToolCall
			json.Unmarshal(e.Data, &c)
			calls[c.ID] = true
		}
	}
	byRule := map[string][]string{}
	for _, d := range decisions(evs) {
		if d.Tool != "apply_patch" {
			continue
		}
		if len(d.Paths) == 0 || !calls[d.ToolUseID] {
			t.Errorf("decision %+v names no file, or no tool-call of its call", d)
		}
		byRule[d.Decision+" "+d.DecidedBy] = append(byRule[d.Decision+" "+d.DecidedBy], d.Paths...)
	}
	if p := byRule["deny policy:secrets"]; len(p) != 1 || !strings.HasSuffix(p[0], ".env") {
		t.Errorf("secrets: %v", byRule)
	}
	if p := byRule["deny policy:outside"]; len(p) != 1 || !strings.Contains(p[0], "planted.txt") {
		t.Errorf("outside: %v", byRule)
	}
	if p := byRule["allow mode:bypass"]; len(p) != 1 || !strings.HasSuffix(p[0], "notes.txt") {
		t.Errorf("allowed: %v", byRule)
	}
}
