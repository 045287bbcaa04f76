package hookbridge

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFirstDecisionWins(t *testing.T) {
	b := NewBroker(BrokerOptions{Timeout: time.Minute})
	req, done := b.Open(Request{SessionID: "s1", Tool: "Bash"})
	if got := b.Pending(""); len(got) != 1 || got[0].ID != req.ID {
		t.Fatalf("pending: %+v", got)
	}
	var wg sync.WaitGroup
	results := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			dec := Allow
			if i%2 == 1 {
				dec = Deny
			}
			_, _, err := b.Decide(req.ID, dec, "human", "because", false)
			results <- err
		}(i)
	}
	wg.Wait()
	close(results)
	wins := 0
	for err := range results {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, ErrAlreadyDecided):
			t.Errorf("unexpected error %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d decisions won", wins)
	}
	d := b.Wait(context.Background(), req, done)
	if d.RequestID != req.ID || d.SessionID != "s1" || d.Tool != "Bash" || d.DecidedBy != "human" || d.At.IsZero() {
		t.Fatalf("decision: %+v", d)
	}
	if _, _, err := b.Decide(req.ID, Allow, "human", "", false); !errors.Is(err, ErrAlreadyDecided) || !strings.Contains(err.Error(), d.Decision) {
		t.Fatalf("late decision: %v", err)
	}
	if _, _, err := b.Decide("nope", Allow, "human", "", false); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, _, err := b.Decide(req.ID, "maybe", "human", "", false); err == nil {
		t.Fatal("accepted decision maybe")
	}
	if len(b.Pending("")) != 0 {
		t.Fatal("decided request still pending")
	}
}

func TestWaitFailsClosed(t *testing.T) {
	b := NewBroker(BrokerOptions{Timeout: 50 * time.Millisecond})
	req, done := b.Open(Request{SessionID: "s", Tool: "Write"})
	if d := b.Wait(context.Background(), req, done); d.Decision != Deny || d.DecidedBy != "timeout" {
		t.Fatalf("timeout: %+v", d)
	}
	if _, _, err := b.Decide(req.ID, Allow, "human", "", false); !errors.Is(err, ErrAlreadyDecided) {
		t.Fatalf("allow after timeout: %v", err)
	}
	b = NewBroker(BrokerOptions{Timeout: time.Hour})
	req, done = b.Open(Request{SessionID: "s", Tool: "Write"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d := b.Wait(ctx, req, done); d.Decision != Deny || d.DecidedBy != "daemon" {
		t.Fatalf("abandoned: %+v", d)
	}
	req, done = b.Open(Request{SessionID: "s2", Tool: "Write"})
	b.EndSession("s2", "the session ended")
	if d := b.Wait(context.Background(), req, done); d.Decision != Deny || !strings.Contains(d.Reason, "ended") {
		t.Fatalf("ended session: %+v", d)
	}
}

func TestSessionRules(t *testing.T) {
	b := NewBroker(BrokerOptions{Timeout: time.Minute})
	req, done := b.Open(Request{SessionID: "s", Tool: "Bash"})
	b.Decide(req.ID, Allow, "human", "fine for now", true)
	b.Wait(context.Background(), req, done)
	if d, ok := b.SessionRule("s", "Bash"); !ok || d.Decision != Allow || d.DecidedBy != "session-rule" {
		t.Fatalf("rule: %+v %v", d, ok)
	}
	if _, ok := b.SessionRule("s", "Write"); ok {
		t.Fatal("rule for another tool")
	}
	if _, ok := b.SessionRule("other", "Bash"); ok {
		t.Fatal("rule leaked to another session")
	}
	b.EndSession("s", "done")
	if _, ok := b.SessionRule("s", "Bash"); ok {
		t.Fatal("rule survived the session")
	}
}

func TestGateOrder(t *testing.T) {
	policy := func(action string) func(string, json.RawMessage) PolicyVerdict {
		return func(string, json.RawMessage) PolicyVerdict {
			return PolicyVerdict{Action: action, Rule: "r1", Reason: "rule says " + action}
		}
	}
	humanAllows := func(b *Broker) func(Request) {
		return func(r Request) { go b.Decide(r.ID, Allow, "human", "ok", false) }
	}
	cases := []struct {
		name   string
		policy string
		mode   string
		want   string
		by     string
	}{
		{"policy deny beats bypass", PolicyDeny, ModeBypass, Deny, "policy:r1"},
		{"policy allow beats detect", PolicyAllow, ModeDetect, Allow, "policy:r1"},
		{"policy ask asks even in bypass", PolicyAsk, ModeBypass, Allow, "human"},
		{"no rule, bypass", "", ModeBypass, Allow, "mode:bypass"},
		{"no rule, detect asks", "", ModeDetect, Allow, "human"},
		{"an unknown verdict denies, even in bypass", "Allow", ModeBypass, Deny, "policy:r1"},
	}
	for _, c := range cases {
		b := NewBroker(BrokerOptions{Timeout: 5 * time.Second})
		asked := 0
		g := Gate{Policy: policy(c.policy), Mode: c.mode, Broker: b, Asked: func(r Request) { asked++; humanAllows(b)(r) }}
		d := g.Decide(context.Background(), Request{SessionID: "s", Tool: "Bash"})
		if d.Decision != c.want || d.DecidedBy != c.by {
			t.Errorf("%s: %+v", c.name, d)
		}
		if (c.by == "human") != (asked == 1) {
			t.Errorf("%s: asked %d times", c.name, asked)
		}
	}
	// Nobody answers in detect mode: denied at the timeout, never allowed.
	b := NewBroker(BrokerOptions{Timeout: 30 * time.Millisecond})
	if d := (Gate{Mode: ModeDetect, Broker: b}).Decide(context.Background(), Request{SessionID: "s", Tool: "Bash"}); d.Decision != Deny {
		t.Fatalf("unanswered: %+v", d)
	}
}

func TestHookFormats(t *testing.T) {
	for _, bad := range []string{``, `not json`, `[1]`, `{"tool_name":"Bash"}`, `{"hook_event_name":"PreToolUse"}`} {
		if _, err := ParseInput([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	in, err := ParseInput([]byte(`{"session_id":"a","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"tool_use_id":"t1"}`))
	if err != nil || in.ToolName != "Bash" || string(in.ToolInput) != `{"command":"ls"}` {
		t.Fatalf("parse: %+v %v", in, err)
	}
	var out struct {
		HookSpecificOutput struct {
			HookEventName, PermissionDecision, PermissionDecisionReason string
		}
	}
	json.Unmarshal(PreToolUseOutput("", "why"), &out)
	if out.HookSpecificOutput.PermissionDecision != "deny" || out.HookSpecificOutput.HookEventName != "PreToolUse" {
		t.Fatalf("empty decision must deny: %+v", out)
	}
	json.Unmarshal(PreToolUseOutput(Allow, ""), &out)
	if out.HookSpecificOutput.PermissionDecision != "allow" {
		t.Fatalf("allow: %+v", out)
	}
}

// The hook input decoder never panics, and what it accepts names its
// event (and a PreToolUse its tool).
func FuzzParseInput(f *testing.F) {
	f.Add([]byte(`{"session_id":"s","hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"cwd":"/w"}`))
	f.Add([]byte(`not json`))
	f.Add([]byte(`{"hook_event_name":"Stop"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := ParseInput(b)
		if err != nil {
			return
		}
		if in.HookEventName == "" || in.HookEventName == "PreToolUse" && in.ToolName == "" {
			t.Fatalf("accepted %q as %+v", b, in)
		}
	})
}
