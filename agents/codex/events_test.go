package codex

import (
	"os"
	"strings"
	"testing"

	"reeve.dev/reeve/agents/ptyrun"
	"reeve.dev/reeve/daemon/wire"
)

func mapLines(lines ...string) (*mapper, *recorder) {
	var rec recorder
	m := &mapper{emit: rec.Emit, model: "gpt-x"}
	for _, l := range lines {
		m.line([]byte(l))
	}
	return m, &rec
}

// The captured output of the pinned Codex (agents/agenttest golden fixture)
// maps onto the expected kinds.
func TestMapGoldenFixture(t *testing.T) {
	b, err := os.ReadFile("../agenttest/testdata/codex-exec.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	m, rec := mapLines(strings.Split(string(b), "\n")...)
	rec.CheckTypes(t)
	if got, want := strings.Join(rec.Kinds(), " "), "agent-message tool-call tool-result agent-message usage"; got != want {
		t.Fatalf("kinds %q, want %q", got, want)
	}
	if m.threadID == "" || !m.completed || m.failure != nil {
		t.Fatalf("state %+v", m)
	}
}

func TestMapFailures(t *testing.T) {
	// A top-level error followed by a completed turn was retried: the turn
	// succeeded.
	m, rec := mapLines(
		`{"type":"thread.started","thread_id":"th"}`,
		`{"type":"error","message":"stream disconnected; retrying"}`,
		`{"type":"turn.completed","usage":{"input_tokens":5,"cached_input_tokens":2,"output_tokens":1}}`,
	)
	if m.failure != nil || !m.completed || m.lastError == "" {
		t.Fatalf("state %+v", m)
	}
	if k := strings.Join(rec.Kinds(), " "); k != "error usage" {
		t.Fatalf("kinds %s", k)
	}
	if u := rec.Of(wire.KindUsage)[0].(wire.Usage); u.CacheReadTokens != 2 || u.Model != "gpt-x" || u.CostUSD != nil {
		t.Fatalf("usage %+v", u)
	}

	m, rec = mapLines(
		`{"type":"thread.started","thread_id":"th"}`,
		`{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}`,
	)
	if m.failure == nil || m.failure.Error() != "codex: unexpected status 401 Unauthorized" {
		t.Fatalf("failure %v", m.failure)
	}
	if e := rec.Of(wire.KindError); len(e) != 1 || e[0].(wire.Error).Message != "unexpected status 401 Unauthorized" {
		t.Fatalf("errors %+v", e)
	}

	// Without turn.completed, the last top-level error is why it failed.
	if res := result(&mapper{threadID: "th", lastError: "quota exceeded"}, "", ptyResultOK()); res.Err == nil || res.Err.Error() != "codex: quota exceeded" || res.Resume != "th" {
		t.Fatalf("result %+v", res)
	}
}

func TestMapOtherItems(t *testing.T) {
	_, rec := mapLines(
		`{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"thinking"}}`,
		`{"type":"item.completed","item":{"id":"item_1","type":"file_change","changes":[{"path":"/w/a.go","kind":"update"},{"path":"/w/b.go","kind":"add"}],"status":"completed"}}`,
		`{"type":"item.started","item":{"id":"item_2","type":"mcp_tool_call","server":"docs","tool":"search","arguments":{"q": "x"},"status":"in_progress"}}`,
		`{"type":"item.completed","item":{"id":"item_2","type":"mcp_tool_call","server":"docs","tool":"search","arguments":{"q":"x"},"result":{"content":[{"type":"text","text":"found"},{"type":"image"}]},"status":"completed"}}`,
		`{"type":"item.started","item":{"id":"item_3","type":"todo_list","items":[{"text":"a","completed":false}]}}`,
		`{"type":"item.updated","item":{"id":"item_3","type":"todo_list","items":[{"text":"a","completed":true}]}}`,
		`{"type":"item.completed","item":{"id":"item_3","type":"todo_list","items":[{"text":"a","completed":true},{"text":"b","completed":false}]}}`,
		`{"type":"item.completed","item":{"id":"item_4","type":"error","message":"model metadata not found"}}`,
		`{"type":"item.completed","item":{"id":"item_5","type":"brand_new_kind","text":"?"}}`,
		`{"type":"item.completed","item":{"id":"item_6","type":"plan","text":"1. do it"}}`,
		`{"type":"request_user_input","id":"t","call_id":"c","questions":[{"id":"q","question":"Which branch?"}]}`,
	)
	rec.CheckTypes(t)
	want := "tool-call tool-result tool-call tool-result tool-call tool-result error agent-message agent-message"
	if got := strings.Join(rec.Kinds(), " "); got != want {
		t.Fatalf("kinds %q, want %q", got, want)
	}
	evs := rec.Events()
	if c := evs[0].Data.(wire.ToolCall); c.Name != "file_change" || !strings.Contains(string(c.Input), "/w/a.go") {
		t.Errorf("file_change call %+v", c)
	}
	if r := evs[1].Data.(wire.ToolResult); r.Output != "update /w/a.go\nadd /w/b.go" || r.IsError {
		t.Errorf("file_change result %+v", r)
	}
	if c := evs[2].Data.(wire.ToolCall); c.Name != "mcp__docs__search" || string(c.Input) != `{"q":"x"}` {
		t.Errorf("mcp call %+v", c)
	}
	if r := evs[3].Data.(wire.ToolResult); r.Output != "found\n[image]" || r.ID != "item_2" {
		t.Errorf("mcp result %+v", r)
	}
	if r := evs[5].Data.(wire.ToolResult); r.Output != "[x] a\n[ ] b" {
		t.Errorf("todo result %+v", r)
	}
	if m := evs[8].Data.(wire.AgentMessage); m.Text != "Which branch?" {
		t.Errorf("question %+v", m)
	}
}

func ptyResultOK() ptyrun.Result { return ptyrun.Result{} }
