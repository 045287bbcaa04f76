package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/hookbridge"
)

// restartReason is why a request left waiting by a worker that stopped is
// denied when the next worker starts.
const restartReason = "the daemon worker stopped while this request waited for a decision; the agent's channel to it is gone, so reeve denied it"

// settleAbandoned puts a decision on the record for every permission
// request of a session that a previous worker filed and never decided.
// The request itself is durable (a permission-request event is written
// before anyone is asked); what a worker restart loses is the agent's
// channel waiting on it. So the request is denied by rule, on the record
// with its tool-use id, rather than left pending forever or forgotten.
// The agent's side fails closed on its own: its hook gets no answer and
// denies, an in-band channel dies with the worker and the tool never runs.
func (m *Manager) settleAbandoned(ctx context.Context, sessionID string) (int, error) {
	open := map[string]wire.PermissionRequest{}
	var order []string
	after := int64(0)
	for {
		evs, err := m.opts.Store.Events(ctx, sessionID, after, 1000)
		if err != nil {
			return 0, fmt.Errorf("read the requests of session %s: %w", sessionID, err)
		}
		for _, e := range evs {
			after = e.Seq
			switch e.Kind {
			case wire.KindPermissionRequest:
				var r wire.PermissionRequest
				if json.Unmarshal(e.Data, &r) == nil && r.ID != "" {
					open[r.ID] = r
					order = append(order, r.ID)
				}
			case wire.KindPermissionDecision:
				var d wire.PermissionDecision
				if json.Unmarshal(e.Data, &d) == nil && d.RequestID != "" {
					delete(open, d.RequestID)
				}
			}
		}
		if len(evs) < 1000 {
			break
		}
	}
	n := 0
	for _, id := range order {
		r, ok := open[id]
		if !ok {
			continue
		}
		delete(open, id)
		d := hookbridge.Decision{RequestID: r.ID, SessionID: sessionID, Tool: r.Tool, ToolUseID: r.ToolUseID,
			Decision: hookbridge.Deny, DecidedBy: "daemon", Reason: restartReason, At: time.Now().UTC()}
		d.Command, d.Paths = whatIsDecided(r.Input)
		m.recordDecision(sessionID, d)
		n++
	}
	return n, nil
}
