package runtime_test

import (
	"errors"
	"os"
	"path/filepath"
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
