// Package teamsync writes a workspace's team resources (a bundle of
// project configuration files) into a git repository: it verifies every
// file's SHA-256 and path before writing any, keeps every write inside the
// project config directory (.reeve/), then stages and commits the change.
package teamsync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"reeve.dev/reeve/internal/atomicfile"
	"reeve.dev/reeve/server/sdk"
)

// ConfigDir is the project config directory every file must lie in.
const ConfigDir = ".reeve"

// Limits of a bundle, so that a hostile one cannot exhaust memory or disk.
const (
	MaxFiles = 1000
	MaxBytes = 16 << 20 // total decoded content
)

// Errors a caller maps to exit codes.
var (
	ErrDigest = errors.New("digest mismatch")
	ErrPath   = errors.New("path outside " + ConfigDir + "/")
	ErrBundle = errors.New("invalid bundle")
)

// Options say where and how to apply a bundle.
type Options struct {
	Repo          string // the repository's working tree
	CommitMessage string // default names the resource and version
	NoCommit      bool   // write and stage, do not commit
	Push          bool   // push the commit to the branch's upstream
	Git           string // the git binary; default "git"
}

// File is what happened to one file.
type File struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Action string `json:"action"` // created, updated, unchanged
}

// Result is the outcome of Apply.
type Result struct {
	Repo   string `json:"repo"`
	Files  []File `json:"files"`
	Staged bool   `json:"staged"`           // something changed and was staged
	Commit string `json:"commit,omitempty"` // the commit made, if any
	Pushed bool   `json:"pushed"`
}

type checked struct {
	rel     string // slash path
	abs     string
	content []byte
	sum     string
}

// Verify checks every file of the bundle against its digest and the path
// rules, without writing anything.
func Verify(repo string, b sdk.TeamResourceBundle) error {
	_, err := verify(repo, b)
	return err
}

func verify(repo string, b sdk.TeamResourceBundle) ([]checked, error) {
	if len(b.Files) == 0 {
		return nil, fmt.Errorf("%w: no files", ErrBundle)
	}
	if len(b.Files) > MaxFiles {
		return nil, fmt.Errorf("%w: %d files, at most %d", ErrBundle, len(b.Files), MaxFiles)
	}
	root, err := filepath.EvalSymlinks(repo)
	if err != nil {
		return nil, fmt.Errorf("repository %s: %w", repo, err)
	}
	cfg := filepath.Join(root, ConfigDir)
	seen := map[string]bool{}
	total := 0
	var out []checked
	for _, f := range b.Files {
		rel, err := cleanPath(f.Path)
		if err != nil {
			return nil, err
		}
		if seen[rel] {
			return nil, fmt.Errorf("%w: %s appears twice", ErrBundle, rel)
		}
		seen[rel] = true
		content, err := base64.StdEncoding.DecodeString(f.ContentBase64)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: content is not base64", ErrBundle, rel)
		}
		if total += len(content); total > MaxBytes {
			return nil, fmt.Errorf("%w: more than %d bytes of content", ErrBundle, MaxBytes)
		}
		sum := sha256.Sum256(content)
		got := hex.EncodeToString(sum[:])
		if !strings.EqualFold(got, f.SHA256) {
			return nil, fmt.Errorf("%w: %s has SHA-256 %s, the bundle says %q", ErrDigest, rel, got, f.SHA256)
		}
		abs := filepath.Join(root, filepath.FromSlash(rel))
		if err := staysInside(cfg, abs); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrPath, rel, err)
		}
		out = append(out, checked{rel: rel, abs: abs, content: content, sum: got})
	}
	return out, nil
}

// cleanPath accepts a relative slash path under .reeve/ and nothing else.
func cleanPath(p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("%w: empty path", ErrPath)
	case strings.ContainsAny(p, "\\\x00"):
		return "", fmt.Errorf("%w: %q has a backslash or NUL", ErrPath, p)
	case strings.HasPrefix(p, "/") || filepath.IsAbs(p):
		return "", fmt.Errorf("%w: %q is absolute", ErrPath, p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: %q climbs out of its directory (..)", ErrPath, p)
		}
	}
	c := path.Clean(p)
	if !strings.HasPrefix(c, ConfigDir+"/") {
		return "", fmt.Errorf("%w: %q", ErrPath, p)
	}
	if strings.HasPrefix(c, ConfigDir+"/.git/") || c == ConfigDir+"/.git" {
		return "", fmt.Errorf("%w: %q is git metadata", ErrPath, p)
	}
	return c, nil
}

// staysInside refuses a target whose existing parts are symlinks that
// resolve outside dir (or dir itself being a symlink out of the repo).
func staysInside(dir, target string) error {
	// The deepest part of target that exists, resolved.
	probe := target
	for {
		fi, err := os.Lstat(probe)
		if err == nil {
			if probe == target && fi.Mode()&fs.ModeSymlink != 0 {
				return errors.New("the file is a symbolic link")
			}
			if probe == target && fi.IsDir() {
				return errors.New("a directory is in the way")
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			break
		}
		probe = parent
	}
	real, err := filepath.EvalSymlinks(probe)
	if err != nil {
		return err
	}
	rest, _ := filepath.Rel(probe, target)
	resolved := filepath.Join(real, rest)
	// dir's own real path, if it exists (else it will be created as a
	// plain directory under the real repository).
	realDir := dir
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		realDir = r
	}
	if realDir != dir {
		return fmt.Errorf("%s is a symbolic link", ConfigDir)
	}
	if !strings.HasPrefix(resolved, realDir+string(filepath.Separator)) {
		return fmt.Errorf("a symbolic link leads to %s", resolved)
	}
	return nil
}

// Apply verifies the bundle, writes its files, stages them and, unless
// NoCommit, commits; nothing is written when any file fails verification.
func Apply(ctx context.Context, o Options, b sdk.TeamResourceBundle) (Result, error) {
	res := Result{Repo: o.Repo}
	top, err := o.git(ctx, "rev-parse", "--show-toplevel")
	if err != nil {
		return res, fmt.Errorf("%s is not a git working tree: %w", o.Repo, err)
	}
	o.Repo, res.Repo = top, top
	files, err := verify(top, b)
	if err != nil {
		return res, err
	}
	var paths []string
	for _, f := range files {
		action := "created"
		if old, err := os.ReadFile(f.abs); err == nil {
			action = "updated"
			if bytes.Equal(old, f.content) {
				action = "unchanged"
			}
		}
		if action != "unchanged" {
			if err := os.MkdirAll(filepath.Dir(f.abs), 0o755); err != nil {
				return res, err
			}
			if err := atomicfile.WriteFile(f.abs, f.content, 0o644); err != nil {
				return res, err
			}
		}
		res.Files = append(res.Files, File{Path: f.rel, SHA256: f.sum, Action: action})
		paths = append(paths, f.rel)
	}
	if _, err := o.git(ctx, append([]string{"add", "--"}, paths...)...); err != nil {
		return res, fmt.Errorf("stage: %w", err)
	}
	if _, err := o.git(ctx, append([]string{"diff", "--cached", "--quiet", "--"}, paths...)...); err == nil {
		return res, nil // nothing changed in the index
	}
	res.Staged = true
	if o.NoCommit {
		return res, nil
	}
	msg := o.CommitMessage
	if msg == "" {
		msg = "Sync team resources"
		if b.Resource != "" || b.Version != "" {
			msg += fmt.Sprintf(" (%s %s)", b.Resource, b.Version)
		}
	}
	// Only the bundle's paths go into the commit, whatever else is staged.
	if _, err := o.git(ctx, append([]string{"commit", "--no-verify", "-m", msg, "--"}, paths...)...); err != nil {
		return res, fmt.Errorf("commit: %w", err)
	}
	if res.Commit, err = o.git(ctx, "rev-parse", "HEAD"); err != nil {
		return res, err
	}
	if o.Push {
		if _, err := o.git(ctx, "push"); err != nil {
			return res, fmt.Errorf("push: %w", err)
		}
		res.Pushed = true
	}
	return res, nil
}

func (o Options) git(ctx context.Context, args ...string) (string, error) {
	bin := o.Git
	if bin == "" {
		bin = "git"
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = o.Repo
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			return "", err
		}
		return "", fmt.Errorf("git %s: %s", args[0], msg)
	}
	return strings.TrimSpace(out.String()), nil
}
