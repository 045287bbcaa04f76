package worktree

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Actions name why a checkpoint commit was made; they are recorded in its
// Reeve-Action trailer.
const (
	ActionTurn           = "turn" // the end of an agent turn
	ActionBeforeRollback = "before-rollback"
	ActionRollback       = "rollback" // the commit that restores a checkpoint's tree
	ActionBeforeSquash   = "before-squash"
	ActionBeforeRemove   = "before-remove"
	ActionAgent          = "agent" // a commit the agent made itself
)

// Checkpoint is one commit on a session branch.
type Checkpoint struct {
	SHA     string    `json:"sha"`
	Session string    `json:"session,omitempty"` // the session that made it; another one for a retry's inherited history
	Turn    int       `json:"turn,omitempty"`
	Action  string    `json:"action"`
	Subject string    `json:"subject"`
	At      time.Time `json:"at"`
	Files   []string  `json:"files"`
}

// CheckpointOptions describe a checkpoint commit.
type CheckpointOptions struct {
	Turn   int
	Action string // default ActionTurn
	// Note is a line for the message body, such as the turn's prompt.
	Note string
}

// Checkpoint commits everything in the worktree (untracked files included,
// ignored ones not) as a commit on the session branch. It returns nil when
// nothing changed since the branch tip.
//
// It works with plumbing rather than `git commit` so that the commit lands
// on the session branch even when the agent checked out something else,
// and so that no user hook runs.
func (m *Manager) Checkpoint(ctx context.Context, wt Worktree, o CheckpointOptions) (*Checkpoint, error) {
	unlock, err := m.lock(ctx, wt.Path)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return m.checkpoint(ctx, wt, o)
}

func (m *Manager) checkpoint(ctx context.Context, wt Worktree, o CheckpointOptions) (*Checkpoint, error) {
	if !wt.Exists() {
		return nil, fmt.Errorf("checkpoint %s: %w", wt.Path, ErrGone)
	}
	if o.Action == "" {
		o.Action = ActionTurn
	}
	if _, err := m.git(ctx, wt.Path, "add", "--all"); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	tree, err := m.git(ctx, wt.Path, "write-tree")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	tree = strings.TrimSpace(tree)
	parent, err := m.rev(ctx, wt.Path, "refs/heads/"+wt.Branch)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: session branch: %w", err)
	}
	if ptree, _ := m.rev(ctx, wt.Path, parent+"^{tree}"); ptree == tree {
		return nil, nil
	}
	msg := checkpointMessage(wt.Session, o)
	sha, err := m.commitTree(ctx, wt.Path, tree, parent, msg)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if _, err := m.git(ctx, wt.Path, "update-ref", "-m", "reeve checkpoint", "refs/heads/"+wt.Branch, sha, parent); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	files, err := m.changedFiles(ctx, wt.Path, parent, sha)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return &Checkpoint{SHA: sha, Session: wt.Session, Turn: o.Turn, Action: o.Action, Subject: firstLine(msg), At: time.Now().UTC(), Files: files}, nil
}

func checkpointMessage(session string, o CheckpointOptions) string {
	var subject string
	switch o.Action {
	case ActionTurn:
		subject = fmt.Sprintf("reeve: session %s turn %d", session, o.Turn)
	case ActionRollback:
		subject = fmt.Sprintf("reeve: session %s rollback", session)
	default:
		subject = fmt.Sprintf("reeve: session %s checkpoint %s", session, o.Action)
	}
	var b strings.Builder
	b.WriteString(subject + "\n\n")
	if note := strings.TrimSpace(o.Note); note != "" {
		b.WriteString(note + "\n\n")
	}
	fmt.Fprintf(&b, "Reeve-Session: %s\nReeve-Turn: %d\nReeve-Action: %s\n", session, o.Turn, o.Action)
	return b.String()
}

func (m *Manager) commitTree(ctx context.Context, dir, tree, parent, msg string) (string, error) {
	args := append(m.identity(ctx, dir), "commit-tree", tree, "-p", parent, "-F", "-")
	out, _, err := m.gitEnv(ctx, dir, nil, []byte(msg), args...)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// rev resolves a revision to a full object name.
func (m *Manager) rev(ctx context.Context, dir, rev string) (string, error) {
	out, err := m.git(ctx, dir, "rev-parse", "--verify", "--quiet", "--end-of-options", rev)
	if err != nil || strings.TrimSpace(out) == "" {
		return "", fmt.Errorf("%s does not resolve", rev)
	}
	return strings.TrimSpace(out), nil
}

// changedFiles lists the paths that differ between two commits or trees.
func (m *Manager) changedFiles(ctx context.Context, dir, a, b string) ([]string, error) {
	out, err := m.git(ctx, dir, "diff-tree", "-r", "-z", "--name-only", "--no-renames", "--no-commit-id", a, b)
	if err != nil {
		return nil, err
	}
	files := splitNul(out)
	if files == nil {
		files = []string{}
	}
	return files, nil
}

// Checkpoints lists the commits of the session branch since its base,
// oldest first: the session's checkpoints, and for a retried session those
// it inherited.
func (m *Manager) Checkpoints(ctx context.Context, wt Worktree, withFiles bool) ([]Checkpoint, error) {
	dir := m.gitDir(wt)
	const sep, end = "\x1f", "\x1e"
	format := strings.Join([]string{"%H", "%cI", "%s",
		"%(trailers:key=Reeve-Session,valueonly,separator=)",
		"%(trailers:key=Reeve-Turn,valueonly,separator=)",
		"%(trailers:key=Reeve-Action,valueonly,separator=)"}, sep) + end
	out, err := m.git(ctx, dir, "log", "--reverse", "--format="+format, wt.BaseCommit+"..refs/heads/"+wt.Branch, "--")
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	list := []Checkpoint{}
	for _, rec := range strings.Split(out, end) {
		rec = strings.TrimLeft(rec, "\n")
		if rec == "" {
			continue
		}
		f := strings.Split(rec, sep)
		if len(f) < 6 {
			continue
		}
		c := Checkpoint{SHA: f[0], Subject: f[2], Session: strings.TrimSpace(f[3]), Action: strings.TrimSpace(f[5])}
		c.At, _ = time.Parse(time.RFC3339, f[1])
		c.Turn, _ = strconv.Atoi(strings.TrimSpace(f[4]))
		if c.Action == "" {
			c.Action = ActionAgent
		}
		if withFiles {
			if c.Files, err = m.changedFiles(ctx, dir, c.SHA+"^", c.SHA); err != nil {
				return nil, fmt.Errorf("list checkpoints: %w", err)
			}
		}
		list = append(list, c)
	}
	return list, nil
}

// gitDir is where to run git for a session: its worktree while it exists,
// else the repository it shares objects and refs with.
func (m *Manager) gitDir(wt Worktree) string {
	if wt.Exists() {
		return wt.Path
	}
	return wt.Repository
}

// Resolve checks that sha names a commit of the session branch since its
// base and returns its full name. Anything else (a ref name, another
// session's commit, the base itself) is refused.
func (m *Manager) Resolve(ctx context.Context, wt Worktree, sha string) (string, error) {
	if !hexSHA().MatchString(sha) {
		return "", fmt.Errorf("%q: %w (give a hexadecimal commit id)", sha, ErrBadSHA)
	}
	dir := m.gitDir(wt)
	full, err := m.rev(ctx, dir, sha+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("%s is unknown in %s: %w", sha, wt.Repository, ErrForeignCommit)
	}
	out, err := m.git(ctx, dir, "rev-list", wt.BaseCommit+"..refs/heads/"+wt.Branch, "--")
	if err != nil {
		return "", fmt.Errorf("list session commits: %w", err)
	}
	for _, c := range strings.Fields(out) {
		if c == full {
			return full, nil
		}
	}
	return "", fmt.Errorf("%s is not on branch %s since its base %s: %w", sha, wt.Branch, short(wt.BaseCommit), ErrForeignCommit)
}

// RollbackResult says what a rollback did.
type RollbackResult struct {
	To string `json:"to"`
	// Head is the session branch afterwards: a new commit with To's tree,
	// or the old tip when it already had that tree.
	Head string `json:"head"`
	// Saved is the checkpoint of uncommitted work taken first, if any.
	Saved *Checkpoint `json:"saved,omitempty"`
	// Files are the paths the rollback changed.
	Files []string `json:"files"`
}

// Rollback makes the worktree's files exactly the tree of checkpoint sha.
// Uncommitted work is checkpointed first, and the rollback is a new commit
// on top, so the checkpoints after sha stay on the branch: rolling back is
// itself undoable.
func (m *Manager) Rollback(ctx context.Context, wt Worktree, sha string, turn int) (RollbackResult, error) {
	unlock, err := m.lock(ctx, wt.Path)
	if err != nil {
		return RollbackResult{}, err
	}
	defer unlock()
	if !wt.Exists() {
		return RollbackResult{}, fmt.Errorf("rollback: %s: %w", wt.Path, ErrGone)
	}
	to, err := m.Resolve(ctx, wt, sha)
	if err != nil {
		return RollbackResult{}, err
	}
	res := RollbackResult{To: to}
	if res.Saved, err = m.checkpoint(ctx, wt, CheckpointOptions{Turn: turn, Action: ActionBeforeRollback}); err != nil {
		return res, fmt.Errorf("checkpoint before rollback: %w", err)
	}
	tip, err := m.rev(ctx, wt.Path, "refs/heads/"+wt.Branch)
	if err != nil {
		return res, fmt.Errorf("rollback: %w", err)
	}
	tree, err := m.rev(ctx, wt.Path, to+"^{tree}")
	if err != nil {
		return res, fmt.Errorf("rollback: %w", err)
	}
	res.Head = tip
	if tipTree, _ := m.rev(ctx, wt.Path, tip+"^{tree}"); tipTree != tree {
		msg := checkpointMessage(wt.Session, CheckpointOptions{Turn: turn, Action: ActionRollback, Note: "Restores the tree of checkpoint " + to + "."})
		head, err := m.commitTree(ctx, wt.Path, tree, tip, msg)
		if err != nil {
			return res, fmt.Errorf("rollback: %w", err)
		}
		if _, err := m.git(ctx, wt.Path, "update-ref", "-m", "reeve rollback", "refs/heads/"+wt.Branch, head, tip); err != nil {
			return res, fmt.Errorf("rollback: %w", err)
		}
		res.Head = head
	}
	if res.Files, err = m.changedFiles(ctx, wt.Path, tip, res.Head); err != nil {
		return res, fmt.Errorf("rollback: %w", err)
	}
	// Put HEAD back on the session branch (the agent may have moved it),
	// then make index and files match it. The worktree was clean after
	// the checkpoint, so reset removes exactly the files the rolled-back
	// tree does not have.
	if _, err := m.git(ctx, wt.Path, "symbolic-ref", "HEAD", "refs/heads/"+wt.Branch); err != nil {
		return res, fmt.Errorf("rollback: %w", err)
	}
	if _, err := m.git(ctx, wt.Path, "reset", "--hard", "--quiet", res.Head); err != nil {
		return res, fmt.Errorf("rollback: %w", err)
	}
	return res, nil
}

// Branch creates the worktree of a new session whose branch starts at
// checkpoint sha of wt's session (branch-retry). The new session keeps
// wt's base, so its net change and squash are measured from the same point.
func (m *Manager) Branch(ctx context.Context, wt Worktree, sha, session string) (Worktree, error) {
	from, err := m.Resolve(ctx, wt, sha)
	if err != nil {
		return Worktree{}, err
	}
	return m.Create(ctx, CreateOptions{
		Session: session, Repo: Repo{Root: wt.Repository, Prefix: wt.Prefix, Head: from, Branch: wt.BaseBranch},
		From: from, BaseCommit: wt.BaseCommit, BaseBranch: wt.BaseBranch,
	})
}

// Status is the live state of a worktree.
type Status struct {
	Exists bool   `json:"exists"`
	Dirty  bool   `json:"dirty"` // files differ from the session branch tip
	Head   string `json:"head,omitempty"`
}

// State reports whether the worktree still exists and has uncommitted
// changes (untracked files count; ignored ones do not).
func (m *Manager) State(ctx context.Context, wt Worktree) (Status, error) {
	var st Status
	st.Head, _ = m.rev(ctx, m.gitDir(wt), "refs/heads/"+wt.Branch)
	if !wt.Exists() {
		return st, nil
	}
	st.Exists = true
	out, _, err := m.gitEnv(ctx, wt.Path, []string{"GIT_OPTIONAL_LOCKS=0"}, nil, "status", "--porcelain", "-z")
	if err != nil {
		return st, fmt.Errorf("worktree status: %w", err)
	}
	st.Dirty = out != ""
	return st, nil
}

// RemoveResult says what Remove did.
type RemoveResult struct {
	Path    string      `json:"path"`
	Removed bool        `json:"removed"`
	Saved   *Checkpoint `json:"saved,omitempty"`
	Branch  string      `json:"branch"`
	// BranchDeleted is true only when the branch's changes are already in
	// the base branch; otherwise the branch stays, with every checkpoint.
	BranchDeleted bool   `json:"branch_deleted"`
	Note          string `json:"note"`
}

// Remove deletes the session's worktree directory after checkpointing
// anything uncommitted. The branch is deleted only when its net change is
// already in the base branch (or it has none); otherwise it is kept, so
// nothing the session did is lost. Ignored files in the worktree (build
// output, caches) go with the directory.
func (m *Manager) Remove(ctx context.Context, wt Worktree, turn int) (RemoveResult, error) {
	unlock, err := m.lock(ctx, wt.Path)
	if err != nil {
		return RemoveResult{}, err
	}
	defer unlock()
	res := RemoveResult{Path: wt.Path, Branch: wt.Branch}
	if wt.Exists() {
		if res.Saved, err = m.checkpoint(ctx, wt, CheckpointOptions{Turn: turn, Action: ActionBeforeRemove}); err != nil {
			return res, fmt.Errorf("checkpoint before removal: %w", err)
		}
		runlock, err := m.lock(ctx, "repo:"+m.commonDir(ctx, wt.Repository))
		if err != nil {
			return res, err
		}
		_, err = m.git(ctx, wt.Repository, "worktree", "remove", wt.Path)
		runlock()
		if err != nil {
			return res, fmt.Errorf("remove worktree: %w", err)
		}
		res.Removed = true
	} else if _, err := os.Stat(wt.Path); err == nil {
		return res, fmt.Errorf("remove worktree: %s exists but is not a git worktree; leaving it alone", wt.Path)
	}
	m.git(ctx, wt.Repository, "worktree", "prune")
	if _, err := m.rev(ctx, wt.Repository, "refs/heads/"+wt.Branch); err != nil {
		res.Note = "the branch was already gone"
		return res, nil
	}
	merged, why, err := m.merged(ctx, wt)
	if err != nil {
		return res, err
	}
	if !merged {
		res.Note = "branch kept: " + why
		return res, nil
	}
	if _, err := m.git(ctx, wt.Repository, "branch", "-D", "--quiet", wt.Branch); err != nil {
		return res, fmt.Errorf("delete branch: %w", err)
	}
	res.BranchDeleted = true
	res.Note = "branch deleted: " + why
	return res, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
