package worker

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/daemon/wireclient"
	"reeve.dev/reeve/server/sdk"
)

// fakeServer is a func-field Server: a nil func answers a default.
type fakeServer struct {
	identity  func() (sdk.ManagedExecutor, error)
	claim     func(sdk.WorkerClaimRequest) (sdk.Lease, bool, error)
	byToken   func() (sdk.Lease, error)
	heartbeat func(id string, fence int64) (sdk.LeaseHeartbeat, error)
	raise     func(sdk.LeaseApprovalRequest) (sdk.WorkflowApproval, error)
	wait      func(nodeKey string) (sdk.WorkflowApproval, error)

	mu        sync.Mutex
	states    []sdk.LeaseStateRequest
	completes []sdk.LeaseCompleteRequest
	releases  []sdk.LeaseReleaseRequest
	events    []sdk.LeaseEventIn
	claims    int
}

func (f *fakeServer) AppendLeaseEvents(_ context.Context, _ string, req sdk.LeaseEventsRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, req.Events...)
	return nil
}

var _ Server = (*fakeServer)(nil)

func (f *fakeServer) WorkerIdentity(context.Context) (sdk.ManagedExecutor, error) {
	if f.identity != nil {
		return f.identity()
	}
	return sdk.ManagedExecutor{ID: "ex1", WorkspaceID: "ws1", Name: "test"}, nil
}

func (f *fakeServer) ClaimLease(ctx context.Context, req sdk.WorkerClaimRequest) (sdk.Lease, bool, error) {
	f.mu.Lock()
	f.claims++
	f.mu.Unlock()
	if f.claim != nil {
		return f.claim(req)
	}
	<-ctx.Done()
	return sdk.Lease{}, false, nil
}

func (f *fakeServer) LeaseByToken(context.Context) (sdk.Lease, error) {
	if f.byToken != nil {
		return f.byToken()
	}
	return sdk.Lease{}, &sdk.APIError{Status: 401, Body: sdk.ErrorBody{Code: "unauthenticated", Message: "unknown lease token"}}
}

func (f *fakeServer) HeartbeatLease(_ context.Context, id string, fence int64) (sdk.LeaseHeartbeat, error) {
	if f.heartbeat != nil {
		return f.heartbeat(id, fence)
	}
	return sdk.LeaseHeartbeat{ExpiresAt: time.Now().Add(time.Minute), Status: sdk.RunRunning}, nil
}

func (f *fakeServer) ReportLeaseState(_ context.Context, _ string, req sdk.LeaseStateRequest) (sdk.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states = append(f.states, req)
	return sdk.WorkflowRun{Status: req.State}, nil
}

func (f *fakeServer) RaiseLeaseApproval(_ context.Context, _ string, req sdk.LeaseApprovalRequest) (sdk.WorkflowApproval, error) {
	if f.raise != nil {
		return f.raise(req)
	}
	return sdk.WorkflowApproval{NodeKey: req.NodeKey, State: sdk.ApprovalPending}, nil
}

func (f *fakeServer) WaitLeaseApproval(ctx context.Context, _, nodeKey string, wait time.Duration) (sdk.WorkflowApproval, error) {
	if f.wait != nil {
		return f.wait(nodeKey)
	}
	select {
	case <-ctx.Done():
		return sdk.WorkflowApproval{}, ctx.Err()
	case <-time.After(wait):
	}
	return sdk.WorkflowApproval{NodeKey: nodeKey, State: sdk.ApprovalPending}, nil
}

func (f *fakeServer) CompleteLease(_ context.Context, _ string, req sdk.LeaseCompleteRequest) (sdk.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.completes = append(f.completes, req)
	return sdk.WorkflowRun{Status: req.Status}, nil
}

func (f *fakeServer) ReleaseLease(_ context.Context, _ string, req sdk.LeaseReleaseRequest) (sdk.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases = append(f.releases, req)
	return sdk.WorkflowRun{Status: sdk.RunQueued}, nil
}

// fakeDaemon runs one scripted session per launch: script gets the
// session and writes its events; Kill ends it as killed.
type fakeDaemon struct {
	health wire.Health
	script func(s *fakeSession)
	diff   wire.DiffStat

	mu       sync.Mutex
	launches []wire.LaunchRequest
	answers  []wire.RespondPermissionRequest
	kills    []string
	session  *fakeSession
}

var _ Daemon = (*fakeDaemon)(nil)

func (d *fakeDaemon) Health(context.Context) (wire.Health, error) { return d.health, nil }

func (d *fakeDaemon) AddDirectory(_ context.Context, path string) (wire.AddDirectoryResponse, error) {
	return wire.AddDirectoryResponse{Directory: wire.Directory{ID: "dir-" + path, Path: path}}, nil
}

func (d *fakeDaemon) Launch(_ context.Context, req wire.LaunchRequest) (wire.SessionInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.launches = append(d.launches, req)
	d.session = &fakeSession{d: d, id: "s1", c: make(chan wireclient.Update, 64), answers: make(chan wire.RespondPermissionRequest, 8), killed: make(chan struct{})}
	return wire.SessionInfo{ID: "s1", Agent: req.Agent, Workdir: "/wt"}, nil
}

func (d *fakeDaemon) Follow(context.Context, string) (Stream, error) {
	d.mu.Lock()
	s := d.session
	d.mu.Unlock()
	go d.script(s)
	return s, nil
}

func (d *fakeDaemon) RespondPermission(_ context.Context, req wire.RespondPermissionRequest) error {
	d.mu.Lock()
	d.answers = append(d.answers, req)
	s := d.session
	d.mu.Unlock()
	s.answers <- req
	return nil
}

func (d *fakeDaemon) Kill(_ context.Context, id string) error {
	d.mu.Lock()
	d.kills = append(d.kills, id)
	s := d.session
	d.mu.Unlock()
	s.killOnce.Do(func() { close(s.killed) })
	return nil
}

func (d *fakeDaemon) WorktreeSummary(context.Context, string) (wire.WorktreeSummary, error) {
	return wire.WorktreeSummary{DiffStat: d.diff}, nil
}

func (d *fakeDaemon) Close() error { return nil }

type fakeSession struct {
	d        *fakeDaemon
	id       string
	seq      int64
	c        chan wireclient.Update
	answers  chan wire.RespondPermissionRequest
	killed   chan struct{}
	killOnce sync.Once
	mu       sync.Mutex
	ended    *wire.SessionEnded
}

func (s *fakeSession) Updates() <-chan wireclient.Update { return s.c }
func (s *fakeSession) Err() error                        { return errors.New("stream stopped") }
func (s *fakeSession) Ended() *wire.SessionEnded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

func (s *fakeSession) emit(kind string, data any) {
	s.seq++
	b, _ := json.Marshal(data)
	s.c <- wireclient.Update{SessionUpdate: wire.SessionUpdate{SessionID: s.id, Seq: s.seq, TS: time.Now(), Kind: kind, Data: b}}
}

func (s *fakeSession) end(status string) {
	s.mu.Lock()
	s.ended = &wire.SessionEnded{SessionID: s.id, Status: status, LastSeq: s.seq}
	s.mu.Unlock()
	close(s.c)
}

// waitKilled ends the session as killed once Kill comes (or fails the
// script after a long while).
func (s *fakeSession) waitKilled() {
	select {
	case <-s.killed:
		s.end("killed")
	case <-time.After(60 * time.Second):
		s.end("failed")
	}
}
