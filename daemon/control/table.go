package control

import (
	"context"
	"errors"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/sdk"
)

// The dispatch table: every request type of the control protocol, and
// nothing anywhere else, decides which code answers it. Adding a request
// type is one entry here (and a typed method in daemon/wireclient); a test
// fails when a request type is handled outside this file.

// handler answers one decoded request; its result becomes the ack's.
type handler func(c *wsConn, frame []byte) (result any, err error)

// errAcked is a handler saying it has acked the request itself (subscribe
// must ack before the events it streams).
var errAcked = errors.New("acked by the handler")

// entry is one request type: the handler that answers it and the
// permission a remote client needs for it (access.go), checked before the
// handler runs. Every entry declares one; a test fails when one does not.
type entry struct {
	h    handler
	need permission
}

func (s *wsServer) buildTable() map[string]entry {
	t := map[string]entry{
		wire.TypeList:        {decode((*wsConn).list), need(sdk.SessionViewer, scopeMachine)},
		wire.TypeSubscribe:   {decode((*wsConn).subscribe), need(sdk.SessionViewer, scopeSession)},
		wire.TypeUnsubscribe: {decode((*wsConn).unsubscribe), anyClient()},
		wire.TypeLaunch:      {call(s.sessions.Launch), need(sdk.SessionSteerer, scopeDirectory)},
		wire.TypePrompt:      {done(s.sessions.Prompt), need(sdk.SessionSteerer, scopeSession)},
		wire.TypeKill:        {done(s.sessions.Kill), need(sdk.SessionSteerer, scopeSession)},
	}
	if p := s.permissions; p != nil {
		t[wire.TypeRespondPermission] = entry{call(p.RespondPermission), need(sdk.SessionApprover, scopeRequest)}
		t[wire.TypeSetMode] = entry{done(p.SetMode), need(sdk.SessionOwner, scopeSession)}
	}
	if w := s.worktrees; w != nil {
		// Reading a worktree is viewing the session; changing it is the
		// owner's.
		t[wire.TypeWorktreeList] = entry{call(w.WorktreeList), need(sdk.SessionViewer, scopeSessionOpt)}
		t[wire.TypeWorktreeDiff] = entry{call(w.WorktreeDiff), need(sdk.SessionViewer, scopeSession)}
		t[wire.TypeWorktreeSummary] = entry{call(w.WorktreeSummary), need(sdk.SessionViewer, scopeSession)}
		t[wire.TypeRollback] = entry{call(w.Rollback), need(sdk.SessionOwner, scopeSession)}
		t[wire.TypeBranchRetry] = entry{call(w.BranchRetry), need(sdk.SessionOwner, scopeSession)}
		t[wire.TypeSquashMerge] = entry{call(w.SquashMerge), need(sdk.SessionOwner, scopeSession)}
		t[wire.TypeWorktreeRemove] = entry{call(w.WorktreeRemove), need(sdk.SessionOwner, scopeSession)}
	}
	return t
}

// decode is the one adapter from a frame to a typed handler: it reads the
// frame into the request's type, refusing one with fields of the wrong
// type, and hands it over with the connection it came on.
func decode[Req any](fn func(c *wsConn, req Req) (any, error)) handler {
	return func(c *wsConn, frame []byte) (any, error) {
		var req Req
		if err := decodeFrame(frame, &req); err != nil {
			return nil, err
		}
		return fn(c, req)
	}
}

// call adapts a typed method of the session manager that has a result.
func call[Req, Res any](fn func(context.Context, Req) (Res, error)) handler {
	return decode(func(c *wsConn, req Req) (any, error) { return fn(c.ctx, req) })
}

// done adapts a typed method whose ack carries no result.
func done[Req any](fn func(context.Context, Req) error) handler {
	return decode(func(c *wsConn, req Req) (any, error) { return nil, fn(c.ctx, req) })
}
