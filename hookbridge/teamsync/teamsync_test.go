package teamsync

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/server/sdk"
)

func gitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"config", "user.email", "t@example.com"},
		{"config", "user.name", "t"},
		{"commit", "-q", "--allow-empty", "-m", "init"},
	} {
		run(t, dir, args...)
	}
	return dir
}

func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func file(p, content string) sdk.TeamResourceFile {
	sum := sha256.Sum256([]byte(content))
	return sdk.TeamResourceFile{Path: p, SHA256: hex.EncodeToString(sum[:]), ContentBase64: base64.StdEncoding.EncodeToString([]byte(content))}
}

func TestApplyCommitsAndIsIdempotent(t *testing.T) {
	repo := gitRepo(t)
	ctx := context.Background()
	b := sdk.TeamResourceBundle{Resource: "default", Version: "7", Files: []sdk.TeamResourceFile{
		file(".reeve/policy.yaml", "version: 1\n"), file(".reeve/routes/a.yaml", "version: 1\n"),
	}}
	res, err := Apply(ctx, Options{Repo: repo}, b)
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit == "" || res.Commit != run(t, repo, "rev-parse", "HEAD") || !res.Staged {
		t.Fatalf("result %+v", res)
	}
	if msg := run(t, repo, "log", "-1", "--format=%s"); msg != "Sync team resources (default 7)" {
		t.Fatalf("commit message %q", msg)
	}
	if got := run(t, repo, "show", "--name-only", "--format=", "HEAD"); got != ".reeve/policy.yaml\n.reeve/routes/a.yaml" {
		t.Fatalf("committed %q", got)
	}
	again, err := Apply(ctx, Options{Repo: repo}, b)
	if err != nil || again.Commit != "" || again.Staged || again.Files[0].Action != "unchanged" {
		t.Fatalf("second apply: %+v %v", again, err)
	}

	// Something else staged by the user stays out of the commit.
	os.WriteFile(filepath.Join(repo, "mine.txt"), []byte("x"), 0o644)
	run(t, repo, "add", "mine.txt")
	b.Files[0] = file(".reeve/policy.yaml", "version: 1\nrules: []\n")
	res, err = Apply(ctx, Options{Repo: repo, CommitMessage: "policy from the team"}, b)
	if err != nil || res.Files[0].Action != "updated" {
		t.Fatalf("update: %+v %v", res, err)
	}
	if got := run(t, repo, "show", "--name-only", "--format=%s", "HEAD"); got != "policy from the team\n\n.reeve/policy.yaml" {
		t.Fatalf("commit %q", got)
	}
	if got := run(t, repo, "diff", "--cached", "--name-only"); got != "mine.txt" {
		t.Fatalf("the user's staged file: %q", got)
	}

	// --no-commit stages only.
	b.Files[1] = file(".reeve/routes/a.yaml", "version: 1\nroutes: []\n")
	head := run(t, repo, "rev-parse", "HEAD")
	res, err = Apply(ctx, Options{Repo: repo, NoCommit: true}, b)
	if err != nil || res.Commit != "" || !res.Staged || run(t, repo, "rev-parse", "HEAD") != head {
		t.Fatalf("no-commit: %+v %v", res, err)
	}
	if !strings.Contains(run(t, repo, "diff", "--cached", "--name-only"), ".reeve/routes/a.yaml") {
		t.Fatal("no-commit did not stage")
	}
}

func TestPushReachesTheRemote(t *testing.T) {
	repo := gitRepo(t)
	remote := t.TempDir()
	run(t, remote, "init", "-q", "--bare")
	run(t, repo, "remote", "add", "origin", remote)
	run(t, repo, "push", "-q", "-u", "origin", "main")
	res, err := Apply(context.Background(), Options{Repo: repo, Push: true}, sdk.TeamResourceBundle{Files: []sdk.TeamResourceFile{file(".reeve/policy.yaml", "version: 1\n")}})
	if err != nil || !res.Pushed {
		t.Fatalf("%+v %v", res, err)
	}
	if got := run(t, remote, "rev-parse", "main"); got != res.Commit {
		t.Fatalf("remote main %s, commit %s", got, res.Commit)
	}
}

// Nothing is written when any file of the bundle is refused: a wrong
// digest, a path outside .reeve/, or a symbolic link leading out.
func TestRefusals(t *testing.T) {
	ctx := context.Background()
	good := file(".reeve/policy.yaml", "version: 1\n")
	tampered := file(".reeve/routes/r.yaml", "version: 1\n")
	tampered.ContentBase64 = base64.StdEncoding.EncodeToString([]byte("version: 1\nrules: [{allow: '*'}]\n"))
	cases := map[string]struct {
		f    sdk.TeamResourceFile
		want error
	}{
		"digest":        {tampered, ErrDigest},
		"dotdot":        {file(".reeve/../evil", "x"), ErrPath},
		"dotdot-prefix": {file("../.reeve/x", "x"), ErrPath},
		"absolute":      {file("/etc/passwd", "x"), ErrPath},
		"outside":       {file("src/main.go", "x"), ErrPath},
		"bare dir":      {file(".reeve", "x"), ErrPath},
		"git metadata":  {file(".reeve/.git/config", "x"), ErrPath},
		"backslash":     {file(`.reeve\..\x`, "x"), ErrPath},
		"not base64":    {sdk.TeamResourceFile{Path: ".reeve/a", SHA256: "00", ContentBase64: "%%%"}, ErrBundle},
	}
	for name, c := range cases {
		repo := gitRepo(t)
		_, err := Apply(ctx, Options{Repo: repo}, sdk.TeamResourceBundle{Files: []sdk.TeamResourceFile{good, c.f}})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
		if _, err := os.Stat(filepath.Join(repo, ".reeve")); err == nil {
			t.Errorf("%s: a refused bundle wrote files", name)
		}
	}

	// Symbolic links that lead out of .reeve.
	outside := t.TempDir()
	repo := gitRepo(t)
	os.MkdirAll(filepath.Join(repo, ".reeve"), 0o755)
	os.Symlink(outside, filepath.Join(repo, ".reeve", "routes"))
	_, err := Apply(ctx, Options{Repo: repo}, sdk.TeamResourceBundle{Files: []sdk.TeamResourceFile{file(".reeve/routes/a.yaml", "x")}})
	if !errors.Is(err, ErrPath) {
		t.Fatalf("symlinked directory: %v", err)
	}
	os.Symlink(filepath.Join(outside, "target"), filepath.Join(repo, ".reeve", "policy.yaml"))
	if _, err := Apply(ctx, Options{Repo: repo}, sdk.TeamResourceBundle{Files: []sdk.TeamResourceFile{good}}); !errors.Is(err, ErrPath) {
		t.Fatalf("symlinked file: %v", err)
	}
	repo2 := gitRepo(t)
	os.Symlink(outside, filepath.Join(repo2, ".reeve"))
	if _, err := Apply(ctx, Options{Repo: repo2}, sdk.TeamResourceBundle{Files: []sdk.TeamResourceFile{good}}); !errors.Is(err, ErrPath) {
		t.Fatalf(".reeve itself a symlink: %v", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("wrote outside: %v", entries)
	}
	// Too many files.
	many := make([]sdk.TeamResourceFile, MaxFiles+1)
	for i := range many {
		many[i] = good
	}
	if _, err := Apply(ctx, Options{Repo: gitRepo(t)}, sdk.TeamResourceBundle{Files: many}); !errors.Is(err, ErrBundle) {
		t.Fatalf("too many files: %v", err)
	}
}
