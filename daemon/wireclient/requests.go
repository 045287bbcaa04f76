package wireclient

import (
	"context"
	"encoding/json"
	"fmt"

	"reeve.dev/reeve/daemon/wire"
)

// The typed requests. A new request type of the protocol is one method
// here, beside its entry in the daemon's dispatch table
// (daemon/control/table.go).

// call sends req and decodes its ack's result as a Res.
func call[Res any](ctx context.Context, c *Conn, req wire.Request) (Res, error) {
	var out Res
	return out, c.Call(ctx, req, &out)
}

// Launch starts a session.
func (c *Conn) Launch(ctx context.Context, req wire.LaunchRequest) (wire.SessionInfo, error) {
	return call[wire.SessionInfo](ctx, c, &req)
}

// Prompt gives a session a further prompt.
func (c *Conn) Prompt(ctx context.Context, req wire.PromptRequest) error {
	return c.Call(ctx, &req, nil)
}

// Kill stops a running session.
func (c *Conn) Kill(ctx context.Context, req wire.KillRequest) error {
	return c.Call(ctx, &req, nil)
}

// List lists sessions, with the sessions agents ran outside reeve when the
// scope includes them (they arrive before the answer and are gathered
// here).
func (c *Conn) List(ctx context.Context, req wire.ListRequest) (wire.ListResult, []wire.DiscoveredInfo, error) {
	var res wire.ListResult
	a, found, err := c.do(ctx, &req, true)
	if err != nil {
		return res, nil, err
	}
	if err := json.Unmarshal(a.Result, &res); err != nil {
		return res, nil, fmt.Errorf("decode the daemon's answer: %w", err)
	}
	return res, found, nil
}

// RespondPermission decides a pending permission request.
func (c *Conn) RespondPermission(ctx context.Context, req wire.RespondPermissionRequest) (wire.PermissionDecision, error) {
	return call[wire.PermissionDecision](ctx, c, &req)
}

// SetMode sets a session's operator mode.
func (c *Conn) SetMode(ctx context.Context, req wire.SetModeRequest) error {
	return c.Call(ctx, &req, nil)
}

// WorktreeList lists session worktrees.
func (c *Conn) WorktreeList(ctx context.Context, req wire.WorktreeListRequest) (wire.WorktreeList, error) {
	return call[wire.WorktreeList](ctx, c, &req)
}

// WorktreeDiff is a session's patch against its base.
func (c *Conn) WorktreeDiff(ctx context.Context, req wire.WorktreeDiffRequest) (wire.WorktreeDiff, error) {
	return call[wire.WorktreeDiff](ctx, c, &req)
}

// WorktreeSummary sums a session's change and lists its checkpoints.
func (c *Conn) WorktreeSummary(ctx context.Context, req wire.WorktreeSummaryRequest) (wire.WorktreeSummary, error) {
	return call[wire.WorktreeSummary](ctx, c, &req)
}

// Rollback resets a session's worktree to one of its checkpoints.
func (c *Conn) Rollback(ctx context.Context, req wire.RollbackRequest) (wire.RollbackResult, error) {
	return call[wire.RollbackResult](ctx, c, &req)
}

// BranchRetry starts a new session on a branch from a checkpoint.
func (c *Conn) BranchRetry(ctx context.Context, req wire.BranchRetryRequest) (wire.BranchRetryResult, error) {
	return call[wire.BranchRetryResult](ctx, c, &req)
}

// SquashMerge merges a session's net change into its base branch.
func (c *Conn) SquashMerge(ctx context.Context, req wire.SquashMergeRequest) (wire.SquashMergeResult, error) {
	return call[wire.SquashMergeResult](ctx, c, &req)
}

// WorktreeRemove removes a session's worktree directory.
func (c *Conn) WorktreeRemove(ctx context.Context, req wire.WorktreeRemoveRequest) (wire.WorktreeRemoveResult, error) {
	return call[wire.WorktreeRemoveResult](ctx, c, &req)
}
