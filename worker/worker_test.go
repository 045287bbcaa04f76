package worker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/sdk"
)

func lease(workdir, agent string) sdk.Lease {
	return sdk.Lease{ID: "l1", Fence: 3, RunID: "r1", HeartbeatInterval: 1, ExpiresAt: time.Now().Add(time.Minute),
		Run: sdk.WorkflowRun{ID: "r1", Agent: agent, Prompt: "do it", Workdir: workdir, Attempt: 1}}
}

func runner(t *testing.T, srv *fakeServer, d *fakeDaemon) *LeaseRunner {
	dir := t.TempDir()
	return &LeaseRunner{Server: srv, Daemon: d, Profile: Profile{Workdirs: []string{dir}}, Agents: []string{"claude", "shell"}, Logf: t.Logf}
}

func TestLeaseReportsEvidence(t *testing.T) {
	srv := &fakeServer{}
	d := &fakeDaemon{diff: wire.DiffStat{FilesChanged: 1, Insertions: 2, Files: []wire.FileStat{{Path: "a.txt", Insertions: 2}}}}
	cost := 0.25
	d.script = func(s *fakeSession) {
		s.emit(wire.KindUsage, wire.Usage{Model: "m1", InputTokens: 10, OutputTokens: 5, CostUSD: &cost})
		s.emit(wire.KindUsage, wire.Usage{InputTokens: 1, OutputTokens: 1})
		s.emit(wire.KindCheckpoint, wire.Checkpoint{SHA: "abc", Turn: 1, Action: "turn"})
		s.emit(wire.KindAgentMessage, map[string]any{"text": "the key is sk-ant-abcdefghijklmnopqrstuvwxyz " + strings.Repeat("x", 10000)})
		s.end("completed")
	}
	r := runner(t, srv, d)
	res := r.Run(context.Background(), lease(filepath.Base(r.Profile.Workdirs[0]), "claude"))
	if res.Status != StatusSucceeded {
		t.Fatalf("result %+v", res)
	}
	if len(srv.completes) != 1 {
		t.Fatalf("completes: %+v", srv.completes)
	}
	c := srv.completes[0]
	if c.Fence != 3 || c.Status != "succeeded" || *c.ExitCode != 0 || c.SessionID != "s1" || !strings.HasPrefix(c.DiffSummary, "1 file changed, 2 insertions(+), 0 deletions(-): a.txt") {
		t.Fatalf("complete: %+v", c)
	}
	if c.Usage == nil || c.Usage.InputTokens != 11 || c.Usage.OutputTokens != 6 || c.Usage.TotalTokens != 17 || c.Usage.CostUSD != "0.250000" || c.Usage.Model != "m1" {
		t.Fatalf("usage: %+v", c.Usage)
	}
	if len(c.Checkpoints) != 1 || c.Checkpoints[0].SHA != "abc" {
		t.Fatalf("checkpoints: %+v", c.Checkpoints)
	}
	// The session's events are on the run's history, masked and cut.
	if len(srv.events) != 4 || srv.events[0].Kind != wire.KindUsage || srv.events[0].Data["input_tokens"] != float64(10) || srv.events[3].Kind != wire.KindAgentMessage || srv.events[3].Data["seq"] != int64(4) {
		t.Fatalf("events %+v", srv.events)
	}
	msg := srv.events[3].Data["text"].(string)
	if strings.Contains(msg, "sk-ant-") || len(msg) > 4200 || !strings.Contains(msg, "bytes cut") {
		t.Fatalf("agent message evidence: %d bytes %q", len(msg), msg[:80])
	}
	if len(srv.states) != 1 || srv.states[0].State != sdk.RunRunning || srv.states[0].SessionID != "s1" || srv.states[0].Fence != 3 {
		t.Fatalf("states: %+v", srv.states)
	}
	if l := d.launches[0]; l.Agent != "claude" || l.Prompt != "do it" || l.Mode != "detect" || l.Directory != "dir-"+r.Profile.Workdirs[0] {
		t.Fatalf("launch: %+v", l)
	}
}

func TestCancelRequestedStopsTheAgent(t *testing.T) {
	beats := 0
	srv := &fakeServer{heartbeat: func(string, int64) (sdk.LeaseHeartbeat, error) {
		beats++
		return sdk.LeaseHeartbeat{ExpiresAt: time.Now().Add(time.Minute), CancelRequested: beats >= 2, Status: sdk.RunRunning}, nil
	}}
	d := &fakeDaemon{}
	d.script = func(s *fakeSession) { s.waitKilled() }
	r := runner(t, srv, d)
	res := r.Run(context.Background(), lease("", "shell"))
	if res.Status != StatusCancelled || len(d.kills) != 1 {
		t.Fatalf("result %+v, kills %v", res, d.kills)
	}
	if len(srv.completes) != 1 || srv.completes[0].Status != StatusCancelled {
		t.Fatalf("completes %+v", srv.completes)
	}
}

// A lease refused as stale (another worker holds the run now) stops the
// agent and reports nothing under the old fence.
func TestLostLeaseStopsAndDoesNotReport(t *testing.T) {
	srv := &fakeServer{heartbeat: func(string, int64) (sdk.LeaseHeartbeat, error) {
		return sdk.LeaseHeartbeat{}, &sdk.APIError{Status: 409, Body: sdk.ErrorBody{Code: sdk.CodeStaleFence, Message: "stale fence"}}
	}}
	d := &fakeDaemon{}
	d.script = func(s *fakeSession) { s.waitKilled() }
	res := runner(t, srv, d).Run(context.Background(), lease("", "shell"))
	if res.Status != "lost" || len(d.kills) != 1 || len(srv.completes) != 0 || len(srv.releases) != 0 {
		t.Fatalf("result %+v kills %v completes %+v", res, d.kills, srv.completes)
	}
}

// Transient heartbeat failures are retried until the lease's expiry;
// past it the lease counts as lost.
func TestHeartbeatOutageLosesTheLeaseAtExpiry(t *testing.T) {
	srv := &fakeServer{heartbeat: func(string, int64) (sdk.LeaseHeartbeat, error) {
		return sdk.LeaseHeartbeat{}, errors.New("connection refused")
	}}
	d := &fakeDaemon{}
	d.script = func(s *fakeSession) { s.waitKilled() }
	l := lease("", "shell")
	l.ExpiresAt = time.Now().Add(2 * time.Second)
	res := runner(t, srv, d).Run(context.Background(), l)
	if res.Status != "lost" || !strings.Contains(res.Error, "before the lease expired") {
		t.Fatalf("result %+v", res)
	}
}

func TestApprovalDecidedOnTheServer(t *testing.T) {
	for _, tc := range []struct {
		state, want string
	}{{sdk.ApprovalApproved, "allow"}, {sdk.ApprovalDenied, "deny"}, {sdk.ApprovalExpired, "deny"}} {
		t.Run(tc.state, func(t *testing.T) {
			var raised sdk.LeaseApprovalRequest
			polls := 0
			srv := &fakeServer{
				raise: func(req sdk.LeaseApprovalRequest) (sdk.WorkflowApproval, error) {
					raised = req
					return sdk.WorkflowApproval{NodeKey: req.NodeKey, State: sdk.ApprovalPending}, nil
				},
				wait: func(key string) (sdk.WorkflowApproval, error) {
					polls++
					if polls < 2 {
						return sdk.WorkflowApproval{NodeKey: key, State: sdk.ApprovalPending}, nil
					}
					return sdk.WorkflowApproval{NodeKey: key, State: tc.state, DecidedBy: "owner@example.com", Reason: "looked fine"}, nil
				},
			}
			d := &fakeDaemon{}
			d.script = func(s *fakeSession) {
				s.emit(wire.KindPermissionRequest, wire.PermissionRequest{ID: "pr1", SessionID: s.id, Agent: "claude", Tool: "Bash", Input: []byte(`{"command":"touch x"}`)})
				a := <-s.answers
				s.emit(wire.KindPermissionDecision, wire.PermissionDecision{RequestID: a.RequestID, Decision: a.Decision})
				s.end("completed")
			}
			res := runner(t, srv, d).Run(context.Background(), lease("", "claude"))
			if res.Status != StatusSucceeded {
				t.Fatalf("result %+v", res)
			}
			if raised.NodeKey != "pr1" || raised.Tool != "Bash" || raised.Fence != 3 || raised.Input["command"] != "touch x" {
				t.Fatalf("raised %+v", raised)
			}
			if len(d.answers) != 1 || d.answers[0].Decision != tc.want || d.answers[0].RequestID != "pr1" || !strings.Contains(d.answers[0].Reason, "owner@example.com") {
				t.Fatalf("answers %+v", d.answers)
			}
		})
	}
}

// Nobody deciding within the approval timeout denies the tool use.
func TestApprovalTimeoutDenies(t *testing.T) {
	srv := &fakeServer{}
	d := &fakeDaemon{}
	d.script = func(s *fakeSession) {
		s.emit(wire.KindPermissionRequest, wire.PermissionRequest{ID: "pr1", Tool: "Bash"})
		<-s.answers
		s.end("completed")
	}
	r := runner(t, srv, d)
	r.ApprovalTimeout = 1500 * time.Millisecond
	r.Run(context.Background(), lease("", "claude"))
	if len(d.answers) != 1 || d.answers[0].Decision != "deny" || !strings.Contains(d.answers[0].Reason, "nobody decided") {
		t.Fatalf("answers %+v", d.answers)
	}
}

// A run this worker cannot do goes back to the queue untouched: no agent
// starts, nothing is completed.
func TestReleaseWhatTheWorkerCannotDo(t *testing.T) {
	for name, l := range map[string]sdk.Lease{
		"unknown directory": lease("/no/such/dir", "claude"),
		"missing agent":     lease("", "gemini"),
		"no prompt":         func() sdk.Lease { l := lease("", "claude"); l.Run.Prompt = ""; return l }(),
	} {
		t.Run(name, func(t *testing.T) {
			srv := &fakeServer{}
			d := &fakeDaemon{}
			res := runner(t, srv, d).Run(context.Background(), l)
			if res.Status != "released" || len(srv.releases) != 1 || srv.releases[0].Fence != 3 || len(d.launches) != 0 || len(srv.completes) != 0 {
				t.Fatalf("result %+v releases %+v launches %v", res, srv.releases, d.launches)
			}
			if srv.releases[0].Reason == "" {
				t.Fatal("release without a reason")
			}
		})
	}
}

// Stopping the worker mid-run stops the agent and gives the run back.
func TestStoppingReleasesTheRun(t *testing.T) {
	srv := &fakeServer{}
	d := &fakeDaemon{}
	started := make(chan struct{})
	d.script = func(s *fakeSession) { close(started); s.waitKilled() }
	calls := 0
	srv.claim = func(sdk.WorkerClaimRequest) (sdk.Lease, bool, error) {
		calls++
		if calls == 1 {
			return lease("", "shell"), true, nil
		}
		return sdk.Lease{}, false, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	var results []LeaseResult
	w, err := New(ctx, Options{Server: srv, Daemon: d, Profile: Profile{Workdirs: []string{t.TempDir()}}, ClaimWait: time.Second, OnLease: func(r LeaseResult) { results = append(results, r) }, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || results[0].Status != "released" || len(srv.releases) != 1 || len(d.kills) != 1 || len(srv.completes) != 0 {
		t.Fatalf("results %+v releases %+v kills %v", results, srv.releases, d.kills)
	}
}

// --agents is checked against the daemon before any claim.
func TestAgentsCheckedBeforeClaim(t *testing.T) {
	srv := &fakeServer{}
	d := &fakeDaemon{health: wire.Health{Agents: []string{"claude", "shell"}}}
	_, err := New(context.Background(), Options{Server: srv, Daemon: d, Profile: Profile{Workdirs: []string{"/tmp"}, Agents: []string{"claude", "aider"}}})
	if !errors.Is(err, ErrAgents) || !strings.Contains(err.Error(), "aider") {
		t.Fatalf("err %v", err)
	}
	if srv.claims != 0 {
		t.Fatal("claimed although an agent is missing")
	}
	w, err := New(context.Background(), Options{Server: srv, Daemon: d, Profile: Profile{Workdirs: []string{"/tmp"}}})
	if err != nil || strings.Join(w.Agents(), ",") != "claude,shell" {
		t.Fatalf("default agents: %v %v", w, err)
	}
}

func TestCredentialOfAnotherWorkspaceRefused(t *testing.T) {
	srv := &fakeServer{}
	d := &fakeDaemon{}
	_, err := New(context.Background(), Options{Server: srv, Daemon: d, Profile: Profile{Workdirs: []string{"/tmp"}, WorkspaceID: "ws2"}})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "ws1") {
		t.Fatalf("err %v", err)
	}
	srv.identity = func() (sdk.ManagedExecutor, error) {
		return sdk.ManagedExecutor{}, &sdk.APIError{Status: 401, Body: sdk.ErrorBody{Code: "unauthenticated", Message: "bad credential"}}
	}
	if _, err := New(context.Background(), Options{Server: srv, Daemon: d, Profile: Profile{Workdirs: []string{"/tmp"}}}); !errors.Is(err, ErrRefused) {
		t.Fatalf("err %v", err)
	}
}

func TestTransports(t *testing.T) {
	for _, tr := range []string{"", "polling"} {
		if err := CheckTransport(tr); err != nil {
			t.Fatal(err)
		}
	}
	for _, tr := range []string{"relay", "inbound"} {
		if err := CheckTransport(tr); !errors.Is(err, ErrTransport) {
			t.Fatalf("%s: %v", tr, err)
		}
	}
	if err := CheckTransport("carrier-pigeon"); err == nil || errors.Is(err, ErrTransport) {
		t.Fatal(err)
	}
}

func TestResolveDirectory(t *testing.T) {
	dirs := []string{"/srv/a/repo", "/srv/b/other", "/srv/c/twin", "/srv/d/twin"}
	for asked, want := range map[string]string{"/srv/a/repo": "/srv/a/repo", "/srv/a/repo/": "/srv/a/repo", "repo": "/srv/a/repo", "other.git": "/srv/b/other", "https://code.example/x/repo.git": "/srv/a/repo"} {
		if got, err := ResolveDirectory(asked, dirs); err != nil || got != want {
			t.Errorf("%q: %q %v", asked, got, err)
		}
	}
	for _, asked := range []string{"/srv/a", "/etc", "twin", "nope", "", "../repo"} {
		if got, err := ResolveDirectory(asked, dirs); !errors.Is(err, ErrNoDirectory) {
			t.Errorf("%q: %q %v", asked, got, err)
		}
	}
	if got, err := ResolveDirectory("", dirs[:1]); err != nil || got != dirs[0] {
		t.Fatal(got, err)
	}
}

func TestCredentialSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cred")
	os.WriteFile(file, []byte("rwc_fromfile\n"), 0o600)
	p := Profile{Credential: "rwc_fromprofile"}
	c, err := ResolveCredential(file, "rwc_inline", p)
	if err != nil || c.Source != CredentialFile || c.Value() != "rwc_fromfile" || strings.Contains(c.String(), "rwc_") {
		t.Fatalf("file: %+v %v", c, err)
	}
	if c, err = ResolveCredential("", "rwc_inline", p); err != nil || c.Source != CredentialInline || c.Value() != "rwc_inline" {
		t.Fatalf("inline: %+v %v", c, err)
	}
	if c, err = ResolveCredential("", "", p); err != nil || c.Source != CredentialProfile || c.Value() != "rwc_fromprofile" {
		t.Fatalf("profile: %+v %v", c, err)
	}
	if _, err = ResolveCredential("", "", Profile{}); !errors.Is(err, ErrNoCredential) {
		t.Fatal(err)
	}
	// A named file that is missing or empty is an error, never a fall
	// through to another identity.
	if _, err = ResolveCredential(filepath.Join(dir, "missing"), "rwc_inline", p); err == nil {
		t.Fatal("missing file accepted")
	}
	os.WriteFile(file, nil, 0o600)
	if _, err = ResolveCredential(file, "", p); err == nil {
		t.Fatal("empty file accepted")
	}
}

func TestProcessLockStates(t *testing.T) {
	h := Home{Base: t.TempDir()}
	if st, err := h.LockState(); err != nil || st.State != LockAbsent {
		t.Fatal(st, err)
	}
	l, err := h.AcquireLock()
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := h.LockState(); st.State != LockActive || st.PID != os.Getpid() {
		t.Fatalf("held: %+v", st)
	}
	if _, err := h.AcquireLock(); !errors.Is(err, ErrRunning) {
		t.Fatalf("second lock: %v", err)
	}
	if _, err := h.Reset(); !errors.Is(err, ErrRunning) {
		t.Fatalf("reset while running: %v", err)
	}
	l.Release()
	if st, _ := h.LockState(); st.State != LockAbsent {
		t.Fatalf("after release: %+v", st)
	}
	// A worker killed with -9 leaves its pidfile, not its lock.
	cmd := exec.Command("sleep", "0")
	cmd.Run()
	os.WriteFile(h.PIDFile(), []byte("999999\n"), 0o600)
	if st, _ := h.LockState(); st.State != LockStale || st.PID != 999999 {
		t.Fatalf("stale: %+v", st)
	}
	if _, err := h.ClearStale(); err != nil {
		t.Fatal(err)
	}
	if st, _ := h.LockState(); st.State != LockAbsent {
		t.Fatalf("cleared: %+v", st)
	}
}

func TestProfileAndIdentity(t *testing.T) {
	h := Home{Base: t.TempDir(), Profile: "ci"}
	if err := h.WriteProfile(Profile{ServerURL: "http://x", Credential: "rwc_secret", Workdirs: []string{"/a"}}); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(h.ProfileFile())
	di, _ := os.Stat(h.Dir())
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Fatalf("modes %v %v", fi.Mode(), di.Mode())
	}
	p, err := ReadProfile(h.ProfileFile())
	if err != nil || p.Name != "ci" || p.Credential != "rwc_secret" {
		t.Fatal(p, err)
	}
	id1, _ := h.EnsureIdentity()
	id2, _ := h.EnsureIdentity()
	if id1.WorkerID == "" || id1.WorkerID != id2.WorkerID {
		t.Fatal(id1, id2)
	}
	removed, err := h.Reset()
	if err != nil || len(removed) != 2 {
		t.Fatal(removed, err)
	}
	if _, err := os.Stat(h.Dir()); !os.IsNotExist(err) {
		t.Fatal("home left behind")
	}
	if err := (Home{Base: t.TempDir(), Profile: "../escape"}).Prepare(); err == nil {
		t.Fatal("profile name escaping the home accepted")
	}
}

// Fifty would-be workers racing for one home: exactly one holds it.
func TestOneWorkerPerHome(t *testing.T) {
	h := Home{Base: t.TempDir()}
	const n = 50
	type got struct {
		l   *ProcessLock
		err error
	}
	results := make(chan got, n)
	start := make(chan struct{})
	for range n {
		go func() {
			<-start
			l, err := h.AcquireLock()
			results <- got{l, err}
		}()
	}
	close(start)
	held := 0
	for range n {
		g := <-results
		switch {
		case g.err == nil:
			held++
			defer g.l.Release()
		case !errors.Is(g.err, ErrRunning):
			t.Fatalf("unexpected error: %v", g.err)
		}
	}
	if held != 1 {
		t.Fatalf("%d holders", held)
	}
}

// --runner-pool goes with every claim (the server gives a pooled worker
// only its pool's runs); a name the server would refuse stops the worker
// before it claims.
func TestRunnerPoolClaims(t *testing.T) {
	srv := &fakeServer{}
	d := &fakeDaemon{}
	if _, err := New(context.Background(), Options{Server: srv, Daemon: d, Profile: Profile{Workdirs: []string{"/tmp"}, RunnerPool: "gpu pool"}}); err == nil || !strings.Contains(err.Error(), "runner-pool") {
		t.Fatalf("bad pool: %v", err)
	}
	got := make(chan sdk.WorkerClaimRequest, 1)
	ctx, cancel := context.WithCancel(context.Background())
	srv.claim = func(req sdk.WorkerClaimRequest) (sdk.Lease, bool, error) {
		select {
		case got <- req:
		default:
		}
		cancel()
		return sdk.Lease{}, false, nil
	}
	w, err := New(ctx, Options{Server: srv, Daemon: d, Profile: Profile{Workdirs: []string{"/tmp"}, RunnerPool: "gpu"}, ClaimWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if req := <-got; req.RunnerPool != "gpu" {
		t.Fatalf("claim: %+v", req)
	}
	if srv.claims != 1 {
		t.Fatalf("claims %d", srv.claims)
	}
}
