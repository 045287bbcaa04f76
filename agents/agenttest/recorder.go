package agenttest

import (
	"sync"
	"testing"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// Recorder collects the events an adapter emits, for adapter tests. Its
// Emit is an agents.Emit; it is safe for the adapter's goroutines.
type Recorder struct {
	mu  sync.Mutex
	evs []agents.Event
}

// Emit records one event.
func (r *Recorder) Emit(ev agents.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

// Events is a copy of what was recorded, in order.
func (r *Recorder) Events() []agents.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]agents.Event(nil), r.evs...)
}

// Kinds lists the recorded events' kinds, in order.
func (r *Recorder) Kinds() []string {
	var ks []string
	for _, ev := range r.Events() {
		ks = append(ks, ev.Kind)
	}
	return ks
}

// Of lists the data of the recorded events of one kind.
func (r *Recorder) Of(kind string) []any {
	var out []any
	for _, ev := range r.Events() {
		if ev.Kind == kind {
			out = append(out, ev.Data)
		}
	}
	return out
}

// CheckTypes fails when an event's data is not the payload type of its
// kind: the session manager stores Data as that type's JSON.
func (r *Recorder) CheckTypes(t testing.TB) {
	t.Helper()
	for _, ev := range r.Events() {
		ok := false
		switch ev.Kind {
		case wire.KindAgentMessage:
			_, ok = ev.Data.(wire.AgentMessage)
		case wire.KindToolCall:
			_, ok = ev.Data.(wire.ToolCall)
		case wire.KindToolResult:
			_, ok = ev.Data.(wire.ToolResult)
		case wire.KindUsage:
			_, ok = ev.Data.(wire.Usage)
		case wire.KindError:
			_, ok = ev.Data.(wire.Error)
		case wire.KindPermissionDecision:
			// A call the agent refused by itself.
			_, ok = ev.Data.(wire.PermissionDecision)
		}
		if !ok {
			t.Errorf("event %s carries %T", ev.Kind, ev.Data)
		}
	}
}
