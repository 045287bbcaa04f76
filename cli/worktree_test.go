package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"reeve.dev/reeve/daemon/wire"
)

var (
	cpOne  = wire.CheckpointInfo{SHA: "1111111111aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", SessionID: "S1", Turn: 1, Action: "turn", Subject: "turn 1", At: t0, Files: []string{"a.go"}}
	wtStat = wire.DiffStat{FilesChanged: 2, Insertions: 5, Deletions: 1, Files: []wire.FileStat{{Path: "a.go", Insertions: 4, Deletions: 1}, {Path: "logo.png", Binary: true}}}
)

func worktreeFake() *fakeDaemon {
	return &fakeDaemon{
		wtList: func(wire.WorktreeListRequest) (wire.WorktreeList, error) {
			return wire.WorktreeList{Worktrees: []wire.WorktreeInfo{
				{SessionID: "S1", Status: "completed", Branch: "reeve/S1", BaseBranch: "main", BaseCommit: "abcdef0123456789", Path: "/h/worktrees/S1", Exists: true, Dirty: true, Checkpoints: 1, LastCheckpoint: &cpOne},
				{SessionID: "S2", Status: "failed", Branch: "reeve/S2", BaseCommit: "fedcba9876543210", Path: "/h/worktrees/S2"},
			}}, nil
		},
		wtDiff: func(req wire.WorktreeDiffRequest) (wire.WorktreeDiff, error) {
			return wire.WorktreeDiff{SessionID: req.SessionID, Branch: "reeve/S1", BaseBranch: "main", BaseCommit: "abcdef0123456789", Uncommitted: true, Patch: "diff --git a/a.go b/a.go\n", DiffStat: wtStat}, nil
		},
		wtSummary: func(req wire.WorktreeSummaryRequest) (wire.WorktreeSummary, error) {
			return wire.WorktreeSummary{SessionID: req.SessionID, Branch: "reeve/S1", BaseBranch: "main", BaseCommit: "abcdef0123456789", DiffStat: wtStat, Checkpoints: []wire.CheckpointInfo{cpOne}}, nil
		},
		rollback: func(req wire.RollbackRequest) (wire.RollbackResult, error) {
			switch req.SHA {
			case "dead":
				return wire.RollbackResult{}, &wire.AckError{Code: wire.CodeUnknownCheckpoint, Message: "dead is not a checkpoint of S1"}
			case "busy":
				return wire.RollbackResult{}, &wire.AckError{Code: wire.CodeBusy, Message: "session S1 is running a turn"}
			}
			return wire.RollbackResult{SessionID: req.SessionID, To: cpOne.SHA, Head: "2222222222bbbb", Files: []string{"a.go"}, Saved: &cpOne}, nil
		},
		squash: func(wire.SquashMergeRequest) (wire.SquashMergeResult, error) {
			return wire.SquashMergeResult{}, &wire.AckError{Code: wire.CodeDirtyBase, Message: "the base checkout has uncommitted changes"}
		},
		wtRemove: func(wire.WorktreeRemoveRequest) (wire.WorktreeRemoveResult, error) {
			return wire.WorktreeRemoveResult{}, &wire.AckError{Code: wire.CodeUnknownType, Message: `unknown frame type "worktree-remove"`}
		},
	}
}

// The worktree commands print people's form and --json, and map refusals
// to the documented exit codes.
func TestWorktreeOutput(t *testing.T) {
	ctx := context.Background()
	run := func(fn func(context.Context, *worktreeOptions) error, o worktreeOptions) (string, string, error) {
		cmd, out, errb := testCmd(t, worktreeFake())
		o.daemonCmd = cmd
		err := fn(ctx, &o)
		return out.String(), errb.String(), err
	}

	out, _, err := run(runWorktreeLs, worktreeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SESSION", "S1", "reeve/S1", "main@abcdef0123", "1111111111 turn 1", "yes", "S2", "detached fedcba9876", "removed"} {
		if !strings.Contains(out, want) {
			t.Errorf("worktree ls lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = run(runWorktreeLs, worktreeOptions{json: true})
	var l wire.WorktreeList
	if json.Unmarshal([]byte(out), &l) != nil || len(l.Worktrees) != 2 || l.Worktrees[0].LastCheckpoint.SHA != cpOne.SHA {
		t.Fatalf("ls --json %s", out)
	}

	out, errOut, err := run(runWorktreeDiffs, worktreeOptions{sessionID: "S1"})
	if err != nil || out != "diff --git a/a.go b/a.go\n" || !strings.Contains(errOut, "2 files changed, 5 insertions(+), 1 deletions(-) against main@abcdef0123 (including work not yet checkpointed)") {
		t.Fatalf("diffs: %v %q %q", err, out, errOut)
	}

	out, _, err = run(runWorktreeSummary, worktreeOptions{sessionID: "S1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"session   S1", "branch    reeve/S1 (base main@abcdef0123)", "+4", "a.go", "binary", "logo.png", "checkpoints (1)", "1111111111", "turn 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = run(runWorktreeSummary, worktreeOptions{sessionID: "S1", json: true})
	var s wire.WorktreeSummary
	if json.Unmarshal([]byte(out), &s) != nil || s.FilesChanged != 2 || len(s.Checkpoints) != 1 {
		t.Fatalf("summary --json %s", out)
	}

	out, errOut, err = run(runWorktreeRollback, worktreeOptions{sessionID: "S1", sha: "1111"})
	if err != nil || out != "2222222222bbbb\n" || !strings.Contains(errOut, "uncommitted work saved first as checkpoint 1111111111") || !strings.Contains(errOut, "rolled back to 1111111111 (1 files changed)") {
		t.Fatalf("rollback: %v %q %q", err, out, errOut)
	}
	for _, c := range []struct {
		fn   func(context.Context, *worktreeOptions) error
		o    worktreeOptions
		code int
		msg  string
	}{
		{runWorktreeRollback, worktreeOptions{sessionID: "S1", sha: "dead"}, ExitNotFound, "not a checkpoint"},
		{runWorktreeRollback, worktreeOptions{sessionID: "S1", sha: "busy"}, ExitConflict, "running a turn"},
		{runWorktreeRollback, worktreeOptions{sessionID: "S1"}, ExitUsage, "--to must name"},
		{runWorktreeSquash, worktreeOptions{sessionID: "S1"}, ExitConflict, "uncommitted changes"},
		{runWorktreeRm, worktreeOptions{sessionID: "S1"}, ExitFailure, "restart it with `reeve restart`"},
	} {
		_, _, err := run(c.fn, c.o)
		if exitCode(err) != c.code || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%+v: exit %d %v", c.o, exitCode(err), err)
		}
	}
}
