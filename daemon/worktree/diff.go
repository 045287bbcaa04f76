package worktree

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// FileStat is one file's share of a diff.
type FileStat struct {
	Path       string `json:"path"`
	Insertions int    `json:"insertions"`
	Deletions  int    `json:"deletions"`
	Binary     bool   `json:"binary,omitempty"`
}

// Stat sums a diff.
type Stat struct {
	FilesChanged int        `json:"files_changed"`
	Insertions   int        `json:"insertions"`
	Deletions    int        `json:"deletions"`
	Files        []FileStat `json:"files"`
}

// Diff is a session's change against its base.
type Diff struct {
	Base string `json:"base"`
	// Head is the tree compared with the base: the worktree as it is now
	// (uncommitted work included) while it exists, else the branch tip.
	Head string `json:"head"`
	// Uncommitted is true when the worktree has work no checkpoint holds
	// yet; it is part of the diff.
	Uncommitted bool   `json:"uncommitted"`
	Patch       string `json:"patch"`
	Stat
}

// Diff compares the session's current state with its base commit. It reads
// the worktree through a scratch index, so it changes nothing, not even
// the worktree's own index, and can run while the agent works.
func (m *Manager) Diff(ctx context.Context, wt Worktree, withPatch bool) (Diff, error) {
	head, uncommitted, err := m.snapshot(ctx, wt)
	if err != nil {
		return Diff{}, fmt.Errorf("diff: %w", err)
	}
	dir := m.gitDir(wt)
	d := Diff{Base: wt.BaseCommit, Head: head, Uncommitted: uncommitted}
	if d.Stat, err = m.stat(ctx, dir, wt.BaseCommit, head); err != nil {
		return d, fmt.Errorf("diff: %w", err)
	}
	if withPatch {
		out, err := m.git(ctx, dir, "diff", "--no-color", "--no-ext-diff", "--no-textconv", wt.BaseCommit, head, "--")
		if err != nil {
			return d, fmt.Errorf("diff: %w", err)
		}
		d.Patch = out
	}
	return d, nil
}

// snapshot returns a tree of the worktree as it is (or the branch tip when
// the worktree is gone) and whether it differs from the tip.
func (m *Manager) snapshot(ctx context.Context, wt Worktree) (string, bool, error) {
	tip, err := m.rev(ctx, m.gitDir(wt), "refs/heads/"+wt.Branch)
	if err != nil {
		return "", false, fmt.Errorf("session branch %s: %w", wt.Branch, err)
	}
	tipTree, err := m.rev(ctx, m.gitDir(wt), tip+"^{tree}")
	if err != nil {
		return "", false, err
	}
	if !wt.Exists() {
		return tipTree, false, nil
	}
	idx, err := m.git(ctx, wt.Path, "rev-parse", "--path-format=absolute", "--git-path", "index")
	if err != nil {
		return "", false, err
	}
	scratch, err := os.CreateTemp("", "reeve-index-")
	if err != nil {
		return "", false, err
	}
	scratch.Close()
	defer os.Remove(scratch.Name())
	if data, err := os.ReadFile(strings.TrimSpace(idx)); err == nil {
		if err := os.WriteFile(scratch.Name(), data, 0o600); err != nil {
			return "", false, err
		}
	} else {
		// git treats an empty file as a corrupt index; start from none.
		os.Remove(scratch.Name())
	}
	env := []string{"GIT_INDEX_FILE=" + scratch.Name(), "GIT_OPTIONAL_LOCKS=0"}
	if _, _, err := m.gitEnv(ctx, wt.Path, env, nil, "add", "--all"); err != nil {
		return "", false, err
	}
	out, _, err := m.gitEnv(ctx, wt.Path, env, nil, "write-tree")
	if err != nil {
		return "", false, err
	}
	tree := strings.TrimSpace(out)
	return tree, tree != tipTree, nil
}

// stat sums the difference between two commits or trees.
func (m *Manager) stat(ctx context.Context, dir, a, b string) (Stat, error) {
	out, err := m.git(ctx, dir, "diff", "--numstat", "-z", "--no-renames", "--no-ext-diff", a, b, "--")
	if err != nil {
		return Stat{}, err
	}
	st := Stat{Files: []FileStat{}}
	for _, rec := range splitNul(out) {
		// "<added>\t<deleted>\t<path>"; "-" counts for binary files.
		f := strings.SplitN(rec, "\t", 3)
		if len(f) != 3 {
			continue
		}
		fs := FileStat{Path: f[2]}
		if f[0] == "-" {
			fs.Binary = true
		} else {
			fs.Insertions, _ = strconv.Atoi(f[0])
			fs.Deletions, _ = strconv.Atoi(f[1])
		}
		st.Files = append(st.Files, fs)
		st.Insertions += fs.Insertions
		st.Deletions += fs.Deletions
	}
	st.FilesChanged = len(st.Files)
	return st, nil
}

// Summary is a session's change in numbers, with its checkpoints.
type Summary struct {
	Diff
	Checkpoints []Checkpoint `json:"checkpoints"`
}

// Summary sums the session's change against its base and lists its
// checkpoints with the files each touched.
func (m *Manager) Summary(ctx context.Context, wt Worktree) (Summary, error) {
	d, err := m.Diff(ctx, wt, false)
	if err != nil {
		return Summary{}, err
	}
	cps, err := m.Checkpoints(ctx, wt, true)
	if err != nil {
		return Summary{}, err
	}
	return Summary{Diff: d, Checkpoints: cps}, nil
}
