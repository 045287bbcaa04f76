package gemini

import (
	"strings"
	"testing"

	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/wire"
)

// Lines a real run does not show: a failed result, a failed tool, an
// error event, a line that is not JSON, and text left at the end.
func TestMapperEdges(t *testing.T) {
	var rec agenttest.Recorder
	m := &mapper{emit: rec.Emit}
	for _, l := range []string{
		`{"type":"init","session_id":"s1","model":"gemini-x"}`,
		`{"type":"message","role":"assistant","content":"part ","delta":true}`,
		`not json`,
		`{"type":"tool_use","tool_name":"write_file","tool_id":"w1","parameters":{"file_path":"a","content":"b"}}`,
		`{"type":"tool_result","tool_id":"w1","status":"error","error":{"type":"x","message":"disk full"}}`,
		`{"type":"error","severity":"warning","message":"loop detected"}`,
		`{"type":"message","role":"assistant","content":"   ","delta":true}`,
		`{"type":"result","status":"error","error":{"type":"FatalTurnLimitedError","message":"turn limit"},"stats":{"input_tokens":7,"output_tokens":3,"cached":2,"models":{"a":{},"b":{}}}}`,
	} {
		m.line([]byte(l))
	}
	rec.CheckTypes(t)
	kinds := strings.Join(rec.Kinds(), " ")
	want := "agent-message error tool-call tool-result error usage error"
	if kinds != want {
		t.Fatalf("kinds %q, want %q", kinds, want)
	}
	if r := rec.Of(wire.KindToolResult)[0].(wire.ToolResult); !r.IsError || r.Output != "disk full" {
		t.Errorf("tool result %+v", r)
	}
	if u := rec.Of(wire.KindUsage)[0].(wire.Usage); u.InputTokens != 7 || u.OutputTokens != 3 || u.CacheReadTokens != 2 || u.Model != "a,b" {
		t.Errorf("usage %+v", u)
	}
	if m.failure == nil || !strings.Contains(m.failure.Error(), "turn limit (error)") || m.sessionID != "s1" {
		t.Errorf("failure %v session %q", m.failure, m.sessionID)
	}
}
