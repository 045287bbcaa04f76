package runtime

import (
	"sync"
	"sync/atomic"

	"reeve.dev/reeve/agents"
)

// A turn's launch event comes before anything its agent does. The launch
// can only be described once the process has started (its argv and
// environment are what the adapter actually executed), and by then the
// agent may already be writing: its first output would be appended by the
// adapter's reader before the daemon appends the launch, and a fast hook
// call or in-band permission request likewise. So each turn has a gate,
// shut while the turn starts, through which the records of what the agent
// does pass: while it is shut they are held in order, and once the launch
// is recorded (or the start failed) it opens, writing them first.
//
// Nothing waits at the gate: an agent's start may itself depend on a hook
// being answered (Claude Code runs its SessionStart hook before it answers
// the initialize request the adapter waits for), so a hook call is decided
// at once and only its records are held.

// launchGate orders a turn's agent records after its launch event.
type launchGate struct {
	mu   sync.Mutex
	held []func()
	// opened is set, under mu, once everything held has been written:
	// from then on a write goes straight through, neither taking mu nor
	// waiting for another writer's append (and its fsync).
	opened atomic.Bool
}

func newLaunchGate() *launchGate { return &launchGate{} }

// pass runs write once the gate is open, holding it until then. Held
// writes run in the order in which they passed, before any write that
// passes after the gate opened.
func (g *launchGate) pass(write func()) {
	if g.opened.Load() {
		write()
		return
	}
	g.mu.Lock()
	if !g.opened.Load() {
		g.held = append(g.held, write)
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	write()
}

// open writes what was held, then lets everything through. Opening twice
// does nothing.
func (g *launchGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opened.Load() {
		return
	}
	for _, write := range g.held {
		write()
	}
	g.held = nil
	g.opened.Store(true)
}

// recordAgent records an event of what a session's agent did (a hook call,
// a permission request or decision), after the running turn's launch.
func (m *Manager) recordAgent(sessionID, kind string, data any) {
	write := func() { m.record(sessionID, kind, data) }
	m.mu.Lock()
	sl := m.slots[sessionID]
	m.mu.Unlock()
	if sl == nil || sl.launch == nil {
		write()
		return
	}
	sl.launch.pass(write)
}

// emitAfterLaunch is the Emit of a turn whose slot is sl: the agent's
// events pass its launch gate.
func (m *Manager) emitAfterLaunch(sessionID string, sl *slot) agents.Emit {
	return func(ev agents.Event) {
		sl.launch.pass(func() {
			if err := m.appendEvent(sessionID, ev.Kind, ev.Data); err != nil && !lostWrite(err) {
				m.logFailure(sessionID, "record "+ev.Kind+" event", err)
			}
		})
	}
}
