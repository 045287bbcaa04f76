package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/custom"
	"reeve.dev/reeve/daemon/runtime"
	"reeve.dev/reeve/daemon/runtime/runtimetest"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/hookbridge"
)

// checkLaunchFirst fails unless every turn's launch event comes before
// anything of that turn other than its prompt, its running status and a
// policy change noticed as it started, and numbers the turn.
func checkLaunchFirst(t *testing.T, evs []store.Event, turns int) {
	t.Helper()
	turn, launched, seen := 0, false, 0
	for _, e := range evs {
		switch e.Kind {
		case wire.KindUserPrompt:
			turn++
			launched = false
		case wire.KindStatus, wire.KindPolicy:
		case wire.KindLaunch:
			var l wire.Launch
			if err := json.Unmarshal(e.Data, &l); err != nil || l.Turn != turn || launched {
				t.Fatalf("turn %d: launch event %s (seq %d) out of place", turn, e.Data, e.Seq)
			}
			launched = true
			seen++
		default:
			if turn > 0 && !launched {
				t.Fatalf("turn %d: %s event (seq %d) before the turn's launch event", turn, e.Kind, e.Seq)
			}
		}
	}
	if seen != turns {
		t.Fatalf("%d launch events for %d turns", seen, turns)
	}
}

// An agent that writes, and calls its hook, while it is being started:
// its output and the hook call are recorded after the turn's launch
// event, whichever comes first.
func TestLaunchPrecedesTheAgentsFirstEvents(t *testing.T) {
	f := newFixture(t, func(o *runtime.ManagerOptions) { o.HookProgram = hookProgram(t) })
	var hooks sync.WaitGroup
	f.agent.StartTurnFunc = func(_ context.Context, turn agents.Turn, emit agents.Emit) (agents.Process, error) {
		emit(agents.Event{Kind: wire.KindAgentMessage, Data: wire.AgentMessage{Text: "early"}})
		hooks.Add(1)
		go func() {
			defer hooks.Done()
			if _, err := f.mgr.Hook(f.ctx, turn.SessionID, hookInput("as-1", "PreToolUse", "Read", `{"file_path":"a"}`)); err != nil {
				t.Errorf("hook: %v", err)
			}
		}()
		time.Sleep(50 * time.Millisecond) // the hook call is made before the process is known
		emit(agents.Event{Kind: wire.KindAgentMessage, Data: wire.AgentMessage{Text: "late"}})
		p := runtimetest.NewProcess()
		go func() { hooks.Wait(); p.End(agents.TurnResult{Resume: "tok"}) }()
		return launchingProcess{p, agents.Launch{Argv: []string{"/bin/agent"}}}, nil
	}
	si, err := f.mgr.Launch(f.ctx, wire.LaunchRequest{Directory: f.dir.ID, Prompt: "one", Mode: hookbridge.ModeBypass})
	if err != nil {
		t.Fatal(err)
	}
	f.waitStatus(si.ID, store.StatusCompleted)
	if err := f.mgr.Prompt(f.ctx, wire.PromptRequest{SessionID: si.ID, Text: "two"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two turns", func() bool { return f.manifest(si.ID).Turns == 2 })
	evs := f.events(si.ID)
	checkLaunchFirst(t, evs, 2)
	var msgs []string
	for _, e := range evs {
		if e.Kind == wire.KindAgentMessage {
			var m wire.AgentMessage
			json.Unmarshal(e.Data, &m)
			msgs = append(msgs, m.Text)
		}
	}
	if fmt.Sprint(msgs) != "[early late early late]" { // held, not lost or reordered
		t.Fatalf("agent messages %q", msgs)
	}
	if n := len(eventsOf(f, si.ID, wire.KindPermissionDecision)); n != 2 {
		t.Fatalf("%d decisions, want 2", n)
	}
}

// Real terminal programs that print at once, turn after turn, in
// sessions running side by side so that the daemon is busy while each
// starts: the launch event is each turn's first.
func TestLaunchPrecedesAFastCustomAgentsOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs many real processes")
	}
	a := custom.New(custom.Options{ID: "fast", Command: "/bin/sh", PromptArg: true, Resume: "again",
		Args: []string{"-n", "output"}})
	f := newFixture(t, func(o *runtime.ManagerOptions) {
		o.Agents = &runtimetest.Registry{Adapters: []agents.Adapter{a}}
	})
	const sessions, turns = 6, 8
	var wg sync.WaitGroup
	ids := make([]string, sessions)
	for s := range sessions {
		si, err := f.mgr.Launch(f.ctx, wire.LaunchRequest{Directory: f.dir.ID, Agent: "fast", Prompt: "go"})
		if err != nil {
			t.Fatal(err)
		}
		ids[s] = si.ID
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i < turns; i++ {
				for f.manifest(si.ID).Turns < i {
					time.Sleep(2 * time.Millisecond)
				}
				for {
					err := f.mgr.Prompt(f.ctx, wire.PromptRequest{SessionID: si.ID, Text: "go"})
					if err == nil {
						break
					}
					if !strings.Contains(err.Error(), "running a turn") {
						t.Errorf("prompt: %v", err)
						return
					}
					time.Sleep(2 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		waitFor(t, "last turn end", func() bool { return f.manifest(id).Turns == turns })
		checkLaunchFirst(t, f.events(id), turns)
		if n := len(eventsOf(f, id, wire.KindTerminalOutput)); n < turns {
			t.Fatalf("too little output recorded: %d events", n)
		}
	}
}
