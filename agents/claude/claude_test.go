package claude

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/agents/ptyrun"
	"reeve.dev/reeve/daemon/wire"
)

const model = "claude-sonnet-4-5"

// recorder collects the events a turn emits.
type recorder = agenttest.Recorder

// env is the offline environment minus IS_SANDBOX, which the adapter must
// add itself when running as root.
func env(baseURL, home string) []string {
	var out []string
	for _, kv := range agenttest.ClaudeEnv(baseURL, home) {
		if !strings.HasPrefix(kv, "IS_SANDBOX=") {
			out = append(out, kv)
		}
	}
	return out
}

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

// A real Claude Code turn: the scripted model runs Bash, the file appears,
// and the events hold the message, the call, its result and usage with
// cost. A follow-up turn resumes the same session with its history.
func TestClaudeTurnAndResume(t *testing.T) {
	exe := agenttest.Claude(t)
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "I will create the file.", Calls: []agenttest.ToolCall{agenttest.Bash("touch made-by-claude.txt")}},
		{Text: "Created made-by-claude.txt."},
		{Text: "Follow-up answered."},
	}})
	a := adapterFor(exe)
	info := a.Describe(context.Background())
	if !info.Installed || info.Path != exe || info.Version != agenttest.ClaudeVersion || info.Provider != "anthropic" ||
		!info.Structured || !info.Resumable || info.Problem != "" {
		t.Fatalf("info %+v", info)
	}

	dir, home, state := t.TempDir(), t.TempDir(), t.TempDir()
	// The leading dash checks that the prompt is never taken for a flag.
	turn := agents.Turn{Prompt: "-create made-by-claude.txt", Model: model, Dir: dir, StateDir: state, Env: env(srv.URL, home)}
	rec, res := runTurn(t, a, turn)
	if res.Err != nil || res.ExitCode != 0 {
		t.Fatalf("result %+v; events %v", res, rec.Events())
	}
	if _, err := os.Stat(filepath.Join(dir, "made-by-claude.txt")); err != nil {
		t.Fatalf("the Bash call did not run: %v", err)
	}
	if res.AgentSessionID == "" || res.Resume != res.AgentSessionID {
		t.Fatalf("result %+v: want the session id as resume token", res)
	}
	want := []string{wire.KindAgentMessage, wire.KindToolCall, wire.KindToolResult, wire.KindAgentMessage, wire.KindUsage}
	if got := rec.Kinds(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("kinds %v, want %v", got, want)
	}
	msgs := rec.Of(wire.KindAgentMessage)
	if msgs[0].(wire.AgentMessage).Text != "I will create the file." || msgs[1].(wire.AgentMessage).Text != "Created made-by-claude.txt." {
		t.Errorf("messages %+v", msgs)
	}
	call := rec.Of(wire.KindToolCall)[0].(wire.ToolCall)
	var input struct{ Command string }
	if call.Name != "Bash" || call.ID == "" || json.Unmarshal(call.Input, &input) != nil || input.Command != "touch made-by-claude.txt" {
		t.Errorf("tool call %+v", call)
	}
	result := rec.Of(wire.KindToolResult)[0].(wire.ToolResult)
	if result.ID != call.ID || result.IsError || result.Output == "" {
		t.Errorf("tool result %+v for call %s", result, call.ID)
	}
	u := rec.Of(wire.KindUsage)[0].(wire.Usage)
	if u.Model != model || u.InputTokens != 200 || u.OutputTokens != 40 || u.CostUSD == nil || *u.CostUSD <= 0 {
		t.Errorf("usage %+v (cost %v)", u, u.CostUSD)
	}

	// Evidence: every stdout line, in a private file.
	files, _ := filepath.Glob(filepath.Join(state, "claude-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("evidence files %v", files)
	}
	st, _ := os.Stat(files[0])
	if st.Mode().Perm() != 0o600 {
		t.Errorf("evidence mode %v", st.Mode())
	}
	lines := readLines(t, files[0])
	// The handshake's answer comes first, then system/init.
	if len(lines) < 7 || !strings.Contains(lines[0], `"request_id":"reeve-initialize"`) || !strings.Contains(lines[1], `"subtype":"init"`) || !strings.Contains(lines[len(lines)-1], `"type":"result"`) {
		t.Errorf("evidence has %d lines: %.200q", len(lines), lines)
	}
	// Running as root without IS_SANDBOX in the turn's env still bypassed.
	if !strings.Contains(lines[1], `"permissionMode":"bypassPermissions"`) {
		t.Errorf("init line %.300s: want bypassPermissions", lines[1])
	}

	// The follow-up resumes the session: same id, and the model saw the
	// earlier turn.
	turn2 := turn
	turn2.Prompt, turn2.Resume = "and now?", res.Resume
	rec2, res2 := runTurn(t, a, turn2)
	if res2.Err != nil || res2.AgentSessionID != res.AgentSessionID || res2.Resume != res.Resume {
		t.Fatalf("follow-up result %+v, want session %s", res2, res.AgentSessionID)
	}
	msgs = rec2.Of(wire.KindAgentMessage)
	if len(msgs) != 1 || msgs[0].(wire.AgentMessage).Text != "Follow-up answered." {
		t.Fatalf("follow-up messages %+v", msgs)
	}
	main := srv.MainRequests()
	last := main[len(main)-1]
	if last.Turn != 2 || !strings.Contains(string(last.Body), "Created made-by-claude.txt.") || !strings.Contains(string(last.Body), "and now?") {
		t.Errorf("follow-up request (turn %d) lacks the history", last.Turn)
	}
	if p := srv.Problems(); len(p) > 0 {
		t.Errorf("server problems: %v", p)
	}
	if files, _ := filepath.Glob(filepath.Join(state, "claude-*.jsonl")); len(files) != 2 {
		t.Errorf("want one evidence file per turn, got %v", files)
	}
}

// Kill in the middle of a turn (the model is slow to answer) ends Wait
// promptly, with an error that says it was killed.
func TestClaudeKillMidTurn(t *testing.T) {
	exe := agenttest.Claude(t)
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "too late", Delay: time.Minute},
	}})
	a := adapterFor(exe)
	var rec recorder
	p, err := a.StartTurn(testContext(t), agents.Turn{Prompt: "hello", Model: model, Dir: t.TempDir(), Env: env(srv.URL, t.TempDir())}, rec.Emit)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(srv.MainRequests()) == 0 {
		if time.Now().After(deadline) {
			p.Kill()
			t.Fatal("claude never asked the model")
		}
		time.Sleep(50 * time.Millisecond)
	}
	killed := time.Now()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	res := waitTurn(t, p, 10*time.Second)
	if !errors.Is(res.Err, ptyrun.ErrKilled) {
		t.Fatalf("result %+v, want killed", res)
	}
	if res.AgentSessionID == "" {
		t.Errorf("the session id from system/init was lost: %+v", res)
	}
	t.Logf("Wait returned %s after Kill", time.Since(killed))
	for _, m := range rec.Of(wire.KindAgentMessage) {
		t.Errorf("message after kill: %+v", m)
	}
}

// An executable that crashes at start gives an error that says what it
// printed.
func TestClaudeCrashAtStart(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "claude")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\necho 'fatal: cannot load config' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := adapterFor(bad)
	if info := a.Describe(context.Background()); !info.Installed || info.Problem == "" {
		t.Errorf("info %+v: want installed with a problem (--version fails)", info)
	}
	var rec recorder
	// The control channel's handshake is the check at launch: a program
	// that dies first does not get a turn, and the error says what it
	// printed.
	_, err := a.StartTurn(testContext(t), agents.Turn{Prompt: "hi", Dir: t.TempDir()}, rec.Emit)
	if err == nil || !strings.Contains(err.Error(), "permission channel is not working") || !strings.Contains(err.Error(), "fatal: cannot load config") {
		t.Fatalf("start error %v", err)
	}

	missing := adapterFor(filepath.Join(t.TempDir(), "nope"))
	if info := missing.Describe(context.Background()); info.Installed || !strings.Contains(info.Problem, EnvPath) {
		t.Errorf("missing: info %+v", info)
	}
	if _, err := missing.StartTurn(testContext(t), agents.Turn{Prompt: "hi"}, rec.Emit); err == nil || !strings.Contains(err.Error(), EnvPath) {
		t.Errorf("missing: start error %v", err)
	}
	onPath := New(Options{Getenv: func(string) string { return "" }, LookPath: func(string) (string, error) { return "", errors.New("not found") }})
	if info := onPath.Describe(context.Background()); info.Installed || !strings.Contains(info.Problem, "not installed") {
		t.Errorf("not on PATH: info %+v", info)
	}
	if _, err := a.StartTurn(testContext(t), agents.Turn{Prompt: "hi", Hook: &agents.Hook{Command: func(string) string { return "true" }, Decide: denyAll}}, rec.Emit); err == nil {
		t.Error("a governed turn without a state directory started")
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
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
	return lines
}

func denyAll(context.Context, agents.ToolUse) agents.Verdict {
	return agents.Verdict{Reason: "test denies"}
}
