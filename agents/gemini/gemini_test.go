package gemini

import (
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

const model = "gemini-2.5-pro"

func adapterFor(path string) *Adapter {
	return New(Options{Getenv: func(k string) string {
		if k == EnvPath {
			return path
		}
		return ""
	}})
}

// setup starts a scripted server and a home whose settings select API-key
// auth, and returns the environment of a turn.
func setup(t *testing.T, turns []agenttest.Turn) (*agenttest.GeminiServer, []string) {
	t.Helper()
	srv := agenttest.NewGeminiServer(t, agenttest.GeminiOptions{Turns: turns})
	home := t.TempDir()
	if err := agenttest.GeminiHome(home, nil); err != nil {
		t.Fatal(err)
	}
	return srv, agenttest.GeminiEnv(srv.URL, home)
}

func runTurn(t *testing.T, a *Adapter, turn agents.Turn) (*agenttest.Recorder, agents.TurnResult) {
	t.Helper()
	var rec agenttest.Recorder
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	p, err := a.StartTurn(ctx, turn, rec.Emit)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Input([]byte("x")); !errors.Is(err, agents.ErrNoInput) {
		t.Errorf("Input: %v, want ErrNoInput", err)
	}
	res := p.Wait()
	rec.CheckTypes(t)
	return &rec, res
}

// A real Gemini CLI turn: the scripted model runs a shell command, the
// file appears, and the events hold the message, the call, its result and
// the run's usage. The next turn resumes the same session with its
// history, and its usage is its own.
func TestGeminiTurnAndResume(t *testing.T) {
	exe := agenttest.Gemini(t)
	srv, env := setup(t, []agenttest.Turn{
		{Text: "I will create the file.", Calls: []agenttest.ToolCall{agenttest.RunShell("touch made-by-gemini.txt")}},
		{Text: "Created made-by-gemini.txt.", InputTokens: 300, OutputTokens: 30},
		{Text: "Follow-up answered.", InputTokens: 1000, OutputTokens: 7},
	})
	a := adapterFor(exe)
	info := a.Describe(context.Background())
	if !info.Installed || info.Version != agenttest.GeminiVersion || info.Provider != "google" || !info.Structured || !info.Resumable || info.Problem != "" {
		t.Fatalf("info %+v", info)
	}
	dir := t.TempDir()
	turn := agents.Turn{Prompt: "-create made-by-gemini.txt", Model: model, Dir: dir, StateDir: t.TempDir(), Env: env}
	rec, res := runTurn(t, a, turn)
	if res.Err != nil || res.ExitCode != 0 {
		t.Fatalf("result %+v; events %v", res, rec.Events())
	}
	if _, err := os.Stat(filepath.Join(dir, "made-by-gemini.txt")); err != nil {
		t.Fatalf("the shell call did not run: %v", err)
	}
	if res.AgentSessionID == "" || res.Resume != res.AgentSessionID {
		t.Fatalf("result %+v: want the session id as resume token", res)
	}
	want := []string{wire.KindAgentMessage, wire.KindToolCall, wire.KindToolResult, wire.KindAgentMessage, wire.KindUsage}
	if got := rec.Kinds(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("kinds %v, want %v", got, want)
	}
	msgs := rec.Of(wire.KindAgentMessage)
	if msgs[0].(wire.AgentMessage).Text != "I will create the file." || msgs[1].(wire.AgentMessage).Text != "Created made-by-gemini.txt." {
		t.Errorf("messages %+v", msgs)
	}
	call := rec.Of(wire.KindToolCall)[0].(wire.ToolCall)
	result := rec.Of(wire.KindToolResult)[0].(wire.ToolResult)
	var in struct{ Command string }
	json.Unmarshal(call.Input, &in)
	if call.Name != "run_shell_command" || in.Command != "touch made-by-gemini.txt" || call.ID == "" || result.ID != call.ID || result.IsError {
		t.Errorf("call %+v result %+v", call, result)
	}
	if u := rec.Of(wire.KindUsage)[0].(wire.Usage); u.InputTokens != 400 || u.OutputTokens != 50 || u.Model != model || u.CostUSD != nil {
		t.Errorf("usage %+v, want this run's 100+300 in, 20+30 out", u)
	}

	turn.Prompt, turn.Resume = "and now?", res.Resume
	rec2, res2 := runTurn(t, a, turn)
	if res2.Err != nil || res2.AgentSessionID != res.AgentSessionID {
		t.Fatalf("resumed result %+v (first session %s); events %v", res2, res.AgentSessionID, rec2.Events())
	}
	if m := rec2.Of(wire.KindAgentMessage); len(m) != 1 || m[0].(wire.AgentMessage).Text != "Follow-up answered." {
		t.Fatalf("resumed messages %+v", m)
	}
	if u := rec2.Of(wire.KindUsage)[0].(wire.Usage); u.InputTokens != 1000 || u.OutputTokens != 7 {
		t.Errorf("resumed usage %+v, want only this turn's 1000 / 7", u)
	}
	main := srv.MainRequests()
	last, err := agenttest.GeminiContents(main[len(main)-1].Body)
	if err != nil {
		t.Fatal(err)
	}
	history, _ := json.Marshal(last)
	if !strings.Contains(string(history), "touch made-by-gemini.txt") || !strings.Contains(string(history), "and now?") {
		t.Fatalf("the resumed request lacks the history: %.600s", history)
	}
	if p := srv.Problems(); len(p) > 0 {
		t.Fatalf("server problems: %v", p)
	}
}

// hookScript writes a hook program that records its stdin and answers as
// the body says, standing in for `reeve hook`.
func hookScript(t *testing.T, dir, body string) string {
	t.Helper()
	path := filepath.Join(dir, "hook.sh")
	script := "#!/bin/sh\nin=$(cat)\nprintf '%s\\n' \"$in\" >> " + filepath.Join(dir, "hook.log") + "\n" + body + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// A governed turn: every tool use passes reeve's BeforeTool hook, which
// sees the tool and its input; a deny really blocks, an allow lets it run.
// Whatever else becomes of the hook (it fails, it is missing, it exits 1
// with text, which Gemini CLI reads as "allow with a warning"), the tool
// does not run.
func TestGeminiBeforeToolHookDecides(t *testing.T) {
	exe := agenttest.Gemini(t)
	cases := []struct {
		name     string
		body     string // the hook's answer; "" for a missing hook program
		wantRuns bool
	}{
		{"allow", `echo '{"decision":"allow"}'`, true},
		{"deny", `echo '{"decision":"deny","reason":"not on this project"}'`, false},
		{"fails-with-text", `echo "reeve exploded" >&2; exit 1`, false},
		{"prints-garbage-and-fails", `echo '{"decision":"al'; exit 3`, false},
		{"missing", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, env := setup(t, []agenttest.Turn{
				{Text: "Creating.", Calls: []agenttest.ToolCall{agenttest.RunShell("touch governed.txt")}},
				{Text: "Finished."},
			})
			dir, state, hooks := t.TempDir(), t.TempDir(), t.TempDir()
			cmd := "/nonexistent/reeve hook"
			if c.body != "" {
				cmd = hookScript(t, hooks, c.body)
			}
			hook := &agents.Hook{Timeout: 30 * time.Second, Command: func(event string) string {
				if event != "BeforeTool" {
					return "true"
				}
				return cmd
			}}
			rec, res := runTurn(t, adapterFor(exe), agents.Turn{Prompt: "create it", Model: model, Dir: dir, StateDir: state, Env: env, Hook: hook})
			if res.Err != nil {
				t.Fatalf("result %+v; events %v", res, rec.Events())
			}
			_, err := os.Stat(filepath.Join(dir, "governed.txt"))
			if ran := err == nil; ran != c.wantRuns {
				t.Fatalf("the command ran: %v, want %v; events %v", ran, c.wantRuns, rec.Events())
			}
			results := rec.Of(wire.KindToolResult)
			if len(results) != 1 || results[0].(wire.ToolResult).IsError == c.wantRuns {
				t.Fatalf("tool results %+v", results)
			}
			if c.body == "" {
				return
			}
			log, _ := os.ReadFile(filepath.Join(hooks, "hook.log"))
			var in struct {
				HookEventName string                   `json:"hook_event_name"`
				ToolName      string                   `json:"tool_name"`
				ToolInput     struct{ Command string } `json:"tool_input"`
				SessionID     string                   `json:"session_id"`
			}
			if err := json.Unmarshal([]byte(strings.SplitN(string(log), "\n", 2)[0]), &in); err != nil ||
				in.HookEventName != "BeforeTool" || in.ToolName != "run_shell_command" || in.ToolInput.Command != "touch governed.txt" || in.SessionID != res.AgentSessionID {
				t.Fatalf("hook input %+v (%v): %s", in, err, log)
			}
			if c.name == "deny" && !strings.Contains(results[0].(wire.ToolResult).Output, "not on this project") {
				t.Errorf("the reason did not reach the result: %+v", results[0])
			}
		})
	}
}

// Killing a Gemini CLI turn while its shell command runs ends it and what
// it sent into its own session; nothing they would write appears.
func TestGeminiKillEndsCommands(t *testing.T) {
	exe := agenttest.Gemini(t)
	cmd := `(setsid sh -c 'sleep 4; echo late > escaped.txt' &); echo started > started.txt; sleep 4; echo late > late.txt`
	_, env := setup(t, []agenttest.Turn{
		{Text: "Running.", Calls: []agenttest.ToolCall{agenttest.RunShell(cmd)}},
		{Text: "Done."},
	})
	dir := t.TempDir()
	var rec agenttest.Recorder
	p, err := adapterFor(exe).StartTurn(context.Background(), agents.Turn{Prompt: "go", Model: model, Dir: dir, StateDir: t.TempDir(), Env: env}, rec.Emit)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "started.txt")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = p.Kill()
			t.Fatalf("the command did not start; events %v", rec.Kinds())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the escapee is on its way
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if res := p.Wait(); !errors.Is(res.Err, ptyrun.ErrKilled) {
		t.Fatalf("result %+v", res)
	}
	time.Sleep(5 * time.Second)
	for _, f := range []string{"late.txt", "escaped.txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s was written after the turn was killed", f)
		}
	}
}

// The command line of a real turn, as the daemon records it: the program
// and the arguments Args gave, in order, with the prompt (which Gemini
// CLI takes as an argument) replaced by its digest, and of the
// environment only Gemini's configuration, its API key masked.
func TestGeminiLaunchIsRecordedWithoutSecrets(t *testing.T) {
	exe := agenttest.Gemini(t)
	srv, env := setup(t, []agenttest.Turn{{Text: "Done."}})
	a := adapterFor(exe)
	turn := agents.Turn{Prompt: "deploy with token ghp_0123456789abcdefghijABCD", Model: model, Dir: t.TempDir(), StateDir: t.TempDir(), Env: env}
	var rec agenttest.Recorder
	p, err := a.StartTurn(context.Background(), turn, rec.Emit)
	if err != nil {
		t.Fatal(err)
	}
	res := p.Wait()
	if res.Err != nil {
		t.Fatalf("turn: %+v", res)
	}
	l := p.(agents.Launcher).Launch()
	args := Args(turn)
	if len(l.Argv) != len(args)+1 || l.Argv[0] != exe {
		t.Fatalf("argv %q, args %q", l.Argv, args)
	}
	for i, a := range args {
		want := a
		if strings.HasSuffix(a, turn.Prompt) {
			want = strings.TrimSuffix(a, turn.Prompt) + "[prompt sha256:"
		}
		if !strings.HasPrefix(l.Argv[i+1], want) {
			t.Fatalf("argv[%d] = %q, want %q", i+1, l.Argv[i+1], want)
		}
	}
	envs := strings.Join(l.Env, " ")
	if !strings.Contains(envs, "GEMINI_API_KEY=[redacted]") || !strings.Contains(envs, "GOOGLE_GEMINI_BASE_URL="+srv.URL) || strings.Contains(envs, "HOME=") {
		t.Fatalf("env %q", l.Env)
	}
	if all, _ := json.Marshal(l); strings.Contains(string(all), "ghp_") || strings.Contains(string(all), "agenttest") {
		t.Fatalf("a secret left in %s", all)
	}
}
