package control

import (
	"context"
	"errors"

	"reeve.dev/reeve/daemon/wire"
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

func (s *wsServer) buildTable() map[string]handler {
	t := map[string]handler{
		wire.TypeList:        decode((*wsConn).list),
		wire.TypeSubscribe:   decode((*wsConn).subscribe),
		wire.TypeUnsubscribe: decode((*wsConn).unsubscribe),
		wire.TypeLaunch:      call(s.sessions.Launch),
		wire.TypePrompt:      done(s.sessions.Prompt),
		wire.TypeKill:        done(s.sessions.Kill),
	}
	if p := s.permissions; p != nil {
		t[wire.TypeRespondPermission] = call(p.RespondPermission)
		t[wire.TypeSetMode] = done(p.SetMode)
	}
	if w := s.worktrees; w != nil {
		t[wire.TypeWorktreeList] = call(w.WorktreeList)
		t[wire.TypeWorktreeDiff] = call(w.WorktreeDiff)
		t[wire.TypeWorktreeSummary] = call(w.WorktreeSummary)
		t[wire.TypeRollback] = call(w.Rollback)
		t[wire.TypeBranchRetry] = call(w.BranchRetry)
		t[wire.TypeSquashMerge] = call(w.SquashMerge)
		t[wire.TypeWorktreeRemove] = call(w.WorktreeRemove)
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
