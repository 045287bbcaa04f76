package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/daemon/wireclient"
	"reeve.dev/reeve/hookbridge"
)

// followOptions shape how a followed session is shown.
type followOptions struct {
	json  bool // one JSON frame per line on stdout
	quiet bool // nothing on stdout: only wait for the end
	// ask offers a one-key allow/deny prompt for each permission request
	// on the terminal that stdin is (attach on a terminal, unless
	// --no-input).
	ask bool
	// history is the seq of the last event that happened before the
	// command began: a permission request among them is announced only
	// when still pending (pending holds those).
	history int64
	pending map[string]bool
	// running reports whether a daemon still runs from the home, to tell
	// a lost connection to a live daemon (exit 9) from a stopped one.
	running func() bool
	// homeFlag spells the reeve command lines of hints.
	homeFlag
}

// follow prints a subscribed session's events until its session-ended
// frame, and returns that frame. Along the way it says on stderr when the
// session waits for a permission decision and how to give it, and, with
// ask, lets the person at the terminal give it with one key.
func follow(ctx context.Context, env *Env, p Protocol, s Stream, sessionID string, fo followOptions) (wire.SessionEnded, error) {
	r := &renderer{w: env.Out}
	w := &waits{env: env, p: p, sessionID: sessionID, homeFlag: fo.homeFlag, waiting: map[string]wire.PermissionRequest{}, mine: map[string]bool{}}
	if fo.ask {
		if f, ok := env.In.(*os.File); ok && isTerminal(f) {
			w.term = f
		}
	}
	defer w.close()
	for {
		select {
		case <-ctx.Done():
			r.finish()
			return wire.SessionEnded{}, ctx.Err()
		case k := <-w.keys:
			w.key(ctx, k)
		case res := <-w.results:
			w.answered(res)
		case u, ok := <-s.Updates():
			if !ok {
				r.finish()
				if e := s.Ended(); e != nil {
					if fo.json && !fo.quiet {
						if err := writeJSONLine(env.Out, e); err != nil {
							return *e, err
						}
					}
					return *e, nil
				}
				return wire.SessionEnded{}, followLost(sessionID, s.Err(), fo)
			}
			switch {
			case fo.quiet:
			case fo.json:
				if _, err := env.Out.Write(append(u.Raw[:len(u.Raw):len(u.Raw)], '\n')); err != nil {
					return wire.SessionEnded{}, err
				}
			default:
				r.render(u.SessionUpdate)
			}
			w.event(ctx, u.SessionUpdate, u.Seq > fo.history || fo.pending != nil && fo.pendingHas(u))
		}
	}
}

// pendingHas reports whether u is a permission request that was still
// pending when following began.
func (fo followOptions) pendingHas(u wireclient.Update) bool {
	if u.Kind != wire.KindPermissionRequest {
		return false
	}
	var req wire.PermissionRequest
	json.Unmarshal(u.Data, &req)
	return fo.pending[req.ID]
}

// followLost explains a follow cut off before the session ended.
func followLost(sessionID string, err error, fo followOptions) error {
	running := fo.running
	var stopped *wireclient.StoppedError
	switch {
	case errors.As(err, &stopped):
		return exitf(ExitNotRunning, "the daemon stopped while following session %s (%s); it interrupts the sessions it runs: start it again with `%s`, then see `%s`", sessionID, stopped.Reason, fo.reeve("start"), fo.reeve("logs "+sessionID))
	case errors.Is(err, wireclient.ErrLost) && running != nil && running():
		return exitf(ExitUnhealthy, "lost the daemon while following session %s: %v; it runs but does not answer (see `%s`)", sessionID, err, fo.reeve("status"))
	case errors.Is(err, wireclient.ErrLost):
		return exitf(ExitNotRunning, "lost the daemon while following session %s: it stopped (%v); see `%s`", sessionID, err, fo.reeve("status"))
	case err == nil:
		return exitf(ExitNotRunning, "lost the daemon while following session %s", sessionID)
	}
	return fo.apiExit(fmt.Errorf("following session %s: %w", sessionID, err))
}

// waits tracks the permission requests of a followed session: announces
// them on stderr and, on a terminal, asks for a one-key decision.
type waits struct {
	env       *Env
	p         Protocol
	sessionID string
	homeFlag
	// waiting are the requests announced and not yet decided.
	waiting map[string]wire.PermissionRequest
	// mine are the requests decided here, whose decision events need no
	// announcement.
	mine map[string]bool

	term    *os.File // nil: no prompt
	restore func()
	keys    chan byte
	results chan answer
	queue   []string // requests to ask about, oldest first
	asking  string   // the request on the prompt now
}

type answer struct {
	id       string
	decision wire.PermissionDecision
	err      error
}

// event reacts to one event of the session; fresh says it is not history
// (or is a request still pending).
func (w *waits) event(ctx context.Context, u wire.SessionUpdate, fresh bool) {
	switch u.Kind {
	case wire.KindPermissionRequest:
		var req wire.PermissionRequest
		if json.Unmarshal(u.Data, &req) != nil || req.ID == "" || !fresh {
			return
		}
		w.waiting[req.ID] = req
		w.announce(req)
		if w.term != nil {
			w.queue = append(w.queue, req.ID)
			w.next()
		}
	case wire.KindPermissionDecision:
		var d wire.PermissionDecision
		if json.Unmarshal(u.Data, &d) != nil || d.RequestID == "" {
			return
		}
		if _, ok := w.waiting[d.RequestID]; !ok {
			return
		}
		delete(w.waiting, d.RequestID)
		w.dequeue(d.RequestID)
		if w.mine[d.RequestID] {
			return
		}
		if w.asking == d.RequestID {
			fmt.Fprintln(w.env.Err)
			w.asking = ""
		}
		fmt.Fprintf(w.env.Err, "reeve: request %s was decided: %s by %s%s\n", d.RequestID, d.Decision, d.DecidedBy, reasonSuffix(d.Reason))
		w.next()
	}
}

func (w *waits) announce(req wire.PermissionRequest) {
	fmt.Fprintf(w.env.Err, "reeve: session %s waits for a permission decision: %s %s\n", w.sessionID, req.Tool, clip(oneLine(string(req.Input)), 300))
	if req.Reason != "" {
		fmt.Fprintf(w.env.Err, "reeve:   why a human is asked: %s\n", req.Reason)
	}
	if w.term == nil {
		fmt.Fprintf(w.env.Err, "reeve:   allow it: %s    deny it: %s --reason '...'\n", w.reeve("permit allow "+req.ID), w.reeve("permit deny "+req.ID))
	}
}

// next puts the oldest undecided request on the prompt, if none is.
func (w *waits) next() {
	if w.term == nil || w.asking != "" || len(w.queue) == 0 {
		return
	}
	if w.keys == nil && !w.startKeys() {
		return
	}
	w.asking, w.queue = w.queue[0], w.queue[1:]
	req := w.waiting[w.asking]
	fmt.Fprintf(w.env.Err, "reeve: %s %s — allow? [y] allow  [n] deny  [s] skip (decide later with `%s`): ", req.Tool, clip(oneLine(string(req.Input)), 120), w.reeve("permit"))
}

func (w *waits) dequeue(id string) {
	for i, q := range w.queue {
		if q == id {
			w.queue = append(w.queue[:i], w.queue[i+1:]...)
			return
		}
	}
}

// startKeys puts the terminal in cbreak mode (keys arrive one at a time,
// unechoed; Ctrl-C still interrupts) and reads them.
func (w *waits) startKeys() bool {
	restore, err := cbreak(w.term)
	if err != nil {
		fmt.Fprintf(w.env.Err, "reeve: cannot read single keys from the terminal (%v); decide with `%s`\n", err, w.reeve("permit"))
		w.term = nil
		return false
	}
	w.restore = restore
	w.keys = make(chan byte, 16)
	w.results = make(chan answer, 4)
	go func(in io.Reader, keys chan<- byte) {
		b := make([]byte, 1)
		for {
			n, err := in.Read(b)
			if err != nil {
				return
			}
			if n == 1 {
				select {
				case keys <- b[0]:
				default:
				}
			}
		}
	}(w.term, w.keys)
	return true
}

// key handles one key press: an answer to the prompt, or nothing.
func (w *waits) key(ctx context.Context, k byte) {
	if w.asking == "" {
		return
	}
	id := w.asking
	var decision string
	switch k {
	case 'y', 'Y', 'a', 'A':
		decision = hookbridge.Allow
	case 'n', 'N', 'd', 'D':
		decision = hookbridge.Deny
	case 's', 'S', 0x1b:
		fmt.Fprintf(w.env.Err, "skip\nreeve: request %s still waits: %s  or  %s\n", id, w.reeve("permit allow "+id), w.reeve("permit deny "+id))
		w.asking = ""
		w.next()
		return
	default:
		return
	}
	fmt.Fprintln(w.env.Err, decision)
	w.asking = ""
	w.mine[id] = true
	reason := "allowed at the terminal that follows the session"
	if decision == hookbridge.Deny {
		reason = "denied at the terminal that follows the session"
	}
	go func() {
		d, err := w.p.RespondPermission(ctx, wire.RespondPermissionRequest{RequestID: id, Decision: decision, Reason: reason})
		w.results <- answer{id: id, decision: d, err: err}
	}()
}

// answered reports what became of a decision given here.
func (w *waits) answered(a answer) {
	var ack *wire.AckError
	switch {
	case a.err == nil:
		fmt.Fprintf(w.env.Err, "reeve: %s request %s (%s)\n", pastTense(a.decision.Decision), a.id, a.decision.Tool)
	case errors.As(a.err, &ack) && (ack.Code == wire.CodeAlreadyDecided || ack.Code == wire.CodeUnknownRequest):
		delete(w.mine, a.id)
		fmt.Fprintf(w.env.Err, "reeve: request %s was already decided elsewhere\n", a.id)
	default:
		delete(w.mine, a.id)
		fmt.Fprintf(w.env.Err, "reeve: could not decide request %s: %v; use `%s`\n", a.id, a.err, w.reeve("permit allow|deny "+a.id))
	}
	w.next()
}

func (w *waits) close() {
	if w.asking != "" {
		fmt.Fprintln(w.env.Err)
	}
	if w.restore != nil {
		w.restore()
	}
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return " (" + strings.TrimSpace(r) + ")"
}
