// Package worktree gives each session its own git worktree and turns the
// work done in it into real commits: checkpoints after each turn, rollback
// to a checkpoint, a new branch from a checkpoint, a squash-merge into the
// base branch, and explicit removal. Everything goes through the git
// binary; nothing of git is reimplemented.
//
// The package never loses work: every step that would change or drop files
// in a worktree commits them as a checkpoint first, rollback adds a commit
// instead of moving the branch back, and removal keeps the session branch
// unless its changes are already in the base branch.
package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// Errors the caller maps to protocol codes. They are wrapped with the
// details.
var (
	// ErrUnbornHead: the repository has no commit to branch from.
	ErrUnbornHead = errors.New("the repository has no commits yet")
	// ErrForeignCommit: a SHA that is not a commit of the session's branch
	// since its base.
	ErrForeignCommit = errors.New("not a checkpoint of this session")
	// ErrBadSHA: not a hexadecimal object name.
	ErrBadSHA = errors.New("not a commit SHA")
	// ErrDirtyBase: the base checkout has uncommitted changes.
	ErrDirtyBase = errors.New("the base checkout has uncommitted changes")
	// ErrConflict: the session's change does not merge cleanly.
	ErrConflict = errors.New("the merge conflicts")
	// ErrNothingToMerge: the base branch already has the session's change.
	ErrNothingToMerge = errors.New("nothing to merge")
	// ErrNoBaseBranch: the session started from a detached HEAD, or its
	// base branch was deleted.
	ErrNoBaseBranch = errors.New("no base branch")
	// ErrGone: the worktree directory was removed.
	ErrGone = errors.New("the worktree was removed")
)

// Options configure a Manager.
type Options struct {
	// Root is where worktrees are created, one directory per session:
	// <daemon home>/worktrees.
	Root string
	// Git is the git executable; default "git" from PATH.
	Git string
	// Env is the environment git runs with; default os.Environ(). Variables
	// that would redirect git to another repository (GIT_DIR, ...) are
	// dropped.
	Env []string
}

// Manager runs git for session worktrees, one operation per worktree (and
// per repository, for the steps that touch shared state) at a time.
type Manager struct {
	opts Options
	env  []string

	mu    sync.Mutex
	locks map[string]chan struct{}
}

// New builds a Manager.
func New(opts Options) *Manager {
	if opts.Git == "" {
		opts.Git = "git"
	}
	if opts.Env == nil {
		opts.Env = os.Environ()
	}
	return &Manager{opts: opts, env: gitEnv(opts.Env), locks: map[string]chan struct{}{}}
}

// Root is the directory worktrees are created in.
func (m *Manager) Root() string { return m.opts.Root }

// Worktree is one session's worktree, as recorded when it was created. The
// caller keeps it (in the session's manifest) and passes it back.
type Worktree struct {
	Session string `json:"session"`
	// Repository is the top level of the checkout the session was launched
	// in; it shares its object store with the worktree.
	Repository string `json:"repository"`
	Path       string `json:"path"`
	// Prefix is the launch directory relative to the repository top level,
	// "" at the top: the agent works in Path/Prefix.
	Prefix string `json:"prefix,omitempty"`
	Branch string `json:"branch"`
	// BaseCommit is the commit the session's change is measured from; a
	// retried session keeps the base of the session it came from.
	BaseCommit string `json:"base_commit"`
	// BaseBranch is the branch checked out when the session started; ""
	// for a detached HEAD (squash is then refused).
	BaseBranch string `json:"base_branch,omitempty"`
	// StartCommit is where the worktree was created from: BaseCommit, or
	// the checkpoint a retry started from.
	StartCommit string `json:"start_commit"`
}

// Workdir is where the agent runs.
func (w Worktree) Workdir() string { return filepath.Join(w.Path, filepath.FromSlash(w.Prefix)) }

// BranchName is the session branch for a session id.
func BranchName(session string) string { return "reeve/" + session }

// Repo is what Detect finds about a directory.
type Repo struct {
	Root   string // top level of the checkout
	Prefix string // the directory relative to Root, "" at the top
	Head   string // the commit HEAD points to
	Branch string // the checked-out branch, "" when HEAD is detached
}

// Detect reports whether dir is inside a git checkout, and where. A
// directory outside any repository gives ok false and no error; a
// repository without commits gives ErrUnbornHead.
func (m *Manager) Detect(ctx context.Context, dir string) (repo Repo, ok bool, err error) {
	out, err := m.git(ctx, dir, "rev-parse", "--is-inside-work-tree")
	if err != nil || strings.TrimSpace(out) != "true" {
		// Not a repository, or inside a .git directory: run in place.
		return Repo{}, false, nil
	}
	out, err = m.git(ctx, dir, "rev-parse", "--show-toplevel", "--show-prefix")
	if err != nil {
		return Repo{}, false, err
	}
	lines := strings.SplitN(strings.TrimRight(out, "\n"), "\n", 2)
	repo.Root = lines[0]
	if len(lines) > 1 {
		repo.Prefix = strings.TrimSuffix(lines[1], "/")
	}
	head, err := m.git(ctx, repo.Root, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	if err != nil || strings.TrimSpace(head) == "" {
		return repo, true, fmt.Errorf("%s: %w, so there is no HEAD to branch a worktree from", repo.Root, ErrUnbornHead)
	}
	repo.Head = strings.TrimSpace(head)
	if b, err := m.git(ctx, repo.Root, "symbolic-ref", "--quiet", "--short", "HEAD"); err == nil {
		repo.Branch = strings.TrimSpace(b)
	}
	return repo, true, nil
}

// CreateOptions say which worktree to create.
type CreateOptions struct {
	Session string
	Repo    Repo
	// From is the commit to start from; "" means Repo.Head.
	From string
	// BaseCommit and BaseBranch override the recorded base (a retried
	// session keeps its origin's base); "" means Repo.Head and Repo.Branch.
	BaseCommit, BaseBranch string
}

// Create makes the session's worktree at Root/<session> on a new branch
// reeve/<session>.
func (m *Manager) Create(ctx context.Context, o CreateOptions) (Worktree, error) {
	if o.Session == "" || strings.ContainsAny(o.Session, "/\\ ") || strings.HasPrefix(o.Session, "-") || strings.HasPrefix(o.Session, ".") {
		return Worktree{}, fmt.Errorf("create worktree: bad session id %q", o.Session)
	}
	wt := Worktree{
		Session: o.Session, Repository: o.Repo.Root, Prefix: o.Repo.Prefix,
		Path:       filepath.Join(m.opts.Root, o.Session),
		Branch:     BranchName(o.Session),
		BaseCommit: o.Repo.Head, BaseBranch: o.Repo.Branch, StartCommit: o.Repo.Head,
	}
	if o.From != "" {
		wt.StartCommit = o.From
	}
	if o.BaseCommit != "" {
		wt.BaseCommit, wt.BaseBranch = o.BaseCommit, o.BaseBranch
	}
	if err := os.MkdirAll(m.opts.Root, 0o700); err != nil {
		return Worktree{}, fmt.Errorf("create worktree: %w", err)
	}
	unlock, err := m.lock(ctx, "repo:"+m.commonDir(ctx, wt.Repository))
	if err != nil {
		return Worktree{}, err
	}
	defer unlock()
	if _, err := m.git(ctx, wt.Repository, "worktree", "add", "--quiet", "-b", wt.Branch, wt.Path, wt.StartCommit); err != nil {
		return Worktree{}, fmt.Errorf("create worktree for session %s: %w", o.Session, err)
	}
	return wt, nil
}

// Exists reports whether the worktree directory is still there.
func (w Worktree) Exists() bool {
	_, err := os.Stat(filepath.Join(w.Path, ".git"))
	return err == nil
}

// git runs git in dir and returns its stdout. A failure carries git's own
// message.
func (m *Manager) git(ctx context.Context, dir string, args ...string) (string, error) {
	out, _, err := m.gitEnv(ctx, dir, nil, nil, args...)
	return out, err
}

// gitEnv runs git with extra environment and optional stdin, and returns
// stdout and the exit code.
func (m *Manager) gitEnv(ctx context.Context, dir string, extra []string, stdin []byte, args ...string) (string, int, error) {
	// Hooks are off: checkpoints are the daemon's bookkeeping, and a
	// user's pre-commit or post-checkout hook must neither block nor
	// slow them. Signing is off because nobody is there to unlock a key.
	full := append([]string{"-c", "core.hooksPath=/dev/null", "-c", "commit.gpgSign=false", "-c", "core.quotePath=false"}, args...)
	cmd := exec.CommandContext(ctx, m.opts.Git, full...)
	cmd.Dir = dir
	cmd.Env = append(append([]string{}, m.env...), extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	if err != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return stdout.String(), code, fmt.Errorf("git %s: %s", subcommand(args), msg)
	}
	return stdout.String(), 0, nil
}

// subcommand names a git invocation in errors, past any -c flags.
func subcommand(args []string) string {
	for i := 0; i < len(args); i++ {
		if args[i] == "-c" {
			i++
			continue
		}
		return args[i]
	}
	return ""
}

// identity returns -c flags naming reeve as author and committer for the
// parts of the identity the user has not configured, so that commits work
// on a machine where git was never set up; a configured identity wins.
func (m *Manager) identity(ctx context.Context, dir string) []string {
	var flags []string
	if envValue(m.env, "GIT_AUTHOR_NAME") == "" || envValue(m.env, "GIT_COMMITTER_NAME") == "" {
		if out, _ := m.git(ctx, dir, "config", "--get", "user.name"); strings.TrimSpace(out) == "" {
			flags = append(flags, "-c", "user.name=reeve")
		}
	}
	if envValue(m.env, "GIT_AUTHOR_EMAIL") == "" || envValue(m.env, "GIT_COMMITTER_EMAIL") == "" {
		if out, _ := m.git(ctx, dir, "config", "--get", "user.email"); strings.TrimSpace(out) == "" {
			flags = append(flags, "-c", "user.email=reeve@localhost")
		}
	}
	return flags
}

// commonDir is the repository's shared .git directory, the key for steps
// that change refs or the worktree list.
func (m *Manager) commonDir(ctx context.Context, dir string) string {
	out, err := m.git(ctx, dir, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return dir
	}
	return strings.TrimSpace(out)
}

// lock takes the named lock, or gives up when ctx ends.
func (m *Manager) lock(ctx context.Context, key string) (func(), error) {
	m.mu.Lock()
	ch := m.locks[key]
	if ch == nil {
		ch = make(chan struct{}, 1)
		m.locks[key] = ch
	}
	m.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for another git operation on %s: %w", strings.TrimPrefix(key, "repo:"), ctx.Err())
	}
}

// gitEnv drops the variables that would point git at another repository
// than the directory it runs in (a daemon started from a git hook inherits
// them), and keeps git from prompting.
func gitEnv(env []string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL":
			// Set but empty reads as unset here: git would refuse it,
			// and identity() supplies the fallback instead.
			if v == "" {
				continue
			}
		case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
			"GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_PREFIX", "GIT_CEILING_DIRECTORIES",
			"GIT_TERMINAL_PROMPT", "LC_ALL":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// Compiled on first use: a counted repetition compiles into hundreds of
// allocations, which every start of the binary would pay in package init.
var hexSHA = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-fA-F]{4,64}$`) })

// splitNul splits NUL-terminated output.
func splitNul(s string) []string {
	s = strings.TrimSuffix(s, "\x00")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}
