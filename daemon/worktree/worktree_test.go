package worktree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
)

// fixture is a developer's repository with one commit on main, and a
// Manager that creates worktrees under a separate root.
type fixture struct {
	t    *testing.T
	repo string
	m    *Manager
	ctx  context.Context
}

func newFixture(t *testing.T, env ...string) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{t: t, repo: filepath.Join(base, "repo"), ctx: context.Background()}
	os.MkdirAll(filepath.Join(f.repo, "sub"), 0o755)
	f.write(f.repo, "README", "hello\n")
	f.write(f.repo, "sub/keep.txt", "one\ntwo\nthree\n")
	f.write(f.repo, "gone.txt", "to be deleted\n")
	f.write(f.repo, ".gitignore", "*.log\n")
	f.gitT(f.repo, "init", "-q", "-b", "main")
	f.gitT(f.repo, "add", "-A")
	f.gitT(f.repo, "commit", "-q", "-m", "initial")
	var e []string
	if len(env) > 0 {
		e = append(os.Environ(), env...)
	}
	f.m = New(Options{Root: filepath.Join(base, "home", "worktrees"), Env: e})
	return f
}

func (f *fixture) write(dir, name, content string) {
	f.t.Helper()
	p := filepath.Join(dir, name)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) read(dir, name string) string {
	f.t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

// gitT runs git as the test (the developer), with an identity of its own.
func (f *fixture) gitT(dir string, args ...string) string {
	f.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Dev", "-c", "user.email=dev@example.com"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		f.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (f *fixture) create(session string) Worktree {
	f.t.Helper()
	repo, ok, err := f.m.Detect(f.ctx, f.repo)
	if err != nil || !ok {
		f.t.Fatalf("detect: %v %v", ok, err)
	}
	wt, err := f.m.Create(f.ctx, CreateOptions{Session: session, Repo: repo})
	if err != nil {
		f.t.Fatal(err)
	}
	return wt
}

func (f *fixture) checkpoint(wt Worktree, turn int) *Checkpoint {
	f.t.Helper()
	cp, err := f.m.Checkpoint(f.ctx, wt, CheckpointOptions{Turn: turn, Note: fmt.Sprintf("prompt of turn %d", turn)})
	if err != nil {
		f.t.Fatal(err)
	}
	return cp
}

// tree is the committed content of a commit: path to blob.
func (f *fixture) tree(rev string) string {
	return f.gitT(f.repo, "ls-tree", "-r", rev)
}

// files lists the worktree's files (not .git), with their contents.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.Name() == ".git" {
			if info.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !info.IsDir() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			out[rel] = string(b)
		}
		return nil
	})
	return out
}

func TestDetect(t *testing.T) {
	f := newFixture(t)
	if _, ok, err := f.m.Detect(f.ctx, t.TempDir()); ok || err != nil {
		t.Fatalf("plain directory: ok %v err %v", ok, err)
	}
	empty := t.TempDir()
	f.gitT(empty, "init", "-q")
	if _, ok, err := f.m.Detect(f.ctx, empty); !ok || !errors.Is(err, ErrUnbornHead) {
		t.Fatalf("repository without commits: ok %v err %v", ok, err)
	}
	r, ok, err := f.m.Detect(f.ctx, filepath.Join(f.repo, "sub"))
	real, _ := filepath.EvalSymlinks(f.repo)
	if !ok || err != nil || r.Root != real || r.Prefix != "sub" || r.Branch != "main" || len(r.Head) != 40 {
		t.Fatalf("subdirectory: %+v %v %v", r, ok, err)
	}
	f.gitT(f.repo, "checkout", "-q", "--detach")
	if r, _, _ := f.m.Detect(f.ctx, f.repo); r.Branch != "" {
		t.Fatalf("detached HEAD has branch %q", r.Branch)
	}
}

func TestCheckpointsLandOnlyInTheWorktree(t *testing.T) {
	f := newFixture(t)
	before := files(t, f.repo)
	wt := f.create("S1")
	if wt.Branch != "reeve/S1" || wt.BaseBranch != "main" || wt.Path != filepath.Join(f.m.Root(), "S1") {
		t.Fatalf("worktree: %+v", wt)
	}
	if got := f.gitT(wt.Path, "symbolic-ref", "--short", "HEAD"); got != "reeve/S1" {
		t.Fatalf("worktree HEAD on %s", got)
	}
	if cp := f.checkpoint(wt, 1); cp != nil {
		t.Fatalf("checkpoint without changes: %+v", cp)
	}
	f.write(wt.Path, "new.txt", "new\n")
	f.write(wt.Path, "sub/keep.txt", "one\n2\nthree\n")
	f.write(wt.Path, "build.log", "ignored\n")
	os.Remove(filepath.Join(wt.Path, "gone.txt"))
	cp := f.checkpoint(wt, 1)
	if cp == nil {
		t.Fatal("no checkpoint for changes")
	}
	sort.Strings(cp.Files)
	if want := []string{"gone.txt", "new.txt", "sub/keep.txt"}; !reflect.DeepEqual(cp.Files, want) {
		t.Fatalf("files %v, want %v", cp.Files, want)
	}
	if tip := f.gitT(f.repo, "rev-parse", "reeve/S1"); tip != cp.SHA {
		t.Fatalf("branch at %s, checkpoint %s", tip, cp.SHA)
	}
	if strings.Contains(f.tree(cp.SHA), "build.log") {
		t.Fatal("an ignored file was committed")
	}
	if !reflect.DeepEqual(files(t, f.repo), before) || f.gitT(f.repo, "status", "--porcelain") != "" {
		t.Fatal("the developer's checkout changed")
	}
	if st, _ := f.m.State(f.ctx, wt); st.Dirty || !st.Exists || st.Head != cp.SHA {
		t.Fatalf("state after checkpoint: %+v", st)
	}
	f.write(wt.Path, "new.txt", "newer\n")
	cp2 := f.checkpoint(wt, 2)
	cps, err := f.m.Checkpoints(f.ctx, wt, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 2 || cps[0].SHA != cp.SHA || cps[1].SHA != cp2.SHA || cps[0].Turn != 1 || cps[1].Turn != 2 ||
		cps[1].Session != "S1" || cps[1].Action != ActionTurn || !reflect.DeepEqual(cps[1].Files, []string{"new.txt"}) {
		t.Fatalf("checkpoints: %+v", cps)
	}
	if msg := f.gitT(f.repo, "log", "-1", "--format=%B", cp2.SHA); !strings.Contains(msg, "session S1 turn 2") || !strings.Contains(msg, "prompt of turn 2") {
		t.Fatalf("message: %q", msg)
	}
}

func TestDiffReadsWithoutChanging(t *testing.T) {
	f := newFixture(t)
	wt := f.create("S1")
	f.write(wt.Path, "sub/keep.txt", "one\nthree\nfour\nfive\n")
	f.checkpoint(wt, 1)
	f.write(wt.Path, "untracked.txt", "a\nb\n")
	d, err := f.m.Diff(f.ctx, wt, true)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Uncommitted || d.FilesChanged != 2 || d.Insertions != 4 || d.Deletions != 1 ||
		!strings.Contains(d.Patch, "+++ b/untracked.txt") || !strings.Contains(d.Patch, "-two") {
		t.Fatalf("diff: %+v", d)
	}
	if st := f.gitT(wt.Path, "status", "--porcelain"); st != "?? untracked.txt" {
		t.Fatalf("diff changed the worktree's index: %q", st)
	}
	s, err := f.m.Summary(f.ctx, wt)
	if err != nil || len(s.Checkpoints) != 1 || s.Checkpoints[0].Turn != 1 || s.FilesChanged != 2 {
		t.Fatalf("summary: %+v %v", s, err)
	}
}

func TestRollbackRestoresTheExactTree(t *testing.T) {
	f := newFixture(t)
	wt := f.create("S1")
	f.write(wt.Path, "a.txt", "a1\n")
	cp1 := f.checkpoint(wt, 1)
	want := files(t, wt.Path)
	f.write(wt.Path, "a.txt", "a2\n")
	f.write(wt.Path, "b.txt", "b\n")
	os.Remove(filepath.Join(wt.Path, "README"))
	cp2 := f.checkpoint(wt, 2)
	f.write(wt.Path, "c.txt", "uncommitted\n")

	res, err := f.m.Rollback(f.ctx, wt, cp1.SHA[:10], 2)
	if err != nil {
		t.Fatal(err)
	}
	if res.To != cp1.SHA || res.Saved == nil || !reflect.DeepEqual(res.Saved.Files, []string{"c.txt"}) {
		t.Fatalf("rollback: %+v", res)
	}
	if got := files(t, wt.Path); !reflect.DeepEqual(got, want) {
		t.Fatalf("files after rollback:\n%v\nwant\n%v", got, want)
	}
	if f.tree(res.Head) != f.tree(cp1.SHA) || f.gitT(wt.Path, "status", "--porcelain") != "" {
		t.Fatal("the branch tip does not have the checkpoint's tree, or the worktree is dirty")
	}
	// Nothing is lost: the later checkpoint and the saved work are history.
	for _, c := range []string{cp2.SHA, res.Saved.SHA} {
		f.gitT(f.repo, "merge-base", "--is-ancestor", c, "reeve/S1")
	}
	if got := f.gitT(f.repo, "show", res.Saved.SHA+":c.txt"); got != "uncommitted" {
		t.Fatalf("saved work: %q", got)
	}
	// Rolling forward again works: the later checkpoint is still one.
	if _, err := f.m.Rollback(f.ctx, wt, cp2.SHA, 3); err != nil {
		t.Fatal(err)
	}
	if f.read(wt.Path, "a.txt") != "a2\n" {
		t.Fatal("roll forward did not restore a2")
	}
}

func TestForeignSHAsAreRejected(t *testing.T) {
	f := newFixture(t)
	wt := f.create("S1")
	other := f.create("S2")
	f.write(other.Path, "x", "x")
	ocp := f.checkpoint(other, 1)
	f.write(wt.Path, "y", "y")
	f.checkpoint(wt, 1)
	base := f.gitT(f.repo, "rev-parse", "HEAD")
	f.write(f.repo, "later.txt", "later")
	f.gitT(f.repo, "add", "later.txt")
	f.gitT(f.repo, "commit", "-q", "-m", "later on main")
	later := f.gitT(f.repo, "rev-parse", "HEAD")
	for _, sha := range []string{ocp.SHA, base, later, strings.Repeat("0", 40)} {
		if _, err := f.m.Rollback(f.ctx, wt, sha, 1); !errors.Is(err, ErrForeignCommit) {
			t.Errorf("rollback to %s: %v", sha, err)
		}
	}
	for _, ref := range []string{"HEAD", "main", "reeve/S1", "--help", "abc", ""} {
		if _, err := f.m.Resolve(f.ctx, wt, ref); !errors.Is(err, ErrBadSHA) {
			t.Errorf("resolve %q: %v", ref, err)
		}
	}
	if _, err := f.m.Branch(f.ctx, wt, ocp.SHA, "S3"); !errors.Is(err, ErrForeignCommit) {
		t.Errorf("branch from another session's checkpoint: %v", err)
	}
	if f.read(wt.Path, "y") != "y" {
		t.Fatal("a refused rollback changed the worktree")
	}
}

func TestBranchRetryStartsFromTheCheckpoint(t *testing.T) {
	f := newFixture(t)
	wt := f.create("S1")
	f.write(wt.Path, "a.txt", "first\n")
	cp1 := f.checkpoint(wt, 1)
	f.write(wt.Path, "a.txt", "second\n")
	cp2 := f.checkpoint(wt, 2)
	nw, err := f.m.Branch(f.ctx, wt, cp1.SHA, "S2")
	if err != nil {
		t.Fatal(err)
	}
	if nw.Branch != "reeve/S2" || nw.BaseCommit != wt.BaseCommit || nw.BaseBranch != "main" || nw.StartCommit != cp1.SHA {
		t.Fatalf("retry worktree: %+v", nw)
	}
	if f.gitT(f.repo, "rev-parse", "reeve/S2") != cp1.SHA || f.read(nw.Path, "a.txt") != "first\n" {
		t.Fatal("the retry branch does not start at the checkpoint")
	}
	if _, err := f.m.Resolve(f.ctx, nw, cp1.SHA); err != nil {
		t.Fatalf("the inherited checkpoint is not part of the retry: %v", err)
	}
	if _, err := f.m.Resolve(f.ctx, nw, cp2.SHA); !errors.Is(err, ErrForeignCommit) {
		t.Fatalf("a checkpoint after the retry point: %v", err)
	}
	if f.gitT(f.repo, "rev-parse", "reeve/S1") != cp2.SHA {
		t.Fatal("the origin's branch moved")
	}
}

func TestSquashMakesOneCommit(t *testing.T) {
	f := newFixture(t)
	wt := f.create("S1")
	f.write(wt.Path, "a.txt", "a1\n")
	f.checkpoint(wt, 1)
	f.write(wt.Path, "a.txt", "a2\n")
	os.Remove(filepath.Join(wt.Path, "gone.txt"))
	f.checkpoint(wt, 2)
	f.write(wt.Path, "late.txt", "uncommitted\n")
	// main gains an unrelated commit meanwhile.
	f.write(f.repo, "main.txt", "main\n")
	f.gitT(f.repo, "add", "main.txt")
	f.gitT(f.repo, "commit", "-q", "-m", "main moves on")
	parent := f.gitT(f.repo, "rev-parse", "main")

	res, err := f.m.Squash(f.ctx, wt, "Add a.txt\n\nfrom session S1\n", 2)
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(f.repo)
	if res.Parent != parent || res.Checkout != real || res.Saved == nil || res.FilesChanged != 3 {
		t.Fatalf("squash: %+v", res)
	}
	if got := f.gitT(f.repo, "rev-list", "--count", parent+"..main"); got != "1" {
		t.Fatalf("%s commits on main, want 1", got)
	}
	if got := f.gitT(f.repo, "rev-parse", "main^"); got != parent {
		t.Fatal("the squash commit is not on top of main")
	}
	// Its diff is the session's net diff.
	net := f.gitT(f.repo, "diff", wt.BaseCommit, "reeve/S1")
	if got := f.gitT(f.repo, "diff", "main^", "main"); got != net {
		t.Fatalf("squash diff:\n%s\nnet diff:\n%s", got, net)
	}
	if f.gitT(f.repo, "log", "-1", "--format=%s", "main") != "Add a.txt" {
		t.Fatal("message")
	}
	// The developer's checkout shows it and is clean.
	if f.read(f.repo, "a.txt") != "a2\n" || f.read(f.repo, "late.txt") != "uncommitted\n" || f.gitT(f.repo, "status", "--porcelain") != "" {
		t.Fatal("the base checkout was not updated cleanly")
	}
	if _, err := f.m.Squash(f.ctx, wt, "again", 2); !errors.Is(err, ErrNothingToMerge) {
		t.Fatalf("second squash: %v", err)
	}
	// Merged, so removal may delete the branch too.
	rm, err := f.m.Remove(f.ctx, wt, 2)
	if err != nil || !rm.Removed || !rm.BranchDeleted {
		t.Fatalf("remove after squash: %+v %v", rm, err)
	}
	if _, err := os.Stat(wt.Path); !os.IsNotExist(err) {
		t.Fatal("worktree directory still there")
	}
}

func TestSquashRefusesAndChangesNothing(t *testing.T) {
	f := newFixture(t)
	wt := f.create("S1")
	f.write(wt.Path, "README", "session version\n")
	f.checkpoint(wt, 1)

	snapshot := func() (string, string, map[string]string) {
		return f.gitT(f.repo, "rev-parse", "main"), f.gitT(f.repo, "status", "--porcelain"), files(t, f.repo)
	}
	check := func(what string, err, want error, before func() (string, string, map[string]string)) {
		t.Helper()
		ref, st, fs := before()
		if !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
		ref2, st2, fs2 := snapshot()
		if ref != ref2 || st != st2 || !reflect.DeepEqual(fs, fs2) {
			t.Fatalf("%s changed the base", what)
		}
	}

	// A dirty base checkout.
	f.write(f.repo, "sub/keep.txt", "developer edit\n")
	ref, st, fs := snapshot()
	_, err := f.m.Squash(f.ctx, wt, "msg", 1)
	check("dirty base", err, ErrDirtyBase, func() (string, string, map[string]string) { return ref, st, fs })
	if !strings.Contains(err.Error(), "sub/keep.txt") {
		t.Fatalf("the refusal does not name the file: %v", err)
	}
	f.gitT(f.repo, "checkout", "--", "sub/keep.txt")

	// An untracked file in the base checkout that the merge would overwrite.
	f.write(wt.Path, "new.txt", "session\n")
	f.checkpoint(wt, 2)
	f.write(f.repo, "new.txt", "developer's own\n")
	ref, st, fs = snapshot()
	_, err = f.m.Squash(f.ctx, wt, "msg", 2)
	check("untracked collision", err, ErrDirtyBase, func() (string, string, map[string]string) { return ref, st, fs })
	os.Remove(filepath.Join(f.repo, "new.txt"))

	// A conflict with what main gained since.
	f.write(f.repo, "README", "main version\n")
	f.gitT(f.repo, "commit", "-q", "-am", "main edits README")
	ref, st, fs = snapshot()
	_, err = f.m.Squash(f.ctx, wt, "msg", 2)
	check("conflict", err, ErrConflict, func() (string, string, map[string]string) { return ref, st, fs })
	if !strings.Contains(err.Error(), "README") {
		t.Fatalf("the refusal does not name the file: %v", err)
	}

	// A session started from a detached HEAD has nothing to merge into.
	f.gitT(f.repo, "checkout", "-q", "--detach")
	d := f.create("S2")
	f.write(d.Path, "x", "x")
	f.checkpoint(d, 1)
	if _, err := f.m.Squash(f.ctx, d, "msg", 1); !errors.Is(err, ErrNoBaseBranch) {
		t.Fatalf("detached base: %v", err)
	}
}

func TestSquashIntoABranchNotCheckedOut(t *testing.T) {
	f := newFixture(t)
	wt := f.create("S1")
	f.write(wt.Path, "a.txt", "a\n")
	f.checkpoint(wt, 1)
	f.gitT(f.repo, "checkout", "-q", "-b", "elsewhere")
	f.write(f.repo, "README", "dirty, but not main's checkout\n")
	res, err := f.m.Squash(f.ctx, wt, "squash", 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkout != "" || f.gitT(f.repo, "rev-parse", "main") != res.Commit {
		t.Fatalf("squash: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(f.repo, "a.txt")); !os.IsNotExist(err) {
		t.Fatal("the checkout of another branch was touched")
	}
}

func TestRemoveKeepsUnmergedWork(t *testing.T) {
	f := newFixture(t)
	wt := f.create("S1")
	f.write(wt.Path, "work.txt", "precious\n")
	res, err := f.m.Remove(f.ctx, wt, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Removed || res.BranchDeleted || res.Saved == nil || !strings.Contains(res.Note, "not in main") {
		t.Fatalf("remove: %+v", res)
	}
	if _, err := os.Stat(wt.Path); !os.IsNotExist(err) {
		t.Fatal("directory still there")
	}
	if got := f.gitT(f.repo, "show", "reeve/S1:work.txt"); got != "precious" {
		t.Fatalf("uncommitted work lost: %q", got)
	}
	// Reads still work from the branch.
	if d, err := f.m.Diff(f.ctx, wt, true); err != nil || !strings.Contains(d.Patch, "+precious") || d.Uncommitted {
		t.Fatalf("diff of a removed worktree: %+v %v", d, err)
	}
	if _, err := f.m.Rollback(f.ctx, wt, res.Saved.SHA, 1); !errors.Is(err, ErrGone) {
		t.Fatalf("rollback of a removed worktree: %v", err)
	}
	// A session that changed nothing loses nothing with its branch.
	empty := f.create("S2")
	if res, err := f.m.Remove(f.ctx, empty, 0); err != nil || !res.BranchDeleted {
		t.Fatalf("remove of an unchanged session: %+v %v", res, err)
	}
}

func TestIdentityFallback(t *testing.T) {
	home := t.TempDir()
	f := newFixture(t, "HOME="+home, "XDG_CONFIG_HOME="+home, "GIT_CONFIG_GLOBAL="+filepath.Join(home, "none"), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=", "GIT_AUTHOR_EMAIL=", "GIT_COMMITTER_NAME=", "GIT_COMMITTER_EMAIL=", "EMAIL=")
	wt := f.create("S1")
	f.write(wt.Path, "a", "a")
	cp := f.checkpoint(wt, 1)
	if got := f.gitT(f.repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", cp.SHA); got != "reeve <reeve@localhost>|reeve <reeve@localhost>" {
		t.Fatalf("without a configured identity: %s", got)
	}
	// A configured identity wins.
	f.gitT(f.repo, "config", "user.name", "Dev")
	f.gitT(f.repo, "config", "user.email", "dev@example.com")
	f.write(wt.Path, "b", "b")
	cp = f.checkpoint(wt, 2)
	if got := f.gitT(f.repo, "log", "-1", "--format=%an <%ae>", cp.SHA); got != "Dev <dev@example.com>" {
		t.Fatalf("with a configured identity: %s", got)
	}
}

func TestConcurrentCheckpointsAreSerialized(t *testing.T) {
	f := newFixture(t)
	wt := f.create("S1")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		f.write(wt.Path, fmt.Sprintf("f%d", i), "x")
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.m.Checkpoint(f.ctx, wt, CheckpointOptions{Turn: i}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	tree := f.tree("reeve/S1")
	for i := range 8 {
		if !strings.Contains(tree, fmt.Sprintf("\tf%d\n", i)) && !strings.HasSuffix(tree, fmt.Sprintf("\tf%d", i)) {
			t.Errorf("f%d missing from the branch", i)
		}
	}
}
