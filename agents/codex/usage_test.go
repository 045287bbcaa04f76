package codex

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
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

// The usage of a turn is the thread's final total less its total before
// the turn, which the first token-usage notification gives (its total less
// its last call), whatever earlier turns used.
func TestUsageFromNotifications(t *testing.T) {
	var rec recorder
	m := newMapper(rec.Emit, "gpt-x", "", "")
	for _, l := range []string{
		`{"method":"thread/tokenUsage/updated","params":{"turnId":"T0","tokenUsage":{"total":{"inputTokens":9000,"outputTokens":90,"cachedInputTokens":5},"last":{"inputTokens":9000,"outputTokens":90,"cachedInputTokens":5}}}}`,
		`{"method":"turn/started","params":{"turn":{"id":"T1"}}}`,
		`{"method":"thread/tokenUsage/updated","params":{"turnId":"T1","tokenUsage":{"total":{"inputTokens":9100,"outputTokens":91,"cachedInputTokens":5},"last":{"inputTokens":100,"outputTokens":1,"cachedInputTokens":0}}}}`,
		`{"method":"thread/tokenUsage/updated","params":{"turnId":"T1","tokenUsage":{"total":{"inputTokens":9300,"outputTokens":94,"cachedInputTokens":7},"last":{"inputTokens":200,"outputTokens":3,"cachedInputTokens":2}}}}`,
		`{"method":"turn/completed","params":{"turn":{"status":"completed"}}}`,
	} {
		m.notify([]byte(l))
	}
	us := rec.Of(wire.KindUsage)
	if len(us) != 1 {
		t.Fatalf("events %v", rec.Events())
	}
	if u := us[0].(wire.Usage); u.InputTokens != 300 || u.OutputTokens != 4 || u.CacheReadTokens != 2 || u.Model != "gpt-x" {
		t.Fatalf("usage %+v", u)
	}
	if !m.completed || m.failure != nil {
		t.Fatalf("state %+v", m)
	}
}
