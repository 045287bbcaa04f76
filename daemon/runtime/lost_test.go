package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/runtime"
	"reeve.dev/reeve/daemon/runtime/runtimetest"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
)

// diskFull switches the fixture's store between a full disk and a working
// one (store.Options.WriteFault).
type diskFull struct{ on atomic.Bool }

func (d *diskFull) fault() error {
	if d.on.Load() {
		return errors.New("database or disk is full (13)")
	}
	return nil
}

// newFaultyFixture is newFixture over a store whose writes fail while
// full is on.
func newFaultyFixture(t *testing.T, full *diskFull) *fixture {
	t.Helper()
	f := newFixture(t, func(o *runtime.ManagerOptions) { o.RetryEvery = 20 * time.Millisecond })
	f.mgr.Close()
	f.st.Close()
	st, err := store.Open(f.ctx, store.Options{Path: filepath.Join(string(f.home), "faulty.db"), WriteFault: full.fault})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f.st = st
	if f.dir, _, err = st.AddDirectory(f.ctx, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	f.opts.Store = st
	f.mgr = f.newManager()
	return f
}

func lostMarker(t *testing.T, evs []store.Event) wire.OutputLost {
	t.Helper()
	for _, e := range evs {
		if e.Kind == wire.KindOutputLost {
			var l wire.OutputLost
			if err := json.Unmarshal(e.Data, &l); err != nil {
				t.Fatal(err)
			}
			return l
		}
	}
	t.Fatalf("no output-lost event in %v", kinds(evs))
	return wire.OutputLost{}
}

// The disk fills during a turn and the turn ends: the session is failed at
// once for every reader (a follower ends instead of hanging), and once the
// disk has space again the log gets a marker of what was lost, in its
// place, and the status event of the end.
func TestDiskFullDuringTurn(t *testing.T) {
	var full diskFull
	f := newFaultyFixture(t, &full)
	emitted := make(chan agents.Emit, 1)
	proc := runtimetest.NewProcess()
	f.agent.StartTurnFunc = func(_ context.Context, _ agents.Turn, emit agents.Emit) (agents.Process, error) {
		emitted <- emit
		return proc, nil
	}
	si := f.launch("fill the disk")
	emit := <-emitted
	emit(agents.Event{Kind: wire.KindAgentMessage, Data: wire.AgentMessage{Text: "before"}})

	followed := make(chan error, 1)
	go func() {
		followed <- f.st.Follow(f.ctx, si.ID, 0, func(store.Event) error { return nil })
	}()

	full.on.Store(true)
	for range 5 {
		emit(agents.Event{Kind: wire.KindTerminalOutput, Data: wire.TerminalOutput{Text: "lost"}})
	}
	emit(agents.Event{Kind: wire.KindAgentMessage, Data: wire.AgentMessage{Text: "lost too"}})
	proc.End(agents.TurnResult{})

	s := f.waitStatus(si.ID, store.StatusFailed)
	if !strings.Contains(s.StatusReason, "ended (completed) but the daemon could not record it") ||
		!strings.Contains(s.StatusReason, "disk is full") {
		t.Fatalf("reason %q", s.StatusReason)
	}
	select {
	case err := <-followed:
		if err != nil {
			t.Fatalf("follow: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a follower hangs on a session whose end could not be written")
	}
	if err := f.mgr.Kill(f.ctx, wire.KillRequest{SessionID: si.ID}); code(err) != wire.CodeNotRunning {
		t.Fatalf("stop of a session already ended: %v", err)
	}
	// Nothing is written while the disk stays full.
	time.Sleep(100 * time.Millisecond)
	if got := kinds(f.events(si.ID)); strings.Join(got, " ") != "user-prompt status:running agent-message" {
		t.Fatalf("events while full: %v", got)
	}

	full.on.Store(false)
	waitFor(t, "the end and the marker to be written", func() bool {
		return f.st.PendingEnds() == 0 && len(f.events(si.ID)) == 5
	})
	evs := f.events(si.ID)
	if got := kinds(evs); strings.Join(got, " ") != "user-prompt status:running agent-message output-lost status:failed" {
		t.Fatalf("events after space returned: %v", got)
	}
	l := lostMarker(t, evs)
	// 5 outputs, a message and the end's status.
	if l.Events != 7 || l.Kinds[wire.KindTerminalOutput] != 5 || l.Kinds[wire.KindAgentMessage] != 1 ||
		l.Kinds[wire.KindStatus] != 1 || l.From.IsZero() || l.To.Before(l.From) || !strings.Contains(l.Reason, "disk is full") {
		t.Fatalf("marker %+v", l)
	}
	f.st.Close()
	again, err := store.Open(context.Background(), store.Options{Path: f.st.Path()})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if s, _ := again.Session(f.ctx, si.ID); s.Status != store.StatusFailed {
		t.Fatalf("stored status %s", s.Status)
	}
}

// Output lost while a turn goes on is marked by the next event that is
// written, in the same transaction, before it.
func TestLostOutputMarkedByNextEvent(t *testing.T) {
	var full diskFull
	f := newFaultyFixture(t, &full)
	f.opts.RetryEvery = time.Hour // only the next event may write the marker
	emitted := make(chan agents.Emit, 1)
	proc := runtimetest.NewProcess()
	f.agent.StartTurnFunc = func(_ context.Context, _ agents.Turn, emit agents.Emit) (agents.Process, error) {
		emitted <- emit
		return proc, nil
	}
	si := f.launch("hiccup")
	emit := <-emitted
	full.on.Store(true)
	emit(agents.Event{Kind: wire.KindTerminalOutput, Data: wire.TerminalOutput{Text: "x"}})
	emit(agents.Event{Kind: wire.KindTerminalOutput, Data: wire.TerminalOutput{Text: "y"}})
	full.on.Store(false)
	emit(agents.Event{Kind: wire.KindTerminalOutput, Data: wire.TerminalOutput{Text: "z"}})
	proc.End(agents.TurnResult{})
	f.waitStatus(si.ID, store.StatusCompleted)
	evs := f.events(si.ID)
	if got := kinds(evs); strings.Join(got, " ") != "user-prompt status:running output-lost terminal-output status:completed" {
		t.Fatalf("events %v", got)
	}
	if l := lostMarker(t, evs); l.Events != 2 || l.Kinds[wire.KindTerminalOutput] != 2 {
		t.Fatalf("marker %+v", l)
	}
	if !strings.Contains(string(evs[3].Data), `"z"`) {
		t.Fatalf("event after the marker: %s", evs[3].Data)
	}
}

// An event whose data does not encode is refused by the store, which
// encodes it (store.ErrBadData): that is a bug of its producer, not output
// lost to a full disk, so no output-lost marker counts it, and the events
// around it are written.
func TestUnencodableEventIsNotLostOutput(t *testing.T) {
	f := newFixture(t, nil)
	emitted := make(chan agents.Emit, 1)
	proc := runtimetest.NewProcess()
	f.agent.StartTurnFunc = func(_ context.Context, _ agents.Turn, emit agents.Emit) (agents.Process, error) {
		emitted <- emit
		return proc, nil
	}
	si := f.launch("encode")
	emit := <-emitted
	emit(agents.Event{Kind: wire.KindTerminalOutput, Data: wire.TerminalOutput{Text: "x"}})
	emit(agents.Event{Kind: wire.KindTerminalOutput, Data: func() {}})
	emit(agents.Event{Kind: wire.KindTerminalOutput, Data: wire.TerminalOutput{Text: "z"}})
	proc.End(agents.TurnResult{})
	f.waitStatus(si.ID, store.StatusCompleted)
	if got := kinds(f.events(si.ID)); strings.Join(got, " ") != "user-prompt status:running terminal-output terminal-output status:completed" {
		t.Fatalf("events %v", got)
	}
}

// A session that is active by its record with no agent process behind it
// is ended by a stop instead of refused, even on a full disk.
func TestStopSessionWithoutProcess(t *testing.T) {
	var full diskFull
	f := newFaultyFixture(t, &full)
	si := f.launch("done")
	f.waitStatus(si.ID, store.StatusCompleted)
	// What a lost end leaves behind: the record says running, nothing runs.
	if _, err := f.st.UpdateSessionStatus(f.ctx, si.ID, store.StatusRunning, ""); err != nil {
		t.Fatal(err)
	}
	full.on.Store(true)
	if err := f.mgr.Kill(f.ctx, wire.KillRequest{SessionID: si.ID}); err != nil {
		t.Fatalf("stop of a session with no process: %v", err)
	}
	s, _ := f.st.Session(f.ctx, si.ID)
	if s.Status != store.StatusFailed || !strings.Contains(s.StatusReason, "stopped by request") {
		t.Fatalf("after stop on a full disk: %s %q", s.Status, s.StatusReason)
	}
	full.on.Store(false)
	waitFor(t, "the stop to be written", func() bool { return f.st.PendingEnds() == 0 })

	// With space, the stop is recorded as such.
	si2 := f.launch("again")
	f.waitStatus(si2.ID, store.StatusCompleted)
	if _, err := f.st.UpdateSessionStatus(f.ctx, si2.ID, store.StatusIdle, ""); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.Kill(f.ctx, wire.KillRequest{SessionID: si2.ID}); err != nil {
		t.Fatal(err)
	}
	s = f.waitStatus(si2.ID, store.StatusKilled)
	if s.StatusReason != "stopped by request; no agent process was running for it" {
		t.Fatalf("reason %q", s.StatusReason)
	}
}

// A worker that stops while an end is kept in memory: the next worker
// finds it in the store, and the log says that output was lost.
func TestLostEndRecordedByNextWorker(t *testing.T) {
	var full diskFull
	f := newFaultyFixture(t, &full)
	proc := runtimetest.NewProcess()
	f.agent.StartTurnFunc = func(context.Context, agents.Turn, agents.Emit) (agents.Process, error) { return proc, nil }
	si := f.launch("x")
	full.on.Store(true)
	proc.End(agents.TurnResult{})
	f.waitStatus(si.ID, store.StatusFailed)
	f.mgr.Close()
	f.st.Close()

	st, err := store.Open(f.ctx, store.Options{Path: f.st.Path()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f.st, f.opts.Store = st, st
	f.mgr = f.newManager()
	s, _ := st.Session(f.ctx, si.ID)
	if s.Status != store.StatusFailed || !strings.Contains(s.StatusReason, "could not record it") {
		t.Fatalf("after restart %s %q", s.Status, s.StatusReason)
	}
	evs := f.events(si.ID)
	if got := kinds(evs); strings.Join(got, " ") != "user-prompt status:running output-lost status:failed" {
		t.Fatalf("events %v", got)
	}
}
