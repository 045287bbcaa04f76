package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/daemon/wireclient"
	"reeve.dev/reeve/internal/syncbuf"
)

// fakeDaemon is a Daemon and its Protocol whose answers are func fields;
// a call without one fails the test.
type fakeDaemon struct {
	t *testing.T

	health     func() (wire.Health, error)
	dirs       func() ([]wire.Directory, error)
	addDir     func(path string) (wire.AddDirectoryResponse, error)
	removeDir  func(id string) error
	session    func(id string) (wire.SessionInfo, error)
	manifest   func(id string) (wire.Manifest, error)
	events     func(id string, after int64, limit int) ([]wire.SessionUpdate, error)
	stream     func(id string, after, until int64, w io.Writer) (int64, error)
	pending    func(sid string) ([]wire.PermissionRequest, error)
	launch     func(wire.LaunchRequest) (wire.SessionInfo, error)
	kill       func(wire.KillRequest) error
	list       func(wire.ListRequest) (wire.ListResult, []wire.DiscoveredInfo, error)
	subscribe  func(sid string, after int64) (Stream, error)
	respond    func(wire.RespondPermissionRequest) (wire.PermissionDecision, error)
	wtList     func(wire.WorktreeListRequest) (wire.WorktreeList, error)
	wtDiff     func(wire.WorktreeDiffRequest) (wire.WorktreeDiff, error)
	wtSummary  func(wire.WorktreeSummaryRequest) (wire.WorktreeSummary, error)
	rollback   func(wire.RollbackRequest) (wire.RollbackResult, error)
	squash     func(wire.SquashMergeRequest) (wire.SquashMergeResult, error)
	wtRemove   func(wire.WorktreeRemoveRequest) (wire.WorktreeRemoveResult, error)
	prompt     func(wire.PromptRequest) error
	setMode    func(wire.SetModeRequest) error
	unlock     func(ttl int) (wire.RemoteStatus, error)
	connectErr error

	mu     sync.Mutex
	calls  []string
	closed int
}

var (
	_ Daemon   = (*fakeDaemon)(nil)
	_ Protocol = (*fakeDaemon)(nil)
)

func (f *fakeDaemon) called(name string) {
	f.mu.Lock()
	f.calls = append(f.calls, name)
	f.mu.Unlock()
}

func (f *fakeDaemon) callsOf(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == name {
			n++
		}
	}
	return n
}

func missing[T any](f *fakeDaemon, name string) (T, error) {
	f.t.Helper()
	f.t.Errorf("unexpected call to %s", name)
	var zero T
	return zero, errors.New("unexpected call to " + name)
}

func (f *fakeDaemon) Health(context.Context) (wire.Health, error) {
	f.called("health")
	if f.health == nil {
		return missing[wire.Health](f, "Health")
	}
	return f.health()
}
func (f *fakeDaemon) ListDirectories(context.Context) ([]wire.Directory, error) {
	f.called("dirs")
	if f.dirs == nil {
		return missing[[]wire.Directory](f, "ListDirectories")
	}
	return f.dirs()
}
func (f *fakeDaemon) AddDirectory(_ context.Context, path string) (wire.AddDirectoryResponse, error) {
	f.called("addDir")
	if f.addDir == nil {
		return missing[wire.AddDirectoryResponse](f, "AddDirectory")
	}
	return f.addDir(path)
}
func (f *fakeDaemon) RemoveDirectory(_ context.Context, id string) error {
	f.called("removeDir")
	if f.removeDir == nil {
		_, err := missing[struct{}](f, "RemoveDirectory")
		return err
	}
	return f.removeDir(id)
}
func (f *fakeDaemon) Session(_ context.Context, id string) (wire.SessionInfo, error) {
	f.called("session")
	if f.session == nil {
		return missing[wire.SessionInfo](f, "Session")
	}
	return f.session(id)
}
func (f *fakeDaemon) Manifest(_ context.Context, id string) (wire.Manifest, error) {
	if f.manifest == nil {
		return missing[wire.Manifest](f, "Manifest")
	}
	return f.manifest(id)
}
func (f *fakeDaemon) Events(_ context.Context, id string, after int64, limit int) ([]wire.SessionUpdate, error) {
	if f.events == nil {
		return missing[[]wire.SessionUpdate](f, "Events")
	}
	return f.events(id, after, limit)
}
func (f *fakeDaemon) StreamEvents(_ context.Context, id string, after, until int64, w io.Writer) (int64, error) {
	f.called("stream")
	if f.stream == nil {
		return missing[int64](f, "StreamEvents")
	}
	return f.stream(id, after, until, w)
}
func (f *fakeDaemon) Pending(_ context.Context, sid string) ([]wire.PermissionRequest, error) {
	if f.pending == nil {
		return nil, nil
	}
	return f.pending(sid)
}
func (f *fakeDaemon) UnlockRemote(_ context.Context, ttl int) (wire.RemoteStatus, error) {
	if f.unlock == nil {
		return missing[wire.RemoteStatus](f, "UnlockRemote")
	}
	return f.unlock(ttl)
}
func (f *fakeDaemon) Protocol(context.Context) (Protocol, error) { return f, nil }
func (f *fakeDaemon) Close() error {
	f.mu.Lock()
	f.closed++
	f.mu.Unlock()
	return nil
}
func (f *fakeDaemon) Launch(_ context.Context, req wire.LaunchRequest) (wire.SessionInfo, error) {
	if f.launch == nil {
		return missing[wire.SessionInfo](f, "Launch")
	}
	return f.launch(req)
}
func (f *fakeDaemon) Prompt(_ context.Context, req wire.PromptRequest) error {
	if f.prompt == nil {
		_, err := missing[struct{}](f, "Prompt")
		return err
	}
	return f.prompt(req)
}
func (f *fakeDaemon) Kill(_ context.Context, req wire.KillRequest) error {
	if f.kill == nil {
		_, err := missing[struct{}](f, "Kill")
		return err
	}
	return f.kill(req)
}
func (f *fakeDaemon) List(_ context.Context, req wire.ListRequest) (wire.ListResult, []wire.DiscoveredInfo, error) {
	f.called("list")
	if f.list == nil {
		r, err := missing[wire.ListResult](f, "List")
		return r, nil, err
	}
	return f.list(req)
}
func (f *fakeDaemon) Subscribe(_ context.Context, sid string, after int64) (Stream, error) {
	f.called("subscribe")
	if f.subscribe == nil {
		return missing[Stream](f, "Subscribe")
	}
	return f.subscribe(sid, after)
}
func (f *fakeDaemon) RespondPermission(_ context.Context, req wire.RespondPermissionRequest) (wire.PermissionDecision, error) {
	f.called("respond")
	if f.respond == nil {
		return missing[wire.PermissionDecision](f, "RespondPermission")
	}
	return f.respond(req)
}
func (f *fakeDaemon) SetMode(_ context.Context, req wire.SetModeRequest) error {
	if f.setMode == nil {
		_, err := missing[struct{}](f, "SetMode")
		return err
	}
	return f.setMode(req)
}
func (f *fakeDaemon) WorktreeList(_ context.Context, req wire.WorktreeListRequest) (wire.WorktreeList, error) {
	if f.wtList == nil {
		return missing[wire.WorktreeList](f, "WorktreeList")
	}
	return f.wtList(req)
}
func (f *fakeDaemon) WorktreeDiff(_ context.Context, req wire.WorktreeDiffRequest) (wire.WorktreeDiff, error) {
	if f.wtDiff == nil {
		return missing[wire.WorktreeDiff](f, "WorktreeDiff")
	}
	return f.wtDiff(req)
}
func (f *fakeDaemon) WorktreeSummary(_ context.Context, req wire.WorktreeSummaryRequest) (wire.WorktreeSummary, error) {
	if f.wtSummary == nil {
		return missing[wire.WorktreeSummary](f, "WorktreeSummary")
	}
	return f.wtSummary(req)
}
func (f *fakeDaemon) Rollback(_ context.Context, req wire.RollbackRequest) (wire.RollbackResult, error) {
	if f.rollback == nil {
		return missing[wire.RollbackResult](f, "Rollback")
	}
	return f.rollback(req)
}
func (f *fakeDaemon) BranchRetry(context.Context, wire.BranchRetryRequest) (wire.BranchRetryResult, error) {
	return missing[wire.BranchRetryResult](f, "BranchRetry")
}
func (f *fakeDaemon) SquashMerge(_ context.Context, req wire.SquashMergeRequest) (wire.SquashMergeResult, error) {
	if f.squash == nil {
		return missing[wire.SquashMergeResult](f, "SquashMerge")
	}
	return f.squash(req)
}
func (f *fakeDaemon) WorktreeRemove(_ context.Context, req wire.WorktreeRemoveRequest) (wire.WorktreeRemoveResult, error) {
	if f.wtRemove == nil {
		return missing[wire.WorktreeRemoveResult](f, "WorktreeRemove")
	}
	return f.wtRemove(req)
}
func (f *fakeDaemon) Err() error { return nil }

// fakeStream is a followed session fed by the test.
type fakeStream struct {
	c     chan wireclient.Update
	mu    sync.Mutex
	ended *wire.SessionEnded
	err   error
}

func newStream() *fakeStream { return &fakeStream{c: make(chan wireclient.Update, 64)} }

func (s *fakeStream) Updates() <-chan wireclient.Update { return s.c }
func (s *fakeStream) Ended() *wire.SessionEnded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}
func (s *fakeStream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// send delivers one event of kind with data as seq.
func (s *fakeStream) send(sid string, seq int64, kind string, data any) {
	raw, _ := json.Marshal(data)
	u := wire.SessionUpdate{Type: wire.TypeSessionUpdate, SessionID: sid, Seq: seq, TS: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Kind: kind, Data: raw}
	frame, _ := json.Marshal(u)
	s.c <- wireclient.Update{SessionUpdate: u, Raw: frame}
}

// end closes the stream with the session's end, or with err.
func (s *fakeStream) end(e *wire.SessionEnded, err error) {
	s.mu.Lock()
	s.ended, s.err = e, err
	s.mu.Unlock()
	close(s.c)
}

// testCmd is a daemonCmd reaching f, with buffers for its output, in a
// fresh home that no daemon runs from.
func testCmd(t *testing.T, f *fakeDaemon) (daemonCmd, *syncbuf.Buffer, *syncbuf.Buffer) {
	t.Helper()
	f.t = t
	out, errb := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	env := &Env{In: strings.NewReader(""), Out: out, Err: errb, Getenv: func(string) string { return "" },
		Connect: func(context.Context, home.Dir) (Daemon, error) {
			if f.connectErr != nil {
				return nil, f.connectErr
			}
			return f, nil
		}}
	return daemonCmd{env: env, home: home.Dir(t.TempDir())}, out, errb
}
