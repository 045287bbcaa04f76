package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

type doctorJSON struct {
	OK      bool `json:"ok"`
	Profile struct {
		Name, Source, Home, BaseHome string
	} `json:"profile"`
	CredentialSource string `json:"credentialSource"`
	ProcessLock      string `json:"processLock"`
	Agents           struct {
		Asked, Loaded, Missing []string
	} `json:"agents"`
	SupportPacket struct {
		Version       string `json:"version"`
		DaemonRunning bool   `json:"daemonRunning"`
	} `json:"supportPacket"`
	Executor *struct{ ID, WorkspaceID string } `json:"executor"`
	Checks   []struct {
		Name   string
		OK     bool
		Detail string
	} `json:"checks"`
}

func (d doctorJSON) failed(name string) string {
	for _, c := range d.Checks {
		if c.Name == name && !c.OK {
			return c.Detail
		}
	}
	return ""
}

// worker doctor: a missing credential, a stale lock, an unknown agent, a
// credential of another workspace; and a healthy setup. Nothing is
// claimed: the queued run stays queued.
func TestWorkerDoctor(t *testing.T) {
	p := newPlane(t, servertest.Options{})
	ex, cred := p.executor(p.owner, "doc", nil, nil)
	repo := gitRepo(t, "app")
	m := newMachine(t, nil)
	run := p.queue(sdk.WorkflowRunCreateRequest{Agent: "shell", Prompt: "true", Workdir: "app"})
	base := []string{"worker", "doctor", "--json", "--server", p.srv.URL, "--workdir", repo}

	r := m.run(base...)
	d := decodeJSON[doctorJSON](t, r.stdout)
	if r.code != 1 || d.CredentialSource != "none" || !strings.Contains(d.failed("credential"), "no runner credential") {
		t.Fatalf("missing credential: exit %d %s", r.code, r.stdout)
	}

	r = m.run(append(base, "--credential-file", cred, "--agents", "shell")...)
	d = decodeJSON[doctorJSON](t, r.stdout)
	if r.code != 0 || !d.OK || d.CredentialSource != "file" || d.ProcessLock != "absent" || d.Executor == nil || d.Executor.ID != ex.ID ||
		d.Profile.Source != "flags" || d.Profile.Name != "default" || d.Profile.BaseHome != m.home || !d.SupportPacket.DaemonRunning {
		t.Fatalf("healthy: exit %d %s", r.code, r.stdout)
	}
	credValue, _ := os.ReadFile(cred)
	if strings.Contains(r.stdout+r.stderr, strings.TrimSpace(string(credValue))) {
		t.Fatal("doctor printed the credential")
	}

	r = m.run(append(base, "--credential-file", cred, "--agents", "shell,nope")...)
	d = decodeJSON[doctorJSON](t, r.stdout)
	if r.code != 1 || !slices.Equal(d.Agents.Missing, []string{"nope"}) || !slices.Contains(d.Agents.Loaded, "shell") || d.failed("agents") == "" {
		t.Fatalf("unknown agent: exit %d %s", r.code, r.stdout)
	}

	// A worker killed with -9 leaves its pidfile behind.
	h := filepath.Join(m.home, "workers", "default")
	os.MkdirAll(h, 0o700)
	os.WriteFile(filepath.Join(h, "worker.pid"), []byte("999999\n"), 0o600)
	r = m.run(append(base, "--credential-file", cred)...)
	d = decodeJSON[doctorJSON](t, r.stdout)
	if r.code != 1 || d.ProcessLock != "stale" || !strings.Contains(d.failed("process-lock"), "stale") {
		t.Fatalf("stale lock: exit %d %s", r.code, r.stdout)
	}

	// Another workspace's credential, for this workspace.
	other := p.srv.NewUser("other@example.com")
	_, otherCred := p.executor(other, "theirs", nil, nil)
	r = m.run(append(base, "--credential-file", otherCred, "--workspace", p.owner.Workspace)...)
	d = decodeJSON[doctorJSON](t, r.stdout)
	if r.code != 1 || !strings.Contains(d.failed("workspace"), other.Workspace) {
		t.Fatalf("other workspace: exit %d %s", r.code, r.stdout)
	}
	// ... and worker start refuses it before claiming.
	r = m.run("worker", "start", "--server", p.srv.URL, "--workdir", repo, "--credential-file", otherCred, "--workspace", p.owner.Workspace, "--worker-profile", "x")
	if r.code != 6 || !strings.Contains(r.stderr, other.Workspace) {
		t.Fatalf("start with another workspace's credential: exit %d %s", r.code, r.stderr)
	}
	// A worker without the agent exits before any claim.
	r = m.run("worker", "start", "--server", p.srv.URL, "--workdir", repo, "--credential-file", cred, "--agents", "nope", "--worker-profile", "y")
	if r.code != 2 || !strings.Contains(r.stderr, "nope") {
		t.Fatalf("start without the agent: exit %d %s", r.code, r.stderr)
	}
	// relay and inbound are refused, not faked.
	for _, tr := range []string{"relay", "inbound"} {
		r = m.run("worker", "start", "--server", p.srv.URL, "--workdir", repo, "--credential-file", cred, "--transport", tr, "--worker-profile", "z")
		if r.code != 2 || !strings.Contains(r.stderr, "not implemented") {
			t.Fatalf("transport %s: exit %d %s", tr, r.code, r.stderr)
		}
	}
	if got := p.run(run.ID); got.Status != sdk.RunQueued || got.Attempt != 0 {
		t.Fatalf("a check claimed the run: %+v", got)
	}

	// diagnostic: the profile's credential is redacted.
	m.must("worker", "reset", "--json")
	hp := filepath.Join(m.home, "workers", "default")
	os.MkdirAll(hp, 0o700)
	os.WriteFile(filepath.Join(hp, "profile.json"), []byte(`{"name":"default","server_url":"`+p.srv.URL+`","credential":"`+strings.TrimSpace(string(credValue))+`"}`), 0o600)
	r = m.must("diagnostic", "--json")
	if strings.Contains(r.stdout, strings.TrimSpace(string(credValue))) || !strings.Contains(r.stdout, "[redacted]") {
		t.Fatalf("diagnostic: %s", r.stdout)
	}
	rs := m.must("worker", "reset", "--json")
	if !strings.Contains(rs.stdout, "profile.json") {
		t.Fatalf("reset: %s", rs.stdout)
	}
}

// A tool use the policy leaves to a human becomes an approval node on
// the run; an approver decides it through REST and the worker answers the
// agent with it.
func TestApprovalDecidedThroughREST(t *testing.T) {
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "asking", Calls: []agenttest.ToolCall{agenttest.Bash("touch approved.txt")}},
		{Text: "done"},
	}})
	exe := agenttest.Claude(t)
	p := newPlane(t, servertest.Options{})
	_, cred := p.executor(p.owner, "gov", nil, nil)
	repo := gitRepo(t, "app")
	m := newMachine(t, append(agenttest.ClaudeEnv(srv.URL, t.TempDir()), "REEVE_CLAUDE_PATH="+exe))
	m.startWorker("w", "--server", p.srv.URL, "--credential-file", cred, "--workdir", repo, "--agents", "claude")
	run := p.queue(sdk.WorkflowRunCreateRequest{Agent: "claude", Prompt: "make the file", Workdir: "app"})
	waiting := p.waitRun(run.ID, "waiting-approval", 3*time.Minute, func(r sdk.WorkflowRun) bool {
		return r.Status == sdk.RunWaitingApproval && len(r.Approvals) > 0
	})
	node := waiting.Approvals[0]
	if node.State != sdk.ApprovalPending || node.Tool != "Bash" || !strings.Contains(node.Summary+strings.Join(mapValues(node.Input), " "), "approved.txt") {
		t.Fatalf("approval node: %+v", node)
	}
	if _, err := p.owner.Client.DecideWorkflowApproval(ctxT(t), p.owner.Workspace, run.ID, node.NodeKey, sdk.WorkflowApprovalDecisionRequest{Decision: "approve", Reason: "fine"}); err != nil {
		t.Fatal(err)
	}
	done := p.waitRun(run.ID, "the end", 3*time.Minute, func(r sdk.WorkflowRun) bool { return sdk.RunTerminal(r.Status) })
	if done.Status != sdk.RunSucceeded || !strings.Contains(done.DiffSummary, "approved.txt") {
		t.Fatalf("after approval: %+v", done)
	}
	if done.Usage == nil || done.Usage.InputTokens == 0 {
		t.Fatalf("usage not reported: %+v", done.Usage)
	}

	// Denied through REST: the agent is told no, the file is never made,
	// and the run still ends (the agent finishes its turn).
	os.Remove(filepath.Join(repo, "approved.txt"))
	run = p.queue(sdk.WorkflowRunCreateRequest{Agent: "claude", Prompt: "make the file again", Workdir: "app"})
	waiting = p.waitRun(run.ID, "waiting-approval", 3*time.Minute, func(r sdk.WorkflowRun) bool {
		return r.Status == sdk.RunWaitingApproval && len(r.Approvals) > 0
	})
	if _, err := p.owner.Client.DecideWorkflowApproval(ctxT(t), p.owner.Workspace, run.ID, waiting.Approvals[0].NodeKey, sdk.WorkflowApprovalDecisionRequest{Decision: "deny", Reason: "not today"}); err != nil {
		t.Fatal(err)
	}
	done = p.waitRun(run.ID, "the end", 3*time.Minute, func(r sdk.WorkflowRun) bool { return sdk.RunTerminal(r.Status) })
	if done.Status != sdk.RunSucceeded || strings.Contains(done.DiffSummary, "approved.txt") {
		t.Fatalf("after denial: %+v", done)
	}
	evs, err := p.owner.Client.WorkflowRunEvents(ctxT(t), p.owner.Workspace, run.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	denied := false
	for _, e := range evs {
		if e.Kind == "permission-decision" && e.Data["decision"] == "deny" && strings.Contains(fmt.Sprint(e.Data["reason"]), "not today") {
			denied = true
		}
	}
	if !denied {
		t.Fatalf("no denial with the approver's reason in the run's history: %+v", evs)
	}
}

// Several `worker start` processes on one worker home: one runs, the
// others exit 5 (conflict) before reaching the server.
func TestOneWorkerProcessPerProfile(t *testing.T) {
	p := newPlane(t, servertest.Options{})
	_, cred := p.executor(p.owner, "one", nil, nil)
	repo := gitRepo(t, "app")
	m := newMachine(t, nil)
	const n = 8
	codes := make(chan int, n)
	var procs []*workerProc
	for range n {
		w := m.startWorker("same", "--server", p.srv.URL, "--credential-file", cred, "--workdir", repo, "--agents", "shell")
		procs = append(procs, w)
	}
	running := 0
	for _, w := range procs {
		select {
		case <-w.done:
			codes <- w.exited(time.Second)
		case <-time.After(20 * time.Second):
			running++
		}
	}
	close(codes)
	for c := range codes {
		if c != 5 {
			t.Fatalf("a losing worker exited %d", c)
		}
	}
	if running != 1 {
		t.Fatalf("%d workers running on one profile", running)
	}
}

func mapValues(m map[string]any) []string {
	var out []string
	for _, v := range m {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
