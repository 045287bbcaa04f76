package agenttest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const claudeModel = "claude-sonnet-4-5"

// claudeScript: the model runs Bash once, then finishes; a follow-up prompt
// gets turn 2.
func claudeScript() []Turn {
	return []Turn{
		{Text: "I will create the file.", Calls: []ToolCall{Bash("touch made-by-claude.txt")}},
		{Text: "Created made-by-claude.txt."},
		{Text: "Follow-up answered."},
	}
}

func claudeArgs(prompt string, extra ...string) []string {
	return append([]string{"-p", prompt, "--output-format", "stream-json", "--verbose", "--model", claudeModel}, extra...)
}

// checkClaudeBashEvents asserts the stream-json of one claudeScript turn
// in which Bash was allowed to run.
func checkClaudeBashEvents(t *testing.T, events []map[string]any) (sessionID string) {
	t.Helper()
	if len(events) == 0 || str(events[0], "type") != "system" || str(events[0], "subtype") != "init" {
		t.Fatalf("first event is not system/init: %v", events[:min(1, len(events))])
	}
	sessionID = str(events[0], "session_id")
	if sessionID == "" {
		t.Fatal("system/init has no session_id")
	}
	uses := find(events, func(e map[string]any) bool {
		return str(e, "type") == "assistant" && str(e, "message", "content", 0, "type") == "tool_use"
	})
	if len(uses) != 1 {
		t.Fatalf("want 1 assistant tool_use event, got %d", len(uses))
	}
	use := get(uses[0], "message", "content", 0)
	if str(use, "name") != "Bash" || str(use, "input", "command") != "touch made-by-claude.txt" {
		t.Fatalf("tool_use = %v, want Bash touch made-by-claude.txt", use)
	}
	results := find(events, func(e map[string]any) bool {
		return str(e, "type") == "user" && str(e, "message", "content", 0, "type") == "tool_result"
	})
	if len(results) != 1 {
		t.Fatalf("want 1 user tool_result event, got %d", len(results))
	}
	res := get(results[0], "message", "content", 0)
	if str(res, "tool_use_id") != str(use, "id") || get(res, "is_error") != false {
		t.Fatalf("tool_result = %v, want a success for %s", res, str(use, "id"))
	}
	last := events[len(events)-1]
	if str(last, "type") != "result" || str(last, "subtype") != "success" || get(last, "is_error") != false {
		t.Fatalf("last event is not a successful result: %v", last)
	}
	if str(last, "result") != "Created made-by-claude.txt." {
		t.Fatalf("result text = %q", str(last, "result"))
	}
	if str(last, "session_id") != sessionID {
		t.Fatalf("result session_id %q != init %q", str(last, "session_id"), sessionID)
	}
	// Two scripted turns of 100 in / 20 out each.
	if in, out := num(last, "usage", "input_tokens"), num(last, "usage", "output_tokens"); in != 200 || out != 40 {
		t.Fatalf("result usage = %v in / %v out, want 200 / 40", in, out)
	}
	if num(last, "total_cost_usd") <= 0 {
		t.Fatalf("result total_cost_usd = %v, want > 0", get(last, "total_cost_usd"))
	}
	return sessionID
}

// TestClaudeBypass runs Claude Code with --dangerously-skip-permissions:
// the scripted Bash call really runs, the stream-json holds the tool call,
// its result and usage, and --resume continues the same session.
func TestClaudeBypass(t *testing.T) {
	exe := Claude(t)
	srv := NewAnthropicServer(t, AnthropicOptions{Turns: claudeScript()})
	dir, home := t.TempDir(), t.TempDir()
	env := ClaudeEnv(srv.URL, home)

	run := runAgent(t, exe, dir, env, claudeArgs("create made-by-claude.txt", "--dangerously-skip-permissions"))
	mustExist(t, filepath.Join(dir, "made-by-claude.txt"))
	sid := checkClaudeBashEvents(t, run.events)
	if pm := str(run.events[0], "permissionMode"); pm != "bypassPermissions" {
		t.Errorf("init permissionMode = %q, want bypassPermissions", pm)
	}

	main := srv.MainRequests()
	if len(main) != 2 {
		t.Fatalf("want 2 main requests, got %d", len(main))
	}
	if main[0].Query.Get("beta") != "true" {
		t.Errorf("main request query = %q, want beta=true", main[0].Query.Encode())
	}
	results, err := ToolResults(main[1].Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || results[0].ToolUseID != "toolu_agenttest_0_0" || results[0].IsError {
		t.Fatalf("second request tool_results = %+v, want one success for toolu_agenttest_0_0", results)
	}
	checkGolden(t, claudeGolden, run.stdout, map[string]string{dir: "/WORKDIR", home: "/HOME"})

	// A follow-up prompt resumes the transcript under $HOME/.claude; the
	// server sees the full history and serves turn 2.
	run2 := runAgent(t, exe, dir, env, claudeArgs("and now?", "--resume", sid, "--dangerously-skip-permissions"))
	last := run2.events[len(run2.events)-1]
	if str(last, "result") != "Follow-up answered." || str(last, "session_id") != sid {
		t.Fatalf("resumed result = %q in session %q, want %q in %q", str(last, "result"), str(last, "session_id"), "Follow-up answered.", sid)
	}
	main = srv.MainRequests()
	if got := main[len(main)-1].Turn; got != 2 {
		t.Fatalf("resumed request served turn %d, want 2", got)
	}
	checkNoProblems(t, srv.Problems())
}

// TestClaudePreToolUseHook runs Claude Code in its default permission mode
// with a --settings file whose PreToolUse hook decides. This is the
// mechanism the reeve hook bridge uses.
func TestClaudePreToolUseHook(t *testing.T) {
	exe := Claude(t)
	for _, tc := range []struct {
		decision string
		ran      bool
	}{
		{"deny", false},
		{"allow", true},
		// Headless -p has nobody to ask: "ask" ends up refused.
		{"ask", false},
	} {
		t.Run(tc.decision, func(t *testing.T) {
			srv := NewAnthropicServer(t, AnthropicOptions{Turns: claudeScript()})
			dir, home, hooks := t.TempDir(), t.TempDir(), t.TempDir()
			reason := "reeve policy says " + tc.decision
			hook := hookScript(t, hooks, preToolUseReply(tc.decision, reason))
			settings := filepath.Join(t.TempDir(), "settings.json")
			writeJSONFile(t, settings, map[string]any{"hooks": map[string]any{
				"PreToolUse": []any{map[string]any{
					"matcher": "*",
					"hooks":   []any{map[string]any{"type": "command", "command": hook + " PreToolUse"}},
				}},
			}})

			run := runAgent(t, exe, dir, ClaudeEnv(srv.URL, home), claudeArgs("create made-by-claude.txt", "--settings", settings))
			sid := str(run.events[0], "session_id")
			if pm := str(run.events[0], "permissionMode"); pm != "default" {
				t.Errorf("init permissionMode = %q, want default", pm)
			}
			file := filepath.Join(dir, "made-by-claude.txt")
			if tc.ran {
				mustExist(t, file)
			} else {
				mustNotExist(t, file)
			}

			ins := readHookInputs(t, hooks, "PreToolUse")
			if len(ins) != 1 {
				t.Fatalf("PreToolUse hook ran %d times, want 1", len(ins))
			}
			in := ins[0]
			for k, want := range map[string]string{
				"hook_event_name": "PreToolUse", "tool_name": "Bash", "session_id": sid,
				"cwd": dir, "tool_use_id": "toolu_agenttest_0_0",
			} {
				if got := str(in, k); got != want {
					t.Errorf("hook stdin %s = %q, want %q", k, got, want)
				}
			}
			if got := str(in, "tool_input", "command"); got != "touch made-by-claude.txt" {
				t.Errorf("hook stdin tool_input.command = %q", got)
			}
			if tp := str(in, "transcript_path"); !strings.HasPrefix(tp, filepath.Join(home, ".claude", "projects")) {
				t.Errorf("hook stdin transcript_path = %q, want under $HOME/.claude/projects", tp)
			}

			// What the model is told comes back in the next request.
			main := srv.MainRequests()
			if len(main) != 2 {
				t.Fatalf("want 2 main requests, got %d", len(main))
			}
			results, err := ToolResults(main[1].Body)
			if err != nil {
				t.Fatal(err)
			}
			if len(results) != 1 {
				t.Fatalf("tool_results = %+v", results)
			}
			if results[0].IsError == tc.ran {
				t.Errorf("tool_result is_error = %v, want %v (%q)", results[0].IsError, !tc.ran, results[0].Content)
			}
			if !tc.ran && !strings.Contains(results[0].Content, reason) {
				t.Errorf("refused tool_result %q does not carry the hook's reason %q", results[0].Content, reason)
			}
			last := run.events[len(run.events)-1]
			denials, _ := get(last, "permission_denials").([]any)
			if tc.ran != (len(denials) == 0) {
				t.Errorf("result permission_denials = %v", denials)
			}
			checkNoProblems(t, srv.Problems())
		})
	}
}

// TestClaudeDefaultModeRefusesWithoutHook pins down why reeve must either
// bypass or answer through a hook: headless Claude Code with neither
// refuses the Bash call on its own.
func TestClaudeDefaultModeRefusesWithoutHook(t *testing.T) {
	exe := Claude(t)
	srv := NewAnthropicServer(t, AnthropicOptions{Turns: claudeScript()})
	dir := t.TempDir()
	run := runAgent(t, exe, dir, ClaudeEnv(srv.URL, t.TempDir()), claudeArgs("create made-by-claude.txt"))
	mustNotExist(t, filepath.Join(dir, "made-by-claude.txt"))
	last := run.events[len(run.events)-1]
	if denials, _ := get(last, "permission_denials").([]any); len(denials) != 1 {
		t.Fatalf("permission_denials = %v, want the Bash call", get(last, "permission_denials"))
	}
	checkNoProblems(t, srv.Problems())
}

// TestClaudeStreamJSONInput drives two prompts through one process with
// --input-format stream-json, writing the second only after the first
// result, as an adapter would.
func TestClaudeStreamJSONInput(t *testing.T) {
	exe := Claude(t)
	srv := NewAnthropicServer(t, AnthropicOptions{Turns: claudeScript()})
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-p", "--input-format", "stream-json", "--output-format", "stream-json",
		"--verbose", "--model", claudeModel, "--dangerously-skip-permissions")
	cmd.Dir, cmd.Env = dir, ClaudeEnv(srv.URL, t.TempDir())
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	send := func(text string) {
		line, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
		if _, err := stdin.Write(append(line, '\n')); err != nil {
			t.Fatalf("write prompt: %v", err)
		}
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var events []map[string]any
	untilResult := func() map[string]any {
		for sc.Scan() {
			var e map[string]any
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("stdout line is not JSON: %s", sc.Bytes())
			}
			events = append(events, e)
			if str(e, "type") == "result" {
				return e
			}
		}
		t.Fatalf("stdout ended before a result (ctx err %v): %v\nstderr: %s", ctx.Err(), sc.Err(), tail(stderr.String(), 4000))
		return nil
	}

	send("create made-by-claude.txt")
	r1 := untilResult()
	if str(r1, "result") != "Created made-by-claude.txt." {
		t.Fatalf("first result = %q", str(r1, "result"))
	}
	mustExist(t, filepath.Join(dir, "made-by-claude.txt"))
	send("and now?")
	r2 := untilResult()
	if str(r2, "result") != "Follow-up answered." || str(r2, "session_id") != str(r1, "session_id") {
		t.Fatalf("second result = %q in %q, want %q in the same session %q", str(r2, "result"), str(r2, "session_id"), "Follow-up answered.", str(r1, "session_id"))
	}
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	// EOF on stdin ends the process cleanly.
	rest, _ := io.ReadAll(stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("claude after stdin EOF: %v\n%s\nstderr: %s", err, rest, tail(stderr.String(), 4000))
	}
	if inits := find(events, func(e map[string]any) bool { return str(e, "subtype") == "init" }); len(inits) < 1 {
		t.Fatalf("no system/init event")
	}
	checkNoProblems(t, srv.Problems())
}

func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
