package runtime_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/daemon/runtime"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/hookbridge"
	"reeve.dev/reeve/hookbridge/policy"
)

// A session keeps the policy it started with: unregistering its directory
// is refused while it runs, and whatever happens to the policy file later
// (deleted, broken, replaced by a link to /dev/zero, the whole checkout
// moved away) denies; it never turns into "allow, mode: bypass".
func TestPolicyCannotBeTurnedOff(t *testing.T) {
	f := newFixture(t, func(o *runtime.ManagerOptions) {
		o.HookProgram = hookProgram(t)
		o.Policy = func(src policy.Source, req policy.Request) hookbridge.PolicyVerdict {
			d := src.Decide(req)
			return hookbridge.PolicyVerdict{Action: string(d.Action), Rule: d.Rule, Reason: d.Reason}
		}
	})
	gov := filepath.Join(f.dir.Path, policy.Dir)
	file := filepath.Join(gov, policy.File)
	if err := os.MkdirAll(gov, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("version: 1\ndeny:\n  - name: no-rm\n    commands: [\"rm *\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	procs := f.blockingTurns()
	si, err := f.mgr.Launch(f.ctx, wire.LaunchRequest{Directory: f.dir.ID, Prompt: "x", Mode: hookbridge.ModeBypass})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { (<-procs).Kill() }()
	if mf := f.manifest(si.ID); mf.PolicyFile != file {
		t.Fatalf("manifest policy file %q, want %q", mf.PolicyFile, file)
	}
	hook := func(command string) wire.HookAnswer {
		t.Helper()
		ans, err := f.mgr.Hook(f.ctx, si.ID, hookInput("as-1", "PreToolUse", "Bash", `{"command":"`+command+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	expect := func(step, command, decision, by string) {
		t.Helper()
		if ans := hook(command); ans.Decision != decision || ans.DecidedBy != by {
			t.Fatalf("%s: %q answered %+v, want %s by %s", step, command, ans, decision, by)
		}
	}
	expect("policy in place", "rm -rf build", hookbridge.Deny, "policy:no-rm")
	expect("policy in place", "make", hookbridge.Allow, "mode:bypass")

	// reeve remove is refused while the session is active.
	err = f.st.RemoveDirectory(f.ctx, f.dir.ID)
	var inUse *store.InUseError
	if !errors.As(err, &inUse) || !errors.Is(err, store.ErrInUse) || len(inUse.Sessions) != 1 || inUse.Sessions[0] != si.ID {
		t.Fatalf("remove with an active session: %v", err)
	}
	if _, err := f.st.Directory(f.ctx, f.dir.ID); err != nil {
		t.Fatalf("the refused remove removed it: %v", err)
	}
	expect("after a refused remove", "rm -rf build", hookbridge.Deny, "policy:no-rm")

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	expect("policy deleted", "make", hookbridge.Deny, "policy:"+policy.RuleMissing)
	if err := os.Symlink("/dev/zero", file); err != nil {
		t.Fatal(err)
	}
	expect("policy is /dev/zero", "make", hookbridge.Deny, "policy:"+policy.RuleInvalid)
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("version: 1\ndeny: [{}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("policy broken", "make", hookbridge.Deny, "policy:"+policy.RuleInvalid)
	moved := f.dir.Path + ".moved"
	if err := os.Rename(f.dir.Path, moved); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(moved, f.dir.Path)
	expect("checkout moved away", "make", hookbridge.Deny, "policy:"+policy.RuleMissing)
}

// A session started without a policy file stays governed by the mode, and
// one added later takes effect at once.
func TestPolicyAddedLater(t *testing.T) {
	f := newFixture(t, func(o *runtime.ManagerOptions) {
		o.HookProgram = hookProgram(t)
		o.Policy = func(src policy.Source, req policy.Request) hookbridge.PolicyVerdict {
			d := src.Decide(req)
			return hookbridge.PolicyVerdict{Action: string(d.Action), Rule: d.Rule, Reason: d.Reason}
		}
	})
	procs := f.blockingTurns()
	si, err := f.mgr.Launch(f.ctx, wire.LaunchRequest{Directory: f.dir.ID, Prompt: "x", Mode: hookbridge.ModeBypass})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { (<-procs).Kill() }()
	if mf := f.manifest(si.ID); mf.PolicyFile != "" {
		t.Fatalf("manifest policy file %q", mf.PolicyFile)
	}
	ans, err := f.mgr.Hook(f.ctx, si.ID, hookInput("as-1", "PreToolUse", "Bash", `{"command":"rm -rf x"}`))
	if err != nil || ans.Decision != hookbridge.Allow || ans.DecidedBy != "mode:bypass" {
		t.Fatalf("no policy: %+v %v", ans, err)
	}
	gov := filepath.Join(f.dir.Path, policy.Dir)
	if err := os.MkdirAll(gov, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gov, policy.File), []byte("version: 1\ndeny:\n  - commands: [\"rm *\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ans, err = f.mgr.Hook(f.ctx, si.ID, hookInput("as-1", "PreToolUse", "Bash", `{"command":"rm -rf x"}`))
	if err != nil || ans.Decision != hookbridge.Deny {
		t.Fatalf("policy added: %+v %v", ans, err)
	}
}

// The breaks of the attack run, through the daemon's hook path with the
// real policy reader: apply_patch to .env, Codex's workdir /etc, command
// rules dodged, and bad input (a 1 MB command, a patch that does not
// parse), in bypass mode where anything the policy misses is allowed.
func TestHookPolicySeesWhatWillHappen(t *testing.T) {
	f := newFixture(t, func(o *runtime.ManagerOptions) {
		o.HookProgram = hookProgram(t)
		o.Policy = func(src policy.Source, req policy.Request) hookbridge.PolicyVerdict {
			d := src.Decide(req)
			return hookbridge.PolicyVerdict{Action: string(d.Action), Rule: d.Rule, Reason: d.Reason}
		}
	})
	gov := filepath.Join(f.dir.Path, policy.Dir)
	if err := os.MkdirAll(gov, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gov, policy.File), []byte(`version: 1
deny:
  - name: secrets
    paths: [".env"]
  - name: outside
    outside_workdir: true
  - name: no-rm
    commands: ["rm *"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	procs := f.blockingTurns()
	si, err := f.mgr.Launch(f.ctx, wire.LaunchRequest{Directory: f.dir.ID, Prompt: "x", Mode: hookbridge.ModeBypass})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { (<-procs).Kill() }()
	patchEnv, _ := json.Marshal(map[string]string{"command": "*** Begin Patch\n*** Add File: .env\n+TOKEN=1\n*** End Patch\n"})
	badPatch, _ := json.Marshal(map[string]string{"input": "*** Begin Patch\n*** Add File: x\nno plus\n*** End Patch\n"})
	big, _ := json.Marshal(map[string]string{"command": "echo " + strings.Repeat("a", 1<<20)})
	tests := []struct {
		tool, input, by string
	}{
		{"apply_patch", string(patchEnv), "policy:secrets"},
		{"Bash", string(patchEnv), "policy:secrets"},
		{"exec_command", `{"cmd":"cat hostname","workdir":"/etc"}`, "policy:outside"},
		{"Bash", `{"command":"/bin/rm -rf build"}`, "policy:no-rm"},
		{"Bash", `{"command":"command rm -rf build"}`, "policy:no-rm"},
		{"Bash", `{"command":"find . -delete"}`, "policy:no-rm"},
		{"apply_patch", string(badPatch), "policy:" + policy.RuleBadInput},
		{"Bash", string(big), "policy:" + policy.RuleBadInput},
	}
	for _, tt := range tests {
		ans, err := f.mgr.Hook(f.ctx, si.ID, hookInput("as-1", "PreToolUse", tt.tool, tt.input))
		if err != nil || ans.Decision != hookbridge.Deny || ans.DecidedBy != tt.by || ans.Reason == "" {
			t.Errorf("%s %.80s: %+v %v, want deny by %s", tt.tool, tt.input, ans, err, tt.by)
		}
	}
	// x=rm; $x cannot be read: a human is asked even in bypass mode.
	answered := make(chan wire.HookAnswer, 1)
	go func() {
		ans, _ := f.mgr.Hook(f.ctx, si.ID, hookInput("as-1", "PreToolUse", "Bash", `{"command":"x=rm; $x -rf build"}`))
		answered <- ans
	}()
	waitFor(t, "the opaque command to be asked about", func() bool { return len(f.mgr.Pending(si.ID)) == 1 })
	p := f.mgr.Pending(si.ID)[0]
	if !strings.Contains(p.Reason, "cannot tell what this command runs") {
		t.Errorf("asked with reason %q", p.Reason)
	}
	if _, err := f.mgr.RespondPermission(f.ctx, wire.RespondPermissionRequest{RequestID: p.ID, Decision: hookbridge.Deny}); err != nil {
		t.Fatal(err)
	}
	if ans := <-answered; ans.Decision != hookbridge.Deny || ans.DecidedBy != "human" {
		t.Errorf("opaque: %+v", ans)
	}
	// The hook's cwd is where commands start.
	in, _ := json.Marshal(map[string]any{"session_id": "as-1", "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": map[string]string{"command": "cat hostname"}, "cwd": "/etc"})
	if ans, err := f.mgr.Hook(f.ctx, si.ID, in); err != nil || ans.DecidedBy != "policy:outside" {
		t.Errorf("cwd /etc: %+v %v", ans, err)
	}
}
