package claude

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/wire"
)

// transcriptUsage sums the usage Claude Code recorded in its own
// transcripts of a session: the main one and its subagents', each
// assistant message once (a message spans several lines, one per block).
func transcriptUsage(t *testing.T, home, sessionID string) (in, out int64) {
	t.Helper()
	mains, _ := filepath.Glob(filepath.Join(home, ".claude", "projects", "*", sessionID+".jsonl"))
	if len(mains) != 1 {
		t.Fatalf("transcripts of %s: %v", sessionID, mains)
	}
	subs, _ := filepath.Glob(filepath.Join(filepath.Dir(mains[0]), sessionID, "subagents", "*.jsonl"))
	type usage struct{ in, out int64 }
	seen := map[string]usage{}
	for _, f := range append(mains, subs...) {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var l struct {
				Type    string `json:"type"`
				Message struct {
					ID    string `json:"id"`
					Usage struct {
						InputTokens  int64 `json:"input_tokens"`
						OutputTokens int64 `json:"output_tokens"`
					} `json:"usage"`
				} `json:"message"`
			}
			if json.Unmarshal(sc.Bytes(), &l) != nil || l.Type != "assistant" || l.Message.ID == "" {
				continue
			}
			seen[filepath.Base(f)+"/"+l.Message.ID] = usage{l.Message.Usage.InputTokens, l.Message.Usage.OutputTokens}
		}
		fh.Close()
	}
	for _, u := range seen {
		in += u.in
		out += u.out
	}
	return in, out
}

// Usage is a per-turn delta, right across resumed turns and subagents:
// over three turns of one session, the second delegating to a subagent,
// each turn's usage events add up to what the agent's own transcripts
// gained in that turn, and the costs add up to the session's total as
// Claude Code reports it.
func TestClaudeUsageIsPerTurnAcrossResumeAndSubagents(t *testing.T) {
	exe := agenttest.Claude(t)
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{
		Turns: []agenttest.Turn{
			{Text: "one", InputTokens: 1000, OutputTokens: 10},
			{Text: "delegating", InputTokens: 2000, OutputTokens: 20, Calls: []agenttest.ToolCall{{Name: "Agent",
				Input: map[string]any{"description": "count files", "prompt": "SUBTASK: count the files", "subagent_type": "general-purpose"}}}},
			{Text: "two", InputTokens: 3000, OutputTokens: 30},
			{Text: "noted the subagent", InputTokens: 4000, OutputTokens: 40},
			{Text: "three", InputTokens: 5000, OutputTokens: 50},
		},
		Subagents: map[string][]agenttest.Turn{"SUBTASK": {
			{Text: "looking", InputTokens: 500, OutputTokens: 5, Calls: []agenttest.ToolCall{agenttest.Bash("ls")}},
			{Text: "no files", InputTokens: 600, OutputTokens: 6},
		}},
	})
	a := adapterFor(exe)
	dir, home, state := t.TempDir(), t.TempDir(), t.TempDir()
	turn := agents.Turn{Model: model, Dir: dir, StateDir: state, Env: env(srv.URL, home)}
	var sumIn, sumOut int64
	var sumCost float64
	var prevIn, prevOut int64
	for i, prompt := range []string{"first", "second", "third"} {
		turn.Prompt = prompt
		rec, res := runTurn(t, a, turn)
		if res.Err != nil {
			t.Fatalf("turn %d: %+v; events %v", i+1, res, rec.Events())
		}
		turn.Resume = res.Resume
		var in, out int64
		for _, e := range rec.Of(wire.KindUsage) {
			u := e.(wire.Usage)
			if u.Model != model || u.CostUSD == nil || *u.CostUSD <= 0 {
				t.Errorf("turn %d: usage %+v", i+1, u)
			}
			in, out = in+u.InputTokens, out+u.OutputTokens
			if u.CostUSD != nil {
				sumCost += *u.CostUSD
			}
		}
		tin, tout := transcriptUsage(t, home, res.AgentSessionID)
		if in != tin-prevIn || out != tout-prevOut {
			t.Errorf("turn %d: usage %d in / %d out; the transcripts gained %d / %d", i+1, in, out, tin-prevIn, tout-prevOut)
		}
		t.Logf("turn %d: %d in / %d out (transcripts %d / %d)", i+1, in, out, tin-prevIn, tout-prevOut)
		prevIn, prevOut = tin, tout
		sumIn, sumOut = sumIn+in, sumOut+out
	}
	// The scripted server's own count of everything it served.
	if sumIn != 1000+2000+3000+4000+5000+500+600 {
		t.Errorf("input tokens over the session %d", sumIn)
	}
	// Claude Code's own session total, from the last result's evidence.
	files, _ := filepath.Glob(filepath.Join(state, "claude-*.jsonl"))
	var total float64
	for _, f := range files {
		for _, line := range readLines(t, f) {
			var r struct {
				Type  string  `json:"type"`
				Total float64 `json:"total_cost_usd"`
			}
			if json.Unmarshal([]byte(line), &r) == nil && r.Type == "result" && r.Total > total {
				total = r.Total
			}
		}
	}
	if total == 0 || math.Abs(sumCost-total) > 1e-9 {
		t.Errorf("costs add up to %v; Claude Code's session total is %v", sumCost, total)
	}
	if p := srv.Problems(); len(p) > 0 {
		t.Errorf("server problems: %v", p)
	}
}
