package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/daemon/worktree"
)

// Sessions in a git repository run in their own worktree; this file
// connects the session manager to daemon/worktree: it isolates a launch,
// checkpoints each turn, and serves the worktree requests of the control
// protocol.
//
// Busy rule: rollback, squash-merge and worktree-remove change a session's
// worktree, so they are refused (busy) while the session runs a turn, and
// hold the session's turn slot while they work, so that no turn can start
// under them. Reads (worktree-list, -diff, -summary) and branch-retry, which
// only reads committed checkpoints, run at any time.

func newWorktrees(opts ManagerOptions) *worktree.Manager {
	return worktree.New(worktree.Options{Root: filepath.Join(string(opts.Home), "worktrees"), Env: opts.Env})
}

// retryFrom asks launch for a worktree branched from a checkpoint of
// another session instead of from the directory's HEAD.
type retryFrom struct {
	session string
	wt      worktree.Worktree
	sha     string
}

// isolate prepares where a new session works and records it in the
// manifest: a fresh worktree when dir is in a git repository with a
// commit, else dir itself. It returns the agent's working directory.
func (m *Manager) isolate(ctx context.Context, sessionID, dir string, from *retryFrom, mf *wire.Manifest) (string, error) {
	// A client that goes away must not leave a half-created worktree.
	ctx = context.WithoutCancel(ctx)
	if from != nil {
		wt, err := m.worktrees.Branch(ctx, from.wt, from.sha, sessionID)
		if err != nil {
			return "", worktreeErr(err)
		}
		recordWorktree(mf, wt)
		mf.RetryOf = &wire.RetryOrigin{SessionID: from.session, SHA: wt.StartCommit}
		return wt.Workdir(), nil
	}
	repo, ok, err := m.worktrees.Detect(ctx, dir)
	switch {
	case !ok:
		mf.Isolation, mf.IsolationNote = wire.IsolationInPlace, dir+" is not a git repository, so the agent works in it directly"
		return dir, nil
	case errors.Is(err, worktree.ErrUnbornHead):
		mf.Isolation, mf.IsolationNote = wire.IsolationInPlace, err.Error()+"; the agent works in the directory directly"
		return dir, nil
	case err != nil:
		return "", sessionErr(wire.CodeLaunchFailed, "inspect %s: %v", dir, err)
	}
	wt, err := m.worktrees.Create(ctx, worktree.CreateOptions{Session: sessionID, Repo: repo})
	if err != nil {
		// Never fall back to the developer's checkout: isolation is the
		// point.
		return "", sessionErr(wire.CodeLaunchFailed, "%v", err)
	}
	recordWorktree(mf, wt)
	return wt.Workdir(), nil
}

func recordWorktree(mf *wire.Manifest, wt worktree.Worktree) {
	mf.Isolation = wire.IsolationWorktree
	mf.Worktree, mf.Workdir = wt.Path, wt.Workdir()
	mf.Repository, mf.WorktreePrefix = wt.Repository, wt.Prefix
	mf.Branch, mf.BaseCommit, mf.BaseBranch, mf.StartCommit = wt.Branch, wt.BaseCommit, wt.BaseBranch, wt.StartCommit
}

// dropWorktree undoes isolate for a session that could not be created.
func (m *Manager) dropWorktree(ctx context.Context, mf wire.Manifest) {
	if wt, ok := worktreeOf(mf); ok {
		if _, err := m.worktrees.Remove(ctx, wt, 0); err != nil {
			fmt.Fprintf(m.opts.Log, "worker: remove the worktree of a session that failed to start: %v\n", err)
		}
	}
}

func worktreeOf(mf wire.Manifest) (worktree.Worktree, bool) {
	if mf.Isolation != wire.IsolationWorktree || mf.Worktree == "" {
		return worktree.Worktree{}, false
	}
	return worktree.Worktree{
		Session: mf.SessionID, Repository: mf.Repository, Path: mf.Worktree, Prefix: mf.WorktreePrefix,
		Branch: mf.Branch, BaseCommit: mf.BaseCommit, BaseBranch: mf.BaseBranch, StartCommit: mf.StartCommit,
	}, true
}

// checkpointTurn commits what the turn changed in the session's worktree
// and records a checkpoint event. It runs before the turn's terminal
// status, so a follower sees the checkpoint before the end.
func (m *Manager) checkpointTurn(ctx context.Context, sessionID string) {
	mf, err := m.manifest(ctx, sessionID)
	if err != nil {
		return
	}
	wt, ok := worktreeOf(mf)
	if !ok || mf.WorktreeRemoved {
		return
	}
	note := ""
	if s, err := m.opts.Store.Session(ctx, sessionID); err == nil {
		note = "Session prompt: " + clipLine(s.Prompt, 200)
	}
	cp, err := m.worktrees.Checkpoint(ctx, wt, worktree.CheckpointOptions{Turn: mf.Turns, Note: note})
	if err != nil {
		fmt.Fprintf(m.opts.Log, "worker: session %s: checkpoint: %v\n", sessionID, err)
		m.record(sessionID, wire.KindError, wire.Error{Message: "checkpoint failed: " + err.Error()})
		return
	}
	m.recordCheckpoint(sessionID, wt, cp)
}

func (m *Manager) recordCheckpoint(sessionID string, wt worktree.Worktree, cp *worktree.Checkpoint) {
	if cp == nil {
		return
	}
	m.record(sessionID, wire.KindCheckpoint, wire.Checkpoint{SHA: cp.SHA, Turn: cp.Turn, Action: cp.Action, Branch: wt.Branch, Files: cp.Files})
}

// hold takes the session's turn slot for a worktree operation; what says
// what it is, for the refusals of others meanwhile.
func (m *Manager) hold(sessionID, what string) (release func(), err error) {
	sl, err := m.reserve(sessionID, what)
	if err != nil {
		return nil, err
	}
	return func() { m.release(sessionID, sl) }, nil
}

// sessionWorktree finds a session and its worktree, or says clearly why it
// has none.
func (m *Manager) sessionWorktree(ctx context.Context, sessionID string) (store.Session, wire.Manifest, worktree.Worktree, error) {
	sess, err := m.session(ctx, sessionID)
	if err != nil {
		return sess, wire.Manifest{}, worktree.Worktree{}, err
	}
	mf, err := m.manifest(ctx, sessionID)
	if err != nil {
		return sess, mf, worktree.Worktree{}, err
	}
	wt, ok := worktreeOf(mf)
	if !ok {
		why := mf.IsolationNote
		if why == "" {
			why = "it was started before reeve gave sessions worktrees"
		}
		return sess, mf, wt, sessionErr(wire.CodeNoWorktree, "session %s has no worktree: %s", sessionID, why)
	}
	return sess, mf, wt, nil
}

// worktreeErr gives a worktree failure its protocol code.
func worktreeErr(err error) error {
	var se *SessionError
	if errors.As(err, &se) {
		return err
	}
	for _, c := range []struct {
		target error
		code   string
	}{
		{worktree.ErrBadSHA, wire.CodeBadFrame},
		{worktree.ErrForeignCommit, wire.CodeUnknownCheckpoint},
		{worktree.ErrDirtyBase, wire.CodeDirtyBase},
		{worktree.ErrConflict, wire.CodeMergeConflict},
		{worktree.ErrNothingToMerge, wire.CodeNothingToMerge},
		{worktree.ErrNoBaseBranch, wire.CodeNoBaseBranch},
		{worktree.ErrGone, wire.CodeWorktreeRemoved},
	} {
		if errors.Is(err, c.target) {
			return &SessionError{Code: c.code, Err: err}
		}
	}
	return err
}

// The worktree requests run to their end even if the client goes away: a
// git step killed halfway (a fast-forward, a reset) would leave a checkout
// half updated. Each starts with context.WithoutCancel for that.

// Rollback resets a session's worktree to one of its checkpoints, after
// checkpointing uncommitted work.
func (m *Manager) Rollback(ctx context.Context, req wire.RollbackRequest) (wire.RollbackResult, error) {
	ctx = context.WithoutCancel(ctx)
	if req.SHA == "" {
		return wire.RollbackResult{}, sessionErr(wire.CodeBadFrame, "sha is required: the checkpoint to roll back to")
	}
	_, mf, wt, err := m.sessionWorktree(ctx, req.SessionID)
	if err != nil {
		return wire.RollbackResult{}, err
	}
	release, err := m.hold(req.SessionID, "roll back")
	if err != nil {
		return wire.RollbackResult{}, err
	}
	defer release()
	res, err := m.worktrees.Rollback(ctx, wt, req.SHA, mf.Turns)
	m.recordCheckpoint(req.SessionID, wt, res.Saved)
	if err != nil {
		return wire.RollbackResult{}, worktreeErr(err)
	}
	m.record(req.SessionID, wire.KindWorktree, wire.WorktreeEvent{Action: "rollback", SHA: res.To, Head: res.Head, Files: res.Files})
	return wire.RollbackResult{SessionID: req.SessionID, To: res.To, Head: res.Head, Saved: checkpointInfo(res.Saved), Files: res.Files}, nil
}

// BranchRetry starts a new session with the same agent, model and prompt
// on a new branch from a checkpoint of another session.
func (m *Manager) BranchRetry(ctx context.Context, req wire.BranchRetryRequest) (wire.BranchRetryResult, error) {
	ctx = context.WithoutCancel(ctx)
	if req.SHA == "" {
		return wire.BranchRetryResult{}, sessionErr(wire.CodeBadFrame, "sha is required: the checkpoint to start from")
	}
	sess, mf, wt, err := m.sessionWorktree(ctx, req.SessionID)
	if err != nil {
		return wire.BranchRetryResult{}, err
	}
	// Check the SHA before launching, so a foreign one fails as such and
	// not as a launch failure.
	sha, err := m.worktrees.Resolve(ctx, wt, req.SHA)
	if err != nil {
		return wire.BranchRetryResult{}, worktreeErr(err)
	}
	prompt := req.Prompt
	if strings.TrimSpace(prompt) == "" {
		prompt = sess.Prompt
	}
	si, err := m.launch(ctx, wire.LaunchRequest{
		Directory: sess.DirectoryID, Prompt: prompt, Agent: sess.Agent, Model: sess.Model, Mode: mf.PermissionMode,
	}, &retryFrom{session: sess.ID, wt: wt, sha: sha})
	if err != nil {
		return wire.BranchRetryResult{Session: si}, worktreeErr(err)
	}
	m.record(sess.ID, wire.KindWorktree, wire.WorktreeEvent{Action: "branch-retry", SHA: sha, SessionID: si.ID})
	nmf, _ := m.manifest(ctx, si.ID)
	return wire.BranchRetryResult{Session: si, From: sha, Branch: nmf.Branch, Worktree: nmf.Worktree}, nil
}

// SquashMerge merges a session's net change into its base branch as one
// commit.
func (m *Manager) SquashMerge(ctx context.Context, req wire.SquashMergeRequest) (wire.SquashMergeResult, error) {
	ctx = context.WithoutCancel(ctx)
	sess, mf, wt, err := m.sessionWorktree(ctx, req.SessionID)
	if err != nil {
		return wire.SquashMergeResult{}, err
	}
	release, err := m.hold(req.SessionID, "squash")
	if err != nil {
		return wire.SquashMergeResult{}, err
	}
	defer release()
	msg := req.Message
	if strings.TrimSpace(msg) == "" {
		msg = squashMessage(sess, mf)
	}
	res, err := m.worktrees.Squash(ctx, wt, msg, mf.Turns)
	m.recordCheckpoint(req.SessionID, wt, res.Saved)
	if err != nil {
		return wire.SquashMergeResult{}, worktreeErr(err)
	}
	files := make([]string, 0, len(res.Files))
	for _, f := range res.Files {
		files = append(files, f.Path)
	}
	m.record(req.SessionID, wire.KindWorktree, wire.WorktreeEvent{Action: "squash-merge", SHA: res.Commit, BaseBranch: res.BaseBranch, Files: files})
	return wire.SquashMergeResult{
		SessionID: req.SessionID, BaseBranch: res.BaseBranch, Parent: res.Parent, Commit: res.Commit,
		Checkout: res.Checkout, Message: msg, Saved: checkpointInfo(res.Saved), DiffStat: diffStat(res.Stat),
	}, nil
}

// squashMessage derives the commit message from the session: its prompt
// as the subject, where it came from in the body.
func squashMessage(sess store.Session, mf wire.Manifest) string {
	subject := clipLine(sess.Prompt, 72)
	if subject == "" {
		subject = "reeve session " + sess.ID
	}
	var b strings.Builder
	b.WriteString(subject + "\n\n")
	fmt.Fprintf(&b, "Squash-merged from reeve session %s (agent %s, branch %s, %d turns).\n", sess.ID, sess.Agent, mf.Branch, mf.Turns)
	if p := strings.TrimSpace(sess.Prompt); p != "" && p != subject {
		b.WriteString("\nPrompt:\n" + clip(p, 2000) + "\n")
	}
	fmt.Fprintf(&b, "\nReeve-Session: %s\n", sess.ID)
	return b.String()
}

// WorktreeRemove deletes a session's worktree directory, after
// checkpointing uncommitted work; the branch stays unless merged.
func (m *Manager) WorktreeRemove(ctx context.Context, req wire.WorktreeRemoveRequest) (wire.WorktreeRemoveResult, error) {
	ctx = context.WithoutCancel(ctx)
	_, mf, wt, err := m.sessionWorktree(ctx, req.SessionID)
	if err != nil {
		return wire.WorktreeRemoveResult{}, err
	}
	release, err := m.hold(req.SessionID, "remove the worktree of")
	if err != nil {
		return wire.WorktreeRemoveResult{}, err
	}
	defer release()
	res, err := m.worktrees.Remove(ctx, wt, mf.Turns)
	m.recordCheckpoint(req.SessionID, wt, res.Saved)
	if err != nil {
		return wire.WorktreeRemoveResult{}, worktreeErr(err)
	}
	m.logFailure(req.SessionID, "update manifest", m.updateManifest(ctx, req.SessionID, func(mf *wire.Manifest) { mf.WorktreeRemoved = true }))
	m.record(req.SessionID, wire.KindWorktree, wire.WorktreeEvent{Action: "remove", Path: res.Path, Note: res.Note})
	return wire.WorktreeRemoveResult{
		SessionID: req.SessionID, Path: res.Path, Removed: res.Removed, Branch: res.Branch,
		BranchDeleted: res.BranchDeleted, Note: res.Note, Saved: checkpointInfo(res.Saved),
	}, nil
}

// WorktreeList lists the sessions that have worktrees (or one session's).
func (m *Manager) WorktreeList(ctx context.Context, req wire.WorktreeListRequest) (wire.WorktreeList, error) {
	ctx = context.WithoutCancel(ctx)
	var sessions []store.Session
	if req.SessionID != "" {
		s, _, _, err := m.sessionWorktree(ctx, req.SessionID)
		if err != nil {
			return wire.WorktreeList{}, err
		}
		sessions = []store.Session{s}
	} else {
		list, err := m.opts.Store.ListSessions(ctx, store.SessionFilter{})
		if err != nil {
			return wire.WorktreeList{}, err
		}
		sessions = list
	}
	out := wire.WorktreeList{Worktrees: []wire.WorktreeInfo{}}
	for _, s := range sessions {
		var mf wire.Manifest
		if json.Unmarshal(s.Manifest, &mf) != nil {
			continue
		}
		mf.SessionID = s.ID
		wt, ok := worktreeOf(mf)
		if !ok {
			continue
		}
		info := wire.WorktreeInfo{
			SessionID: s.ID, Status: string(s.Status), Agent: s.Agent, Repository: wt.Repository, Path: wt.Path,
			Branch: wt.Branch, BaseBranch: wt.BaseBranch, BaseCommit: wt.BaseCommit, RetryOf: mf.RetryOf,
		}
		if st, err := m.worktrees.State(ctx, wt); err == nil {
			info.Exists, info.Dirty, info.Head = st.Exists, st.Dirty, st.Head
		}
		if cps, err := m.worktrees.Checkpoints(ctx, wt, false); err == nil && len(cps) > 0 {
			info.Checkpoints = len(cps)
			info.LastCheckpoint = checkpointInfo(&cps[len(cps)-1])
		}
		out.Worktrees = append(out.Worktrees, info)
	}
	return out, nil
}

// WorktreeDiff is a session's change against its base, as a patch.
func (m *Manager) WorktreeDiff(ctx context.Context, req wire.WorktreeDiffRequest) (wire.WorktreeDiff, error) {
	ctx = context.WithoutCancel(ctx)
	_, _, wt, err := m.sessionWorktree(ctx, req.SessionID)
	if err != nil {
		return wire.WorktreeDiff{}, err
	}
	d, err := m.worktrees.Diff(ctx, wt, true)
	if err != nil {
		return wire.WorktreeDiff{}, worktreeErr(err)
	}
	return wire.WorktreeDiff{
		SessionID: req.SessionID, Branch: wt.Branch, BaseBranch: wt.BaseBranch, BaseCommit: wt.BaseCommit,
		Head: d.Head, Uncommitted: d.Uncommitted, Patch: d.Patch, DiffStat: diffStat(d.Stat),
	}, nil
}

// WorktreeSummary sums a session's change and lists its checkpoints.
func (m *Manager) WorktreeSummary(ctx context.Context, req wire.WorktreeSummaryRequest) (wire.WorktreeSummary, error) {
	ctx = context.WithoutCancel(ctx)
	_, _, wt, err := m.sessionWorktree(ctx, req.SessionID)
	if err != nil {
		return wire.WorktreeSummary{}, err
	}
	s, err := m.worktrees.Summary(ctx, wt)
	if err != nil {
		return wire.WorktreeSummary{}, worktreeErr(err)
	}
	out := wire.WorktreeSummary{
		SessionID: req.SessionID, Branch: wt.Branch, BaseBranch: wt.BaseBranch, BaseCommit: wt.BaseCommit,
		Uncommitted: s.Uncommitted, DiffStat: diffStat(s.Stat), Checkpoints: make([]wire.CheckpointInfo, 0, len(s.Checkpoints)),
	}
	for i := range s.Checkpoints {
		out.Checkpoints = append(out.Checkpoints, *checkpointInfo(&s.Checkpoints[i]))
	}
	return out, nil
}

func checkpointInfo(c *worktree.Checkpoint) *wire.CheckpointInfo {
	if c == nil {
		return nil
	}
	return &wire.CheckpointInfo{SHA: c.SHA, SessionID: c.Session, Turn: c.Turn, Action: c.Action, Subject: c.Subject, At: c.At, Files: c.Files}
}

func diffStat(s worktree.Stat) wire.DiffStat {
	out := wire.DiffStat{FilesChanged: s.FilesChanged, Insertions: s.Insertions, Deletions: s.Deletions, Files: make([]wire.FileStat, 0, len(s.Files))}
	for _, f := range s.Files {
		out.Files = append(out.Files, wire.FileStat{Path: f.Path, Insertions: f.Insertions, Deletions: f.Deletions, Binary: f.Binary})
	}
	return out
}

// clipLine is the first line of s, at most n bytes.
func clipLine(s string, n int) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return clip(strings.TrimSpace(line), n)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && (s[n]&0xC0) == 0x80 { // never split a UTF-8 character
		n--
	}
	return s[:n] + "..."
}
