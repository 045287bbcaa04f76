// Package sessiontest runs the reeve binary's daemon with a context vault
// and a real agent. It has a package of its own so that its binary build
// and agent runs do not lengthen cmd/reeve's tests.
package sessiontest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/servertest"
)

// reeveBin is the binary under test, built once as a user builds it.
var reeveBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "reeve-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	reeveBin = filepath.Join(dir, "reeve")
	build := exec.Command("go", "build", "-o", reeveBin, "reeve.dev/reeve/cmd/reeve")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build reeve:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemonHome runs reeve commands with one home and environment, and
// stops its daemon when the test ends.
type daemonHome struct {
	t   *testing.T
	dir string
	env []string
}

func newHome(t *testing.T) *daemonHome {
	h := &daemonHome{t: t, dir: filepath.Join(t.TempDir(), "home")}
	t.Cleanup(func() { h.run("stop", "--force", "--timeout", "10") })
	return h
}

type result struct {
	stdout, stderr string
	code           int
}

func (h *daemonHome) run(args ...string) result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, reeveBin, args...)
	env := h.env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(append([]string(nil), env...), "REEVE_HOME="+h.dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		h.t.Fatalf("run reeve %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

func (h *daemonHome) must(args ...string) result {
	h.t.Helper()
	r := h.run(args...)
	if r.code != 0 {
		h.t.Fatalf("reeve %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

func (h *daemonHome) start() { h.must("start", "--listen", "127.0.0.1:0") }

func (h *daemonHome) sessionInfo(out string) wire.SessionInfo {
	h.t.Helper()
	var si wire.SessionInfo
	if err := json.Unmarshal([]byte(out), &si); err != nil || si.ID == "" {
		h.t.Fatalf("session JSON: %v %q", err, out)
	}
	return si
}

// systemPrompt is the system prompt of a Messages request, as one string.
func systemPrompt(t *testing.T, body []byte) string {
	t.Helper()
	var req struct {
		System json.RawMessage `json:"system"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	var s string
	if json.Unmarshal(req.System, &s) == nil {
		return s
	}
	var blocks []struct{ Text string }
	if err := json.Unmarshal(req.System, &blocks); err != nil {
		t.Fatalf("system prompt %s: %v", req.System, err)
	}
	var all []string
	for _, b := range blocks {
		all = append(all, b.Text)
	}
	return strings.Join(all, "\n")
}

// A Claude Code session started by the daemon receives the context
// vault's entries relevant to its task, as an appended system prompt, on
// its first turn and its resumed ones; the scripted model server sees
// them. Nothing is written into the worktree.
func TestClaudeSessionReceivesContext(t *testing.T) {
	exe := agenttest.Claude(t)
	model := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "Understood the conventions."},
		{Text: "Still following them."},
	}})
	cp := servertest.Start(t, servertest.Options{})
	alice := cp.NewUser("alice@example.com")
	in, err := alice.Client.CreateInstall(context.Background(), alice.Workspace, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	h := newHome(t)
	h.env = append(agenttest.ClaudeEnv(model.URL, t.TempDir()), "REEVE_CLAUDE_PATH="+exe)
	d := home.Dir(h.dir)
	if err := d.Prepare(); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteRelayCredentials(home.RelayCredentials{InstallID: in.ID, WorkspaceID: alice.Workspace, IssueToken: in.IssueToken, ServerURL: cp.URL, PairedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	h.must("context", "init", "--vault", "team")
	entries := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(entries, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	h.must("context", "add", write("commits.md", "SENTINEL-CTX-7F3: commit subjects start with the package name."), "--title", "Commit style", "--use-when", "always")
	h.must("context", "add", write("py.md", "SENTINEL-PY-ONLY: use ruff."), "--title", "Python lint", "--use-when", "path:**/*.py")
	h.start()

	work := t.TempDir()
	for _, args := range [][]string{{"init", "--quiet"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "--quiet", "--allow-empty", "-m", "start"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	os.WriteFile(filepath.Join(work, "main.go"), []byte("package main\n"), 0o644)

	r := h.must("run", work, "--agent", "claude", "--mode", "bypass", "--prompt", "tidy the commit history", "--wait", "--timeout", "120", "--json")
	si := h.sessionInfo(r.stdout)
	if si.Status != "completed" {
		t.Fatalf("session ended %s: %s", si.Status, si.StatusReason)
	}
	h.must("send", si.ID, "--prompt", "and again")
	if r := h.run("wait", si.ID, "--timeout", "60"); r.code != 0 {
		t.Fatalf("wait after send: %d %s", r.code, r.stderr)
	}
	main := model.MainRequests()
	if len(main) < 2 {
		t.Fatalf("%d main requests", len(main))
	}
	for i, req := range main {
		sys := systemPrompt(t, req.Body)
		if !strings.Contains(sys, "SENTINEL-CTX-7F3") || !strings.Contains(sys, "## Commit style") {
			t.Fatalf("request %d: the model did not see the resolved entry; system prompt:\n%s", i, sys)
		}
		if strings.Contains(sys, "SENTINEL-PY-ONLY") {
			t.Fatalf("request %d: an entry irrelevant to a Go project reached the model", i)
		}
	}
	// The context lives beside the session, not in the worktree.
	out, err := exec.Command("git", "-C", work, "status", "--porcelain", "--ignored").CombinedOutput()
	if err != nil || strings.Contains(string(out), "context") {
		t.Fatalf("the checkout holds context files: %s %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "sessions", si.ID, "context.md")); err != nil {
		t.Fatalf("the session's context was not kept beside it: %v", err)
	}
}
