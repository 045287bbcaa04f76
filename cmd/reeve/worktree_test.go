package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/wire"
)

// gitIn runs git as the developer in dir.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Dev", "-c", "user.email=dev@example.com"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// devRepo is a developer's checkout on main with one commit.
func devRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	os.MkdirAll(dir, 0o755)
	for name, content := range map[string]string{"README": "hello\n", "a.txt": "zero\n", ".gitignore": "*.log\n"} {
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
	}
	gitIn(t, dir, "init", "-q", "-b", "main")
	gitIn(t, dir, "add", "-A")
	gitIn(t, dir, "commit", "-q", "-m", "initial")
	return dir
}

// treeFiles reads every file under dir but .git: path to content.
func treeFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
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
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// commitFiles reads every file of a commit: path to content.
func commitFiles(t *testing.T, repo, rev string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range strings.Split(gitIn(t, repo, "ls-tree", "-r", "--name-only", rev), "\n") {
		if p != "" {
			out[p] = gitIn(t, repo, "show", rev+":"+p) + "\n"
		}
	}
	return out
}

func checkpointsOf(t *testing.T, evs []wire.SessionUpdate) []wire.Checkpoint {
	t.Helper()
	var out []wire.Checkpoint
	for _, e := range evs {
		if e.Kind == wire.KindCheckpoint {
			var c wire.Checkpoint
			if err := json.Unmarshal(e.Data, &c); err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
	}
	return out
}

// runShell runs a shell session to its end. The prompts of these tests use
// shell builtins only: a turn whose shell runs external commands is now and
// then ended by SIGHUP in the PTY runner, which is not what these tests are
// about.
func (h *daemonHome) runShell(dir, prompt string) wire.SessionInfo {
	h.t.Helper()
	si := h.sessionInfo(h.must("run", dir, "--agent", "shell", "--prompt", prompt, "--wait", "--json").stdout)
	if si.Status != "completed" {
		h.t.Fatalf("session %s ended %s: %s", si.ID, si.Status, si.StatusReason)
	}
	return si
}

func (h *daemonHome) sendShell(sid, prompt string) {
	h.t.Helper()
	h.must("send", sid, "--prompt", prompt)
	if r := h.run("wait", sid, "--timeout", "60"); r.code != 0 {
		h.t.Fatalf("wait %s: exit %d %s", sid, r.code, r.stderr)
	}
}

func (h *daemonHome) jsonOut(v any, args ...string) {
	h.t.Helper()
	r := h.must(append(args, "--json")...)
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		h.t.Fatalf("reeve %v --json: %v\n%s", args, err, r.stdout)
	}
}

// refused runs a command that must fail with code and a message naming why.
func (h *daemonHome) refused(code int, msg string, args ...string) {
	h.t.Helper()
	r := h.run(args...)
	if r.code != code || !strings.Contains(r.stderr, msg) {
		h.t.Fatalf("reeve %s: exit %d (want %d), stderr %q (want %q)", strings.Join(args, " "), r.code, code, r.stderr, msg)
	}
}

func TestWorktreeIsolationCheckpointsRollbackRetry(t *testing.T) {
	repo := devRepo(t)
	base := gitIn(t, repo, "rev-parse", "HEAD")
	before := treeFiles(t, repo)
	h := newHome(t)
	h.start()

	// Turn 1 changes and adds a file: in the worktree only.
	si := h.runShell(repo, "echo one > a.txt; echo new > b.txt; echo noise > build.log")
	wtPath := filepath.Join(h.dir, "worktrees", si.ID)
	if si.Workdir != wtPath {
		t.Fatalf("workdir %s, want %s", si.Workdir, wtPath)
	}
	if got := treeFiles(t, repo); !reflect.DeepEqual(got, before) || gitIn(t, repo, "status", "--porcelain") != "" {
		t.Fatalf("the developer's checkout changed: %v", got)
	}
	if b, _ := os.ReadFile(filepath.Join(wtPath, "b.txt")); string(b) != "new\n" {
		t.Fatalf("b.txt in the worktree: %q", b)
	}
	m := h.manifest(si.ID)
	if m.Isolation != wire.IsolationWorktree || m.Worktree != wtPath || m.Workdir != wtPath || m.Branch != "reeve/"+si.ID ||
		m.BaseBranch != "main" || m.BaseCommit != base || m.StartCommit != base {
		t.Fatalf("manifest: %+v", m)
	}
	evs := h.logEvents(si.ID)
	cps := checkpointsOf(t, evs)
	if len(cps) != 1 || cps[0].Turn != 1 || cps[0].Branch != "reeve/"+si.ID || !reflect.DeepEqual(cps[0].Files, []string{"a.txt", "b.txt"}) {
		t.Fatalf("checkpoints after turn 1: %+v", cps)
	}
	if last := evs[len(evs)-1]; last.Kind != wire.KindStatus || !strings.Contains(string(last.Data), "completed") {
		t.Fatalf("the turn's status is not last: %s %s", last.Kind, last.Data)
	}
	cp1 := cps[0].SHA
	if tip := gitIn(t, repo, "rev-parse", "reeve/"+si.ID); tip != cp1 {
		t.Fatalf("branch at %s, checkpoint event says %s", tip, cp1)
	}
	if strings.Contains(gitIn(t, repo, "ls-tree", "-r", "--name-only", cp1), "build.log") {
		t.Fatal("an ignored file was checkpointed")
	}

	// Turn 2 changes more; turn 3 changes nothing and adds no checkpoint.
	h.sendShell(si.ID, "echo two > a.txt; echo changed > b.txt")
	h.sendShell(si.ID, "echo no changes this turn")
	cps = checkpointsOf(t, h.logEvents(si.ID))
	if len(cps) != 2 || cps[1].Turn != 2 || !reflect.DeepEqual(cps[1].Files, []string{"a.txt", "b.txt"}) {
		t.Fatalf("checkpoints after three turns: %+v", cps)
	}
	cp2 := cps[1].SHA
	if parent := gitIn(t, repo, "rev-parse", cp2+"^"); parent != cp1 {
		t.Fatalf("checkpoint 2's parent is %s", parent)
	}

	// ls, summary and diffs see the session; uncommitted work is dirty.
	os.WriteFile(filepath.Join(wtPath, "scratch.txt"), []byte("uncommitted\n"), 0o644)
	var ls wire.WorktreeList
	h.jsonOut(&ls, "worktree", "ls")
	if len(ls.Worktrees) != 1 {
		t.Fatalf("ls: %+v", ls)
	}
	w := ls.Worktrees[0]
	if w.SessionID != si.ID || w.Branch != "reeve/"+si.ID || w.BaseBranch != "main" || w.BaseCommit != base || !w.Exists || !w.Dirty ||
		w.Checkpoints != 2 || w.LastCheckpoint == nil || w.LastCheckpoint.SHA != cp2 || w.LastCheckpoint.Turn != 2 || w.Path != wtPath {
		t.Fatalf("ls entry: %+v", w)
	}
	if out := h.must("worktree", "ls").stdout; !strings.Contains(out, si.ID) || !strings.Contains(out, "turn 2") || !strings.Contains(out, "main@") {
		t.Fatalf("ls table: %s", out)
	}
	var sum wire.WorktreeSummary
	h.jsonOut(&sum, "worktree", "summary", si.ID)
	if !sum.Uncommitted || sum.FilesChanged != 3 || len(sum.Checkpoints) != 2 || sum.Checkpoints[0].Turn != 1 || sum.Checkpoints[1].Turn != 2 ||
		sum.Checkpoints[0].SHA != cp1 || sum.Insertions != 3 || sum.Deletions != 1 {
		t.Fatalf("summary: %+v", sum)
	}
	if out := h.must("worktree", "summary", si.ID).stdout; !strings.Contains(out, "checkpoints (2)") || !strings.Contains(out, cp1[:10]+"  turn 1") ||
		!strings.Contains(out, "3 files changed, 3 insertions(+), 1 deletions(-)") {
		t.Fatalf("summary: %s", out)
	}
	d := h.must("worktree", "diffs", si.ID)
	if !strings.Contains(d.stdout, "+two") || !strings.Contains(d.stdout, "-zero") || !strings.Contains(d.stdout, "+uncommitted") ||
		!strings.Contains(d.stderr, "3 files changed") {
		t.Fatalf("diffs: %s\n%s", d.stdout, d.stderr)
	}

	// Rollback to checkpoint 1 restores its exact tree, after saving the
	// uncommitted file as a checkpoint.
	var rb wire.RollbackResult
	h.jsonOut(&rb, "worktree", "rollback", si.ID, "--to", cp1[:12])
	if rb.To != cp1 || rb.Saved == nil || !reflect.DeepEqual(rb.Saved.Files, []string{"scratch.txt"}) {
		t.Fatalf("rollback: %+v", rb)
	}
	got := treeFiles(t, wtPath)
	delete(got, "build.log") // ignored files are not part of any checkpoint
	if want := commitFiles(t, repo, cp1); !reflect.DeepEqual(got, want) {
		t.Fatalf("worktree after rollback:\n%v\nwant\n%v", got, want)
	}
	if st := gitIn(t, wtPath, "status", "--porcelain"); st != "" {
		t.Fatalf("worktree dirty after rollback: %q", st)
	}
	if gitIn(t, repo, "show", rb.Saved.SHA+":scratch.txt") != "uncommitted" {
		t.Fatal("the uncommitted work was not kept")
	}
	evs = h.logEvents(si.ID)
	if !findEvent(evs, wire.KindCheckpoint, contains(`"action":"before-rollback"`)) || !findEvent(evs, wire.KindWorktree, contains(`"action":"rollback"`)) {
		t.Fatalf("rollback not on the record; kinds %v", kinds(evs))
	}

	// Retry from checkpoint 1: a new session, same agent and prompt, on a
	// new branch starting at that SHA.
	var rt wire.BranchRetryResult
	h.jsonOut(&rt, "worktree", "retry", si.ID, "--from", cp1)
	nid := rt.Session.ID
	if nid == "" || nid == si.ID || rt.Branch != "reeve/"+nid || rt.From != cp1 || rt.Session.Agent != "shell" || rt.Session.Prompt != si.Prompt {
		t.Fatalf("retry: %+v", rt)
	}
	if r := h.run("wait", nid, "--timeout", "60"); r.code != 0 {
		t.Fatalf("retried session: exit %d %s", r.code, r.stderr)
	}
	nm := h.manifest(nid)
	if nm.RetryOf == nil || nm.RetryOf.SessionID != si.ID || nm.RetryOf.SHA != cp1 || nm.StartCommit != cp1 || nm.BaseCommit != base || nm.BaseBranch != "main" {
		t.Fatalf("retry manifest: %+v", nm)
	}
	// The same prompt on the same tree changes nothing: the branch is
	// still exactly at the chosen checkpoint.
	if tip := gitIn(t, repo, "rev-parse", "reeve/"+nid); tip != cp1 {
		t.Fatalf("retry branch at %s, want %s", tip, cp1)
	}
	if !findEvent(h.logEvents(nid), wire.KindUserPrompt, contains("echo one")) {
		t.Fatal("the retry did not run the original prompt")
	}
	h.sendShell(nid, "echo retry > c.txt")
	rcps := checkpointsOf(t, h.logEvents(nid))
	if len(rcps) != 1 || rcps[0].Turn != 2 {
		t.Fatalf("retry checkpoints: %+v", rcps)
	}

	// SHAs that are not the session's are rejected and change nothing.
	head := gitIn(t, repo, "rev-parse", "reeve/"+si.ID)
	h.refused(4, "not on branch reeve/"+si.ID, "worktree", "rollback", si.ID, "--to", rcps[0].SHA)
	h.refused(4, "not on branch", "worktree", "rollback", si.ID, "--to", base)
	h.refused(4, "not on branch", "worktree", "retry", nid, "--from", cp2)
	h.refused(2, "not a commit SHA", "worktree", "rollback", si.ID, "--to", "main")
	if gitIn(t, repo, "rev-parse", "reeve/"+si.ID) != head {
		t.Fatal("a refused rollback moved the branch")
	}
}

func TestWorktreeSquashRefusalsAndCleanup(t *testing.T) {
	repo := devRepo(t)
	h := newHome(t)
	h.start()
	si := h.runShell(repo, "echo session > a.txt; echo added > new.txt\necho second line >> new.txt")
	h.sendShell(si.ID, "echo more >> new.txt")
	m := h.manifest(si.ID)
	mainBefore := gitIn(t, repo, "rev-parse", "main")
	state := func() (string, string, map[string]string) {
		return gitIn(t, repo, "rev-parse", "main"), gitIn(t, repo, "status", "--porcelain"), treeFiles(t, repo)
	}

	// A dirty base checkout: refused, nothing changed.
	os.WriteFile(filepath.Join(repo, "README"), []byte("developer edit\n"), 0o644)
	r0, s0, f0 := state()
	h.refused(5, "uncommitted changes", "worktree", "squash", si.ID)
	if r, s, f := state(); r != r0 || s != s0 || !reflect.DeepEqual(f, f0) {
		t.Fatal("a refused squash changed the dirty base")
	}
	gitIn(t, repo, "checkout", "--", "README")

	// A conflict with what main gained since: refused, nothing changed.
	os.WriteFile(filepath.Join(repo, "a.txt"), []byte("main's own\n"), 0o644)
	gitIn(t, repo, "commit", "-q", "-am", "main edits a.txt")
	r0, s0, f0 = state()
	h.refused(5, "conflict", "worktree", "squash", si.ID)
	if r, s, f := state(); r != r0 || s != s0 || !reflect.DeepEqual(f, f0) {
		t.Fatal("a refused squash changed the base")
	}
	gitIn(t, repo, "reset", "-q", "--hard", mainBefore)

	// Squash: exactly one commit on main carrying the session's net diff.
	var sq wire.SquashMergeResult
	h.jsonOut(&sq, "worktree", "squash", si.ID)
	if sq.Parent != mainBefore || sq.BaseBranch != "main" || sq.FilesChanged != 2 {
		t.Fatalf("squash: %+v", sq)
	}
	if n := gitIn(t, repo, "rev-list", "--count", mainBefore+"..main"); n != "1" {
		t.Fatalf("%s new commits on main", n)
	}
	if gitIn(t, repo, "rev-parse", "main") != sq.Commit {
		t.Fatal("main is not at the squash commit")
	}
	net := gitIn(t, repo, "diff", m.BaseCommit, "reeve/"+si.ID)
	if got := gitIn(t, repo, "diff", "main^", "main"); got != net {
		t.Fatalf("squash diff differs from the session's net diff:\n%s\n---\n%s", got, net)
	}
	if subj := gitIn(t, repo, "log", "-1", "--format=%s", "main"); subj != "echo session > a.txt; echo added > new.txt" {
		t.Fatalf("squash subject %q", subj)
	}
	if body := gitIn(t, repo, "log", "-1", "--format=%b", "main"); !strings.Contains(body, "Reeve-Session: "+si.ID) {
		t.Fatalf("squash body %q", body)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, "new.txt")); string(b) != "added\nsecond line\nmore\n" || gitIn(t, repo, "status", "--porcelain") != "" {
		t.Fatalf("the developer's checkout after squash: %q", b)
	}
	h.refused(5, "already has every change", "worktree", "squash", si.ID)

	// Cleanup never loses work: uncommitted work is checkpointed, and the
	// branch stays because that work is not merged.
	wtPath := m.Worktree
	os.WriteFile(filepath.Join(wtPath, "late.txt"), []byte("late work\n"), 0o644)
	var rm wire.WorktreeRemoveResult
	h.jsonOut(&rm, "worktree", "rm", si.ID)
	if !rm.Removed || rm.BranchDeleted || rm.Saved == nil || !reflect.DeepEqual(rm.Saved.Files, []string{"late.txt"}) {
		t.Fatalf("rm: %+v", rm)
	}
	if _, err := os.Stat(wtPath); !os.IsNotExist(err) {
		t.Fatal("the worktree directory is still there")
	}
	if gitIn(t, repo, "show", "reeve/"+si.ID+":late.txt") != "late work" {
		t.Fatal("uncommitted work was lost")
	}
	if !strings.Contains(h.must("worktree", "diffs", si.ID).stdout, "+late work") {
		t.Fatal("the diff of a removed worktree does not come from its branch")
	}
	h.refused(5, "removed", "worktree", "rollback", si.ID, "--to", rm.Saved.SHA)
	var ls wire.WorktreeList
	h.jsonOut(&ls, "worktree", "ls")
	if len(ls.Worktrees) != 1 || ls.Worktrees[0].Exists {
		t.Fatalf("ls after rm: %+v", ls)
	}
	if !findEvent(h.logEvents(si.ID), wire.KindWorktree, contains(`"action":"remove"`)) {
		t.Fatal("the removal is not on the record")
	}
}

func TestWorktreeRefusals(t *testing.T) {
	h := newHome(t)
	h.start()
	plain := t.TempDir()
	si := h.runShell(plain, "echo in place > f.txt")
	if b, _ := os.ReadFile(filepath.Join(plain, "f.txt")); string(b) != "in place\n" {
		t.Fatal("a session outside git did not run in place")
	}
	m := h.manifest(si.ID)
	if m.Isolation != wire.IsolationInPlace || !strings.Contains(m.IsolationNote, "not a git repository") || m.Worktree != "" {
		t.Fatalf("manifest of an in-place session: %+v", m)
	}
	for _, args := range [][]string{
		{"worktree", "diffs", si.ID}, {"worktree", "summary", si.ID}, {"worktree", "rollback", si.ID, "--to", "abcdef12"},
		{"worktree", "retry", si.ID, "--from", "abcdef12"}, {"worktree", "squash", si.ID}, {"worktree", "rm", si.ID},
	} {
		h.refused(5, "has no worktree: "+plain+" is not a git repository", args...)
	}
	h.refused(4, "no session", "worktree", "summary", "NOPE")
	h.refused(2, "required flag", "worktree", "rollback", si.ID)

	// A session running a turn is busy for every step that changes its
	// worktree, and readable meanwhile.
	repo := devRepo(t)
	sid := strings.TrimSpace(h.must("run", repo, "--agent", "shell", "--prompt", "echo started > s.txt; read line").stdout)
	waitFor(t, "the turn to start", 30*time.Second, func() bool {
		return findEvent(h.logEvents(sid), wire.KindStatus, contains(`"running"`))
	})
	for _, args := range [][]string{{"worktree", "squash", sid}, {"worktree", "rm", sid}, {"worktree", "rollback", sid, "--to", "abcdef12"}} {
		h.refused(5, "running a turn", args...)
	}
	h.must("worktree", "summary", sid)
	h.must("session", "stop", sid)
	h.run("wait", sid, "--timeout", "30")
	// Even a killed turn's work is checkpointed.
	cps := checkpointsOf(t, h.logEvents(sid))
	if len(cps) != 1 || !reflect.DeepEqual(cps[0].Files, []string{"s.txt"}) {
		t.Fatalf("checkpoint of a killed turn: %+v", cps)
	}
}

func TestWorktreeClaudeSessionCheckpoint(t *testing.T) {
	exe := agenttest.Claude(t)
	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "Writing the file.", Calls: []agenttest.ToolCall{agenttest.Bash("echo from claude > made-by-claude.txt && pwd")}},
		{Text: "Done."},
	}})
	h := newHome(t)
	h.env = append(agenttest.ClaudeEnv(srv.URL, t.TempDir()), "REEVE_CLAUDE_PATH="+exe)
	h.start()
	repo := devRepo(t)
	r := h.must("run", repo, "--agent", "claude", "--mode", "bypass", "--prompt", "create made-by-claude.txt", "--wait", "--json")
	si := h.sessionInfo(r.stdout)
	if si.Status != "completed" {
		t.Fatalf("session ended %s: %s", si.Status, si.StatusReason)
	}
	wtPath := filepath.Join(h.dir, "worktrees", si.ID)
	if _, err := os.Stat(filepath.Join(repo, "made-by-claude.txt")); !os.IsNotExist(err) {
		t.Fatal("Claude Code wrote into the developer's checkout")
	}
	evs := h.logEvents(si.ID)
	if !findEvent(evs, wire.KindToolResult, contains(wtPath)) {
		t.Fatalf("the Bash tool did not run in the worktree; kinds %v", kinds(evs))
	}
	cps := checkpointsOf(t, evs)
	if len(cps) != 1 || cps[0].Turn != 1 || !reflect.DeepEqual(cps[0].Files, []string{"made-by-claude.txt"}) {
		t.Fatalf("checkpoints: %+v", cps)
	}
	if got := gitIn(t, repo, "show", cps[0].SHA+":made-by-claude.txt"); got != "from claude" {
		t.Fatalf("checkpointed content %q", got)
	}
	files := strings.Split(gitIn(t, repo, "diff", "--name-only", "main", "reeve/"+si.ID), "\n")
	sort.Strings(files)
	if !reflect.DeepEqual(files, []string{"made-by-claude.txt"}) {
		t.Fatalf("the session branch differs from main in %v", files)
	}
}
