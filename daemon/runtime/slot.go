package runtime

import (
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
)

// A session has one turn slot. A turn holds it from before its prompt is
// recorded until its end is; a worktree operation that changes the
// session's worktree (rollback, squash-merge, worktree-remove) holds it
// while it works. While the slot is taken a new turn is refused as busy,
// and a prompt goes to the running agent's terminal when it has one.

// slot is a session's taken turn slot. Its fields are guarded by
// Manager.mu.
type slot struct {
	// op names the worktree operation holding the slot; "" for a turn.
	op string
	// proc is the turn's agent process, nil until it has started.
	proc agents.Process
	// killed is set by a kill request; a turn whose process starts after
	// it is killed at once.
	killed bool
	// exited is set when the turn's process has ended and its end is
	// being recorded: there is nothing left to kill.
	exited bool
	// freed is closed when the slot is released.
	freed chan struct{}
	// launch holds a turn's agent events until its launch is recorded
	// (launchgate.go); nil for a worktree operation.
	launch *launchGate
}

// endingWait bounds how long a request waits for a turn whose process has
// exited to finish recording its end (a full disk makes that slow).
const endingWait = 30 * time.Second

// awaitEnding waits while the session's slot is held by a turn whose
// process has exited: its end is being recorded, and a client that saw the
// session end (the status is written just before the slot is released)
// must not be told that it is busy.
func (m *Manager) awaitEnding(sessionID string) {
	deadline := time.Now().Add(endingWait)
	for {
		m.mu.Lock()
		held := m.slots[sessionID]
		if held == nil || !held.exited {
			m.mu.Unlock()
			return
		}
		freed := held.freed
		m.mu.Unlock()
		select {
		case <-freed:
		case <-time.After(time.Until(deadline)):
			return
		}
	}
}

// reserve takes the session's slot for a turn (op "") or a worktree
// operation, or says why it cannot.
func (m *Manager) reserve(sessionID, op string) (*slot, error) {
	m.awaitEnding(sessionID)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return nil, sessionErr(wire.CodeShuttingDown, "the daemon is shutting down")
	}
	if held := m.slots[sessionID]; held != nil {
		switch {
		case held.op != "" && op != "":
			return nil, sessionErr(wire.CodeBusy, "another worktree operation (%s) is in progress on session %s", held.op, sessionID)
		case held.op != "":
			return nil, sessionErr(wire.CodeBusy, "a worktree operation (%s) is in progress on session %s; try again when it has ended", held.op, sessionID)
		case op != "":
			return nil, sessionErr(wire.CodeBusy, "session %s is running a turn; %s it when the turn has ended (see `reeve wait %s`)", sessionID, op, sessionID)
		default:
			return nil, sessionErr(wire.CodeBusy, "session %s is running a turn", sessionID)
		}
	}
	sl := &slot{op: op, freed: make(chan struct{})}
	if op == "" {
		sl.launch = newLaunchGate()
	}
	m.slots[sessionID] = sl
	return sl, nil
}

// started gives a turn's slot its process, killing it at once when a kill
// or the daemon's shutdown came while it was starting.
func (m *Manager) started(sl *slot, proc agents.Process) {
	m.mu.Lock()
	sl.proc = proc
	kill := sl.killed || m.closing
	m.mu.Unlock()
	if kill {
		proc.Kill()
	}
}

// release frees the session's slot, if sl still holds it.
func (m *Manager) release(sessionID string, sl *slot) {
	if sl.launch != nil {
		sl.launch.open() // nothing held is lost
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.slots[sessionID] == sl {
		delete(m.slots, sessionID)
		close(sl.freed)
	}
}

// running reports whether the session's slot is taken, and the agent
// process of a running turn (nil while it starts, or for an operation).
func (m *Manager) running(sessionID string) (agents.Process, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sl := m.slots[sessionID]
	if sl == nil {
		return nil, false
	}
	return sl.proc, true
}

// kill stops the session's running turn. A turn still starting is killed
// as soon as its process exists.
func (m *Manager) kill(sessionID string, status store.Status) error {
	m.mu.Lock()
	sl := m.slots[sessionID]
	var proc agents.Process
	switch {
	case sl == nil && status.Active():
		m.mu.Unlock()
		return m.endOrphan(sessionID)
	case sl == nil:
		m.mu.Unlock()
		return sessionErr(wire.CodeNotRunning, "session %s is not running (status %s)", sessionID, status)
	case sl.op != "":
		m.mu.Unlock()
		return sessionErr(wire.CodeBusy, "a worktree operation (%s) is in progress on session %s; nothing is running to stop", sl.op, sessionID)
	case sl.exited:
		m.mu.Unlock()
		return sessionErr(wire.CodeNotRunning, "session %s has ended its turn (status %s)", sessionID, status)
	default:
		sl.killed = true
		proc = sl.proc
	}
	m.mu.Unlock()
	if proc == nil {
		return nil
	}
	return proc.Kill()
}

// endOrphan ends a session that is active by its record but has no turn
// behind it (its end could not be recorded, or a worker lost track of it):
// stopping it must end it rather than refuse. The slot is taken meanwhile,
// so that no turn starts under the stop.
func (m *Manager) endOrphan(sessionID string) error {
	sl, err := m.reserve(sessionID, "stop")
	if err != nil {
		return err
	}
	defer m.release(sessionID, sl)
	sess, err := m.opts.Store.Session(m.ctx, sessionID)
	if err != nil {
		return err
	}
	if !sess.Status.Active() {
		return sessionErr(wire.CodeNotRunning, "session %s is not running (status %s)", sessionID, sess.Status)
	}
	m.broker.DenyPending(sessionID, "the session was stopped")
	return m.setStatus(m.ctx, sessionID, store.StatusKilled, "stopped by request; no agent process was running for it")
}
