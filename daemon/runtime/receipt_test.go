package runtime_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/runtime"
	"reeve.dev/reeve/daemon/runtime/runtimetest"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/hookbridge"
	"reeve.dev/reeve/hookbridge/policy"
)

func fileHash(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

func eventsOf(f *fixture, sid, kind string) []json.RawMessage {
	var out []json.RawMessage
	for _, e := range f.events(sid) {
		if e.Kind == kind {
			out = append(out, e.Data)
		}
	}
	return out
}

// The receipt's policy hash is the policy in force when the session
// started: an edit afterwards does not change it. The daemon notices the
// edit at the next decision and records it once, with both hashes, and
// again at a turn that starts after a further edit.
func TestPolicyHashIsTakenAtStartAndChangesAreRecorded(t *testing.T) {
	f := newFixture(t, func(o *runtime.ManagerOptions) {
		o.HookProgram = hookProgram(t)
		o.Policy = func(src policy.Source, req policy.Request) hookbridge.PolicyVerdict {
			d := src.Decide(req)
			return hookbridge.PolicyVerdict{Action: string(d.Action), Rule: d.Rule, Reason: d.Reason}
		}
	})
	gov := filepath.Join(f.dir.Path, policy.Dir)
	file := filepath.Join(gov, policy.File)
	os.MkdirAll(gov, 0o755)
	if err := os.WriteFile(file, []byte("version: 1\ndeny:\n  - name: no-rm\n    commands: [\"rm *\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := fileHash(t, file)
	procs := f.blockingTurns()
	si, err := f.mgr.Launch(f.ctx, wire.LaunchRequest{Directory: f.dir.ID, Prompt: "x", Mode: hookbridge.ModeBypass})
	if err != nil {
		t.Fatal(err)
	}
	if mf := f.manifest(si.ID); mf.PolicyHash != start || mf.CurrentPolicyHash != "" {
		t.Fatalf("manifest hashes %q %q, want %q", mf.PolicyHash, mf.CurrentPolicyHash, start)
	}
	var first wire.PolicyInForce
	if evs := eventsOf(f, si.ID, wire.KindPolicy); len(evs) != 1 || json.Unmarshal(evs[0], &first) != nil || first.Change != wire.PolicyStart || first.Hash != start || first.File != file {
		t.Fatalf("start events %s", evs)
	}

	// Edited mid-session: the start hash stays.
	if err := os.WriteFile(file, []byte("version: 1\ndeny:\n  - name: no-curl\n    commands: [\"curl *\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	edited := fileHash(t, file)
	if mf := f.manifest(si.ID); mf.PolicyHash != start {
		t.Fatalf("start hash moved to %q", mf.PolicyHash)
	}
	for range 3 { // decisions under the edited policy record it once
		ans, err := f.mgr.Hook(f.ctx, si.ID, hookInput("as-1", "PreToolUse", "Bash", `{"command":"curl x"}`))
		if err != nil || ans.DecidedBy != "policy:no-curl" {
			t.Fatalf("decision under the edit: %+v %v", ans, err)
		}
	}
	mf := f.manifest(si.ID)
	evs := eventsOf(f, si.ID, wire.KindPolicy)
	var changed wire.PolicyInForce
	if mf.PolicyHash != start || mf.CurrentPolicyHash != edited || len(evs) != 2 || json.Unmarshal(evs[1], &changed) != nil ||
		changed.Change != wire.PolicyChanged || changed.Hash != edited || changed.Previous != start {
		t.Fatalf("after the edit: manifest %q/%q, events %s", mf.PolicyHash, mf.CurrentPolicyHash, evs)
	}

	// The policy is removed between turns: the next turn records it.
	(<-procs).End(agents.TurnResult{Resume: "r1"})
	f.waitStatus(si.ID, store.StatusCompleted)
	os.Remove(file)
	if err := f.mgr.Prompt(f.ctx, wire.PromptRequest{SessionID: si.ID, Text: "again"}); err != nil {
		t.Fatal(err)
	}
	defer func() { (<-procs).Kill() }()
	evs = eventsOf(f, si.ID, wire.KindPolicy)
	var removed wire.PolicyInForce
	if len(evs) != 3 || json.Unmarshal(evs[2], &removed) != nil || removed.Hash != wire.PolicyNone || removed.Previous != edited {
		t.Fatalf("after removal: %s", evs)
	}
	if mf := f.manifest(si.ID); mf.PolicyHash != start || mf.CurrentPolicyHash != wire.PolicyNone {
		t.Fatalf("manifest after removal %q/%q", mf.PolicyHash, mf.CurrentPolicyHash)
	}
}

// launchingProcess is a turn's process that says how it was launched, as
// every real adapter's does.
type launchingProcess struct {
	*runtimetest.Process
	launch agents.Launch
}

func (p launchingProcess) Launch() agents.Launch { return p.launch }

// Each turn's command line is recorded as a launch event numbering the
// turn, and the latest is kept in the manifest.
func TestLaunchIsRecordedPerTurn(t *testing.T) {
	f := newFixture(t, nil)
	n := 0
	f.agent.StartTurnFunc = func(_ context.Context, turn agents.Turn, _ agents.Emit) (agents.Process, error) {
		n++
		p := runtimetest.NewProcess()
		argv := []string{"/bin/agent", "-p", "[prompt sha256:x]"}
		if turn.Resume != "" {
			argv = append(argv, "--resume", turn.Resume)
		}
		p.End(agents.TurnResult{Resume: "tok"})
		return launchingProcess{p, agents.Launch{Argv: argv, Env: []string{"ANTHROPIC_API_KEY=[redacted]"}}}, nil
	}
	si := f.launch("one")
	f.waitStatus(si.ID, store.StatusCompleted)
	if err := f.mgr.Prompt(f.ctx, wire.PromptRequest{SessionID: si.ID, Text: "two"}); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(si.ID, store.StatusCompleted)
	waitFor(t, "two turns", func() bool { return f.manifest(si.ID).Turns == 2 })
	evs := eventsOf(f, si.ID, wire.KindLaunch)
	if len(evs) != 2 {
		t.Fatalf("launch events %s", evs)
	}
	var l1, l2 wire.Launch
	json.Unmarshal(evs[0], &l1)
	json.Unmarshal(evs[1], &l2)
	if l1.Turn != 1 || l2.Turn != 2 || l1.Agent != "fake" || l1.AgentVersion != "1.0" || l1.Dir == "" || len(l1.Argv) != 3 ||
		len(l2.Argv) != 5 || l2.Argv[4] != "tok" || len(l1.Env) != 1 {
		t.Fatalf("launches %+v %+v", l1, l2)
	}
	if mf := f.manifest(si.ID); len(mf.CommandLine) != 5 || mf.CommandLine[3] != "--resume" {
		t.Fatalf("manifest command line %q", mf.CommandLine)
	}
}
