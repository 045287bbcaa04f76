package runtime

import (
	"context"
	"sync"

	"reeve.dev/reeve/agents"
)

// A turn's launch event comes before anything its agent does. The launch
// can only be described once the process has started (its argv and
// environment are what the adapter actually executed), and by then the
// agent may already be writing: its first output would be appended by the
// adapter's reader before the daemon appends the launch, and a fast hook
// or in-band permission request likewise. So each turn has a gate, shut
// while the turn starts: the agent's events are held in order, hook calls
// and in-band decisions of the session wait, and once the launch is
// recorded (or the start failed) the gate opens, writing the held events
// first.

// launchGate orders a turn's agent events after its launch event.
type launchGate struct {
	mu     sync.Mutex
	open   bool
	held   []agents.Event
	opened chan struct{}
}

func newLaunchGate() *launchGate { return &launchGate{opened: make(chan struct{})} }

// pass writes ev once the gate is open, holding it until then. Writes are
// serialized, so events from the adapter's several readers keep the order
// in which they passed.
func (g *launchGate) pass(ev agents.Event, write func(agents.Event)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		g.held = append(g.held, ev)
		return
	}
	write(ev)
}

// openWith writes the held events, then lets every later one through.
// Opening twice does nothing.
func (g *launchGate) openWith(write func(agents.Event)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open {
		return
	}
	for _, ev := range g.held {
		write(ev)
	}
	g.held, g.open = nil, true
	close(g.opened)
}

// awaitLaunch waits, when the session's turn is starting, until its launch
// is recorded: a hook call or an in-band permission request is the agent
// acting, whose record must follow the launch. It returns at once for a
// session without a starting turn, and gives up with ctx.
func (m *Manager) awaitLaunch(ctx context.Context, sessionID string) {
	m.mu.Lock()
	sl := m.slots[sessionID]
	m.mu.Unlock()
	if sl == nil || sl.launch == nil {
		return
	}
	select {
	case <-sl.launch.opened:
	case <-sl.freed:
	case <-ctx.Done():
	}
}
