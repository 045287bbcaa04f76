package claude

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/agents/ptyrun"
	"reeve.dev/reeve/daemon/wire"
)

// decisions is a Decide func that records what it was asked.
type decisions struct {
	mu     sync.Mutex
	asked  []agents.ToolUse
	answer func(agents.ToolUse) agents.Verdict
}

func (d *decisions) decide(ctx context.Context, u agents.ToolUse) agents.Verdict {
	d.mu.Lock()
	d.asked = append(d.asked, u)
	d.mu.Unlock()
	return d.answer(u)
}

func (d *decisions) all() []agents.ToolUse {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]agents.ToolUse(nil), d.asked...)
}

// Every tool use of a governed turn is a can_use_tool request reeve
// answers, read-only ones included, even when the hook program is gone
// (break 1): the in-band channel still decides, and a deny really blocks.
func TestClaudeInBandDecidesEveryTool(t *testing.T) {
	exe := agenttest.Claude(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("secret notes\n"), 0o644)
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "working", Calls: []agenttest.ToolCall{
			agenttest.Bash("ls"),
			{Name: "Read", Input: map[string]any{"file_path": filepath.Join(dir, "notes.txt")}},
			agenttest.Bash("touch allowed.txt"),
		}},
		{Text: "done"},
	}})
	d := &decisions{answer: func(u agents.ToolUse) agents.Verdict {
		if u.Tool == "Bash" && strings.Contains(string(u.Input), "touch allowed.txt") {
			return agents.Verdict{Allow: true, DecidedBy: "policy:t"}
		}
		return agents.Verdict{Reason: "not this one", DecidedBy: "policy:no-reads"}
	}}
	var rec recorder
	hook := &agents.Hook{
		// The hook program is gone: every hook fails to start.
		Command: func(ev string) string { return filepath.Join(t.TempDir(), "moved-away", "reeve") + " hook " + ev },
		Timeout: 30 * time.Second,
		Decide:  d.decide,
	}
	p, err := adapterFor(exe).StartTurn(testContext(t), agents.Turn{Prompt: "go", Model: model, Dir: dir, StateDir: t.TempDir(),
		Env: env(srv.URL, t.TempDir()), Hook: hook}, rec.Emit)
	if err != nil {
		t.Fatal(err)
	}
	res := waitTurn(t, p, 90*time.Second)
	if res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	asked := d.all()
	if len(asked) != 3 {
		t.Fatalf("asked %d times: %+v", len(asked), asked)
	}
	calls := map[string]wire.ToolCall{}
	for _, c := range rec.Of(wire.KindToolCall) {
		calls[c.(wire.ToolCall).ID] = c.(wire.ToolCall)
	}
	for _, u := range asked {
		c, ok := calls[u.ToolUseID]
		if !ok || c.Name != u.Tool || u.Channel != "can_use_tool" || u.AgentSessionID != res.AgentSessionID {
			t.Errorf("request %+v does not link to a tool call (%+v)", u, calls)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "allowed.txt")); err != nil {
		t.Error("the allowed command did not run")
	}
	sent := ""
	for _, r := range srv.MainRequests() {
		trs, _ := agenttest.ToolResults(r.Body)
		for _, tr := range trs {
			sent += tr.Content + "\n"
		}
	}
	if strings.Contains(sent, "secret notes") || strings.Count(sent, "not this one (decided by policy:no-reads)") != 2 {
		t.Fatalf("the model was told: %s", sent)
	}
	// The broken second layer is reported, not hidden.
	noVerdict := false
	for _, e := range rec.Of(wire.KindError) {
		noVerdict = noVerdict || strings.Contains(e.(wire.Error).Message, "gave no verdict")
	}
	if !noVerdict {
		t.Errorf("no error event says the hook gave no verdict: %+v", rec.Of(wire.KindError))
	}
}

// Failing closed on reeve's side: no answer and then a crash of the
// channel (its stdin closes) leave the tool unrun; a decider that panics
// denies.
func TestClaudeInBandFailsClosed(t *testing.T) {
	exe := agenttest.Claude(t)
	for _, c := range []string{"crash", "panic"} {
		t.Run(c, func(t *testing.T) {
			dir := t.TempDir()
			srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
				{Text: "working", Calls: []agenttest.ToolCall{agenttest.Bash("touch ran.txt")}},
				{Text: "done"},
			}})
			asked := make(chan struct{}, 1)
			var p agents.Process
			release := make(chan struct{})
			decide := func(ctx context.Context, u agents.ToolUse) agents.Verdict {
				asked <- struct{}{}
				if c == "panic" {
					panic("gate exploded")
				}
				<-release
				<-ctx.Done()
				return agents.Verdict{Allow: true} // too late: must not count
			}
			var rec recorder
			var err error
			p, err = adapterFor(exe).StartTurn(testContext(t), agents.Turn{Prompt: "go", Model: model, Dir: dir, StateDir: t.TempDir(),
				Env: env(srv.URL, t.TempDir()), Hook: &agents.Hook{Command: func(string) string { return "true" }, Timeout: 30 * time.Second, Decide: decide}}, rec.Emit)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-asked:
			case <-time.After(60 * time.Second):
				p.Kill()
				t.Fatal("never asked")
			}
			if c == "crash" {
				// reeve's end of the channel goes away with no answer.
				p.(*ptyrun.Turn).Proc.Stdin().Close()
				close(release)
				// Claude Code may wait for an answer that never comes:
				// give it time to misbehave, then end it.
				time.Sleep(3 * time.Second)
				p.Kill()
			}
			waitTurn(t, p, 60*time.Second)
			if _, err := os.Stat(filepath.Join(dir, "ran.txt")); err == nil {
				t.Fatal("the tool ran without reeve's allow")
			}
		})
	}
}

// The check at launch: a program that never answers the handshake does
// not get the prompt, and the turn does not start.
func TestClaudeRefusesUnverifiedChannel(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "claude")
	marker := filepath.Join(t.TempDir(), "prompt-read")
	// Reads stdin forever without answering; records anything it got
	// after the handshake.
	os.WriteFile(fake, []byte("#!/bin/sh\nread first\nwhile read line; do echo \"$line\" >> "+marker+"; done\n"), 0o755)
	a := adapterFor(fake)
	a.o.InitTimeout = 2 * time.Second
	var rec recorder
	began := time.Now()
	_, err := a.StartTurn(testContext(t), agents.Turn{Prompt: "hi", Dir: t.TempDir(), StateDir: t.TempDir(),
		Hook: &agents.Hook{Command: func(string) string { return "true" }, Decide: denyAll}}, rec.Emit)
	if err == nil || !strings.Contains(err.Error(), "no answer to initialize") {
		t.Fatalf("start error %v", err)
	}
	if time.Since(began) > 60*time.Second {
		t.Fatal("the refusal took too long")
	}
	if b, _ := os.ReadFile(marker); len(b) > 0 {
		t.Fatalf("the prompt was sent to an unverified agent: %s", b)
	}
}

// Claude Code's own refusals are on the record with their tool-use id,
// and its system lines of unexpected shapes are not "not stream-json".
func TestMapperPermissionDenied(t *testing.T) {
	var rec recorder
	m := &mapper{emit: rec.Emit}
	m.line([]byte(`{"type":"system","subtype":"permission_denied","tool_name":"Bash","tool_use_id":"toolu_1","agent_id":null,"decision_reason_type":"rule","decision_reason":"deny rule","message":"Permission to use Bash has been denied.","uuid":"u","session_id":"s"}`))
	m.line([]byte(`{"type":"system","subtype":"something_new","message":{"odd":[1,2]},"model":{"x":1}}`))
	evs := rec.Events()
	if len(evs) != 1 || evs[0].Kind != wire.KindPermissionDecision {
		t.Fatalf("events %+v", evs)
	}
	d := evs[0].Data.(wire.PermissionDecision)
	if d.ToolUseID != "toolu_1" || d.Tool != "Bash" || d.Decision != "deny" || d.DecidedBy != "agent" || !strings.Contains(d.Reason, "denied") {
		t.Fatalf("decision %+v", d)
	}
	b, _ := json.Marshal(d)
	if !strings.Contains(string(b), `"tool_use_id":"toolu_1"`) {
		t.Fatalf("wire form %s", b)
	}
}

// A tool output too large for the model is shown to it as a preview;
// reeve keeps the whole output as evidence beside the session.
func TestClaudeFullOutputKept(t *testing.T) {
	exe := agenttest.Claude(t)
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "counting", Calls: []agenttest.ToolCall{agenttest.Bash("seq 1 200000")}},
		{Text: "done"},
	}})
	state := t.TempDir()
	allow := func(context.Context, agents.ToolUse) agents.Verdict { return agents.Verdict{Allow: true} }
	var rec recorder
	p, err := adapterFor(exe).StartTurn(testContext(t), agents.Turn{Prompt: "go", Model: model, Dir: t.TempDir(), StateDir: state,
		Env: env(srv.URL, t.TempDir()), Hook: &agents.Hook{Command: func(string) string { return "true" }, Timeout: 30 * time.Second, Decide: allow}}, rec.Emit)
	if err != nil {
		t.Fatal(err)
	}
	if res := waitTurn(t, p, 90*time.Second); res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	rs := rec.Of(wire.KindToolResult)
	if len(rs) != 1 {
		t.Fatalf("results %+v", rs)
	}
	r := rs[0].(wire.ToolResult)
	if strings.Contains(r.Output, "\n200000") || r.Evidence == "" || !strings.HasPrefix(r.Evidence, state) {
		t.Fatalf("result %.300s evidence %q", r.Output, r.Evidence)
	}
	b, err := os.ReadFile(r.Evidence)
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(b)), "\n200000") || int64(len(b)) != r.EvidenceBytes {
		t.Fatalf("kept %d bytes (%v), want the whole output", len(b), err)
	}
	if st, _ := os.Stat(r.Evidence); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
}
