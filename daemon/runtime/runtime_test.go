package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/control"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/runtime"
	"reeve.dev/reeve/daemon/runtime/runtimetest"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/hookbridge"
	"reeve.dev/reeve/hookbridge/hookprog"
	"reeve.dev/reeve/hookbridge/policy"
)

// fixture is a session manager over a real SQLite store in a temporary
// home, driving a scripted agent.
type fixture struct {
	t       *testing.T
	ctx     context.Context
	st      *store.Store
	home    home.Dir
	dir     store.Directory
	agent   *runtimetest.Adapter
	mgr     *runtime.Manager
	opts    runtime.ManagerOptions
	notices chan control.Notice
}

func newFixture(t *testing.T, change func(*runtime.ManagerOptions)) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &fixture{t: t, ctx: ctx, home: home.Dir(t.TempDir()), agent: &runtimetest.Adapter{}, notices: make(chan control.Notice, 64)}
	st, err := store.Open(ctx, store.Options{Path: filepath.Join(string(f.home), "reeve.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f.st = st
	if f.dir, _, err = st.AddDirectory(ctx, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	f.opts = runtime.ManagerOptions{Store: st, Agents: &runtimetest.Registry{Adapters: []agents.Adapter{f.agent}}, Home: f.home}
	if change != nil {
		change(&f.opts)
	}
	f.mgr = f.newManager()
	return f
}

// newManager opens a manager on the fixture's store, as a (re)started
// worker does.
func (f *fixture) newManager() *runtime.Manager {
	f.t.Helper()
	m, err := runtime.NewManager(f.ctx, f.opts)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(m.Close)
	m.OnNotice(func(n control.Notice) {
		select {
		case f.notices <- n:
		default:
		}
	})
	return m
}

func (f *fixture) launch(prompt string) wire.SessionInfo {
	f.t.Helper()
	si, err := f.mgr.Launch(f.ctx, wire.LaunchRequest{Directory: f.dir.ID, Prompt: prompt})
	if err != nil {
		f.t.Fatalf("launch: %v", err)
	}
	return si
}

func (f *fixture) events(sid string) []store.Event {
	f.t.Helper()
	evs, err := f.st.Events(f.ctx, sid, 0, 10000)
	if err != nil {
		f.t.Fatal(err)
	}
	return evs
}

func (f *fixture) waitStatus(sid string, want store.Status) store.Session {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := f.st.Session(f.ctx, sid)
		if err == nil && s.Status == want {
			return s
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("session %s is %s (%v), want %s", sid, s.Status, err, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) manifest(sid string) wire.Manifest {
	f.t.Helper()
	m, err := f.mgr.Manifest(f.ctx, sid)
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

// kinds lists the kinds of events, with the status of status events.
func kinds(evs []store.Event) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		k := e.Kind
		if k == wire.KindStatus {
			var s wire.Status
			json.Unmarshal(e.Data, &s)
			k += ":" + s.Status
		}
		out = append(out, k)
	}
	return out
}

func code(err error) string {
	var ce interface{ ErrorCode() string }
	if errors.As(err, &ce) {
		return ce.ErrorCode()
	}
	return ""
}

// blockingTurns makes every turn run until the test ends it, handing each
// process to procs.
func (f *fixture) blockingTurns() chan *runtimetest.Process {
	procs := make(chan *runtimetest.Process, 16)
	f.agent.StartTurnFunc = func(_ context.Context, _ agents.Turn, _ agents.Emit) (agents.Process, error) {
		p := runtimetest.NewProcess()
		procs <- p
		return p, nil
	}
	f.t.Cleanup(func() {
		close(procs)
		for p := range procs {
			p.Kill()
		}
	})
	return procs
}

// A turn persists what the agent emits between the prompt and the end,
// records how it ended in the log and the manifest, and the next prompt
// resumes it with the agent's token.
func TestTurnsAreRecordedAndResumed(t *testing.T) {
	f := newFixture(t, nil)
	var turns []agents.Turn
	var mu sync.Mutex
	f.agent.StartTurnFunc = func(_ context.Context, turn agents.Turn, emit agents.Emit) (agents.Process, error) {
		mu.Lock()
		turns = append(turns, turn)
		n := len(turns)
		mu.Unlock()
		p := runtimetest.NewProcess()
		go func() {
			emit(agents.Event{Kind: wire.KindAgentMessage, Data: wire.AgentMessage{Text: "hello " + turn.Prompt}})
			emit(agents.Event{Kind: wire.KindToolCall, Data: wire.ToolCall{ID: "t1", Name: "Bash", Input: json.RawMessage(`{"command":"ls"}`)}})
			p.End(agents.TurnResult{Resume: "resume-" + string(rune('0'+n)), AgentSessionID: "agent-session"})
		}()
		return p, nil
	}
	si := f.launch("first")
	if si.Agent != "fake" || si.Status != string(store.StatusRunning) {
		t.Fatalf("launched %+v", si)
	}
	select {
	case n := <-f.notices:
		if started, ok := n.Frame.(wire.SessionStarted); !ok || started.Session.ID != si.ID || n.SessionID != "" {
			t.Fatalf("notice %+v", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no session-started notice")
	}
	f.waitStatus(si.ID, store.StatusCompleted)
	want := []string{wire.KindUserPrompt, "status:running", wire.KindAgentMessage, wire.KindToolCall, "status:completed"}
	if got := kinds(f.events(si.ID)); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v, want %v", got, want)
	}
	mf := f.manifest(si.ID)
	if mf.Turns != 1 || mf.ResumeToken != "resume-1" || mf.AgentSessionID != "agent-session" || mf.Isolation != wire.IsolationInPlace {
		t.Fatalf("manifest after one turn: %+v", mf)
	}

	if err := f.mgr.Prompt(f.ctx, wire.PromptRequest{SessionID: si.ID, Text: "second"}); err != nil {
		t.Fatalf("resume: %v", err)
	}
	f.waitStatus(si.ID, store.StatusCompleted)
	waitFor(t, "the second turn's end in the manifest", func() bool { return f.manifest(si.ID).Turns == 2 })
	mu.Lock()
	defer mu.Unlock()
	if len(turns) != 2 || turns[0].Resume != "" || turns[1].Resume != "resume-1" || turns[1].Prompt != "second" || turns[1].Dir != si.Workdir {
		t.Fatalf("turns %+v", turns)
	}
	evs := f.events(si.ID)
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
}

// A turn whose agent fails, or cannot start, ends failed with an error
// event saying why; a launch of an agent that is not installed is refused
// before anything is created.
func TestFailedTurns(t *testing.T) {
	f := newFixture(t, nil)
	f.agent.StartTurnFunc = func(context.Context, agents.Turn, agents.Emit) (agents.Process, error) {
		p := runtimetest.NewProcess()
		p.End(agents.TurnResult{ExitCode: 2, Err: errors.New("model overloaded")})
		return p, nil
	}
	si := f.launch("x")
	s := f.waitStatus(si.ID, store.StatusFailed)
	if s.StatusReason != "model overloaded" {
		t.Fatalf("reason %q", s.StatusReason)
	}
	if got := kinds(f.events(si.ID)); !strings.Contains(strings.Join(got, " "), wire.KindError+" status:failed") {
		t.Fatalf("events %v", got)
	}

	f.agent.StartTurnFunc = func(context.Context, agents.Turn, agents.Emit) (agents.Process, error) {
		return nil, errors.New("exec: no such file")
	}
	_, err := f.mgr.Launch(f.ctx, wire.LaunchRequest{Directory: f.dir.Path, Prompt: "y"})
	if code(err) != wire.CodeLaunchFailed || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("start failure: %v", err)
	}

	f.agent.DescribeFunc = func(context.Context) agents.Info { return agents.Info{ID: "fake", Problem: "not on PATH"} }
	before, _ := f.st.ListSessions(f.ctx, store.SessionFilter{})
	_, err = f.mgr.Launch(f.ctx, wire.LaunchRequest{Directory: f.dir.ID, Prompt: "z"})
	if code(err) != wire.CodeAgentMissing || !strings.Contains(err.Error(), "not on PATH") {
		t.Fatalf("missing agent: %v", err)
	}
	after, _ := f.st.ListSessions(f.ctx, store.SessionFilter{})
	if len(after) != len(before) {
		t.Fatalf("a refused launch created a session")
	}
	f.agent.DescribeFunc = nil
	for _, c := range []struct {
		req  wire.LaunchRequest
		code string
	}{
		{wire.LaunchRequest{Directory: f.dir.ID}, wire.CodeBadFrame},
		{wire.LaunchRequest{Directory: "/no/such/dir", Prompt: "p"}, wire.CodeNotFound},
		{wire.LaunchRequest{Directory: f.dir.ID, Prompt: "p", Agent: "nope"}, wire.CodeUnknownAgent},
		{wire.LaunchRequest{Directory: f.dir.ID, Prompt: "p", Mode: "yolo"}, wire.CodeInvalidMode},
	} {
		if _, err := f.mgr.Launch(f.ctx, c.req); code(err) != c.code {
			t.Errorf("launch %+v: %v, want %s", c.req, err, c.code)
		}
	}
}

// Kill ends a running turn as killed; a session that runs nothing cannot
// be killed; a kill that arrives while the agent is still starting ends it
// as soon as it exists.
func TestKill(t *testing.T) {
	f := newFixture(t, nil)
	procs := f.blockingTurns()
	si := f.launch("long")
	p := <-procs
	if err := f.mgr.Kill(f.ctx, wire.KillRequest{SessionID: si.ID}); err != nil {
		t.Fatal(err)
	}
	s := f.waitStatus(si.ID, store.StatusKilled)
	if !p.Killed() || s.StatusReason != "killed by request" {
		t.Fatalf("killed %v, reason %q", p.Killed(), s.StatusReason)
	}
	if err := f.mgr.Kill(f.ctx, wire.KillRequest{SessionID: si.ID}); code(err) != wire.CodeNotRunning {
		t.Fatalf("second kill: %v", err)
	}
	if err := f.mgr.Kill(f.ctx, wire.KillRequest{SessionID: "nope"}); code(err) != wire.CodeNotFound {
		t.Fatalf("kill of no session: %v", err)
	}

	// Kill while StartTurn is still running.
	entered, proceed := make(chan string), make(chan struct{})
	slow := runtimetest.NewProcess()
	f.agent.StartTurnFunc = func(_ context.Context, turn agents.Turn, _ agents.Emit) (agents.Process, error) {
		entered <- turn.SessionID
		<-proceed
		return slow, nil
	}
	launched := make(chan wire.SessionInfo, 1)
	go func() { launched <- f.launch("slow start") }()
	sid := <-entered
	if err := f.mgr.Kill(f.ctx, wire.KillRequest{SessionID: sid}); err != nil {
		t.Fatalf("kill while starting: %v", err)
	}
	close(proceed)
	<-launched
	f.waitStatus(sid, store.StatusKilled)
	if !slow.Killed() {
		t.Fatal("the process that started after the kill still runs")
	}
}

// A worker that dies with turns running leaves them running in the store;
// the next worker marks them interrupted, saying why in the log. A worker
// that stops gracefully interrupts its own turns.
func TestInterruptsOnRestart(t *testing.T) {
	f := newFixture(t, nil)
	procs := f.blockingTurns()
	si := f.launch("will be cut off")
	<-procs
	// The first manager is abandoned as a crashed worker would be: never
	// closed. A new one opens the same store.
	f.mgr = f.newManager()
	s := f.waitStatus(si.ID, store.StatusInterrupted)
	if !strings.Contains(s.StatusReason, "worker stopped") {
		t.Fatalf("reason %q", s.StatusReason)
	}
	evs := f.events(si.ID)
	last := evs[len(evs)-1]
	var st wire.Status
	json.Unmarshal(last.Data, &st)
	if last.Kind != wire.KindStatus || st.Status != string(store.StatusInterrupted) {
		t.Fatalf("last event %+v", last)
	}

	si2 := f.launch("graceful stop")
	p2 := <-procs
	f.mgr.Close()
	if !p2.Killed() {
		t.Fatal("Close left the turn running")
	}
	s = f.waitStatus(si2.ID, store.StatusInterrupted)
	if !strings.Contains(s.StatusReason, "daemon stopped") {
		t.Fatalf("reason %q", s.StatusReason)
	}
	if _, err := f.mgr.Launch(f.ctx, wire.LaunchRequest{Directory: f.dir.ID, Prompt: "p"}); code(err) != wire.CodeShuttingDown {
		t.Fatalf("launch after Close: %v", err)
	}
}

// Of many prompts racing for an ended session, exactly one starts a turn;
// the others are refused as busy.
func TestPromptsRaceForOneTurn(t *testing.T) {
	f := newFixture(t, nil)
	var started atomic.Int32
	procs := make(chan *runtimetest.Process, 64)
	f.agent.StartTurnFunc = func(_ context.Context, turn agents.Turn, _ agents.Emit) (agents.Process, error) {
		p := runtimetest.NewProcess()
		if started.Add(1) == 1 {
			p.End(agents.TurnResult{Resume: "r"})
		} else {
			procs <- p
		}
		return p, nil
	}
	t.Cleanup(func() {
		close(procs)
		for p := range procs {
			p.Kill()
		}
	})
	si := f.launch("first")
	f.waitStatus(si.ID, store.StatusCompleted)
	waitFor(t, "the resume token", func() bool { return f.manifest(si.ID).ResumeToken == "r" })

	var ok, busy atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := f.mgr.Prompt(f.ctx, wire.PromptRequest{SessionID: si.ID, Text: "again"})
			switch code(err) {
			case "":
				if err == nil {
					ok.Add(1)
				}
			case wire.CodeBusy:
				busy.Add(1)
			default:
				t.Errorf("prompt: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 1 || busy.Load() != 49 || started.Load() != 2 {
		t.Fatalf("%d prompts started a turn, %d were busy, %d turns started", ok.Load(), busy.Load(), started.Load())
	}
}

// A prompt to a running terminal agent is typed into it and recorded.
func TestPromptTypedIntoRunningTerminal(t *testing.T) {
	f := newFixture(t, nil)
	var typed []byte
	var mu sync.Mutex
	procs := make(chan *runtimetest.Process, 1)
	f.agent.StartTurnFunc = func(context.Context, agents.Turn, agents.Emit) (agents.Process, error) {
		p := runtimetest.NewProcess()
		p.InputFunc = func(b []byte) error { mu.Lock(); typed = append(typed, b...); mu.Unlock(); return nil }
		procs <- p
		return p, nil
	}
	si := f.launch("sh")
	p := <-procs
	defer p.Kill()
	if err := f.mgr.Prompt(f.ctx, wire.PromptRequest{SessionID: si.ID, Text: "echo hi"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := string(typed)
	mu.Unlock()
	if got != "echo hi\r" {
		t.Fatalf("typed %q", got)
	}
	if ks := kinds(f.events(si.ID)); ks[len(ks)-1] != wire.KindUserPrompt {
		t.Fatalf("events %v", ks)
	}
	if err := f.mgr.Prompt(f.ctx, wire.PromptRequest{SessionID: si.ID, Text: " "}); code(err) != wire.CodeBadFrame {
		t.Fatalf("empty prompt: %v", err)
	}
}

func hookInput(agentSession, event, tool, input string) []byte {
	b, _ := json.Marshal(map[string]any{"session_id": agentSession, "hook_event_name": event, "tool_name": tool, "tool_input": json.RawMessage(input), "tool_use_id": "tu1"})
	return b
}

// The permission flow: a tool use the policy does not decide waits for a
// human in detect mode (the session says waiting-permission, followers get
// a notice), the first decision wins and is recorded in the log and the
// manifest; a policy rule decides before the mode; bypass allows; a hook
// from another agent session is refused.
func TestPermissionFlow(t *testing.T) {
	f := newFixture(t, func(o *runtime.ManagerOptions) {
		o.HookProgram = hookProgram(t)
		o.Policy = func(_ policy.Source, req policy.Request) hookbridge.PolicyVerdict {
			if req.Tool == "Delete" {
				return hookbridge.PolicyVerdict{Action: hookbridge.PolicyDeny, Rule: "no-delete", Reason: "never delete"}
			}
			return hookbridge.PolicyVerdict{}
		}
	})
	procs := f.blockingTurns()
	si := f.launch("use tools")
	defer func() { (<-procs).Kill() }()
	if mf := f.manifest(si.ID); !mf.Guarded || mf.PermissionMode != hookbridge.ModeDetect {
		t.Fatalf("manifest %+v", mf)
	}
	for len(f.notices) > 0 {
		<-f.notices
	}

	answered := make(chan wire.HookAnswer, 1)
	go func() {
		ans, err := f.mgr.Hook(f.ctx, si.ID, hookInput("as-1", "PreToolUse", "Bash", `{"command":"rm -rf build"}`))
		if err != nil {
			t.Error(err)
		}
		answered <- ans
	}()
	var req wire.PermissionRequest
	select {
	case n := <-f.notices:
		hr, ok := n.Frame.(wire.HookPermissionRequest)
		if !ok || n.SessionID != si.ID {
			t.Fatalf("notice %+v", n)
		}
		req = hr.Request
	case <-time.After(10 * time.Second):
		t.Fatal("no permission-request notice")
	}
	if p := f.mgr.Pending(si.ID); len(p) != 1 || p[0].ID != req.ID || p[0].Tool != "Bash" {
		t.Fatalf("pending %+v", p)
	}
	f.waitStatus(si.ID, store.StatusWaitingPermission)
	d, err := f.mgr.RespondPermission(f.ctx, wire.RespondPermissionRequest{RequestID: req.ID, Decision: hookbridge.Allow, Reason: "fine"})
	if err != nil || d.Decision != hookbridge.Allow || d.DecidedBy != "human" {
		t.Fatalf("respond: %+v %v", d, err)
	}
	if _, err := f.mgr.RespondPermission(f.ctx, wire.RespondPermissionRequest{RequestID: req.ID, Decision: hookbridge.Deny}); code(err) != wire.CodeAlreadyDecided {
		t.Fatalf("second decision: %v", err)
	}
	if _, err := f.mgr.RespondPermission(f.ctx, wire.RespondPermissionRequest{RequestID: "nope", Decision: hookbridge.Deny}); code(err) != wire.CodeUnknownRequest {
		t.Fatalf("unknown request: %v", err)
	}
	if ans := <-answered; ans.Decision != hookbridge.Allow || ans.DecidedBy != "human" {
		t.Fatalf("hook answer %+v", ans)
	}
	f.waitStatus(si.ID, store.StatusRunning)

	// The policy decides first.
	ans, err := f.mgr.Hook(f.ctx, si.ID, hookInput("as-1", "PreToolUse", "Delete", `{}`))
	if err != nil || ans.Decision != hookbridge.Deny || ans.DecidedBy != "policy:no-delete" {
		t.Fatalf("policy answer %+v %v", ans, err)
	}
	// Bypass allows without asking.
	if err := f.mgr.SetMode(f.ctx, wire.SetModeRequest{SessionID: si.ID, Mode: hookbridge.ModeBypass}); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.SetMode(f.ctx, wire.SetModeRequest{SessionID: si.ID, Mode: "yolo"}); code(err) != wire.CodeInvalidMode {
		t.Fatalf("bad mode: %v", err)
	}
	ans, err = f.mgr.Hook(f.ctx, si.ID, hookInput("as-1", "PreToolUse", "Bash", `{"command":"make"}`))
	if err != nil || ans.Decision != hookbridge.Allow || ans.DecidedBy != "mode:bypass" {
		t.Fatalf("bypass answer %+v %v", ans, err)
	}
	// Another agent session's hook is refused.
	if _, err := f.mgr.Hook(f.ctx, si.ID, hookInput("intruder", "PreToolUse", "Bash", `{}`)); code(err) != wire.CodeSessionMismatch {
		t.Fatalf("foreign hook: %v", err)
	}
	if _, err := f.mgr.Hook(f.ctx, si.ID, []byte(`not json`)); code(err) != wire.CodeBadFrame {
		t.Fatalf("bad input: %v", err)
	}

	mf := f.manifest(si.ID)
	if len(mf.Approvals) != 3 || mf.AgentSessionID != "as-1" || mf.PermissionMode != hookbridge.ModeBypass {
		t.Fatalf("manifest %+v", mf)
	}
	got := strings.Join(kinds(f.events(si.ID)), " ")
	for _, want := range []string{
		wire.KindHookEvent + " " + wire.KindPermissionRequest + " status:waiting-permission " + wire.KindPermissionDecision + " status:running",
		wire.KindMode,
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("events %s lack %q", got, want)
		}
	}
}

// A request still waiting when its turn ends is denied, not left for a
// human who can no longer help.
func TestTurnEndDeniesPending(t *testing.T) {
	f := newFixture(t, func(o *runtime.ManagerOptions) { o.HookProgram = hookProgram(t) })
	procs := f.blockingTurns()
	si := f.launch("x")
	p := <-procs
	answered := make(chan wire.HookAnswer, 1)
	go func() {
		ans, _ := f.mgr.Hook(f.ctx, si.ID, hookInput("a", "PreToolUse", "Bash", `{}`))
		answered <- ans
	}()
	waitFor(t, "the pending request", func() bool { return len(f.mgr.Pending(si.ID)) == 1 })
	p.End(agents.TurnResult{})
	select {
	case ans := <-answered:
		if ans.Decision != hookbridge.Deny {
			t.Fatalf("answer %+v", ans)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hook still waits after the turn ended")
	}
	f.waitStatus(si.ID, store.StatusCompleted)
}

// What a session's agent may govern comes from its adapter's info.
func TestGuardFromAgentInfo(t *testing.T) {
	for _, c := range []struct {
		name    string
		info    agents.Info
		hooked  bool
		guarded bool
		note    string
	}{
		{"terminal program", agents.Info{ID: "fake", Installed: true}, true, false, "terminal programs"},
		{"no hook program", agents.Info{ID: "fake", Installed: true, Structured: true}, false, false, "own permission bypass"},
		{"every tool", agents.Info{ID: "fake", Installed: true, Structured: true}, true, true, "each tool use passes"},
		{"adapter's scope", agents.Info{ID: "fake", Installed: true, Structured: true, Governance: "only shell commands reach the hook"}, true, true, "governed: only shell commands reach the hook"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, func(o *runtime.ManagerOptions) {
				if c.hooked {
					o.HookProgram = hookProgram(t)
				}
			})
			f.agent.DescribeFunc = func(context.Context) agents.Info { return c.info }
			si := f.launch("p")
			mf := f.manifest(si.ID)
			if mf.Guarded != c.guarded || !strings.Contains(mf.GuardNote, c.note) {
				t.Fatalf("guarded %v, note %q", mf.Guarded, mf.GuardNote)
			}
			f.waitStatus(si.ID, store.StatusCompleted)
		})
	}
}

func gitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"config", "user.email", "t@example.com"},
		{"config", "user.name", "t"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	os.WriteFile(filepath.Join(dir, "README"), []byte("base\n"), 0o644)
	for _, args := range [][]string{{"add", "."}, {"commit", "-q", "-m", "base"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// Worktree operations that change the worktree hold the session's slot:
// refused while a turn runs, and while one holds it a prompt, a kill and
// another operation are refused; reads and a retry run at any time.
func TestWorktreeOperationsHoldTheSlot(t *testing.T) {
	f := newFixture(t, nil)
	repo := gitRepo(t)
	d, _, err := f.st.AddDirectory(f.ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	f.dir = d
	writes := make(chan string, 4)
	procs := make(chan *runtimetest.Process, 4)
	f.agent.StartTurnFunc = func(_ context.Context, turn agents.Turn, _ agents.Emit) (agents.Process, error) {
		p := runtimetest.NewProcess()
		name := <-writes
		os.WriteFile(filepath.Join(turn.Dir, name), []byte(name+"\n"), 0o644)
		if name == "block" {
			procs <- p
		} else {
			p.End(agents.TurnResult{Resume: "r"})
		}
		return p, nil
	}
	writes <- "one.txt"
	si := f.launch("write one")
	f.waitStatus(si.ID, store.StatusCompleted)
	mf := f.manifest(si.ID)
	if mf.Isolation != wire.IsolationWorktree || !strings.HasPrefix(si.Workdir, string(f.home)) {
		t.Fatalf("manifest %+v, workdir %s", mf, si.Workdir)
	}
	var cp wire.Checkpoint
	for _, e := range f.events(si.ID) {
		if e.Kind == wire.KindCheckpoint {
			json.Unmarshal(e.Data, &cp)
		}
	}
	if cp.SHA == "" || cp.Turn != 1 || len(cp.Files) != 1 || cp.Files[0] != "one.txt" {
		t.Fatalf("checkpoint %+v", cp)
	}

	// While a turn runs, the worktree is not changed under it.
	writes <- "block"
	if err := f.mgr.Prompt(f.ctx, wire.PromptRequest{SessionID: si.ID, Text: "write more"}); err != nil {
		t.Fatal(err)
	}
	p := <-procs
	for _, op := range []func() error{
		func() error {
			_, err := f.mgr.Rollback(f.ctx, wire.RollbackRequest{SessionID: si.ID, SHA: cp.SHA})
			return err
		},
		func() error {
			_, err := f.mgr.SquashMerge(f.ctx, wire.SquashMergeRequest{SessionID: si.ID})
			return err
		},
		func() error {
			_, err := f.mgr.WorktreeRemove(f.ctx, wire.WorktreeRemoveRequest{SessionID: si.ID})
			return err
		},
	} {
		if err := op(); code(err) != wire.CodeBusy || !strings.Contains(err.Error(), "running a turn") {
			t.Fatalf("operation during a turn: %v", err)
		}
	}
	// Reads go on.
	if l, err := f.mgr.WorktreeList(f.ctx, wire.WorktreeListRequest{}); err != nil || len(l.Worktrees) != 1 || !l.Worktrees[0].Dirty {
		t.Fatalf("list during a turn: %+v %v", l, err)
	}
	p.End(agents.TurnResult{Resume: "r"})
	f.waitStatus(si.ID, store.StatusCompleted)
	waitFor(t, "the turn to release the slot", func() bool { return f.manifest(si.ID).Turns == 2 })

	// Many operations and prompts at once: each one either runs alone or
	// is refused as busy, and the session ends up consistent.
	var wg sync.WaitGroup
	var ran, refused atomic.Int32
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var err error
			if i%2 == 0 {
				_, err = f.mgr.Rollback(f.ctx, wire.RollbackRequest{SessionID: si.ID, SHA: cp.SHA})
			} else {
				_, err = f.mgr.WorktreeSummary(f.ctx, wire.WorktreeSummaryRequest{SessionID: si.ID})
			}
			switch {
			case err == nil:
				ran.Add(1)
			case code(err) == wire.CodeBusy:
				refused.Add(1)
			default:
				t.Errorf("op %d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if ran.Load() < 7 || ran.Load()+refused.Load() != 12 {
		t.Fatalf("%d ran, %d refused", ran.Load(), refused.Load())
	}
	sum, err := f.mgr.WorktreeSummary(f.ctx, wire.WorktreeSummaryRequest{SessionID: si.ID})
	if err != nil || sum.FilesChanged != 1 || sum.Files[0].Path != "one.txt" {
		t.Fatalf("after rollbacks: %+v %v", sum, err)
	}
	if _, err := f.mgr.Rollback(f.ctx, wire.RollbackRequest{SessionID: si.ID, SHA: strings.Repeat("0", 40)}); code(err) != wire.CodeUnknownCheckpoint {
		t.Fatalf("foreign sha: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hookProgram installs a stand-in hook program into a temporary home.
func hookProgram(t *testing.T) hookprog.Program {
	t.Helper()
	src := filepath.Join(t.TempDir(), "reeve")
	os.WriteFile(src, []byte("#!/bin/sh\nexit 0\n"), 0o755)
	p, err := hookprog.InstallFrom(t.TempDir(), src)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Break 1 of issue 10: the hook program disappears (or is replaced) under
// a running daemon. A governed session then refuses to start, saying why,
// instead of running an agent whose hooks cannot answer.
func TestGovernedLaunchRefusedWithoutHookProgram(t *testing.T) {
	for _, damage := range []string{"removed", "replaced"} {
		t.Run(damage, func(t *testing.T) {
			prog := hookProgram(t)
			f := newFixture(t, func(o *runtime.ManagerOptions) { o.HookProgram = prog })
			f.agent.DescribeFunc = func(context.Context) agents.Info {
				return agents.Info{ID: "fake", Installed: true, Structured: true}
			}
			started := 0
			f.agent.StartTurnFunc = func(context.Context, agents.Turn, agents.Emit) (agents.Process, error) {
				started++
				return nil, errors.New("must not start")
			}
			if damage == "removed" {
				os.Remove(prog.Path)
			} else {
				os.WriteFile(prog.Path, []byte("#!/bin/sh\necho allow\n"), 0o700)
			}
			_, err := f.mgr.Launch(f.ctx, wire.LaunchRequest{Directory: f.dir.Path, Prompt: "p"})
			if code(err) != wire.CodeLaunchFailed || !strings.Contains(err.Error(), "decision channel is not working") {
				t.Fatalf("launch: %v", err)
			}
			if started != 0 {
				t.Fatal("the agent started without a working hook program")
			}
		})
	}
}
