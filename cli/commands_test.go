package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/syncbuf"
)

// The commands below each reach the daemon through a fake, as a person
// would call them: people's form, --json, and the exit code of a refusal.

func TestAddOutput(t *testing.T) {
	dir := t.TempDir()
	real, _ := filepath.EvalSymlinks(dir)
	created := true
	f := &fakeDaemon{addDir: func(path string) (wire.AddDirectoryResponse, error) {
		if path != real {
			t.Errorf("registered %q, want the canonical %q", path, real)
		}
		return wire.AddDirectoryResponse{Directory: wire.Directory{ID: "D1", Path: path, AddedAt: t0}, Created: created}, nil
	}}
	cmd, out, errb := testCmd(t, f)
	if err := runAdd(context.Background(), &addOptions{daemonCmd: cmd, path: dir}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "D1\n" || errb.String() != "reeve: registered "+real+"\n" {
		t.Fatalf("add: %q %q", out, errb)
	}
	created = false
	cmd, out, errb = testCmd(t, f)
	if err := runAdd(context.Background(), &addOptions{daemonCmd: cmd, path: dir}); err != nil || !strings.Contains(errb.String(), "was already registered") || out.String() != "D1\n" {
		t.Fatalf("add again: %v %q %q", err, out, errb)
	}
	cmd, out, _ = testCmd(t, f)
	if err := runAdd(context.Background(), &addOptions{daemonCmd: cmd, path: dir, json: true}); err != nil {
		t.Fatal(err)
	}
	var res wire.AddDirectoryResponse
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil || res.Directory.ID != "D1" || res.Directory.Path != real || res.Created {
		t.Fatalf("add --json: %v %s", err, out)
	}
	// A missing directory is not found before the daemon is asked.
	calls := f.callsOf("addDir")
	cmd, _, _ = testCmd(t, f)
	if err := runAdd(context.Background(), &addOptions{daemonCmd: cmd, path: filepath.Join(dir, "gone")}); exitCode(err) != ExitNotFound || f.callsOf("addDir") != calls {
		t.Fatalf("missing directory: %v", err)
	}
}

func TestListOutput(t *testing.T) {
	dirs := []wire.Directory{{ID: "D1", Path: "/src/app", AddedAt: t0}, {ID: "D2", Path: "/src/lib", AddedAt: t0}}
	f := &fakeDaemon{
		dirs:   func() ([]wire.Directory, error) { return dirs, nil },
		health: func() (wire.Health, error) { return wire.Health{Status: "ok", Sessions: 3}, nil },
	}
	cmd, out, errb := testCmd(t, f)
	if err := runList(context.Background(), &listOptions{daemonCmd: cmd}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ID", "PATH", "D1", "/src/app", "D2", "/src/lib"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	if errb.String() != "reeve: 3 active sessions\n" {
		t.Errorf("list stderr %q", errb)
	}
	cmd, out, _ = testCmd(t, f)
	if err := runList(context.Background(), &listOptions{daemonCmd: cmd, json: true}); err != nil {
		t.Fatal(err)
	}
	var l directoryListing
	if err := json.Unmarshal([]byte(out.String()), &l); err != nil || len(l.Directories) != 2 || l.ActiveSessions != 3 {
		t.Fatalf("list --json: %v %s", err, out)
	}
	dirs = nil
	cmd, out, errb = testCmd(t, f)
	if err := runList(context.Background(), &listOptions{daemonCmd: cmd}); err != nil || out.String() != "" || !strings.Contains(errb.String(), "no directories registered") {
		t.Fatalf("empty list: %v %q %q", err, out, errb)
	}
}

func TestSendOutput(t *testing.T) {
	var got wire.PromptRequest
	f := &fakeDaemon{prompt: func(req wire.PromptRequest) error {
		got = req
		if req.SessionID == "GONE" {
			return &wire.AckError{Code: wire.CodeNotFound, Message: `no session "GONE"`}
		}
		return nil
	}}
	cmd, out, errb := testCmd(t, f)
	if err := runSend(context.Background(), &sendOptions{daemonCmd: cmd, sessionID: "01REEVE", prompt: "and the docs"}); err != nil {
		t.Fatal(err)
	}
	if got.SessionID != "01REEVE" || got.Text != "and the docs" || out.String() != "" || !strings.Contains(errb.String(), "prompt sent to 01REEVE (follow it with `reeve attach 01REEVE`)") {
		t.Fatalf("send: %+v %q %q", got, out, errb)
	}
	cmd, _, _ = testCmd(t, f)
	if err := runSend(context.Background(), &sendOptions{daemonCmd: cmd, sessionID: "GONE", prompt: "x"}); exitCode(err) != ExitNotFound {
		t.Fatalf("unknown session: %v", err)
	}
	cmd, _, _ = testCmd(t, f)
	if err := runSend(context.Background(), &sendOptions{daemonCmd: cmd, sessionID: "01REEVE"}); exitCode(err) != ExitUsage {
		t.Fatalf("empty prompt: %v", err)
	}
}

func TestSessionStopOutput(t *testing.T) {
	f := &fakeDaemon{kill: func(req wire.KillRequest) error {
		switch req.SessionID {
		case "ENDED":
			return &wire.AckError{Code: wire.CodeNotRunning, Message: "session ENDED is not running"}
		case "GONE":
			return &wire.AckError{Code: wire.CodeNotFound, Message: `no session "GONE"`}
		}
		return nil
	}}
	cmd, out, errb := testCmd(t, f)
	if err := runSessionStop(context.Background(), &sessionStopOptions{daemonCmd: cmd, sessionID: "01REEVE"}); err != nil || out.String() != "" || errb.String() != "reeve: stopping session 01REEVE\n" {
		t.Fatalf("stop: %v %q %q", err, out, errb)
	}
	for sid, code := range map[string]int{"ENDED": ExitConflict, "GONE": ExitNotFound} {
		cmd, _, _ = testCmd(t, f)
		if err := runSessionStop(context.Background(), &sessionStopOptions{daemonCmd: cmd, sessionID: sid}); exitCode(err) != code {
			t.Errorf("stop %s: %v (exit %d, want %d)", sid, err, exitCode(err), code)
		}
	}
}

var manifestOne = wire.Manifest{
	SessionID: "01REEVE", Agent: "claude", AgentVersion: "2.1.329", Provider: "anthropic", Model: "opus", Directory: "/src/app",
	Workdir: "/home/.reeve/worktrees/01REEVE", Guarded: true, PermissionMode: "detect", Turns: 2,
	Approvals: []wire.Approval{{Tool: "Bash", Decision: "allow", DecidedBy: "human", Reason: "fine", At: t0}},
}

func TestManifestOutput(t *testing.T) {
	f := &fakeDaemon{manifest: func(id string) (wire.Manifest, error) {
		if id != "01REEVE" {
			return wire.Manifest{}, &controlclient.APIError{Status: http.StatusNotFound, Code: wire.CodeNotFound, Message: "no session " + id}
		}
		return manifestOne, nil
	}}
	cmd, out, errb := testCmd(t, f)
	if err := runManifest(context.Background(), &manifestOptions{daemonCmd: cmd, sessionID: "01REEVE"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"session", "01REEVE", "claude 2.1.329", "anthropic", "opus", "guarded", "yes", "detect", "workflow", "(none)", "approvals", "Bash allow by human: fine"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("manifest lacks %q:\n%s", want, out)
		}
	}
	if errb.String() != "" {
		t.Errorf("a quick answer printed progress: %q", errb)
	}
	cmd, out, _ = testCmd(t, f)
	if err := runManifest(context.Background(), &manifestOptions{daemonCmd: cmd, sessionID: "01REEVE", json: true}); err != nil {
		t.Fatal(err)
	}
	var m wire.Manifest
	if err := json.Unmarshal([]byte(out.String()), &m); err != nil || m.SessionID != "01REEVE" || !m.Guarded || len(m.Approvals) != 1 {
		t.Fatalf("manifest --json: %v %s", err, out)
	}
	cmd, _, _ = testCmd(t, f)
	if err := runManifest(context.Background(), &manifestOptions{daemonCmd: cmd, sessionID: "GONE"}); exitCode(err) != ExitNotFound {
		t.Fatalf("unknown session: %v", err)
	}
}

// A slow manifest says what the command waits for on stderr, and the
// progress ends before the answer is printed.
func TestManifestSaysWhatItWaitsFor(t *testing.T) {
	var errb *syncbuf.Buffer
	f := &fakeDaemon{manifest: func(string) (wire.Manifest, error) {
		// Answer once the wait has been announced twice; a command
		// without progress would keep this fake waiting until the
		// bound below, and fail the checks after it.
		deadline := time.Now().Add(20 * time.Second)
		for strings.Count(errb.String(), "reading the manifest of session 01REEVE") < 2 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		return manifestOne, nil
	}}
	cmd, out, eb := testCmd(t, f)
	errb = eb
	cmd.env.progressDelay = time.Millisecond
	if err := runManifest(context.Background(), &manifestOptions{daemonCmd: cmd, sessionID: "01REEVE", json: true}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if len(lines) < 2 || lines[0] != "reeve: reading the manifest of session 01REEVE..." || !strings.HasPrefix(lines[1], "reeve: still reading the manifest of session 01REEVE (") {
		t.Fatalf("progress: %q", errb)
	}
	if !strings.HasPrefix(out.String(), "{") {
		t.Fatalf("stdout holds more than the manifest: %q", out)
	}
	// Nothing is printed once the command has its answer.
	before := errb.String()
	time.Sleep(20 * time.Millisecond)
	if errb.String() != before {
		t.Fatalf("progress went on after the answer: %q", errb)
	}
}

func TestPermitOutput(t *testing.T) {
	pending := []wire.PermissionRequest{{ID: "REQ1", SessionID: "01REEVE", Agent: "claude", Tool: "Bash", Input: json.RawMessage(`{"command":"make"}`), CreatedAt: time.Now()}}
	var asked string
	var decided wire.RespondPermissionRequest
	f := &fakeDaemon{
		pending: func(sid string) ([]wire.PermissionRequest, error) {
			asked = sid
			return pending, nil
		},
		respond: func(req wire.RespondPermissionRequest) (wire.PermissionDecision, error) {
			decided = req
			switch req.RequestID {
			case "GONE":
				return wire.PermissionDecision{}, &wire.AckError{Code: wire.CodeUnknownRequest, Message: `no such permission request: "GONE"`}
			case "DONE":
				return wire.PermissionDecision{}, &wire.AckError{Code: wire.CodeAlreadyDecided, Message: "already decided: allow"}
			}
			return wire.PermissionDecision{RequestID: req.RequestID, SessionID: "01REEVE", Tool: "Bash", Decision: req.Decision, DecidedBy: "human", Reason: req.Reason, Remember: req.Remember, At: t0}, nil
		},
	}
	cmd, out, _ := testCmd(t, f)
	if err := runPermitList(context.Background(), &permitListOptions{daemonCmd: cmd, session: "01REEVE"}); err != nil {
		t.Fatal(err)
	}
	if asked != "01REEVE" {
		t.Errorf("asked for the requests of %q", asked)
	}
	for _, want := range []string{"REQUEST", "REQ1", "01REEVE", "claude", "Bash", `{"command":"make"}`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("permit ls lacks %q:\n%s", want, out)
		}
	}
	cmd, out, _ = testCmd(t, f)
	if err := runPermitList(context.Background(), &permitListOptions{daemonCmd: cmd, json: true}); err != nil {
		t.Fatal(err)
	}
	var l wire.PermissionList
	if err := json.Unmarshal([]byte(out.String()), &l); err != nil || len(l.Pending) != 1 || l.Pending[0].ID != "REQ1" {
		t.Fatalf("permit ls --json: %v %s", err, out)
	}
	pending = nil
	cmd, out, errb := testCmd(t, f)
	if err := runPermitList(context.Background(), &permitListOptions{daemonCmd: cmd}); err != nil || out.String() != "" || !strings.Contains(errb.String(), "no permission requests are waiting") {
		t.Fatalf("nothing pending: %v %q %q", err, out, errb)
	}

	cmd, out, errb = testCmd(t, f)
	if err := runPermitDecide(context.Background(), &permitDecideOptions{daemonCmd: cmd, decision: "allow", requestID: "REQ1", remember: true}); err != nil {
		t.Fatal(err)
	}
	if decided.Decision != "allow" || !decided.Remember || out.String() != "" || errb.String() != "reeve: allowed REQ1 (Bash in session 01REEVE), and for Bash for the rest of the session\n" {
		t.Fatalf("allow: %+v %q %q", decided, out, errb)
	}
	cmd, out, _ = testCmd(t, f)
	if err := runPermitDecide(context.Background(), &permitDecideOptions{daemonCmd: cmd, decision: "deny", requestID: "REQ1", reason: "not now", json: true}); err != nil {
		t.Fatal(err)
	}
	var d wire.PermissionDecision
	if err := json.Unmarshal([]byte(out.String()), &d); err != nil || d.Decision != "deny" || d.Reason != "not now" || d.RequestID != "REQ1" {
		t.Fatalf("deny --json: %v %s", err, out)
	}
	for id, code := range map[string]int{"GONE": ExitNotFound, "DONE": ExitConflict} {
		cmd, _, _ = testCmd(t, f)
		if err := runPermitDecide(context.Background(), &permitDecideOptions{daemonCmd: cmd, decision: "allow", requestID: id}); exitCode(err) != code {
			t.Errorf("allow %s: %v (exit %d, want %d)", id, err, exitCode(err), code)
		}
	}
}

func TestAgentModeOutput(t *testing.T) {
	mode := "detect"
	f := &fakeDaemon{
		setMode: func(req wire.SetModeRequest) error {
			mode = req.Mode
			return nil
		},
		manifest: func(id string) (wire.Manifest, error) {
			m := manifestOne
			m.PermissionMode = mode
			return m, nil
		},
	}
	cmd, out, _ := testCmd(t, f)
	if err := runAgentMode(context.Background(), &agentModeOptions{daemonCmd: cmd, sessionID: "01REEVE"}); err != nil || out.String() != "detect\n" {
		t.Fatalf("read: %v %q", err, out)
	}
	cmd, out, _ = testCmd(t, f)
	if err := runAgentMode(context.Background(), &agentModeOptions{daemonCmd: cmd, sessionID: "01REEVE", mode: "bypass", json: true}); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil || got["mode"] != "bypass" || got["session_id"] != "01REEVE" {
		t.Fatalf("set --json: %v %s", err, out)
	}
	cmd, _, _ = testCmd(t, f)
	if err := runAgentMode(context.Background(), &agentModeOptions{daemonCmd: cmd, sessionID: "01REEVE", mode: "yolo"}); exitCode(err) != ExitUsage || mode != "bypass" {
		t.Fatalf("bad mode: %v (mode now %s)", err, mode)
	}
}

func TestPairUnlockOutput(t *testing.T) {
	until := time.Date(2026, 3, 4, 6, 0, 0, 0, time.UTC)
	var asked int
	f := &fakeDaemon{unlock: func(ttl int) (wire.RemoteStatus, error) {
		asked = ttl
		return wire.RemoteStatus{Link: "connected", UnlockedUntil: until}, nil
	}}
	cmd, out, errb := testCmd(t, f)
	if err := runPairUnlock(context.Background(), &pairUnlockOptions{daemonCmd: cmd, ttl: 60}); err != nil {
		t.Fatal(err)
	}
	if asked != 60 || out.String() != "2026-03-04T06:00:00Z\n" || !strings.Contains(errb.String(), "--ttl 60 is outside 300..3600; using 300") || !strings.Contains(errb.String(), "relay link: connected") {
		t.Fatalf("unlock: ttl %d %q %q", asked, out, errb)
	}
	cmd, out, _ = testCmd(t, f)
	if err := runPairUnlock(context.Background(), &pairUnlockOptions{daemonCmd: cmd, ttl: 1800, json: true}); err != nil {
		t.Fatal(err)
	}
	var st wire.RemoteStatus
	if err := json.Unmarshal([]byte(out.String()), &st); err != nil || !st.UnlockedUntil.Equal(until) || st.Link != "connected" {
		t.Fatalf("unlock --json: %v %s", err, out)
	}
	f.unlock = func(int) (wire.RemoteStatus, error) {
		return wire.RemoteStatus{}, &controlclient.APIError{Status: http.StatusNotFound, Message: "no relay"}
	}
	cmd, _, _ = testCmd(t, f)
	if err := runPairUnlock(context.Background(), &pairUnlockOptions{daemonCmd: cmd, ttl: 1800}); exitCode(err) != ExitNotFound || !strings.Contains(err.Error(), "no relay link") {
		t.Fatalf("unpaired: %v", err)
	}
	f.unlock = func(int) (wire.RemoteStatus, error) {
		return wire.RemoteStatus{}, &controlclient.APIError{Status: http.StatusForbidden, Message: "only from this machine"}
	}
	cmd, _, _ = testCmd(t, f)
	if err := runPairUnlock(context.Background(), &pairUnlockOptions{daemonCmd: cmd, ttl: 1800}); exitCode(err) != ExitDenied {
		t.Fatalf("refused: %v", err)
	}
	cmd, _, _ = testCmd(t, f)
	if err := runPairUnlock(context.Background(), &pairUnlockOptions{daemonCmd: cmd, ttl: -1}); exitCode(err) != ExitUsage {
		t.Fatalf("negative ttl: %v", err)
	}
}

// A daemon that is not running is exit 3 for every one of them, before
// anything is printed.
func TestCommandsWithoutADaemon(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	runs := map[string]func(daemonCmd) error{
		"add":          func(c daemonCmd) error { return runAdd(ctx, &addOptions{daemonCmd: c, path: dir}) },
		"list":         func(c daemonCmd) error { return runList(ctx, &listOptions{daemonCmd: c}) },
		"send":         func(c daemonCmd) error { return runSend(ctx, &sendOptions{daemonCmd: c, sessionID: "S", prompt: "p"}) },
		"session stop": func(c daemonCmd) error { return runSessionStop(ctx, &sessionStopOptions{daemonCmd: c, sessionID: "S"}) },
		"manifest":     func(c daemonCmd) error { return runManifest(ctx, &manifestOptions{daemonCmd: c, sessionID: "S"}) },
		"permit ls":    func(c daemonCmd) error { return runPermitList(ctx, &permitListOptions{daemonCmd: c}) },
		"permit allow": func(c daemonCmd) error {
			return runPermitDecide(ctx, &permitDecideOptions{daemonCmd: c, decision: "allow", requestID: "R"})
		},
		"agent mode":     func(c daemonCmd) error { return runAgentMode(ctx, &agentModeOptions{daemonCmd: c, sessionID: "S"}) },
		"pair unlock":    func(c daemonCmd) error { return runPairUnlock(ctx, &pairUnlockOptions{daemonCmd: c, ttl: 1800}) },
		"ls --directory": func(c daemonCmd) error { return runLs(ctx, &lsOptions{daemonCmd: c, scope: "ALL", directory: "D1"}) },
	}
	for name, run := range runs {
		f := &fakeDaemon{connectErr: exitf(ExitNotRunning, "no daemon is running")}
		cmd, out, _ := testCmd(t, f)
		if err := run(cmd); exitCode(err) != ExitNotRunning || out.String() != "" {
			t.Errorf("%s: %v, %q", name, err, out)
		}
	}
	// A plain failure to connect is not mistaken for a missing daemon.
	f := &fakeDaemon{connectErr: errors.New("boom")}
	cmd, _, _ := testCmd(t, f)
	if err := runList(ctx, &listOptions{daemonCmd: cmd}); err == nil || exitCode(err) == ExitNotRunning {
		t.Fatalf("list: %v", err)
	}
}

// The hints of a command run with --home name that home: a plain
// `reeve permit allow` would reach another home's daemon.
func TestHintsNameTheHomeFlag(t *testing.T) {
	h := filepath.Join(t.TempDir(), "my home")
	s := newStream()
	f := &fakeDaemon{
		session:   func(string) (wire.SessionInfo, error) { si := reeveOne; si.LastSeq = 5; return si, nil },
		subscribe: func(string, int64) (Stream, error) { return s, nil },
		prompt:    func(wire.PromptRequest) error { return nil },
	}
	f.t = t
	go func() {
		s.send("01REEVE", 6, wire.KindPermissionRequest, wire.PermissionRequest{ID: "REQ2", Tool: "Write", Input: json.RawMessage(`{}`)})
		s.end(&wire.SessionEnded{Type: wire.TypeSessionEnded, SessionID: "01REEVE", Status: "completed", LastSeq: 6}, nil)
	}()
	run := func(env map[string]string, args ...string) string {
		var out, errb syncbuf.Buffer
		e := &Env{In: strings.NewReader(""), Out: &out, Err: &errb, Getenv: func(k string) string { return env[k] },
			Connect: func(_ context.Context, dir home.Dir) (Daemon, error) {
				if string(dir) != h {
					t.Errorf("%v reached the home %s", args, dir)
				}
				return f, nil
			}}
		if code := Execute(context.Background(), e, args); code != ExitOK {
			t.Fatalf("%v: exit %d\n%s", args, code, errb.String())
		}
		return errb.String()
	}
	e := run(nil, "--home", h, "wait", "01REEVE")
	if want := "allow it: reeve --home '" + h + "' permit allow REQ2    deny it: reeve --home '" + h + "' permit deny REQ2"; !strings.Contains(e, want) {
		t.Errorf("wait --home lacks %q:\n%s", want, e)
	}
	if e := run(nil, "send", "--home", h, "01REEVE", "--prompt", "more"); !strings.Contains(e, "`reeve --home '"+h+"' attach 01REEVE`") {
		t.Errorf("send --home said:\n%s", e)
	}
	// A home from REEVE_HOME carries over to the next command by itself.
	if e := run(map[string]string{"REEVE_HOME": h}, "send", "01REEVE", "--prompt", "more"); !strings.Contains(e, "`reeve attach 01REEVE`") {
		t.Errorf("send with REEVE_HOME said:\n%s", e)
	}
}

// run without --wait or --attach prints the new session's id, or with
// --json the session; a --timeout without a wait is refused before
// anything is launched.
func TestRunOutput(t *testing.T) {
	dir := t.TempDir()
	var launched wire.LaunchRequest
	f := &fakeDaemon{
		addDir: func(path string) (wire.AddDirectoryResponse, error) {
			return wire.AddDirectoryResponse{Directory: wire.Directory{ID: "D1", Path: path}}, nil
		},
		launch: func(req wire.LaunchRequest) (wire.SessionInfo, error) {
			launched = req
			si := reeveOne
			si.Agent = req.Agent
			return si, nil
		},
	}
	start := func() (daemonCmd, *syncbuf.Buffer, *syncbuf.Buffer) {
		cmd, out, errb := testCmd(t, f)
		fakeSupervisor(t, cmd.home) // a daemon runs: run starts none
		return cmd, out, errb
	}
	cmd, out, errb := start()
	if err := runRun(context.Background(), &runOptions{daemonCmd: cmd, dir: dir, prompt: "fix it", agent: "shell", mode: "bypass"}); err != nil {
		t.Fatal(err)
	}
	if launched.Directory != "D1" || launched.Prompt != "fix it" || launched.Agent != "shell" || launched.Mode != "bypass" {
		t.Errorf("launched %+v", launched)
	}
	if out.String() != "01REEVE\n" || !strings.Contains(errb.String(), "reeve: session 01REEVE started: agent shell in "+reeveOne.Workdir) {
		t.Fatalf("run: %q %q", out, errb)
	}
	cmd, out, _ = start()
	if err := runRun(context.Background(), &runOptions{daemonCmd: cmd, dir: dir, prompt: "fix it", json: true}); err != nil {
		t.Fatal(err)
	}
	var si wire.SessionInfo
	if err := json.Unmarshal([]byte(out.String()), &si); err != nil || si.ID != "01REEVE" || si.Directory != "/src/app" {
		t.Fatalf("run --json: %v %s", err, out)
	}
	launches := launched
	launched = wire.LaunchRequest{}
	cmd, out, _ = start()
	err := runRun(context.Background(), &runOptions{daemonCmd: cmd, dir: dir, prompt: "fix it", timeout: 5})
	if exitCode(err) != ExitUsage || !strings.Contains(err.Error(), "--timeout bounds a wait: add --wait or --attach") || launched.Prompt != "" || out.String() != "" {
		t.Fatalf("--timeout without a wait: %v (launched %+v after %+v)", err, launched, launches)
	}
}

// diagnostic reaches the daemon through the injected client: its health
// in the snapshot when one runs, the reason when none does or it fails.
func TestDiagnosticOutput(t *testing.T) {
	f := &fakeDaemon{health: func() (wire.Health, error) {
		return wire.Health{Status: "ok", Version: "9.9.9", DaemonID: "01DAEMON", WorkerPID: 42}, nil
	}}
	cmd, out, _ := testCmd(t, f)
	if err := runDiagnostic(context.Background(), &diagnosticOptions{daemonCmd: cmd, json: true}); err != nil {
		t.Fatal(err)
	}
	var s diagnosticSnapshot
	if err := json.Unmarshal([]byte(out.String()), &s); err != nil || s.Daemon.Running || s.Daemon.Error != "no daemon is running from this home" || f.callsOf("health") != 0 {
		t.Fatalf("no daemon: %v %s", err, out)
	}

	cmd, out, _ = testCmd(t, f)
	fakeSupervisor(t, cmd.home)
	if err := runDiagnostic(context.Background(), &diagnosticOptions{daemonCmd: cmd, json: true}); err != nil {
		t.Fatal(err)
	}
	s = diagnosticSnapshot{}
	if err := json.Unmarshal([]byte(out.String()), &s); err != nil || !s.Daemon.Running || f.callsOf("health") != 1 {
		t.Fatalf("running: %v %s", err, out)
	}
	if h, _ := s.Daemon.Health.(map[string]any); h["version"] != "9.9.9" || h["daemon_id"] != "01DAEMON" {
		t.Fatalf("health in the snapshot: %+v", s.Daemon.Health)
	}
	cmd, out, _ = testCmd(t, f)
	fakeSupervisor(t, cmd.home)
	if err := runDiagnostic(context.Background(), &diagnosticOptions{daemonCmd: cmd}); err != nil || !strings.Contains(out.String(), "daemon: running") {
		t.Fatalf("people's form: %v %q", err, out)
	}

	f.health = func() (wire.Health, error) { return wire.Health{}, context.DeadlineExceeded }
	cmd, out, _ = testCmd(t, f)
	fakeSupervisor(t, cmd.home)
	if err := runDiagnostic(context.Background(), &diagnosticOptions{daemonCmd: cmd}); err != nil || !strings.Contains(out.String(), "daemon: running but not answering (context deadline exceeded)") {
		t.Fatalf("a daemon that does not answer: %v %q", err, out)
	}
}

// Ctrl-C during a wait or a follow ends it with the shell's code for an
// interrupt and says the session keeps running, not "context canceled".
func TestInterruptedWait(t *testing.T) {
	for _, name := range []string{"wait", "attach"} {
		s := newStream()
		subscribed := make(chan struct{})
		f := &fakeDaemon{
			session: func(string) (wire.SessionInfo, error) { return reeveOne, nil },
			subscribe: func(string, int64) (Stream, error) {
				close(subscribed)
				return s, nil
			},
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		go func() {
			<-subscribed
			cancel(errors.New("interrupt signal received")) // as signal.NotifyContext does
		}()
		cmd, _, _ := testCmd(t, f)
		var err error
		if name == "wait" {
			err = runWait(ctx, &waitOptions{daemonCmd: cmd, sessionID: "01REEVE"})
		} else {
			err = runLogs(ctx, &logsOptions{daemonCmd: cmd, sessionID: "01REEVE", follow: true})
		}
		if exitCode(err) != ExitInterrupted || err.Error() != "stopped waiting for session 01REEVE: interrupt signal received (it keeps running)" {
			t.Errorf("%s: exit %d: %v", name, exitCode(err), err)
		}
	}
}
