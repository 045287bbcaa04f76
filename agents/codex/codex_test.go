package codex

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/agents/ptyrun"
	"reeve.dev/reeve/daemon/wire"
)

// recorder collects the events a turn emits.
type recorder = agenttest.Recorder

func adapterFor(path string) *Adapter {
	return New(Options{Getenv: func(k string) string {
		if k == EnvPath {
			return path
		}
		return ""
	}})
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func waitTurn(t *testing.T, p agents.Process, within time.Duration) agents.TurnResult {
	t.Helper()
	ch := make(chan agents.TurnResult, 1)
	go func() { ch <- p.Wait() }()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		_ = p.Kill()
		t.Fatalf("turn did not end within %s", within)
		return agents.TurnResult{}
	}
}

func runTurn(t *testing.T, a *Adapter, turn agents.Turn) (*recorder, agents.TurnResult) {
	t.Helper()
	var rec recorder
	p, err := a.StartTurn(testContext(t), turn, rec.Emit)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Input([]byte("x")); !errors.Is(err, agents.ErrNoInput) {
		t.Errorf("Input: %v, want ErrNoInput", err)
	}
	res := waitTurn(t, p, 90*time.Second)
	rec.CheckTypes(t)
	return &rec, res
}

// A real Codex turn: the scripted model runs two commands (one fails), the
// file appears, the events hold messages, calls, results and usage; the
// warning about an unknown model is an error event that does not fail the
// turn; a follow-up resumes the same thread with its history.
func TestCodexTurnAndResume(t *testing.T) {
	exe := agenttest.Codex(t)
	srv := agenttest.NewOpenAIServer(t, agenttest.OpenAIOptions{Turns: []agenttest.Turn{
		{Text: "I will create the file.", Calls: []agenttest.ToolCall{
			agenttest.ExecCommand("touch made-by-codex.txt"),
			agenttest.ExecCommand("ls no-such-file"),
		}},
		{Text: "Created made-by-codex.txt."},
		{Text: "Follow-up answered."},
	}})
	a := adapterFor(exe)
	info := a.Describe(context.Background())
	if !info.Installed || info.Path != exe || info.Version != agenttest.CodexVersion || info.Provider != "openai" ||
		!info.Structured || !info.Resumable || info.Problem != "" {
		t.Fatalf("info %+v", info)
	}

	home := agenttest.CodexHome(t, agenttest.CodexHomeOptions{BaseURL: srv.URL})
	dir, state := t.TempDir(), t.TempDir()
	// A model Codex has no metadata for makes it print a warning item; the
	// leading dash checks the prompt is never taken for a flag.
	const model = "gpt-5.1-codex"
	turn := agents.Turn{Prompt: "-create made-by-codex.txt", Model: model, Dir: dir, StateDir: state,
		Env: agenttest.CodexEnv(home, t.TempDir())}
	rec, res := runTurn(t, a, turn)
	if res.Err != nil || res.ExitCode != 0 {
		t.Fatalf("result %+v; events %+v", res, rec.Events())
	}
	if _, err := os.Stat(filepath.Join(dir, "made-by-codex.txt")); err != nil {
		t.Fatalf("the command did not run: %v", err)
	}
	if res.AgentSessionID == "" || res.Resume != res.AgentSessionID {
		t.Fatalf("result %+v: want the thread id as resume token", res)
	}

	if len(rec.Of(wire.KindError)) == 0 {
		t.Errorf("no warning event for the unknown model; kinds %v", rec.Kinds())
	}
	msgs := rec.Of(wire.KindAgentMessage)
	if len(msgs) != 2 || msgs[0].(wire.AgentMessage).Text != "I will create the file." || msgs[1].(wire.AgentMessage).Text != "Created made-by-codex.txt." {
		t.Errorf("messages %+v", msgs)
	}
	calls, results := rec.Of(wire.KindToolCall), rec.Of(wire.KindToolResult)
	if len(calls) != 2 || len(results) != 2 {
		t.Fatalf("calls %+v results %+v", calls, results)
	}
	byID := map[string]wire.ToolResult{}
	for _, r := range results {
		byID[r.(wire.ToolResult).ID] = r.(wire.ToolResult)
	}
	for _, c := range calls {
		call := c.(wire.ToolCall)
		var input struct{ Command string }
		if call.Name != "command_execution" || json.Unmarshal(call.Input, &input) != nil {
			t.Fatalf("call %+v", call)
		}
		r, ok := byID[call.ID]
		if !ok || r.ExitCode == nil {
			t.Fatalf("no result with an exit code for call %+v: %+v", call, results)
		}
		switch {
		case strings.Contains(input.Command, "touch made-by-codex.txt"):
			if *r.ExitCode != 0 || r.IsError {
				t.Errorf("touch result %+v", r)
			}
		case strings.Contains(input.Command, "ls no-such-file"):
			if *r.ExitCode == 0 || !r.IsError || !strings.Contains(r.Output, "no-such-file") {
				t.Errorf("failing ls result %+v", r)
			}
		default:
			t.Errorf("unexpected command %q", input.Command)
		}
	}
	// Every tool-call comes before its result.
	seen := map[string]bool{}
	for _, ev := range rec.Events() {
		switch d := ev.Data.(type) {
		case wire.ToolCall:
			seen[d.ID] = true
		case wire.ToolResult:
			if !seen[d.ID] {
				t.Errorf("result %s before its call", d.ID)
			}
		}
	}
	usage := rec.Of(wire.KindUsage)
	if len(usage) != 1 {
		t.Fatalf("usage events %+v", usage)
	}
	if u := usage[0].(wire.Usage); u.Model != model || u.InputTokens != 200 || u.OutputTokens != 40 || u.CostUSD != nil {
		t.Errorf("usage %+v", u)
	}
	if k := rec.Kinds(); k[len(k)-1] != wire.KindUsage {
		t.Errorf("kinds %v: usage should come last", k)
	}

	files, _ := filepath.Glob(filepath.Join(state, "codex-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("evidence files %v", files)
	}
	st, _ := os.Stat(files[0])
	b, _ := os.ReadFile(files[0])
	if st.Mode().Perm() != 0o600 || !strings.Contains(string(b), `"method":"thread/started"`) || !strings.Contains(string(b), `"method":"turn/completed"`) {
		t.Errorf("evidence %v: %.300s", st.Mode(), b)
	}

	turn2 := turn
	turn2.Prompt, turn2.Resume = "and now?", res.Resume
	rec2, res2 := runTurn(t, a, turn2)
	if res2.Err != nil || res2.AgentSessionID != res.AgentSessionID {
		t.Fatalf("follow-up result %+v, want thread %s", res2, res.AgentSessionID)
	}
	msgs = rec2.Of(wire.KindAgentMessage)
	if len(msgs) != 1 || msgs[0].(wire.AgentMessage).Text != "Follow-up answered." {
		t.Fatalf("follow-up messages %+v", msgs)
	}
	main := srv.MainRequests()
	last := main[len(main)-1]
	if last.Turn != 2 || !strings.Contains(string(last.Body), "Created made-by-codex.txt.") || !strings.Contains(string(last.Body), "and now?") {
		t.Errorf("follow-up request (turn %d) lacks the history", last.Turn)
	}
	if p := srv.Problems(); len(p) > 0 {
		t.Errorf("server problems: %v", p)
	}
}

func TestCodexKillMidTurn(t *testing.T) {
	exe := agenttest.Codex(t)
	srv := agenttest.NewOpenAIServer(t, agenttest.OpenAIOptions{Turns: []agenttest.Turn{
		{Text: "too late", Delay: time.Minute},
	}})
	home := agenttest.CodexHome(t, agenttest.CodexHomeOptions{BaseURL: srv.URL})
	var rec recorder
	turn := agents.Turn{Prompt: "hello", Dir: t.TempDir(), Env: agenttest.CodexEnv(home, t.TempDir())}
	p, err := adapterFor(exe).StartTurn(testContext(t), turn, rec.Emit)
	if err != nil {
		t.Fatal(err)
	}
	// The command line as launched: the real executable and Args,
	// CODEX_HOME kept, the API key's variable (not an agent's own) left
	// out with the rest of the daemon's environment.
	l := p.(agents.Launcher).Launch()
	if strings.Join(l.Argv, " ") != exe+" "+strings.Join(Args(turn), " ") || !slices.Contains(l.Env, "CODEX_HOME="+home) ||
		strings.Contains(strings.Join(l.Env, " "), agenttest.CodexAPIKeyEnv) {
		t.Fatalf("launch %+v", l)
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(srv.MainRequests()) == 0 {
		if time.Now().After(deadline) {
			p.Kill()
			t.Fatal("codex never asked the model")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	res := waitTurn(t, p, 10*time.Second)
	if !errors.Is(res.Err, ptyrun.ErrKilled) || res.AgentSessionID == "" {
		t.Fatalf("result %+v, want killed with the thread id kept", res)
	}
	if m := rec.Of(wire.KindAgentMessage); len(m) > 0 {
		t.Errorf("messages after kill: %+v", m)
	}
}

func TestCodexCrashAtStart(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "codex")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\necho 'Error: config.toml is broken' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var rec recorder
	_, err := adapterFor(bad).StartTurn(testContext(t), agents.Turn{Prompt: "hi", Dir: t.TempDir()}, rec.Emit)
	if err == nil || !strings.Contains(err.Error(), "the app-server did not start the turn") || !strings.Contains(err.Error(), "Error: config.toml is broken") {
		t.Fatalf("start: %v", err)
	}
	// Governed, the same crash is a decision channel that does not work.
	_, err = adapterFor(bad).StartTurn(testContext(t), agents.Turn{Prompt: "hi", Dir: t.TempDir(),
		Hook: &agents.Hook{Command: func(string) string { return "true" }, Decide: func(context.Context, agents.ToolUse) agents.Verdict { return agents.Verdict{} }}}, rec.Emit)
	if err == nil || !strings.Contains(err.Error(), "the decision channel is not working, so the turn does not start") {
		t.Fatalf("governed start: %v", err)
	}
	// A governed turn without an in-band decision function does not start.
	if _, err := adapterFor(bad).StartTurn(testContext(t), agents.Turn{Prompt: "hi", Hook: &agents.Hook{Command: func(string) string { return "true" }}}, rec.Emit); err == nil {
		t.Fatal("a governed turn started without a decision function")
	}
	missing := adapterFor(filepath.Join(t.TempDir(), "nope"))
	if info := missing.Describe(context.Background()); info.Installed || !strings.Contains(info.Problem, EnvPath) {
		t.Errorf("missing: info %+v", info)
	}
	if _, err := missing.StartTurn(testContext(t), agents.Turn{Prompt: "hi"}, rec.Emit); err == nil {
		t.Error("missing executable started")
	}
}

func TestArgs(t *testing.T) {
	got := strings.Join(Args(agents.Turn{Prompt: "p", Model: "m"}), " ")
	if got != "app-server --listen stdio://" {
		t.Errorf("unguarded turn: %s", got)
	}
	hooked := Args(agents.Turn{Prompt: "p", Hook: &agents.Hook{Command: func(ev string) string { return `'/x y/reeve' hook "` + ev + `"` }, Timeout: 600 * time.Second}})
	joined := strings.Join(hooked, "\n")
	if !strings.Contains(joined, `hooks.PreToolUse=[{matcher="*",hooks=[{type="command",command="'/x y/reeve' hook \"PreToolUse\"",timeout=601}]}]`) {
		t.Errorf("governed turn: %s", joined)
	}
	if strings.Contains(joined, "p") && hooked[len(hooked)-1] == "p" {
		t.Errorf("the prompt is on the command line: %s", joined)
	}
}
