package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/wire"
)

// logEvents reads a session's whole log through `reeve logs --json`.
func (h *daemonHome) logEvents(sid string, extra ...string) []wire.SessionUpdate {
	h.t.Helper()
	r := h.must(append([]string{"logs", sid, "--json"}, extra...)...)
	return parseUpdates(h.t, r.stdout)
}

func parseUpdates(t *testing.T, out string) []wire.SessionUpdate {
	t.Helper()
	var evs []wire.SessionUpdate
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var u wire.SessionUpdate
		if err := json.Unmarshal(sc.Bytes(), &u); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		if u.Type == wire.TypeSessionUpdate {
			evs = append(evs, u)
		}
	}
	return evs
}

func kinds(evs []wire.SessionUpdate) map[string]int {
	m := map[string]int{}
	for _, e := range evs {
		m[e.Kind]++
	}
	return m
}

func findEvent(evs []wire.SessionUpdate, kind string, match func(json.RawMessage) bool) bool {
	for _, e := range evs {
		if e.Kind == kind && match(e.Data) {
			return true
		}
	}
	return false
}

func contains(sub string) func(json.RawMessage) bool {
	return func(d json.RawMessage) bool { return strings.Contains(string(d), sub) }
}

func (h *daemonHome) sessionInfo(out string) wire.SessionInfo {
	h.t.Helper()
	var si wire.SessionInfo
	if err := json.Unmarshal([]byte(out), &si); err != nil || si.ID == "" {
		h.t.Fatalf("session JSON: %v %q", err, out)
	}
	return si
}

func (h *daemonHome) manifest(sid string) wire.Manifest {
	h.t.Helper()
	var m wire.Manifest
	r := h.must("session", "manifest", "--session", sid, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		h.t.Fatal(err)
	}
	return m
}

func checkSeqs(t *testing.T, evs []wire.SessionUpdate) {
	t.Helper()
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
}

func TestClaudeSessionThroughDaemon(t *testing.T) {
	exe := agenttest.Claude(t)
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "I will create the file.", Calls: []agenttest.ToolCall{agenttest.Bash("touch made-by-claude.txt")}},
		{Text: "Created made-by-claude.txt."},
		{Text: "Second turn answered."},
	}})
	agentHome := t.TempDir()
	h := newHome(t)
	h.env = append(agenttest.ClaudeEnv(srv.URL, agentHome), "REEVE_CLAUDE_PATH="+exe)
	h.start()
	work := t.TempDir()

	r := h.must("run", work, "--agent", "claude", "--model", "claude-sonnet-4-5", "--mode", "bypass", "--prompt", "create made-by-claude.txt", "--wait", "--json")
	si := h.sessionInfo(r.stdout)
	if si.Status != "completed" {
		t.Fatalf("session ended %s: %s", si.Status, si.StatusReason)
	}
	if _, err := os.Stat(filepath.Join(work, "made-by-claude.txt")); err != nil {
		t.Fatalf("the tool did not really run: %v", err)
	}
	evs := h.logEvents(si.ID)
	checkSeqs(t, evs)
	if !findEvent(evs, wire.KindUserPrompt, contains("create made-by-claude.txt")) ||
		!findEvent(evs, wire.KindAgentMessage, contains("I will create the file.")) ||
		!findEvent(evs, wire.KindToolCall, contains(`"name":"Bash"`)) ||
		!findEvent(evs, wire.KindToolResult, contains(`"is_error":false`)) ||
		!findEvent(evs, wire.KindUsage, contains(`"input_tokens":200`)) ||
		!findEvent(evs, wire.KindUsage, contains(`"cost_usd"`)) {
		t.Fatalf("log is missing events; kinds %v", kinds(evs))
	}
	m := h.manifest(si.ID)
	if m.Provider != "anthropic" || m.Agent != "claude" || m.AgentVersion == "" || m.Model != "claude-sonnet-4-5" ||
		m.AgentSessionID == "" || !m.Guarded || m.PermissionMode != "bypass" || m.Directory == "" || m.Turns != 1 ||
		len(m.Approvals) != 1 || m.Approvals[0].DecidedBy != "mode:bypass" || m.Approvals[0].Tool != "Bash" {
		t.Fatalf("manifest: %+v", m)
	}

	// A follow-up prompt resumes the same Claude Code session.
	h.must("send", si.ID, "--prompt", "and now?")
	if r := h.run("wait", si.ID, "--timeout", "60"); r.code != 0 {
		t.Fatalf("wait after send: %d %s", r.code, r.stderr)
	}
	evs = h.logEvents(si.ID)
	if !findEvent(evs, wire.KindAgentMessage, contains("Second turn answered.")) {
		t.Fatalf("follow-up answer missing; kinds %v", kinds(evs))
	}
	// Each turn's command line is on the record as the daemon ran it: the
	// real executable, the resumed session the second time, the API key
	// masked.
	var launches []wire.Launch
	for _, e := range evs {
		if e.Kind == wire.KindLaunch {
			var l wire.Launch
			json.Unmarshal(e.Data, &l)
			launches = append(launches, l)
			if strings.Contains(string(e.Data), "agenttest") {
				t.Fatalf("the API key left in the launch: %s", e.Data)
			}
		}
	}
	if len(launches) != 2 || launches[0].Argv[0] != exe || launches[0].Turn != 1 || launches[1].Turn != 2 ||
		!strings.Contains(strings.Join(launches[1].Argv, " "), "--resume "+m.AgentSessionID) ||
		!strings.Contains(strings.Join(launches[0].Env, " "), "ANTHROPIC_API_KEY=[redacted]") {
		t.Fatalf("launches %+v", launches)
	}
	if m2 := h.manifest(si.ID); m2.AgentSessionID != m.AgentSessionID || m2.Turns != 2 {
		t.Fatalf("follow-up did not resume the same session: %+v", m2)
	}
	if p := srv.Problems(); len(p) > 0 {
		t.Fatalf("model server problems: %v", p)
	}

	// A session Claude Code ran outside reeve is discovered; reeve's own is not.
	outside := exec.Command(exe, "-p", "hello from outside", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions")
	outside.Dir, outside.Env = t.TempDir(), agenttest.ClaudeEnv(srv.URL, agentHome)
	if out, err := outside.CombinedOutput(); err != nil {
		t.Fatalf("claude outside reeve: %v\n%s", err, out)
	}
	r = h.must("ls", "--scope", "DISCOVERED", "--json")
	var ls struct {
		Discovered []wire.DiscoveredInfo `json:"discovered"`
	}
	json.Unmarshal([]byte(r.stdout), &ls)
	found := false
	for _, d := range ls.Discovered {
		if d.ID == m.AgentSessionID {
			t.Errorf("reeve's own session is listed as discovered")
		}
		found = found || (d.Agent == "claude" && d.Directory == outside.Dir)
	}
	if !found {
		t.Fatalf("outside session not discovered: %s", r.stdout)
	}
}

func TestClaudeSessionKilledMidRun(t *testing.T) {
	exe := agenttest.Claude(t)
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "thinking for a long time", Delay: 60 * time.Second},
	}})
	h := newHome(t)
	h.env = append(agenttest.ClaudeEnv(srv.URL, t.TempDir()), "REEVE_CLAUDE_PATH="+exe)
	h.start()
	sid := strings.TrimSpace(h.must("run", t.TempDir(), "--agent", "claude", "--prompt", "take your time").stdout)
	waitFor(t, "the model request", 30*time.Second, func() bool { return len(srv.MainRequests()) > 0 })
	h.must("session", "stop", sid)
	r := h.run("wait", sid, "--timeout", "30", "--json")
	if r.code != 10 || h.sessionInfo(r.stdout).Status != "killed" {
		t.Fatalf("wait on killed session: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := h.run("session", "stop", sid); r.code != 5 {
		t.Errorf("stopping an ended session: exit %d %s", r.code, r.stderr)
	}
}

func TestCodexSessionThroughDaemon(t *testing.T) {
	exe := agenttest.Codex(t)
	srv := agenttest.NewOpenAIServer(t, agenttest.OpenAIOptions{Turns: []agenttest.Turn{
		{Text: "Creating it.", Calls: []agenttest.ToolCall{agenttest.ExecCommand("touch made-by-codex.txt")}},
		{Text: "Done."},
		{Text: "Follow-up done."},
		{Text: "slow", Delay: 60 * time.Second},
	}})
	codexHome := agenttest.CodexHome(t, agenttest.CodexHomeOptions{BaseURL: srv.URL})
	h := newHome(t)
	h.env = append(agenttest.CodexEnv(codexHome, t.TempDir()), "REEVE_CODEX_PATH="+exe)
	h.start()
	work := t.TempDir()
	r := h.must("run", work, "--agent", "codex", "--mode", "bypass", "--prompt", "create made-by-codex.txt", "--wait", "--json")
	si := h.sessionInfo(r.stdout)
	if si.Status != "completed" {
		t.Fatalf("session ended %s: %s", si.Status, si.StatusReason)
	}
	if _, err := os.Stat(filepath.Join(work, "made-by-codex.txt")); err != nil {
		t.Fatalf("the command did not really run: %v", err)
	}
	evs := h.logEvents(si.ID)
	checkSeqs(t, evs)
	if !findEvent(evs, wire.KindAgentMessage, contains("Creating it.")) ||
		!findEvent(evs, wire.KindToolCall, contains("made-by-codex.txt")) ||
		!findEvent(evs, wire.KindToolResult, contains(`"exit_code":0`)) ||
		!findEvent(evs, wire.KindUsage, contains(`"output_tokens":40`)) {
		t.Fatalf("log is missing events; kinds %v", kinds(evs))
	}
	m := h.manifest(si.ID)
	if m.Provider != "openai" || m.Agent != "codex" || m.AgentSessionID == "" || !m.Resumable {
		t.Fatalf("manifest: %+v", m)
	}
	h.must("send", si.ID, "--prompt", "once more")
	if r := h.run("wait", si.ID, "--timeout", "60"); r.code != 0 {
		t.Fatalf("wait after send: %d %s", r.code, r.stderr)
	}
	if evs := h.logEvents(si.ID); !findEvent(evs, wire.KindAgentMessage, contains("Follow-up done.")) {
		t.Fatalf("follow-up answer missing; kinds %v", kinds(evs))
	}
	if m2 := h.manifest(si.ID); m2.AgentSessionID != m.AgentSessionID {
		t.Fatalf("resume changed the thread: %s then %s", m.AgentSessionID, m2.AgentSessionID)
	}

	// Kill a turn mid-run: the slow fourth turn.
	h.must("send", si.ID, "--prompt", "slowly now")
	waitFor(t, "the slow request", 30*time.Second, func() bool { return len(srv.MainRequests()) >= 4 })
	h.must("session", "stop", si.ID)
	if r := h.run("wait", si.ID, "--timeout", "30"); r.code != 10 {
		t.Fatalf("wait on killed session: exit %d %s", r.code, r.stderr)
	}
}

// The live stream and a later replay of the same log are identical, from
// the start and from any seq.
func TestReplayEqualsLiveStream(t *testing.T) {
	h := newHome(t)
	h.start()
	r := h.must("run", t.TempDir(), "--agent", "shell", "--prompt", "for i in $(seq 1 3000); do echo line $i; done", "--attach", "--json")
	live := parseUpdates(t, r.stdout)
	if len(live) < 5 {
		t.Fatalf("live stream too short: %d", len(live))
	}
	checkSeqs(t, live)
	sid := live[0].SessionID
	replay := h.logEvents(sid)
	if len(replay) != len(live) {
		t.Fatalf("replay has %d events, live had %d", len(replay), len(live))
	}
	for i := range live {
		a, _ := json.Marshal(live[i])
		b, _ := json.Marshal(replay[i])
		if string(a) != string(b) {
			t.Fatalf("event %d differs:\nlive   %s\nreplay %s", i, a, b)
		}
	}
	n := int64(len(live) / 2)
	tail := h.logEvents(sid, "--last-seq", itoa(n))
	if len(tail) != len(live)-int(n) || tail[0].Seq != n+1 {
		t.Fatalf("--last-seq %d gave %d events starting at %d", n, len(tail), tail[0].Seq)
	}
	// The same through the follower.
	followed := parseUpdates(t, h.must("logs", sid, "--follow", "--last-seq", itoa(n), "--json").stdout)
	if len(followed) != len(tail) {
		t.Fatalf("follow replay: %d events, want %d", len(followed), len(tail))
	}
	var text strings.Builder
	for _, e := range live {
		if e.Kind == wire.KindTerminalOutput {
			var d wire.TerminalOutput
			json.Unmarshal(e.Data, &d)
			text.WriteString(d.Text)
		}
	}
	if !strings.Contains(text.String(), "line 1\r\n") || !strings.Contains(text.String(), "line 3000") {
		t.Fatalf("terminal output incomplete (%d bytes)", text.Len())
	}
}

func TestWorkerCrashInterruptsSession(t *testing.T) {
	h := newHome(t)
	h.start()
	sid := strings.TrimSpace(h.must("run", t.TempDir(), "--agent", "shell", "--prompt", "echo started-work; sleep 120").stdout)
	waitFor(t, "the session's output", 30*time.Second, func() bool {
		return findEvent(h.logEvents(sid), wire.KindTerminalOutput, contains("started-work"))
	})
	before := h.logEvents(sid)
	st, _ := h.status()
	syscall.Kill(st.Health.WorkerPID, syscall.SIGKILL)
	waitFor(t, "a new worker", 30*time.Second, func() bool {
		st2, code := h.status()
		return code == 0 && st2.Health.WorkerPID != st.Health.WorkerPID
	})
	r := h.must("ls", "--json")
	var ls struct{ Sessions []wire.SessionInfo }
	json.Unmarshal([]byte(r.stdout), &ls)
	if len(ls.Sessions) != 1 || ls.Sessions[0].Status != "interrupted" || ls.Sessions[0].StatusReason == "" {
		t.Fatalf("after the crash: %+v", ls.Sessions)
	}
	after := h.logEvents(sid)
	if len(after) < len(before) {
		t.Fatalf("events lost: %d before, %d after", len(before), len(after))
	}
	for i := range before {
		if before[i].Seq != after[i].Seq || string(before[i].Data) != string(after[i].Data) {
			t.Fatalf("event %d changed", i)
		}
	}
	if !findEvent(after, wire.KindStatus, contains("interrupted")) {
		t.Errorf("no interrupted status event in the log")
	}
	if r := h.run("wait", sid, "--timeout", "10"); r.code != 10 {
		t.Errorf("wait on interrupted session: exit %d", r.code)
	}
}

func TestSessionBadInput(t *testing.T) {
	h := newHome(t)
	crasher := filepath.Join(t.TempDir(), "claude")
	os.WriteFile(crasher, []byte("#!/bin/sh\nif [ \"$1\" = --version ]; then echo '9.9.9 (Claude Code)'; exit 0; fi\necho 'cannot start' >&2\nexit 1\n"), 0o700)
	h.env = append(os.Environ(), "REEVE_CLAUDE_PATH="+crasher, "REEVE_CUSTOM_AGENT_COMMAND=/bin/cat", "REEVE_CUSTOM_AGENT_ID=cat")
	r := h.run("run", t.TempDir(), "--agent", "shell", "--prompt", "true")
	if r.code != 0 || !strings.Contains(r.stderr, "starting one") {
		t.Fatalf("run without a daemon: exit %d %q", r.code, r.stderr)
	}
	work := t.TempDir()
	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"unknown agent", []string{"run", work, "--agent", "nope", "--prompt", "x"}, 2, "available: claude, codex, gemini, shell, cat"},
		{"missing directory", []string{"run", filepath.Join(work, "gone"), "--prompt", "x"}, 4, "does not exist"},
		{"missing prompt", []string{"run", work}, 2, "prompt"},
		{"empty prompt", []string{"run", work, "--prompt", ""}, 2, "prompt"},
		{"unknown session: logs", []string{"logs", "NOPE"}, 4, "no session"},
		{"unknown session: follow", []string{"logs", "NOPE", "--follow"}, 4, "no session"},
		{"unknown session: wait", []string{"wait", "NOPE"}, 4, "no session"},
		{"unknown session: send", []string{"send", "NOPE", "--prompt", "x"}, 4, "no session"},
		{"unknown session: stop", []string{"session", "stop", "NOPE"}, 4, "no session"},
		{"unknown session: manifest", []string{"session", "manifest", "--session", "NOPE"}, 4, "no session"},
		{"bad scope", []string{"ls", "--scope", "SOME"}, 2, "scope"},
		{"bad format", []string{"ls", "--format", "{{.Nope"}, 2, "format"},
	}
	for _, c := range cases {
		r := h.run(c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%s: exit %d, stderr %q", c.name, r.code, r.stderr)
		}
	}

	// An agent that crashes at start ends its session failed, with why: the
	// run is refused before any prompt is sent (its permission channel never
	// answered), exits 10 and names the session it recorded as failed.
	r = h.run("run", work, "--agent", "claude", "--prompt", "x", "--wait", "--json")
	if r.code != 10 || !strings.Contains(r.stderr, "cannot start") {
		t.Fatalf("crashing agent: exit %d %q", r.code, r.stderr)
	}
	m := regexp.MustCompile(`session (\w+): agent claude could not start`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("crashing agent: no session named in %q", r.stderr)
	}
	failed := h.sessionInfoOf(m[1])
	if failed.Status != "failed" || !findEvent(h.logEvents(failed.ID), wire.KindError, contains("cannot start")) {
		t.Fatalf("crashing agent's session: %+v", failed)
	}

	// send to an ended session of an agent that cannot resume.
	sid := strings.TrimSpace(h.must("run", work, "--agent", "cat", "--prompt", "hello").stdout)
	h.must("session", "stop", sid)
	h.run("wait", sid, "--timeout", "10")
	if r := h.run("send", sid, "--prompt", "again"); r.code != 5 || !strings.Contains(r.stderr, "cannot resume") {
		t.Fatalf("send to ended custom session: exit %d %q", r.code, r.stderr)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// ls --format works on every line when agents' own sessions are
// discovered beside reeve's: every field the help names, for both kinds.
func TestLsFormatWithDiscoveredSessions(t *testing.T) {
	userHome := t.TempDir()
	claudeProject := filepath.Join(userHome, ".claude", "projects", "-src-web")
	os.MkdirAll(claudeProject, 0o700)
	os.WriteFile(filepath.Join(claudeProject, "c0ffee00-1111-2222-3333-444455556666.jsonl"),
		[]byte(`{"type":"user","sessionId":"c0ffee00-1111-2222-3333-444455556666","cwd":"/src/web","timestamp":"2026-01-02T03:04:05Z","message":{"role":"user","content":"Fix the login bug"}}`+"\n"), 0o600)
	codexDay := filepath.Join(userHome, ".codex", "sessions", "2026", "01", "03")
	os.MkdirAll(codexDay, 0o700)
	os.WriteFile(filepath.Join(codexDay, "rollout-2026-01-03T10-00-00-0199aaaa-bbbb-cccc-dddd-eeeeffff0000.jsonl"),
		[]byte(`{"timestamp":"2026-01-03T10:00:00Z","type":"session_meta","payload":{"id":"0199aaaa-bbbb-cccc-dddd-eeeeffff0000","timestamp":"2026-01-03T10:00:00Z","cwd":"/src/api"}}`+"\n"+
			`{"timestamp":"2026-01-03T10:00:01Z","type":"event_msg","payload":{"type":"user_message","message":"Add a README"}}`+"\n"), 0o600)
	h := newHome(t)
	h.env = append(os.Environ(), "HOME="+userHome, "CODEX_HOME="+filepath.Join(userHome, ".codex"))
	h.start()
	sid := strings.TrimSpace(h.must("run", t.TempDir(), "--agent", "shell", "--prompt", "echo hi", "--wait").stdout)

	r := h.must("ls", "--format", "{{.ID}} {{.Status}}")
	for _, want := range []string{sid + " completed\n", "c0ffee00-1111-2222-3333-444455556666 discovered\n", "0199aaaa-bbbb-cccc-dddd-eeeeffff0000 discovered\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("ls --format lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := h.must("ls", "--format", "{{.Prompt}}"); !strings.Contains(r.stdout, "Fix the login bug") || !strings.Contains(r.stdout, "echo hi") {
		t.Fatalf("{{.Prompt}}:\n%s", r.stdout)
	}
	help := h.must("ls", "--help").stdout
	for _, field := range []string{"Kind", "ID", "Agent", "Status", "StatusReason", "Directory", "DirectoryID", "Workdir", "Model", "Prompt", "Title", "Path", "CreatedAt", "StartedAt", "UpdatedAt", "EndedAt", "LastSeq"} {
		if !strings.Contains(help, field) {
			t.Errorf("the help does not name %s", field)
		}
		r := h.run("ls", "--format", "{{."+field+"}}")
		if r.code != 0 || strings.Count(r.stdout, "\n") < 3 {
			t.Errorf("{{.%s}}: exit %d, %q %q", field, r.code, r.stdout, r.stderr)
		}
	}
}
