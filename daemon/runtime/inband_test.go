package runtime_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/runtime"
	"reeve.dev/reeve/daemon/runtime/runtimetest"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/hookbridge"
	"reeve.dev/reeve/hookbridge/policy"
)

// hookedTurns is a fixture whose turns block and hand over their hook.
func hookedTurns(f *fixture) (chan *agents.Hook, chan *runtimetest.Process) {
	hooks := make(chan *agents.Hook, 4)
	procs := make(chan *runtimetest.Process, 4)
	f.agent.StartTurnFunc = func(_ context.Context, turn agents.Turn, _ agents.Emit) (agents.Process, error) {
		p := runtimetest.NewProcess()
		hooks <- turn.Hook
		procs <- p
		return p, nil
	}
	return hooks, procs
}

// One tool use is decided once, whichever channels it passes: the in-band
// request after the PreToolUse hook gets the hook's decision; without a
// hook call the gate decides in-band; an input changed between the two is
// decided afresh. Every decision names its call and what it runs.
func TestInBandSharesTheGate(t *testing.T) {
	var evaluated []string
	var mu sync.Mutex
	f := newFixture(t, func(o *runtime.ManagerOptions) {
		o.HookProgram = hookProgram(t)
		o.Policy = func(_ policy.Source, req policy.Request) hookbridge.PolicyVerdict {
			mu.Lock()
			evaluated = append(evaluated, string(req.Input))
			mu.Unlock()
			if strings.Contains(string(req.Input), "rm") {
				return hookbridge.PolicyVerdict{Action: hookbridge.PolicyDeny, Rule: "no-rm", Reason: "no removing"}
			}
			return hookbridge.PolicyVerdict{Action: hookbridge.PolicyAllow, Rule: "ok"}
		}
	})
	hooks, procs := hookedTurns(f)
	si := f.launch("work")
	hook := <-hooks
	defer (<-procs).Kill()
	if hook == nil || hook.Decide == nil {
		t.Fatal("a governed turn has no in-band decision function")
	}
	in := `{"command":"ls -la"}`
	b, _ := json.Marshal(map[string]any{"session_id": "agent-1", "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": json.RawMessage(in), "tool_use_id": "tu1", "cwd": "/x"})
	ans, err := f.mgr.Hook(f.ctx, si.ID, b)
	if err != nil || ans.Decision != hookbridge.Allow {
		t.Fatalf("hook %+v %v", ans, err)
	}
	v := hook.Decide(f.ctx, agents.ToolUse{ToolUseID: "tu1", Tool: "Bash", Input: json.RawMessage(` { "command" : "ls -la" }`), AgentSessionID: "agent-1", Channel: "can_use_tool"})
	if !v.Allow || v.DecidedBy != "policy:ok" || len(evaluated) != 1 {
		t.Fatalf("in-band after hook: %+v (policy ran %d times)", v, len(evaluated))
	}
	// No hook call (the hook program failed): the gate decides in-band.
	v = hook.Decide(f.ctx, agents.ToolUse{ToolUseID: "tu2", Tool: "Bash", Input: json.RawMessage(`{"command":"rm -rf x"}`), AgentSessionID: "agent-1", Channel: "can_use_tool"})
	if v.Allow || v.DecidedBy != "policy:no-rm" || v.Reason != "no removing" {
		t.Fatalf("in-band alone: %+v", v)
	}
	// A hook allowed one input; the in-band request carries another.
	b, _ = json.Marshal(map[string]any{"session_id": "agent-1", "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": json.RawMessage(`{"command":"echo hi"}`), "tool_use_id": "tu3"})
	f.mgr.Hook(f.ctx, si.ID, b)
	v = hook.Decide(f.ctx, agents.ToolUse{ToolUseID: "tu3", Tool: "Bash", Input: json.RawMessage(`{"command":"rm -rf /"}`), AgentSessionID: "agent-1"})
	if v.Allow {
		t.Fatalf("a changed input rode on the hook's allow: %+v", v)
	}
	// Another agent session on the in-band channel is refused.
	if v := hook.Decide(f.ctx, agents.ToolUse{ToolUseID: "tu4", Tool: "Bash", Input: json.RawMessage(`{"command":"ls"}`), AgentSessionID: "agent-2"}); v.Allow {
		t.Fatalf("foreign agent session allowed: %+v", v)
	}
	mf := f.manifest(si.ID)
	if len(mf.Approvals) != 4 {
		t.Fatalf("approvals %+v", mf.Approvals)
	}
	a0, a1 := mf.Approvals[0], mf.Approvals[1]
	if a0.ToolUseID != "tu1" || a0.Channel != "PreToolUse" || a0.Command != "ls -la" ||
		a1.ToolUseID != "tu2" || a1.Channel != "can_use_tool" || a1.Command != "rm -rf x" || a1.Decision != hookbridge.Deny {
		t.Fatalf("approvals %+v", mf.Approvals)
	}
}

// A human decides an in-band request as a hook's; the turn's end denies
// one nobody decided.
func TestInBandWaitsForHuman(t *testing.T) {
	f := newFixture(t, func(o *runtime.ManagerOptions) { o.HookProgram = hookProgram(t) })
	hooks, procs := hookedTurns(f)
	si := f.launch("work")
	hook := <-hooks
	p := <-procs
	got := make(chan agents.Verdict, 2)
	go func() {
		got <- hook.Decide(f.ctx, agents.ToolUse{ToolUseID: "w1", Tool: "Write", Input: json.RawMessage(`{"file_path":"/w/a.txt","content":"x"}`)})
	}()
	waitFor(t, "the request", func() bool { return len(f.mgr.Pending(si.ID)) == 1 })
	req := f.mgr.Pending(si.ID)[0]
	if req.ToolUseID != "w1" {
		t.Fatalf("request %+v", req)
	}
	if _, err := f.mgr.RespondPermission(f.ctx, wire.RespondPermissionRequest{RequestID: req.ID, Decision: "allow", Reason: "fine"}); err != nil {
		t.Fatal(err)
	}
	if v := <-got; !v.Allow || v.DecidedBy != "human" {
		t.Fatalf("verdict %+v", v)
	}
	go func() {
		got <- hook.Decide(f.ctx, agents.ToolUse{ToolUseID: "w2", Tool: "Write", Input: json.RawMessage(`{}`)})
	}()
	waitFor(t, "the second request", func() bool { return len(f.mgr.Pending(si.ID)) == 1 })
	p.End(agents.TurnResult{})
	select {
	case v := <-got:
		if v.Allow {
			t.Fatalf("allowed after the turn ended: %+v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the in-band request outlived its turn")
	}
	mf := f.manifest(si.ID)
	if len(mf.Approvals) != 2 || len(mf.Approvals[0].Paths) != 1 || mf.Approvals[0].Paths[0] != "/w/a.txt" {
		t.Fatalf("approvals %+v", mf.Approvals)
	}
}

// Durable pending requests: a request waiting for a human when the worker
// dies is not lost. The next worker denies it by rule, on the record with
// its tool-use id and command, and a late decision for it is refused
// with a reason.
func TestPendingRequestSurvivesWorkerRestart(t *testing.T) {
	f := newFixture(t, func(o *runtime.ManagerOptions) { o.HookProgram = hookProgram(t) })
	procs := f.blockingTurns()
	si := f.launch("work")
	<-procs
	hookCtx, cancelHook := context.WithCancel(f.ctx)
	defer cancelHook()
	go f.mgr.Hook(hookCtx, si.ID, hookInput("a", "PreToolUse", "Bash", `{"command":"make deploy"}`))
	waitFor(t, "the pending request", func() bool { return len(f.mgr.Pending(si.ID)) == 1 })
	req := f.mgr.Pending(si.ID)[0]

	// The worker dies (nothing closes it) and another starts on the store.
	m2 := f.newManager()
	var d wire.PermissionDecision
	for _, e := range f.events(si.ID) {
		if e.Kind == wire.KindPermissionDecision {
			json.Unmarshal(e.Data, &d)
		}
	}
	if d.RequestID != req.ID || d.Decision != hookbridge.Deny || d.DecidedBy != "daemon" || d.ToolUseID != "tu1" ||
		d.Command != "make deploy" || !strings.Contains(d.Reason, "worker stopped") {
		t.Fatalf("decision after restart: %+v", d)
	}
	mf, err := m2.Manifest(f.ctx, si.ID)
	if err != nil || len(mf.Approvals) != 1 || mf.Approvals[0].RequestID != req.ID || mf.Approvals[0].Decision != hookbridge.Deny {
		t.Fatalf("manifest %+v %v", mf.Approvals, err)
	}
	// Bad input: a decision for a request this worker does not hold.
	for _, id := range []string{req.ID, "NOPE", ""} {
		_, err := m2.RespondPermission(f.ctx, wire.RespondPermissionRequest{RequestID: id, Decision: "allow"})
		if code(err) != wire.CodeUnknownRequest || !strings.Contains(err.Error(), "no such permission request") {
			t.Fatalf("decision for %q: %v", id, err)
		}
	}
	if _, err := m2.RespondPermission(f.ctx, wire.RespondPermissionRequest{RequestID: req.ID, Decision: "maybe"}); err == nil {
		t.Fatal("accepted decision maybe")
	}
	// A third worker finds nothing left to settle: one decision, not two.
	f.newManager()
	n := 0
	for _, e := range f.events(si.ID) {
		if e.Kind == wire.KindPermissionDecision {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d decisions after two restarts", n)
	}
}
