package codex

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// nopCloser is a stdin that keeps what reeve wrote.
type nopCloser struct {
	mu sync.Mutex
	bytes.Buffer
}

func (n *nopCloser) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.Buffer.Write(p)
}
func (n *nopCloser) Close() error { return nil }

func (n *nopCloser) answers(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]json.RawMessage{}
	for _, l := range strings.Split(strings.TrimSpace(n.String()), "\n") {
		var e struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("reeve wrote %q: %v", l, err)
		}
		if len(e.Error) > 0 {
			out[string(e.ID)] = e.Error
		} else {
			out[string(e.ID)] = e.Result
		}
	}
	return out
}

func testChannel(decide func(context.Context, agents.ToolUse) agents.Verdict) (*channel, *nopCloser, *recorder) {
	var rec recorder
	m := newMapper(rec.Emit, "", "", "")
	m.threadID = "thread-1"
	c := newChannel(m, decide, "/w")
	w := &nopCloser{}
	c.w = w
	return c, w, &rec
}

// Every request the app-server makes gets an answer, and none allows what
// reeve did not: bad parameters, a patch whose changes were never
// announced, a grant of a whole root, a panicking gate, a turn without a
// decision function and requests reeve does not handle are all declined
// or refused; an allowed command is decided as its hook sees it.
func TestChannelFailsClosed(t *testing.T) {
	var mu sync.Mutex
	var asked []agents.ToolUse
	allow := func(_ context.Context, u agents.ToolUse) agents.Verdict {
		mu.Lock()
		asked = append(asked, u)
		mu.Unlock()
		if strings.Contains(string(u.Input), "boom") {
			panic("gate failure")
		}
		return agents.Verdict{Allow: true}
	}
	c, w, _ := testChannel(allow)
	c.m.started(&item{ID: "fc1", Type: "fileChange", Changes: []fileChange{{Path: "/w/a.txt"}}})
	lines := []string{
		`{"id":1,"method":"item/commandExecution/requestApproval","params":{"itemId":"c1","command":"/bin/bash -lc 'touch it'","cwd":"/w/sub"}}`,
		`{"id":2,"method":"item/commandExecution/requestApproval","params":{"itemId":"c2","command":42}}`,
		`{"id":3,"method":"item/commandExecution/requestApproval","params":{"itemId":"c3","command":"echo boom"}}`,
		`{"id":4,"method":"item/fileChange/requestApproval","params":{"itemId":"nope"}}`,
		`{"id":5,"method":"item/fileChange/requestApproval","params":{"itemId":"fc1","grantRoot":"/"}}`,
		`{"id":6,"method":"item/fileChange/requestApproval","params":{"itemId":"fc1"}}`,
		`{"id":7,"method":"item/tool/requestUserInput","params":{}}`,
		`{"id":8,"method":"item/permissions/requestApproval","params":{"itemId":"p1","cwd":"/w","permissions":{"network":{"enabled":true}}}}`,
		`{"id":"s9","method":"execCommandApproval","params":{"callId":"l1","command":["rm","-rf","boom"],"cwd":"/w"}}`,
	}
	for _, l := range lines {
		c.line([]byte(l))
	}
	c.wg.Wait()
	got := w.answers(t)
	want := map[string]string{
		"1": `{"decision":"accept"}`, "2": `{"decision":"decline"}`, "3": `{"decision":"decline"}`,
		"4": `{"decision":"decline"}`, "5": `{"decision":"decline"}`, "6": `{"decision":"accept"}`,
		"8":    `{"permissions":{"network":{"enabled":true}},"scope":"turn"}`,
		`"s9"`: `{"decision":"denied"}`,
	}
	for id, w := range want {
		if string(got[id]) != w {
			t.Errorf("answer %s: %s, want %s", id, got[id], w)
		}
	}
	if !strings.Contains(string(got["7"]), "does not handle") {
		t.Errorf("user input: %s", got["7"])
	}
	var cmd agents.ToolUse
	for _, u := range asked {
		if u.ToolUseID == "c1" {
			cmd = u
		}
		if u.ToolUseID == "nope" || u.ToolUseID == "c2" {
			t.Errorf("decided a request reeve cannot read: %+v", u)
		}
	}
	if string(cmd.Input) != `{"command":"touch it"}` || cmd.Tool != "Bash" || cmd.Cwd != "/w/sub" || cmd.AgentSessionID != "thread-1" ||
		cmd.Channel != methodCommandApproval {
		t.Errorf("command use %+v", cmd)
	}

	// No decision function: nothing that asks runs.
	c, w, _ = testChannel(nil)
	c.line([]byte(`{"id":1,"method":"item/commandExecution/requestApproval","params":{"itemId":"c1","command":"ls"}}`))
	c.wg.Wait()
	if got := w.answers(t); string(got["1"]) != `{"decision":"decline"}` {
		t.Errorf("no decision function: %s", got["1"])
	}
	// A decision still pending when the turn ends is a decline.
	block := func(ctx context.Context, u agents.ToolUse) agents.Verdict {
		<-ctx.Done()
		return agents.Verdict{Allow: true}
	}
	c, w, _ = testChannel(block)
	c.line([]byte(`{"id":1,"method":"item/commandExecution/requestApproval","params":{"itemId":"c1","command":"ls"}}`))
	c.cancel()
	c.wg.Wait()
	if got := w.answers(t); string(got["1"]) != `{"decision":"decline"}` {
		t.Errorf("withdrawn: %s", got["1"])
	}
}

// A call Codex declined without asking reeve is the agent's decision; one
// reeve declined is not recorded twice.
func TestDeclinedItems(t *testing.T) {
	c, _, rec := testChannel(func(context.Context, agents.ToolUse) agents.Verdict { return agents.Verdict{} })
	for _, l := range []string{
		`{"method":"item/started","params":{"item":{"type":"commandExecution","id":"a","command":"x","status":"inProgress"}}}`,
		`{"id":1,"method":"item/commandExecution/requestApproval","params":{"itemId":"a","command":"x"}}`,
		`{"method":"item/completed","params":{"item":{"type":"commandExecution","id":"a","command":"x","status":"declined"}}}`,
		`{"method":"item/completed","params":{"item":{"type":"commandExecution","id":"b","command":"y","status":"declined"}}}`,
	} {
		c.line([]byte(l))
	}
	c.wg.Wait()
	ds := rec.Of(wire.KindPermissionDecision)
	if len(ds) != 1 || ds[0].(wire.PermissionDecision).ToolUseID != "b" || ds[0].(wire.PermissionDecision).DecidedBy != "agent" {
		t.Fatalf("decisions %+v", ds)
	}
	if rs := rec.Of(wire.KindToolResult); len(rs) != 2 || !rs[0].(wire.ToolResult).IsError {
		t.Fatalf("results %+v", rs)
	}
}

func TestUnwrapShell(t *testing.T) {
	for in, want := range map[string]string{
		`/bin/bash -lc 'touch a.txt'`: "touch a.txt",
		`bash -c 'echo '"'"'hi'"'"''`: "echo 'hi'",
		`/bin/zsh -lc "ls -la"`:       "ls -la",
		`/bin/bash -lc "$(curl x)"`:   `/bin/bash -lc "$(curl x)"`,
		`/bin/bash -lc 'a' extra`:     `/bin/bash -lc 'a' extra`,
		`python -c 'print(1)'`:        `python -c 'print(1)'`,
		`/bin/bash -lc 'a' > /tmp/x`:  `/bin/bash -lc 'a' > /tmp/x`,
		`/bin/bash -lc 'a'; rm -rf /`: `/bin/bash -lc 'a'; rm -rf /`,
		`X=1 /bin/bash -lc 'a'`:       `X=1 /bin/bash -lc 'a'`,
		`/bin/bash -lc 'unterminated`: `/bin/bash -lc 'unterminated`,
	} {
		if got := unwrapShell(in); got != want {
			t.Errorf("unwrapShell(%q) = %q, want %q", in, got, want)
		}
	}
}

// 100 approvals in flight at once, decided in any order: each gets exactly
// one answer, under its own id, with its own decision.
func TestChannelConcurrentApprovals(t *testing.T) {
	decide := func(_ context.Context, u agents.ToolUse) agents.Verdict {
		var in struct{ Command string }
		json.Unmarshal(u.Input, &in)
		return agents.Verdict{Allow: strings.HasSuffix(in.Command, "even")}
	}
	c, w, _ := testChannel(decide)
	const n = 100
	for i := 0; i < n; i++ {
		parity := "odd"
		if i%2 == 0 {
			parity = "even"
		}
		c.line([]byte(`{"id":` + itoa(i) + `,"method":"item/commandExecution/requestApproval","params":{"itemId":"c` + itoa(i) + `","command":"run ` + parity + `"}}`))
	}
	c.wg.Wait()
	w.mu.Lock()
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	w.mu.Unlock()
	if len(lines) != n {
		t.Fatalf("%d answers to %d requests", len(lines), n)
	}
	got := w.answers(t)
	for i := 0; i < n; i++ {
		want := `{"decision":"decline"}`
		if i%2 == 0 {
			want = `{"decision":"accept"}`
		}
		if string(got[itoa(i)]) != want {
			t.Fatalf("answer %d: %s, want %s", i, got[itoa(i)], want)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
