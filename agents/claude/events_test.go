package claude

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

func mapLines(lines ...string) (*mapper, *recorder) {
	var rec recorder
	m := &mapper{emit: rec.Emit}
	for _, l := range lines {
		m.line([]byte(l))
	}
	return m, &rec
}

// The captured output of the pinned Claude Code (agents/agenttest golden
// fixture) maps onto the expected kinds.
func TestMapGoldenFixture(t *testing.T) {
	f, err := os.Open("../agenttest/testdata/claude-stream-json.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	m, rec := mapLines(lines...)
	rec.CheckTypes(t)
	want := "agent-message tool-call tool-result agent-message usage"
	if got := strings.Join(rec.Kinds(), " "); got != want {
		t.Fatalf("kinds %q, want %q", got, want)
	}
	if m.sessionID == "" || !m.gotResult || m.failure != nil {
		t.Fatalf("mapper state %+v", m)
	}
}

func TestMapFailedResult(t *testing.T) {
	m, rec := mapLines(
		`{"type":"system","subtype":"init","session_id":"s1","model":"claude-opus-4"}`,
		`{"type":"result","subtype":"error_max_turns","is_error":true,"session_id":"s1","total_cost_usd":0.5,"usage":{"input_tokens":7,"output_tokens":3,"cache_read_input_tokens":11,"cache_creation_input_tokens":13},"modelUsage":{"claude-opus-4":{},"claude-haiku":{}}}`,
	)
	if m.failure == nil || m.failure.Error() != "claude: the turn failed (error_max_turns)" {
		t.Fatalf("failure %v", m.failure)
	}
	evs := rec.Events()
	if len(evs) != 2 || evs[0].Kind != wire.KindUsage || evs[1].Kind != wire.KindError {
		t.Fatalf("events %+v", evs)
	}
	u := evs[0].Data.(wire.Usage)
	if u.Model != "claude-opus-4" || u.InputTokens != 7 || u.OutputTokens != 3 || u.CacheReadTokens != 11 || u.CacheWriteTokens != 13 || *u.CostUSD != 0.5 {
		t.Fatalf("usage %+v", u)
	}

	m, rec = mapLines(`{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500 overloaded","session_id":"s2"}`)
	if m.failure == nil || !strings.Contains(m.failure.Error(), "API Error: 500 overloaded") || m.sessionID != "s2" {
		t.Fatalf("failure %v, session %q", m.failure, m.sessionID)
	}
	if evs := rec.Events(); len(evs) != 1 || evs[0].Data.(wire.Error).Message != "API Error: 500 overloaded" {
		t.Fatalf("events %+v", evs)
	}

	m, _ = mapLines(`{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["tool crashed","then this"]}`)
	if m.failure == nil || m.failure.Error() != "claude: tool crashed; then this (error_during_execution)" {
		t.Fatalf("failure %v", m.failure)
	}
}

func TestMapToleratesOddLines(t *testing.T) {
	m, rec := mapLines(
		``,
		`{"type":"stream_event","event":{"type":"content_block_delta"}}`,
		`{"type":"system","subtype":"hook_started","hook_id":"h"}`,
		`{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"hmm"},{"type":"text","text":"  "}]}}`,
		`{"type":"user","message":{"role":"user","content":"a plain prompt"}}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":[{"type":"text","text":"line one"},{"type":"image","source":{}},{"type":"text","text":"line two"}]}]}}`,
		`not json at all`,
	)
	evs := rec.Events()
	if len(evs) != 2 {
		t.Fatalf("events %+v", evs)
	}
	if r := evs[0].Data.(wire.ToolResult); r.ID != "t1" || !r.IsError || r.Output != "line one\n[image]\nline two" {
		t.Errorf("tool result %+v", r)
	}
	if e := evs[1].Data.(wire.Error); evs[1].Kind != wire.KindError || !strings.Contains(e.Message, "not json at all") {
		t.Errorf("event %+v", evs[1])
	}
	if m.gotResult || m.failure != nil {
		t.Errorf("state %+v", m)
	}
	var _ agents.Emit = rec.Emit
}
