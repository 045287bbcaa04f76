package agenttest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// codexScript: the model runs a command, then finishes; a resumed follow-up
// runs a second command and finishes.
func codexScript() []Turn {
	return []Turn{
		{Text: "I will create the file.", Calls: []ToolCall{ExecCommand("touch made-by-codex.txt")}},
		{Text: "Created made-by-codex.txt."},
		{Calls: []ToolCall{ExecCommand("touch follow-up.txt")}},
		{Text: "Follow-up answered."},
	}
}

// codexExecArgs: `codex exec` runs with approval policy "never" whatever
// the config says, and its default sandbox is read-only, so the command
// fails inside the sandbox unless workspace-write (or danger-full-access,
// or --dangerously-bypass-approvals-and-sandbox) is chosen.
func codexExecArgs(prompt string, extra ...string) []string {
	return append(append([]string{"exec", "--json", "--skip-git-repo-check", "-s", "workspace-write"}, extra...), prompt)
}

// checkCodexExecEvents asserts the JSONL of one turn in which cmd ran.
func checkCodexExecEvents(t *testing.T, events []map[string]any, cmd string) (threadID string) {
	t.Helper()
	types := make([]string, len(events))
	for i, e := range events {
		types[i] = str(e, "type")
		if it := str(e, "item", "type"); it != "" {
			types[i] += "/" + it
		}
	}
	got := strings.Join(types, " ")
	want := "thread.started turn.started item.completed/agent_message item.started/command_execution item.completed/command_execution item.completed/agent_message turn.completed"
	if got != want {
		t.Fatalf("codex event sequence:\n got: %s\nwant: %s", got, want)
	}
	threadID = str(events[0], "thread_id")
	if threadID == "" {
		t.Fatal("thread.started has no thread_id")
	}
	started, done := events[3], events[4]
	if str(started, "item", "id") != str(done, "item", "id") {
		t.Errorf("command item ids differ: %q vs %q", str(started, "item", "id"), str(done, "item", "id"))
	}
	if c := str(done, "item", "command"); !strings.Contains(c, cmd) {
		t.Errorf("command_execution command = %q, want it to contain %q", c, cmd)
	}
	if str(started, "item", "status") != "in_progress" || str(done, "item", "status") != "completed" || num(done, "item", "exit_code") != 0 {
		t.Errorf("command_execution started %v / completed %v", started["item"], done["item"])
	}
	if txt := str(events[5], "item", "text"); txt != "Created made-by-codex.txt." {
		t.Errorf("final agent_message = %q", txt)
	}
	last := events[len(events)-1]
	if in, out := num(last, "usage", "input_tokens"), num(last, "usage", "output_tokens"); in != 200 || out != 40 {
		t.Errorf("turn.completed usage = %v in / %v out, want 200 / 40", in, out)
	}
	return threadID
}

// withoutWarnings drops the `item.completed` items of type "error" that
// Codex uses for warnings (unknown config keys, hook-trust bypass) and
// that do not end the turn. Adapters must treat them as notices.
func withoutWarnings(events []map[string]any) []map[string]any {
	return find(events, func(e map[string]any) bool { return str(e, "item", "type") != "error" })
}

// TestCodexExec runs `codex exec --json`: the scripted exec_command really
// runs, the JSONL has the thread, turn, command and message items and
// usage, and `codex exec resume` continues the same thread.
func TestCodexExec(t *testing.T) {
	exe := Codex(t)
	srv := NewOpenAIServer(t, OpenAIOptions{Turns: codexScript()})
	dir, home := t.TempDir(), t.TempDir()
	codexHome := CodexHome(t, CodexHomeOptions{BaseURL: srv.URL})
	env := CodexEnv(codexHome, home)

	run := runAgent(t, exe, dir, env, codexExecArgs("create made-by-codex.txt"))
	mustExist(t, filepath.Join(dir, "made-by-codex.txt"))
	if w := len(run.events) - len(withoutWarnings(run.events)); w != 0 {
		t.Errorf("%d warning items with a clean config: %s", w, run.stdout)
	}
	tid := checkCodexExecEvents(t, run.events, "touch made-by-codex.txt")
	checkGolden(t, codexGolden, run.stdout, map[string]string{dir: "/WORKDIR", home: "/HOME"})

	main := srv.MainRequests()
	if len(main) != 2 {
		t.Fatalf("want 2 main requests, got %d", len(main))
	}
	input, err := ResponsesInput(main[1].Body)
	if err != nil {
		t.Fatal(err)
	}
	out := lastOfType(input, "function_call_output")
	if out == nil || out.CallID != "call_agenttest_0_0" || !strings.Contains(string(out.Output), "exited with code 0") {
		t.Fatalf("second request's function_call_output = %+v", out)
	}

	// resume has no -s flag; the sandbox comes from config (-c).
	run2 := runAgent(t, exe, dir, env, []string{"exec", "resume", "--json", "--skip-git-repo-check",
		"-c", `sandbox_mode="workspace-write"`, tid, "and now?"})
	mustExist(t, filepath.Join(dir, "follow-up.txt"))
	ev := withoutWarnings(run2.events)
	if str(ev[0], "type") != "thread.started" || str(ev[0], "thread_id") != tid {
		t.Fatalf("resume started %v, want thread.started %s", ev[0], tid)
	}
	last := ev[len(ev)-1]
	msgs := find(ev, func(e map[string]any) bool { return str(e, "item", "type") == "agent_message" })
	if str(last, "type") != "turn.completed" || len(msgs) == 0 || str(msgs[len(msgs)-1], "item", "text") != "Follow-up answered." {
		t.Fatalf("resumed turn events: %s", run2.stdout)
	}
	main = srv.MainRequests()
	if got := main[len(main)-1].Turn; got != 3 {
		t.Fatalf("last resumed request served turn %d, want 3", got)
	}
	checkNoProblems(t, srv.Problems())
}

func lastOfType(items []ResponsesItem, typ string) *ResponsesItem {
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].Type == typ {
			return &items[i]
		}
	}
	return nil
}

// codexHooks is config.toml for a PreToolUse hook.
func codexHooks(hook string) string {
	return fmt.Sprintf(`[[hooks.PreToolUse]]
matcher = "*"
[[hooks.PreToolUse.hooks]]
type = "command"
command = %q
`, hook+" PreToolUse")
}

// TestCodexPreToolUseHook: Codex's hooks (Claude-compatible JSON on stdin
// and out) are its only per-command decision point in exec mode. A deny
// really blocks the command; a hook that is not trusted does not run at
// all unless --dangerously-bypass-hook-trust is given.
func TestCodexPreToolUseHook(t *testing.T) {
	exe := Codex(t)
	for _, tc := range []struct {
		name     string
		decision string
		trust    bool
		ran      bool
		hooked   bool
	}{
		{name: "deny", decision: "deny", trust: true, ran: false, hooked: true},
		{name: "allow", decision: "allow", trust: true, ran: true, hooked: true},
		{name: "untrusted-ignored", decision: "deny", trust: false, ran: true, hooked: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := NewOpenAIServer(t, OpenAIOptions{Turns: codexScript()})
			dir, hooks := t.TempDir(), t.TempDir()
			reason := "reeve policy says " + tc.decision
			hook := hookScript(t, hooks, preToolUseReply(tc.decision, reason))
			codexHome := CodexHome(t, CodexHomeOptions{BaseURL: srv.URL, Extra: codexHooks(hook)})
			var extra []string
			if tc.trust {
				extra = append(extra, "--dangerously-bypass-hook-trust")
			}
			run := runAgent(t, exe, dir, CodexEnv(codexHome, t.TempDir()), codexExecArgs("create made-by-codex.txt", extra...))
			file := filepath.Join(dir, "made-by-codex.txt")
			if tc.ran {
				mustExist(t, file)
			} else {
				mustNotExist(t, file)
			}
			ins := readHookInputs(t, hooks, "PreToolUse")
			if !tc.hooked {
				if len(ins) != 0 {
					t.Fatalf("untrusted hook ran %d times", len(ins))
				}
				return
			}
			if len(ins) != 1 {
				t.Fatalf("PreToolUse hook ran %d times, want 1", len(ins))
			}
			in := ins[0]
			tid := str(withoutWarnings(run.events)[0], "thread_id")
			for k, want := range map[string]string{
				"hook_event_name": "PreToolUse", "tool_name": "Bash", "session_id": tid,
				"cwd": dir, "tool_use_id": "call_agenttest_0_0", "model": DefaultCodexModel,
			} {
				if got := str(in, k); got != want {
					t.Errorf("hook stdin %s = %q, want %q", k, got, want)
				}
			}
			if got := str(in, "tool_input", "command"); got != "touch made-by-codex.txt" {
				t.Errorf("hook stdin tool_input.command = %q", got)
			}
			main := srv.MainRequests()
			input, err := ResponsesInput(main[len(main)-1].Body)
			if err != nil {
				t.Fatal(err)
			}
			out := lastOfType(input, "function_call_output")
			if out == nil {
				t.Fatal("no function_call_output sent back")
			}
			if blocked := strings.Contains(string(out.Output), "blocked by PreToolUse hook"); blocked == tc.ran {
				t.Errorf("function_call_output = %s (ran=%v)", out.Output, tc.ran)
			}
			if !tc.ran && !strings.Contains(string(out.Output), reason) {
				t.Errorf("function_call_output %s lacks the hook's reason", out.Output)
			}
			// A blocked command produces no command_execution items at all.
			cmds := find(run.events, func(e map[string]any) bool { return str(e, "item", "type") == "command_execution" })
			if tc.ran != (len(cmds) > 0) {
				t.Errorf("command_execution items: %d (ran=%v)", len(cmds), tc.ran)
			}
			checkNoProblems(t, srv.Problems())
		})
	}
}

// TestCodexExecIgnoresApprovalPolicy pins down the finding that matters for
// the hook bridge: exec mode runs with approval policy "never" even when
// config asks for "on-request", so a command asking for escalation is
// refused outright and no PermissionRequest hook ever fires.
func TestCodexExecIgnoresApprovalPolicy(t *testing.T) {
	exe := Codex(t)
	srv := NewOpenAIServer(t, OpenAIOptions{Turns: []Turn{
		{Calls: []ToolCall{{Name: "exec_command", Input: map[string]any{
			"cmd": "touch escalated.txt", "sandbox_permissions": "require_escalated", "justification": "needs it",
		}}}},
		{Text: "Done."},
	}})
	dir, hooks := t.TempDir(), t.TempDir()
	hook := hookScript(t, hooks, "")
	extra := `approval_policy = "on-request"
[[hooks.PermissionRequest]]
matcher = "*"
[[hooks.PermissionRequest.hooks]]
type = "command"
command = "` + hook + ` PermissionRequest"
`
	codexHome := CodexHome(t, CodexHomeOptions{BaseURL: srv.URL, Extra: extra})
	runAgent(t, exe, dir, CodexEnv(codexHome, t.TempDir()), codexExecArgs("escalate", "--dangerously-bypass-hook-trust"))
	mustNotExist(t, filepath.Join(dir, "escalated.txt"))
	if ins := readHookInputs(t, hooks, "PermissionRequest"); len(ins) != 0 {
		t.Errorf("PermissionRequest hook ran %d times in exec mode", len(ins))
	}
	main := srv.MainRequests()
	input, err := ResponsesInput(main[len(main)-1].Body)
	if err != nil {
		t.Fatal(err)
	}
	out := lastOfType(input, "function_call_output")
	if out == nil || !strings.Contains(string(out.Output), "approval policy is Never") {
		t.Fatalf("function_call_output = %+v, want the never-policy refusal", out)
	}
	checkNoProblems(t, srv.Problems())
}
