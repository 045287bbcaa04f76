package worktree

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// SquashResult says what a squash-merge did.
type SquashResult struct {
	BaseBranch string `json:"base_branch"`
	// Parent is the base branch before, Commit the one new commit on it.
	Parent string `json:"parent"`
	Commit string `json:"commit"`
	// Checkout is the checkout of the base branch whose files were
	// updated, "" when the branch was not checked out anywhere.
	Checkout string      `json:"checkout,omitempty"`
	Saved    *Checkpoint `json:"saved,omitempty"`
	Stat
}

// Squash merges the session's net change (base commit to the session
// branch, after checkpointing uncommitted work) into its base branch as one
// commit with message. It changes nothing when the base checkout has
// uncommitted changes (ErrDirtyBase), the change conflicts with what the
// base branch gained since (ErrConflict), or there is nothing to merge
// (ErrNothingToMerge).
//
// The merge is computed without touching any checkout (git merge-tree);
// the base checkout is then fast-forwarded, which git refuses, changing
// nothing, if it would overwrite a file that is not committed.
func (m *Manager) Squash(ctx context.Context, wt Worktree, message string, turn int) (SquashResult, error) {
	res := SquashResult{BaseBranch: wt.BaseBranch}
	if wt.BaseBranch == "" {
		return res, fmt.Errorf("squash: the session started from a detached HEAD at %s: %w to merge into", short(wt.BaseCommit), ErrNoBaseBranch)
	}
	unlock, err := m.lock(ctx, wt.Path)
	if err != nil {
		return res, err
	}
	defer unlock()
	if wt.Exists() {
		if res.Saved, err = m.checkpoint(ctx, wt, CheckpointOptions{Turn: turn, Action: ActionBeforeSquash}); err != nil {
			return res, fmt.Errorf("checkpoint before squash: %w", err)
		}
	}
	dir := wt.Repository
	runlock, err := m.lock(ctx, "repo:"+m.commonDir(ctx, dir))
	if err != nil {
		return res, err
	}
	defer runlock()

	base, err := m.rev(ctx, dir, "refs/heads/"+wt.BaseBranch)
	if err != nil {
		return res, fmt.Errorf("squash: base branch %s: %w", wt.BaseBranch, ErrNoBaseBranch)
	}
	tip, err := m.rev(ctx, dir, "refs/heads/"+wt.Branch)
	if err != nil {
		return res, fmt.Errorf("squash: session branch %s: %w", wt.Branch, err)
	}
	res.Parent = base
	merged, conflicts, err := m.mergeTree(ctx, dir, base, tip)
	if err != nil {
		return res, fmt.Errorf("squash: %w", err)
	}
	if len(conflicts) > 0 {
		return res, fmt.Errorf("%w: %s changed on %s since the session started (conflicting files: %s); nothing was changed",
			ErrConflict, wt.BaseBranch, wt.BaseBranch, strings.Join(conflicts, ", "))
	}
	baseTree, err := m.rev(ctx, dir, base+"^{tree}")
	if err != nil {
		return res, fmt.Errorf("squash: %w", err)
	}
	if merged == baseTree {
		return res, fmt.Errorf("%w: %s already has every change of session %s", ErrNothingToMerge, wt.BaseBranch, wt.Session)
	}
	checkout, err := m.checkoutOf(ctx, dir, wt.BaseBranch)
	if err != nil {
		return res, fmt.Errorf("squash: %w", err)
	}
	if checkout != "" {
		dirty, err := m.trackedChanges(ctx, checkout)
		if err != nil {
			return res, fmt.Errorf("squash: %w", err)
		}
		if len(dirty) > 0 {
			return res, fmt.Errorf("%w: %s (branch %s) has changes in %s; commit or stash them first; nothing was changed",
				ErrDirtyBase, checkout, wt.BaseBranch, strings.Join(clipList(dirty, 10), ", "))
		}
	}
	commit, err := m.commitTree(ctx, dir, merged, base, message)
	if err != nil {
		return res, fmt.Errorf("squash: %w", err)
	}
	if checkout != "" {
		// A fast-forward from the checkout updates its files and the branch
		// together, and refuses to overwrite untracked files; refused, the
		// new commit is left unreferenced and nothing visible changed.
		if _, err := m.git(ctx, checkout, append(m.identity(ctx, checkout), "merge", "--ff-only", "--quiet", "--no-stat", commit)...); err != nil {
			return res, fmt.Errorf("%w: git refused to update %s: %v; nothing was changed", ErrDirtyBase, checkout, err)
		}
		res.Checkout = checkout
	} else if _, err := m.git(ctx, dir, "update-ref", "-m", "reeve squash-merge of "+wt.Branch, "refs/heads/"+wt.BaseBranch, commit, base); err != nil {
		return res, fmt.Errorf("squash: %w", err)
	}
	res.Commit = commit
	if res.Stat, err = m.stat(ctx, dir, base, commit); err != nil {
		return res, fmt.Errorf("squash: %w", err)
	}
	return res, nil
}

// mergeTree merges b into a without touching any checkout and returns the
// resulting tree, or the conflicting paths.
func (m *Manager) mergeTree(ctx context.Context, dir, a, b string) (tree string, conflicts []string, err error) {
	out, code, err := m.gitEnv(ctx, dir, nil, nil, "merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", a, b)
	if err != nil && code != 1 {
		return "", nil, fmt.Errorf("%w (squash needs git 2.38 or newer)", err)
	}
	// -z output: the tree, then (on conflict) the conflicted paths, each
	// NUL-terminated.
	parts := splitNul(out)
	if len(parts) == 0 {
		return "", nil, errors.New("git merge-tree printed no tree")
	}
	tree = strings.TrimSpace(parts[0])
	if code == 1 {
		seen := map[string]bool{}
		for _, p := range parts[1:] {
			if p != "" && !seen[p] {
				seen[p] = true
				conflicts = append(conflicts, p)
			}
		}
		if len(conflicts) == 0 {
			conflicts = []string{"(unknown)"}
		}
	}
	return tree, conflicts, nil
}

// checkoutOf finds the worktree (the main checkout or a linked one) that
// has branch checked out, "" when none has.
func (m *Manager) checkoutOf(ctx context.Context, dir, branch string) (string, error) {
	out, err := m.git(ctx, dir, "worktree", "list", "--porcelain", "-z")
	if err != nil {
		return "", err
	}
	var path string
	for _, line := range splitNul(out) {
		switch {
		case strings.HasPrefix(line, "worktree "):
			path = strings.TrimPrefix(line, "worktree ")
		case line == "branch refs/heads/"+branch:
			return path, nil
		}
	}
	return "", nil
}

// trackedChanges lists files with staged or unstaged changes in a
// checkout. Untracked files are not changes to merge over; git refuses
// the fast-forward itself if the merge would overwrite one.
func (m *Manager) trackedChanges(ctx context.Context, dir string) ([]string, error) {
	out, _, err := m.gitEnv(ctx, dir, []string{"GIT_OPTIONAL_LOCKS=0"}, nil, "status", "--porcelain", "-z", "--untracked-files=no")
	if err != nil {
		return nil, err
	}
	var files []string
	entries := splitNul(out)
	for i := 0; i < len(entries); i++ {
		e := entries[i]
		if len(e) < 4 {
			continue
		}
		files = append(files, e[3:])
		if e[0] == 'R' || e[0] == 'C' {
			i++ // the original path of a rename follows
		}
	}
	return files, nil
}

// merged reports whether the session branch's net change is already in
// its base branch (or there is none), with the reason in words.
func (m *Manager) merged(ctx context.Context, wt Worktree) (bool, string, error) {
	dir := wt.Repository
	tip, err := m.rev(ctx, dir, "refs/heads/"+wt.Branch)
	if err != nil {
		return false, "", err
	}
	tipTree, _ := m.rev(ctx, dir, tip+"^{tree}")
	baseTree, _ := m.rev(ctx, dir, wt.BaseCommit+"^{tree}")
	if tipTree != "" && tipTree == baseTree {
		return true, "the session changed nothing", nil
	}
	if wt.BaseBranch == "" {
		return false, "its changes are not merged anywhere (the session started from a detached HEAD)", nil
	}
	base, err := m.rev(ctx, dir, "refs/heads/"+wt.BaseBranch)
	if err != nil {
		return false, "its base branch " + wt.BaseBranch + " is gone", nil
	}
	tree, conflicts, err := m.mergeTree(ctx, dir, base, tip)
	if err != nil {
		return false, "", err
	}
	bt, _ := m.rev(ctx, dir, base+"^{tree}")
	if len(conflicts) == 0 && tree == bt {
		return true, "its changes are in " + wt.BaseBranch, nil
	}
	return false, "its changes are not in " + wt.BaseBranch + " (squash it, or delete the branch yourself)", nil
}

func clipList(list []string, n int) []string {
	if len(list) <= n {
		return list
	}
	return append(list[:n:n], fmt.Sprintf("and %d more", len(list)-n))
}
