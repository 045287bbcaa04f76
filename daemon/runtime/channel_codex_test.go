package runtime_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/runtime"
	"reeve.dev/reeve/hookbridge"
	"reeve.dev/reeve/hookbridge/policy"
)

// Codex's PreToolUse hook sees an apply_patch call as its patch text, and
// its app-server approval names the files the patch changes, absolute.
// The same call id with the same files is one decision; with other files
// (a hook allow for a.txt, an approval for .env under the same id) it is
// decided afresh.
func TestCodexPatchDecidedOnceAcrossLayers(t *testing.T) {
	var mu sync.Mutex
	evaluated := 0
	f := newFixture(t, func(o *runtime.ManagerOptions) {
		o.HookProgram = hookProgram(t)
		o.Policy = func(_ policy.Source, req policy.Request) hookbridge.PolicyVerdict {
			mu.Lock()
			evaluated++
			mu.Unlock()
			if strings.Contains(string(req.Input), ".env") {
				return hookbridge.PolicyVerdict{Action: hookbridge.PolicyDeny, Rule: "no-env", Reason: "secrets"}
			}
			return hookbridge.PolicyVerdict{Action: hookbridge.PolicyAllow, Rule: "ok"}
		}
	})
	hooks, procs := hookedTurns(f)
	si := f.launch("work")
	hook := <-hooks
	defer (<-procs).Kill()
	hookCall := func(id, patch string) {
		t.Helper()
		in, _ := json.Marshal(map[string]string{"command": patch})
		b, _ := json.Marshal(map[string]any{"session_id": "thread-1", "hook_event_name": "PreToolUse", "tool_name": "apply_patch",
			"tool_input": json.RawMessage(in), "tool_use_id": id, "cwd": "/w"})
		if ans, err := f.mgr.Hook(f.ctx, si.ID, b); err != nil || ans.Decision != hookbridge.Allow {
			t.Fatalf("hook %+v %v", ans, err)
		}
	}
	approval := func(id, envelope string) agents.Verdict {
		in, _ := json.Marshal(map[string]string{"command": envelope})
		return hook.Decide(f.ctx, agents.ToolUse{ToolUseID: id, Tool: "apply_patch", Input: in, Cwd: "/w",
			AgentSessionID: "thread-1", Channel: "item/fileChange/requestApproval"})
	}
	hookCall("c1", "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** Update File: sub/b.txt\n@@\n-x\n+y\n*** End Patch\n")
	v := approval("c1", "*** Begin Patch\n*** Add File: /w/a.txt\n*** Update File: /w/sub/b.txt\n@@\n*** End Patch")
	if !v.Allow || evaluated != 1 {
		t.Fatalf("same files: %+v, policy ran %d times", v, evaluated)
	}
	hookCall("c2", "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n")
	v = approval("c2", "*** Begin Patch\n*** Add File: /w/.env\n*** End Patch")
	if v.Allow || v.DecidedBy != "policy:no-env" || evaluated != 3 {
		t.Fatalf("other files rode on the hook's allow: %+v, policy ran %d times", v, evaluated)
	}
}
