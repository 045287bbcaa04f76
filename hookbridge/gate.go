package hookbridge

import (
	"context"
	"encoding/json"
	"strconv"
)

// Policy actions.
const (
	PolicyAllow = "allow"
	PolicyDeny  = "deny"
	PolicyAsk   = "ask"
)

// PolicyVerdict is what the project policy says of a tool use; an empty
// Action means no rule matched.
type PolicyVerdict struct {
	Action string
	Rule   string
	Reason string
}

// Gate decides one tool use of a session, in the order of design section
// 7: the project policy, then the session's rules, then its operator mode,
// then a human.
type Gate struct {
	// Policy evaluates the project policy; nil means there is none.
	Policy func(tool string, input json.RawMessage) PolicyVerdict
	// Mode is the session's operator mode.
	Mode   string
	Broker *Broker
	// Asked is called when a request is filed for a human, to record and
	// announce it.
	Asked func(Request)
}

// Decide returns the decision for req, waiting for a human when one must
// decide. It never allows unless a policy rule, a session rule, bypass
// mode or a human allowed.
func (g Gate) Decide(ctx context.Context, req Request) Decision {
	var v PolicyVerdict
	if g.Policy != nil {
		v = g.Policy(req.Tool, req.Input)
	}
	switch v.Action {
	case PolicyDeny:
		return g.now(Decision{Decision: Deny, DecidedBy: "policy:" + v.Rule, Reason: orDefault(v.Reason, "denied by the project policy ("+v.Rule+")")})
	case PolicyAllow:
		return g.now(Decision{Decision: Allow, DecidedBy: "policy:" + v.Rule, Reason: orDefault(v.Reason, "allowed by the project policy ("+v.Rule+")")})
	case PolicyAsk:
		// An ask rule wants a human whatever the mode.
		req.Reason = orDefault(v.Reason, "the project policy asks a human ("+v.Rule+")")
		return g.ask(ctx, req)
	case "":
	default:
		// A verdict this gate does not know is not "no rule": it denies.
		return g.now(Decision{Decision: Deny, DecidedBy: "policy:" + v.Rule, Reason: "the project policy gave an unknown verdict " + strconv.Quote(v.Action) + ", so reeve denies"})
	}
	if d, ok := g.Broker.SessionRule(req.SessionID, req.Tool); ok {
		return d
	}
	if g.Mode == ModeBypass {
		return g.now(Decision{Decision: Allow, DecidedBy: "mode:bypass", Reason: "the session is in bypass mode"})
	}
	req.Reason = "the session is in detect mode: a human decides"
	return g.ask(ctx, req)
}

func (g Gate) ask(ctx context.Context, req Request) Decision {
	req, done := g.Broker.Open(req)
	if g.Asked != nil {
		g.Asked(req)
	}
	return g.Broker.Wait(ctx, req, done)
}

func (g Gate) now(d Decision) Decision {
	d.At = g.Broker.opts.Now().UTC()
	return d
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
