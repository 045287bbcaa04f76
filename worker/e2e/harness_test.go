package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// reeveBin is the binary under test, built once as a user builds it.
var reeveBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "reeve-worker-e2e-")
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

// plane is a control plane with an owner and their workspace.
type plane struct {
	t     testing.TB
	srv   *servertest.Server
	owner servertest.User
}

func newPlane(t testing.TB, o servertest.Options) *plane {
	srv := servertest.Start(t, o)
	return &plane{t: t, srv: srv, owner: srv.NewUser("owner@example.com")}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// executor creates a managed executor and writes its runner credential to
// a 0600 file.
func (p *plane) executor(u servertest.User, name string, tags, agents []string) (sdk.ManagedExecutor, string) {
	p.t.Helper()
	ex, err := u.Client.CreateManagedExecutor(ctxT(p.t), u.Workspace, sdk.ManagedExecutorCreateRequest{Name: name, Tags: tags, Agents: agents})
	if err != nil {
		p.t.Fatalf("create executor: %v", err)
	}
	if !strings.HasPrefix(ex.Credential, sdk.RunnerCredentialPrefix) {
		p.t.Fatalf("executor credential %q", ex.Credential)
	}
	f := filepath.Join(p.t.TempDir(), name+".cred")
	if err := os.WriteFile(f, []byte(ex.Credential+"\n"), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return ex, f
}

func (p *plane) queue(req sdk.WorkflowRunCreateRequest) sdk.WorkflowRun {
	p.t.Helper()
	r, err := p.owner.Client.CreateWorkflowRun(ctxT(p.t), p.owner.Workspace, req)
	if err != nil {
		p.t.Fatalf("queue run: %v", err)
	}
	return r
}

func (p *plane) run(id string) sdk.WorkflowRun {
	p.t.Helper()
	r, err := p.owner.Client.GetWorkflowRun(ctxT(p.t), p.owner.Workspace, id)
	if err != nil {
		p.t.Fatalf("get run %s: %v", id, err)
	}
	return r
}

// waitRun polls a run until cond holds.
func (p *plane) waitRun(id, what string, timeout time.Duration, cond func(sdk.WorkflowRun) bool) sdk.WorkflowRun {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := p.run(id)
		if cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("run %s: timed out waiting for %s; it is %s (attempt %d, error %q)", id, what, r.Status, r.Attempt, r.Error)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// machine is a daemon home with a running daemon.
type machine struct {
	t    testing.TB
	home string
	env  []string
}

func newMachine(t testing.TB, env []string) *machine {
	t.Helper()
	if env == nil {
		env = os.Environ()
	}
	m := &machine{t: t, home: filepath.Join(t.TempDir(), "home"), env: env}
	t.Cleanup(func() { m.run("stop", "--force", "--timeout", "10") })
	m.must("start", "--listen", "127.0.0.1:0")
	return m
}

type result struct {
	stdout, stderr string
	code           int
}

func (m *machine) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, reeveBin, args...)
	cmd.Env = append(append([]string{}, m.env...), "REEVE_HOME="+m.home)
	return cmd
}

func (m *machine) run(args ...string) result {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := m.command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		m.t.Fatalf("reeve %v: %v", args, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

func (m *machine) must(args ...string) result {
	m.t.Helper()
	r := m.run(args...)
	if r.code != 0 {
		m.t.Fatalf("reeve %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// leaseLine is one line of `worker start --json`.
type leaseLine struct {
	LeaseID     string `json:"lease_id"`
	RunID       string `json:"run_id"`
	Status      string `json:"status"`
	SessionID   string `json:"session_id"`
	ExitCode    int    `json:"exit_code"`
	DiffSummary string `json:"diff_summary"`
	Checkpoints int    `json:"checkpoints"`
	Error       string `json:"error"`
}

// workerProc is a running `reeve worker start`.
type workerProc struct {
	t      testing.TB
	name   string
	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	lines  []leaseLine
	stderr bytes.Buffer
	err    error
}

func (m *machine) startWorker(name string, args ...string) *workerProc {
	m.t.Helper()
	args = append([]string{"worker", "start", "--worker-profile", name, "--json", "--claim-wait", "3"}, args...)
	w := &workerProc{t: m.t, name: name, cmd: m.command(context.Background(), args...), done: make(chan struct{})}
	w.cmd.Stderr = &syncWriter{mu: &w.mu, w: &w.stderr}
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		m.t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l leaseLine
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				w.mu.Lock()
				w.lines = append(w.lines, l)
				w.mu.Unlock()
			}
		}
		err := w.cmd.Wait()
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
		close(w.done)
	}()
	m.t.Cleanup(func() {
		w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.done:
		case <-time.After(60 * time.Second):
			w.cmd.Process.Kill()
			<-w.done
		}
		if m.t.Failed() {
			m.t.Logf("worker %s stderr:\n%s", name, w.log())
		}
	})
	return w
}

func (w *workerProc) results() []leaseLine {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]leaseLine(nil), w.lines...)
}

func (w *workerProc) log() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stderr.String()
}

// exited waits for the worker to exit and returns its exit code.
func (w *workerProc) exited(timeout time.Duration) int {
	w.t.Helper()
	select {
	case <-w.done:
	case <-time.After(timeout):
		w.t.Fatalf("worker %s did not exit; stderr:\n%s", w.name, w.log())
	}
	if ee, ok := w.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return 0
}

type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// gitRepo makes a repository with one commit in a directory named name.
func gitRepo(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"config", "user.email", "t@example.com"},
		{"config", "user.name", "t"},
	} {
		gitIn(t, dir, args...)
	}
	os.WriteFile(filepath.Join(dir, "README"), []byte("app\n"), 0o644)
	gitIn(t, dir, "add", ".")
	gitIn(t, dir, "commit", "-q", "-m", "init")
	return dir
}

func gitIn(t testing.TB, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func decodeJSON[T any](t testing.TB, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}
