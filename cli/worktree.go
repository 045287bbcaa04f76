package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/wire"
)

// worktreeOptions are shared by the worktree subcommands; each uses the
// fields it needs.
type worktreeOptions struct {
	daemonCmd
	sessionID string
	sha       string
	prompt    string
	message   string
	json      bool
}

func newWorktreeCmd(env *Env) *cobra.Command {
	sub := func(use, short string, args cobra.PositionalArgs, run func(context.Context, *worktreeOptions) error, flags func(*cobra.Command, *worktreeOptions)) *cobra.Command {
		opts := &worktreeOptions{}
		c := &cobra.Command{
			Use: use, Short: short, Args: args,
			RunE: func(cmd *cobra.Command, a []string) error {
				if err := opts.bind(cmd, env); err != nil {
					return err
				}
				if len(a) > 0 {
					opts.sessionID = a[0]
				}
				return run(cmd.Context(), opts)
			},
		}
		c.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
		if flags != nil {
			flags(c, opts)
		}
		return c
	}
	one := usageArgs(cobra.ExactArgs(1))
	group := newGroupCmd("worktree", "Inspect and steer session worktrees: diffs, checkpoints, rollback, retry, squash",
		sub("ls", "List session worktrees with their branch, base, last checkpoint and whether they are dirty", noArgs, runWorktreeLs, nil),
		sub("diffs SID", "Print a session's diff against its base (uncommitted work included)", one, runWorktreeDiffs, nil),
		sub("summary SID", "Files changed, insertions and deletions, and the checkpoints with their turns", one, runWorktreeSummary, nil),
		sub("rollback SID --to SHA", "Reset a session's worktree to one of its checkpoints (uncommitted work is checkpointed first)", one, runWorktreeRollback,
			func(c *cobra.Command, o *worktreeOptions) {
				c.Flags().StringVar(&o.sha, "to", "", "the checkpoint to roll back to (required)")
				c.MarkFlagRequired("to")
			}),
		sub("retry SID --from SHA", "Start a new session, same agent and prompt, on a new branch from a checkpoint", one, runWorktreeRetry,
			func(c *cobra.Command, o *worktreeOptions) {
				c.Flags().StringVar(&o.sha, "from", "", "the checkpoint to start from (required)")
				c.Flags().StringVar(&o.prompt, "prompt", "", "a different prompt for the new session (default: the original one)")
				c.MarkFlagRequired("from")
			}),
		sub("squash SID", "Squash-merge a session's net change into its base branch as one commit", one, runWorktreeSquash,
			func(c *cobra.Command, o *worktreeOptions) {
				c.Flags().StringVar(&o.message, "message", "", "the commit message (default: derived from the session)")
			}),
		sub("rm SID", "Remove a session's worktree directory (uncommitted work is checkpointed first; an unmerged branch is kept)", one, runWorktreeRm, nil),
	)
	group.Long = `Sessions launched in a git repository work in their own worktree, on branch
reeve/<session>, under the daemon home. The daemon commits a checkpoint after
every turn. These commands inspect and steer that work; see docs/worktrees.md.`
	return group
}

// worktreeTimeout bounds a worktree request: git work on a large
// repository takes longer than the other requests.
const worktreeTimeout = 5 * time.Minute

// worktreeRequest sends one worktree request through call.
func worktreeRequest[T any](ctx context.Context, opts *worktreeOptions, call func(context.Context, Protocol) (T, error)) (T, error) {
	var out T
	c, p, err := opts.protocol(ctx)
	if err != nil {
		return out, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, worktreeTimeout)
	defer cancel()
	stop := opts.env.waitingFor("waiting for git in the daemon")
	out, err = call(ctx, p)
	stop()
	if err != nil {
		return out, opts.worktreeExit(err)
	}
	return out, nil
}

// worktreeExit maps a refused worktree request to an exit code: a
// checkpoint that is not the session's is not found (4); refusals because
// of the state of the session or the repository conflict (5).
func (h homeFlag) worktreeExit(err error) error {
	var ae *wire.AckError
	if errors.As(err, &ae) {
		switch ae.Code {
		case wire.CodeUnknownCheckpoint:
			return withExit(ExitNotFound, err)
		case wire.CodeNoWorktree, wire.CodeWorktreeRemoved, wire.CodeDirtyBase, wire.CodeMergeConflict,
			wire.CodeNothingToMerge, wire.CodeNoBaseBranch:
			return withExit(ExitConflict, err)
		case wire.CodeUnknownType:
			return withExit(ExitFailure, fmt.Errorf("the running daemon does not support worktrees (%v); restart it with `%s`", err, h.reeve("restart")))
		}
	}
	return h.ackExit(err)
}

func runWorktreeLs(ctx context.Context, opts *worktreeOptions) error {
	res, err := worktreeRequest(ctx, opts, func(ctx context.Context, p Protocol) (wire.WorktreeList, error) {
		return p.WorktreeList(ctx, wire.WorktreeListRequest{})
	})
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(opts.env.Out, res)
	}
	w := tabwriter.NewWriter(opts.env.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SESSION\tSTATUS\tBRANCH\tBASE\tLAST CHECKPOINT\tDIRTY\tPATH")
	for _, t := range res.Worktrees {
		last := "-"
		if c := t.LastCheckpoint; c != nil {
			last = shortSHA(c.SHA) + " " + checkpointLabel(*c)
		}
		dirty := "no"
		switch {
		case !t.Exists:
			dirty = "removed"
		case t.Dirty:
			dirty = "yes"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.SessionID, t.Status, t.Branch, baseLabel(t.BaseBranch, t.BaseCommit), last, dirty, t.Path)
	}
	return w.Flush()
}

func runWorktreeDiffs(ctx context.Context, opts *worktreeOptions) error {
	d, err := worktreeRequest(ctx, opts, func(ctx context.Context, p Protocol) (wire.WorktreeDiff, error) {
		return p.WorktreeDiff(ctx, wire.WorktreeDiffRequest{SessionID: opts.sessionID})
	})
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(opts.env.Out, d)
	}
	fmt.Fprint(opts.env.Out, d.Patch)
	note := ""
	if d.Uncommitted {
		note = " (including work not yet checkpointed)"
	}
	fmt.Fprintf(opts.env.Err, "reeve: %s against %s%s\n", statLine(d.DiffStat), baseLabel(d.BaseBranch, d.BaseCommit), note)
	return nil
}

func runWorktreeSummary(ctx context.Context, opts *worktreeOptions) error {
	s, err := worktreeRequest(ctx, opts, func(ctx context.Context, p Protocol) (wire.WorktreeSummary, error) {
		return p.WorktreeSummary(ctx, wire.WorktreeSummaryRequest{SessionID: opts.sessionID})
	})
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(opts.env.Out, s)
	}
	out := opts.env.Out
	fmt.Fprintf(out, "session   %s\nbranch    %s (base %s)\nchanges   %s", s.SessionID, s.Branch, baseLabel(s.BaseBranch, s.BaseCommit), statLine(s.DiffStat))
	if s.Uncommitted {
		fmt.Fprint(out, ", including work not yet checkpointed")
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, f := range s.Files {
		if f.Binary {
			fmt.Fprintf(w, "  binary\t\t%s\n", f.Path)
		} else {
			fmt.Fprintf(w, "  +%d\t-%d\t%s\n", f.Insertions, f.Deletions, f.Path)
		}
	}
	w.Flush()
	fmt.Fprintf(out, "checkpoints (%d)\n", len(s.Checkpoints))
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, c := range s.Checkpoints {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", shortSHA(c.SHA), checkpointLabel(c), c.At.Local().Format("2006-01-02 15:04:05"), clip(strings.Join(c.Files, ", "), 80))
	}
	return w.Flush()
}

func runWorktreeRollback(ctx context.Context, opts *worktreeOptions) error {
	if opts.sha == "" {
		return exitf(ExitUsage, "--to must name a checkpoint SHA")
	}
	r, err := worktreeRequest(ctx, opts, func(ctx context.Context, p Protocol) (wire.RollbackResult, error) {
		return p.Rollback(ctx, wire.RollbackRequest{SessionID: opts.sessionID, SHA: opts.sha})
	})
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(opts.env.Out, r)
	}
	fmt.Fprintln(opts.env.Out, r.Head)
	if r.Saved != nil {
		fmt.Fprintf(opts.env.Err, "reeve: uncommitted work saved first as checkpoint %s\n", shortSHA(r.Saved.SHA))
	}
	fmt.Fprintf(opts.env.Err, "reeve: session %s rolled back to %s (%d files changed); later checkpoints stay on the branch\n", r.SessionID, shortSHA(r.To), len(r.Files))
	return nil
}

func runWorktreeRetry(ctx context.Context, opts *worktreeOptions) error {
	if opts.sha == "" {
		return exitf(ExitUsage, "--from must name a checkpoint SHA")
	}
	r, err := worktreeRequest(ctx, opts, func(ctx context.Context, p Protocol) (wire.BranchRetryResult, error) {
		return p.BranchRetry(ctx, wire.BranchRetryRequest{SessionID: opts.sessionID, SHA: opts.sha, Prompt: opts.prompt})
	})
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(opts.env.Out, r)
	}
	fmt.Fprintln(opts.env.Out, r.Session.ID)
	fmt.Fprintf(opts.env.Err, "reeve: session %s started on %s from %s (follow it with `%s`)\n", r.Session.ID, r.Branch, shortSHA(r.From), opts.reeve("attach "+r.Session.ID))
	return nil
}

func runWorktreeSquash(ctx context.Context, opts *worktreeOptions) error {
	r, err := worktreeRequest(ctx, opts, func(ctx context.Context, p Protocol) (wire.SquashMergeResult, error) {
		return p.SquashMerge(ctx, wire.SquashMergeRequest{SessionID: opts.sessionID, Message: opts.message})
	})
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(opts.env.Out, r)
	}
	fmt.Fprintln(opts.env.Out, r.Commit)
	where := "the branch is not checked out anywhere, so no files changed"
	if r.Checkout != "" {
		where = "updated the checkout at " + r.Checkout
	}
	fmt.Fprintf(opts.env.Err, "reeve: squash-merged session %s into %s as %s: %s; %s\n", r.SessionID, r.BaseBranch, shortSHA(r.Commit), statLine(r.DiffStat), where)
	return nil
}

func runWorktreeRm(ctx context.Context, opts *worktreeOptions) error {
	r, err := worktreeRequest(ctx, opts, func(ctx context.Context, p Protocol) (wire.WorktreeRemoveResult, error) {
		return p.WorktreeRemove(ctx, wire.WorktreeRemoveRequest{SessionID: opts.sessionID})
	})
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(opts.env.Out, r)
	}
	if r.Saved != nil {
		fmt.Fprintf(opts.env.Err, "reeve: uncommitted work saved first as checkpoint %s\n", shortSHA(r.Saved.SHA))
	}
	if r.Removed {
		fmt.Fprintf(opts.env.Err, "reeve: removed %s\n", r.Path)
	} else {
		fmt.Fprintf(opts.env.Err, "reeve: %s was already gone\n", r.Path)
	}
	fmt.Fprintf(opts.env.Err, "reeve: %s: %s\n", r.Branch, r.Note)
	return nil
}

func shortSHA(s string) string {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}

func baseLabel(branch, commit string) string {
	if branch == "" {
		return "detached " + shortSHA(commit)
	}
	return branch + "@" + shortSHA(commit)
}

func checkpointLabel(c wire.CheckpointInfo) string {
	switch {
	case c.Action == "agent":
		return "agent commit"
	case c.Action == "turn":
		return fmt.Sprintf("turn %d", c.Turn)
	default:
		return fmt.Sprintf("%s (turn %d)", c.Action, c.Turn)
	}
}

func statLine(s wire.DiffStat) string {
	files := "files"
	if s.FilesChanged == 1 {
		files = "file"
	}
	return fmt.Sprintf("%d %s changed, %d insertions(+), %d deletions(-)", s.FilesChanged, files, s.Insertions, s.Deletions)
}
