package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/daemon/wireclient"
)

var (
	t0        = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	reeveOne  = wire.SessionInfo{ID: "01REEVE", DirectoryID: "D1", Directory: "/src/app", Workdir: "/home/.reeve/worktrees/01REEVE", Agent: "claude", Model: "opus", Prompt: "fix the tests\nand more", Status: "running", CreatedAt: t0, UpdatedAt: t0, LastSeq: 12}
	discovery = wire.DiscoveredInfo{Agent: "codex", ID: "thread-9", Directory: "/src/other", Title: "refactor the parser", Path: "/home/.codex/sessions/x.jsonl", StartedAt: t0, UpdatedAt: t0.Add(time.Hour)}
)

// lsFields are the field names `reeve ls --help` lists.
func lsFields(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, m := range regexp.MustCompile(`(?m)(?:^|[ ,])([A-Z][A-Za-z]+)(?:[ ,.(]|$)`).FindAllStringSubmatch(lsFieldHelp, -1) {
		names = append(names, m[1])
	}
	if len(names) < 10 {
		t.Fatalf("the help lists %d fields: %v", len(names), names)
	}
	return names
}

// Every field the help names exists for every kind of session, and the
// help names every field (issue: `ls --format` with discovered sessions).
func TestLsFormatEveryFieldForEveryKind(t *testing.T) {
	fields := lsFields(t)
	rt := reflect.TypeOf(lsRow{})
	for _, f := range fields {
		if _, ok := rt.FieldByName(f); !ok {
			t.Errorf("the help names %s, which a session does not have", f)
		}
	}
	for i := 0; i < rt.NumField(); i++ {
		found := false
		for _, f := range fields {
			found = found || f == rt.Field(i).Name
		}
		if !found {
			t.Errorf("field %s is not in the help", rt.Field(i).Name)
		}
	}
	f := &fakeDaemon{list: func(req wire.ListRequest) (wire.ListResult, []wire.DiscoveredInfo, error) {
		return wire.ListResult{Sessions: []wire.SessionInfo{reeveOne}, Discovered: 1}, []wire.DiscoveredInfo{discovery}, nil
	}}
	for _, format := range append([]string{"{{.ID}} {{.Status}}", "{{.Prompt}}", "{{.Kind}}\t{{.Agent}}\t{{.UpdatedAt.Format \"2006\"}}"}, fieldFormats(fields)...) {
		cmd, out, errb := testCmd(t, f)
		err := runLs(context.Background(), &lsOptions{daemonCmd: cmd, scope: "ALL", format: format})
		if err != nil {
			t.Errorf("--format %q: %v %s", format, err, errb)
			continue
		}
		if lines := strings.Count(out.String(), "\n"); lines < 2 {
			t.Errorf("--format %q printed %d lines: %q", format, lines, out)
		}
	}
	cmd, out, _ := testCmd(t, f)
	if err := runLs(context.Background(), &lsOptions{daemonCmd: cmd, scope: "ALL", format: "{{.ID}} {{.Status}} {{.Kind}} {{.Path}}"}); err != nil {
		t.Fatal(err)
	}
	if want := "01REEVE running reeve \nthread-9 discovered discovered /home/.codex/sessions/x.jsonl\n"; out.String() != want {
		t.Fatalf("got %q, want %q", out, want)
	}

	// A template naming no field fails before any request.
	before := f.callsOf("list")
	cmd, _, _ = testCmd(t, f)
	err := runLs(context.Background(), &lsOptions{daemonCmd: cmd, scope: "ALL", format: "{{.Nope}}"})
	if exitCode(err) != ExitUsage || !strings.Contains(err.Error(), "ls --help") || f.callsOf("list") != before {
		t.Fatalf("bad field: %v", err)
	}
}

func fieldFormats(fields []string) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = "{{." + f + "}}"
	}
	return out
}

// ls, human and --json, for both kinds; scope and filters reach the
// daemon as given.
func TestLsOutput(t *testing.T) {
	var got wire.ListRequest
	f := &fakeDaemon{list: func(req wire.ListRequest) (wire.ListResult, []wire.DiscoveredInfo, error) {
		got = req
		return wire.ListResult{Sessions: []wire.SessionInfo{reeveOne}, Discovered: 1}, []wire.DiscoveredInfo{discovery}, nil
	}}
	f.dirs = func() ([]wire.Directory, error) { return []wire.Directory{{ID: "D1", Path: "/src/app"}}, nil }
	cmd, out, _ := testCmd(t, f)
	if err := runLs(context.Background(), &lsOptions{daemonCmd: cmd, scope: "all", agent: "claude", directory: "/src/app"}); err != nil {
		t.Fatal(err)
	}
	if got.Scope != wire.ScopeAll || got.Agent != "claude" || got.DirectoryID != "D1" {
		t.Fatalf("request %+v", got)
	}
	for _, want := range []string{"SESSION", "01REEVE", "claude", "running", "fix the tests and more", "DISCOVERED", "thread-9", "refactor the parser"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("human ls lacks %q:\n%s", want, out)
		}
	}
	cmd, out, _ = testCmd(t, f)
	if err := runLs(context.Background(), &lsOptions{daemonCmd: cmd, scope: "ALL", json: true}); err != nil {
		t.Fatal(err)
	}
	var res lsResult
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil || len(res.Sessions) != 1 || len(res.Discovered) != 1 || res.Discovered[0].Path != discovery.Path {
		t.Fatalf("--json %v %s", err, out)
	}
	cmd, _, _ = testCmd(t, f)
	if err := runLs(context.Background(), &lsOptions{daemonCmd: cmd, scope: "SOME"}); exitCode(err) != ExitUsage {
		t.Fatalf("bad scope: %v", err)
	}
	// A directory that is not registered is not found, not an empty list.
	lists := f.callsOf("list")
	cmd, out, _ = testCmd(t, f)
	err := runLs(context.Background(), &lsOptions{daemonCmd: cmd, scope: "ALL", directory: "/src/nowhere"})
	if exitCode(err) != ExitNotFound || !strings.Contains(err.Error(), "/src/nowhere is not a registered directory") || out.String() != "" || f.callsOf("list") != lists {
		t.Fatalf("unknown directory: %v, %q", err, out)
	}
}

// wait says on stderr when the session waits for a permission decision,
// and how to give it — for a request made before it began too — and
// that it was decided; it exits with the session's end.
func TestWaitExplainsPermissionWaits(t *testing.T) {
	s := newStream()
	f := &fakeDaemon{
		session: func(id string) (wire.SessionInfo, error) {
			si := reeveOne
			si.LastSeq = 5
			return si, nil
		},
		pending: func(string) ([]wire.PermissionRequest, error) {
			return []wire.PermissionRequest{{ID: "REQ1", SessionID: "01REEVE", Tool: "Bash", Input: json.RawMessage(`{"command":"rm -rf build"}`)}}, nil
		},
		subscribe: func(sid string, after int64) (Stream, error) {
			if sid != "01REEVE" || after != 5 {
				t.Errorf("subscribe %s after %d", sid, after)
			}
			return s, nil
		},
	}
	go func() {
		// REQ1 is history (seq 4 was before the wait began) but pending;
		// REQ0 is history and was decided: neither is replayed here, as a
		// wait from the current end would not see them.
		s.send("01REEVE", 6, wire.KindPermissionRequest, wire.PermissionRequest{ID: "REQ2", Tool: "Write", Input: json.RawMessage(`{"file_path":"x"}`), Reason: "the session is in detect mode: a human decides"})
		s.send("01REEVE", 7, wire.KindPermissionDecision, wire.PermissionDecision{RequestID: "REQ2", Decision: "deny", DecidedBy: "human", Reason: "no"})
		s.send("01REEVE", 8, wire.KindStatus, wire.Status{Status: "completed"})
		s.end(&wire.SessionEnded{Type: wire.TypeSessionEnded, SessionID: "01REEVE", Status: "completed", LastSeq: 8}, nil)
	}()
	cmd, out, errb := testCmd(t, f)
	err := runWait(context.Background(), &waitOptions{daemonCmd: cmd, sessionID: "01REEVE"})
	if err != nil {
		t.Fatalf("wait: %v\n%s", err, errb)
	}
	e := errb.String()
	for _, want := range []string{
		"session 01REEVE waits for a permission decision: Write {\"file_path\":\"x\"}",
		"why a human is asked: the session is in detect mode",
		"reeve permit allow REQ2", "reeve permit deny REQ2",
		"request REQ2 was decided: deny by human (no)",
		"session 01REEVE completed",
	} {
		if !strings.Contains(e, want) {
			t.Errorf("stderr lacks %q:\n%s", want, e)
		}
	}
	if out.String() != "" {
		t.Fatalf("wait printed data: %q", out)
	}
}

// A pending request from before the command began is announced when its
// event passes in the replay; a decided one is not.
func TestFollowAnnouncesOnlyPendingHistory(t *testing.T) {
	s := newStream()
	f := &fakeDaemon{
		session: func(string) (wire.SessionInfo, error) { si := reeveOne; si.LastSeq = 3; return si, nil },
		pending: func(string) ([]wire.PermissionRequest, error) {
			return []wire.PermissionRequest{{ID: "OPEN"}}, nil
		},
		subscribe: func(string, int64) (Stream, error) { return s, nil },
	}
	go func() {
		s.send("01REEVE", 1, wire.KindPermissionRequest, wire.PermissionRequest{ID: "OLD", Tool: "Bash"})
		s.send("01REEVE", 2, wire.KindPermissionDecision, wire.PermissionDecision{RequestID: "OLD", Decision: "allow", DecidedBy: "human"})
		s.send("01REEVE", 3, wire.KindPermissionRequest, wire.PermissionRequest{ID: "OPEN", Tool: "Edit"})
		s.end(&wire.SessionEnded{SessionID: "01REEVE", Status: "failed"}, nil)
	}()
	cmd, out, errb := testCmd(t, f)
	err := runLogs(context.Background(), &logsOptions{daemonCmd: cmd, sessionID: "01REEVE", follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(errb.String(), "OLD") || !strings.Contains(errb.String(), "reeve permit allow OPEN") {
		t.Fatalf("stderr:\n%s", errb)
	}
	if !strings.Contains(out.String(), "[permission] Bash") || !strings.Contains(out.String(), "[allowed]") {
		t.Fatalf("stdout:\n%s", out)
	}
}

// logs --follow --json prints each frame as the daemon sent it, then the
// end.
func TestFollowJSONLines(t *testing.T) {
	s := newStream()
	f := &fakeDaemon{session: func(string) (wire.SessionInfo, error) { return reeveOne, nil }, subscribe: func(_ string, after int64) (Stream, error) {
		if after != 7 {
			t.Errorf("after %d", after)
		}
		return s, nil
	}}
	go func() {
		s.send("01REEVE", 8, wire.KindAgentMessage, wire.AgentMessage{Text: "hi"})
		s.end(&wire.SessionEnded{Type: wire.TypeSessionEnded, SessionID: "01REEVE", Status: "completed", LastSeq: 8}, nil)
	}()
	cmd, out, _ := testCmd(t, f)
	if err := runLogs(context.Background(), &logsOptions{daemonCmd: cmd, sessionID: "01REEVE", follow: true, lastSeq: 7, json: true}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], `{"type":"session-update","session_id":"01REEVE","seq":8,`) || lines[1] != `{"type":"session-ended","session_id":"01REEVE","status":"completed","last_seq":8}` {
		t.Fatalf("lines %q", lines)
	}
}

// How waits end: the session's outcome, a --timeout, a daemon that stopped
// or that does not answer — each with its exit code and a sentence.
func TestWaitEndings(t *testing.T) {
	for _, c := range []struct {
		name    string
		feed    func(s *fakeStream)
		timeout int
		code    int
		msg     string
	}{
		{"completed", func(s *fakeStream) { s.end(&wire.SessionEnded{SessionID: "01REEVE", Status: "completed"}, nil) }, 0, ExitOK, "completed"},
		{"failed", func(s *fakeStream) {
			s.end(&wire.SessionEnded{SessionID: "01REEVE", Status: "failed", Reason: "model overloaded"}, nil)
		}, 0, ExitSessionBad, "failed: model overloaded"},
		{"timeout", func(*fakeStream) {}, 1, ExitTimeout, "timed out waiting for session 01REEVE (it keeps running)"},
		{"daemon stopped", func(s *fakeStream) { s.end(nil, &wireclient.StoppedError{Reason: "the daemon is stopping"}) }, 0, ExitNotRunning, "the daemon stopped while following session 01REEVE (the daemon is stopping)"},
		{"daemon lost", func(s *fakeStream) { s.end(nil, errors.Join(wireclient.ErrLost, errors.New("refused"))) }, 0, ExitNotRunning, "lost the daemon while following session 01REEVE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStream()
			f := &fakeDaemon{session: func(string) (wire.SessionInfo, error) { return reeveOne, nil }, subscribe: func(string, int64) (Stream, error) { return s, nil }}
			go c.feed(s)
			cmd, _, errb := testCmd(t, f)
			err := runWait(context.Background(), &waitOptions{daemonCmd: cmd, sessionID: "01REEVE", timeout: c.timeout})
			if exitCode(err) != c.code {
				t.Fatalf("exit %d (%v), want %d", exitCode(err), err, c.code)
			}
			msg := errb.String()
			if err != nil {
				msg += err.Error()
			}
			if !strings.Contains(msg, c.msg) {
				t.Fatalf("%q lacks %q", msg, c.msg)
			}
		})
	}
	f := &fakeDaemon{session: func(string) (wire.SessionInfo, error) {
		return wire.SessionInfo{}, &wire.AckError{Code: wire.CodeNotFound, Message: "no session"}
	}}
	cmd, _, _ := testCmd(t, f)
	if err := runWait(context.Background(), &waitOptions{daemonCmd: cmd, sessionID: "X"}); exitCode(err) != ExitNotFound {
		t.Fatalf("unknown session: %v", err)
	}
	f = &fakeDaemon{connectErr: exitf(ExitNotRunning, "no daemon is running")}
	cmd, _, _ = testCmd(t, f)
	if err := runWait(context.Background(), &waitOptions{daemonCmd: cmd, sessionID: "X"}); exitCode(err) != ExitNotRunning {
		t.Fatalf("no daemon: %v", err)
	}
}

// A call to the daemon that runs out of time is an unresponsive daemon
// (9), never the wait's own timeout (7).
func TestCallTimeoutIsNotTheWaitTimeout(t *testing.T) {
	f := &fakeDaemon{session: func(string) (wire.SessionInfo, error) { return reeveOne, nil }, subscribe: func(string, int64) (Stream, error) {
		return nil, context.DeadlineExceeded
	}}
	cmd, _, _ := testCmd(t, f)
	err := runWait(context.Background(), &waitOptions{daemonCmd: cmd, sessionID: "01REEVE"})
	if exitCode(err) != ExitUnhealthy || !strings.Contains(err.Error(), "did not answer in time") {
		t.Fatalf("call timeout: %v", err)
	}
}

// run: a missing directory is not found before any daemon is involved;
// with --wait the outcome and its exit code, with --json the session.
func TestRun(t *testing.T) {
	f := &fakeDaemon{}
	cmd, _, _ := testCmd(t, f)
	if err := runRun(context.Background(), &runOptions{daemonCmd: cmd, dir: "/no/such/dir", prompt: "x"}); exitCode(err) != ExitNotFound {
		t.Fatalf("missing directory: %v", err)
	}
	if len(f.calls) != 0 {
		t.Fatalf("calls %v", f.calls)
	}
}

// logs without --follow prints what is stored when it begins and stops
// there, though the running session goes on; with --json each line is the
// daemon's frame, byte for byte, streamed up to the last seq it had.
func TestLogsPrintsStoredEvents(t *testing.T) {
	var frames []string
	for seq := int64(2); seq <= 3; seq++ {
		raw, _ := json.Marshal(wire.AgentMessage{Text: fmt.Sprint("m", seq)})
		frame, _ := json.Marshal(wire.SessionUpdate{Type: wire.TypeSessionUpdate, SessionID: "01REEVE", Seq: seq, TS: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Kind: wire.KindAgentMessage, Data: raw})
		frames = append(frames, string(frame))
	}
	f := &fakeDaemon{session: func(string) (wire.SessionInfo, error) { si := reeveOne; si.LastSeq = 3; return si, nil },
		stream: func(_ string, after, until int64, w io.Writer) (int64, error) {
			if after != 1 || until != 3 {
				t.Errorf("streamed (%d, %d], want (1, 3]", after, until)
			}
			for _, fr := range frames {
				io.WriteString(w, fr+"\n")
			}
			return int64(len(frames)), nil
		}}
	cmd, out, _ := testCmd(t, f)
	if err := runLogs(context.Background(), &logsOptions{daemonCmd: cmd, sessionID: "01REEVE", lastSeq: 1, json: true}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(frames, "\n") {
		t.Fatalf("lines\n%s\nwant\n%s", out, strings.Join(frames, "\n"))
	}

	if f.callsOf("subscribe") != 0 {
		t.Fatal("--json subscribed instead of streaming")
	}

	// Human form, and nothing to print when --last-seq is already the last.
	s2 := newStream()
	f.subscribe = func(string, int64) (Stream, error) { return s2, nil }
	go s2.send("01REEVE", 1, wire.KindAgentMessage, wire.AgentMessage{Text: "hello there"})
	cmd, out, _ = testCmd(t, f)
	f.session = func(string) (wire.SessionInfo, error) { si := reeveOne; si.LastSeq = 1; return si, nil }
	if err := runLogs(context.Background(), &logsOptions{daemonCmd: cmd, sessionID: "01REEVE"}); err != nil || !strings.Contains(out.String(), "hello there") {
		t.Fatalf("human form: %v\n%s", err, out)
	}
	calls := f.callsOf("subscribe")
	cmd, out, _ = testCmd(t, f)
	if err := runLogs(context.Background(), &logsOptions{daemonCmd: cmd, sessionID: "01REEVE", lastSeq: 1}); err != nil || out.String() != "" || f.callsOf("subscribe") != calls {
		t.Fatalf("nothing after --last-seq: %v %q, %d subscriptions", err, out, f.callsOf("subscribe")-calls)
	}
}

// A stream that breaks before the last stored event is an error, not a
// silently short log.
func TestLogsReportsABrokenStream(t *testing.T) {
	s := newStream()
	f := &fakeDaemon{session: func(string) (wire.SessionInfo, error) { si := reeveOne; si.LastSeq = 10; return si, nil },
		subscribe: func(string, int64) (Stream, error) { return s, nil }}
	go func() {
		s.send("01REEVE", 1, wire.KindAgentMessage, wire.AgentMessage{Text: "a"})
		s.end(nil, errors.New("connection lost"))
	}()
	cmd, out, _ := testCmd(t, f)
	err := runLogs(context.Background(), &logsOptions{daemonCmd: cmd, sessionID: "01REEVE"})
	if err == nil || !strings.Contains(err.Error(), "after seq 1 of 10") || !strings.Contains(out.String(), "a") {
		t.Fatalf("err %v, out %q", err, out)
	}

	// With --json, the stream's own check (controlclient counts the lines).
	f.stream = func(_ string, _, _ int64, w io.Writer) (int64, error) {
		io.WriteString(w, `{"type":"session-update","seq":1}`+"\n")
		return 1, errors.New("the log of session 01REEVE ended after 1 of 10 events")
	}
	cmd, out, _ = testCmd(t, f)
	err = runLogs(context.Background(), &logsOptions{daemonCmd: cmd, sessionID: "01REEVE", json: true})
	if err == nil || exitCode(err) == 0 || !strings.Contains(err.Error(), "1 of 10") || !strings.Contains(out.String(), `"seq":1`) {
		t.Fatalf("err %v, out %q", err, out)
	}
}
