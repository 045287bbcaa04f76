package codex

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/wire"
)

// rolloutCalls sums the per-call usage (last_token_usage of each
// token_count event) Codex recorded in its own rollout file of a thread.
func rolloutCalls(t *testing.T, home, thread string) (in, out int64) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(home, "sessions", "*", "*", "*", "rollout-*-"+thread+".jsonl"))
	if len(files) != 1 {
		t.Fatalf("rollouts of %s: %v", thread, files)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l struct {
			Payload struct {
				Type string `json:"type"`
				Info *struct {
					Last struct {
						InputTokens  int64 `json:"input_tokens"`
						OutputTokens int64 `json:"output_tokens"`
					} `json:"last_token_usage"`
				} `json:"info"`
			} `json:"payload"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Payload.Type == "token_count" && l.Payload.Info != nil {
			in, out = in+l.Payload.Info.Last.InputTokens, out+l.Payload.Info.Last.OutputTokens
		}
	}
	return in, out
}

// Usage is a per-turn delta across resumed turns: Codex reports the
// thread's running total, and over three turns of one thread each turn's
// usage is what its own model calls used, as the server served them and
// as Codex's rollout records them.
func TestCodexUsageIsPerTurnAcrossResume(t *testing.T) {
	exe := agenttest.Codex(t)
	srv := agenttest.NewOpenAIServer(t, agenttest.OpenAIOptions{Turns: []agenttest.Turn{
		{Text: "one", InputTokens: 1000, OutputTokens: 10},
		{Calls: []agenttest.ToolCall{agenttest.ExecCommand("ls")}, InputTokens: 2000, OutputTokens: 20},
		{Text: "two", InputTokens: 3000, OutputTokens: 30},
		{Text: "three", InputTokens: 4000, OutputTokens: 40},
	}})
	home := agenttest.CodexHome(t, agenttest.CodexHomeOptions{BaseURL: srv.URL})
	turn := agents.Turn{Model: "gpt-5.5", Dir: t.TempDir(), StateDir: t.TempDir(), Env: agenttest.CodexEnv(home, t.TempDir())}
	a := adapterFor(exe)
	want := [][2]int64{{1000, 10}, {5000, 50}, {4000, 40}}
	var prevIn, prevOut int64
	for i, prompt := range []string{"first", "second", "third"} {
		turn.Prompt = prompt
		rec, res := runTurn(t, a, turn)
		if res.Err != nil {
			t.Fatalf("turn %d: %+v; events %v", i+1, res, rec.Events())
		}
		turn.Resume = res.Resume
		us := rec.Of(wire.KindUsage)
		if len(us) != 1 {
			t.Fatalf("turn %d: usage events %+v; all %v", i+1, us, rec.Events())
		}
		u := us[0].(wire.Usage)
		rin, rout := rolloutCalls(t, home, res.AgentSessionID)
		if u.InputTokens != want[i][0] || u.OutputTokens != want[i][1] || u.InputTokens != rin-prevIn || u.OutputTokens != rout-prevOut {
			t.Errorf("turn %d: usage %d in / %d out; served %v; the rollout gained %d / %d", i+1, u.InputTokens, u.OutputTokens, want[i], rin-prevIn, rout-prevOut)
		}
		prevIn, prevOut = rin, rout
	}
}

// A resumed turn whose thread's earlier total cannot be read reports no
// usage rather than the thread's whole total, and says why.
func TestCodexUsageUnknownBase(t *testing.T) {
	var rec recorder
	m := &mapper{emit: rec.Emit}
	m.base, m.baseErr = threadTotals(t.TempDir(), "no-such-thread")
	m.line([]byte(`{"type":"turn.completed","usage":{"input_tokens":9000,"output_tokens":90}}`))
	errs := rec.Of(wire.KindError)
	if len(rec.Of(wire.KindUsage)) != 0 || len(errs) != 1 || !strings.Contains(errs[0].(wire.Error).Message, "usage is unknown") {
		t.Fatalf("events %v", rec.Events())
	}
}
