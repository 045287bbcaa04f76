package contract_test

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

	"reeve.dev/reeve/hookbridge/contract"
	"reeve.dev/reeve/hookbridge/teamsync"
	"reeve.dev/reeve/server/sdk"
)

const policyYAML = `version: 1
deny:
  - name: no-rm
    commands: ["rm -rf *"]
allow:
  - tools: [Read]
`

const routesYAML = `version: 1
routes:
  - name: bugfix
    on: {trigger: issue, labels: [bug]}
    agent: claude
    prompt: "Fix {{.Title}}"
`

func run(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// project is a git repository with a committed local policy and a routes
// file written by a real team-resource sync.
func project(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := t.TempDir()
	run(t, dir, "init", "-q")
	write(t, filepath.Join(dir, ".reeve", "policy.yaml"), policyYAML)
	run(t, dir, "add", ".")
	run(t, dir, "commit", "-q", "-m", "policy")
	sum := sha256.Sum256([]byte(routesYAML))
	b := sdk.TeamResourceBundle{Resource: "default", Version: "v7", Files: []sdk.TeamResourceFile{{
		Path: ".reeve/routes/team.yaml", SHA256: hex.EncodeToString(sum[:]), ContentBase64: base64.StdEncoding.EncodeToString([]byte(routesYAML)),
	}}}
	t.Setenv("GIT_AUTHOR_NAME", "t")
	t.Setenv("GIT_AUTHOR_EMAIL", "t@example.com")
	t.Setenv("GIT_COMMITTER_NAME", "t")
	t.Setenv("GIT_COMMITTER_EMAIL", "t@example.com")
	if _, err := teamsync.Apply(context.Background(), teamsync.Options{Repo: dir}, b); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestResolveMergesProjectAndSyncedFiles(t *testing.T) {
	dir := project(t)
	res, err := contract.Resolve(context.Background(), contract.Options{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Valid || len(res.Sources) != 2 {
		t.Fatalf("result = %+v", res)
	}
	byFile := map[string]contract.Source{}
	for _, s := range res.Sources {
		byFile[filepath.Base(s.File)] = s
	}
	if s := byFile["policy.yaml"]; s.Origin != "project" || s.Subject != "policy" || len(s.Commit) < 40 {
		t.Errorf("policy source = %+v", s)
	}
	if s := byFile["team.yaml"]; s.Origin != "team-resource" || s.Bundle != "default v7" || s.Schema != "routes.v1" {
		t.Errorf("routes source = %+v", s)
	}
	got := map[string]contract.Value{}
	for _, v := range res.Values {
		got[v.Key] = v
	}
	for key, line := range map[string]int{"policy.deny.no-rm": 3, "policy.allow[0]": 6, "routes.bugfix": 3} {
		if v, ok := got[key]; !ok || v.Line != line {
			t.Errorf("%s = %+v, want line %d (all: %+v)", key, v, line, res.Values)
		}
	}
	if !strings.HasSuffix(got["routes.bugfix"].File, filepath.Join(".reeve", "routes", "team.yaml")) {
		t.Errorf("routes.bugfix from %s", got["routes.bugfix"].File)
	}

	// Edited after the sync: the file is local now.
	write(t, filepath.Join(dir, ".reeve", "routes", "team.yaml"), routesYAML+"  - name: other\n    on: {trigger: issue}\n    agent: codex\n    prompt: x\n")
	res, err = contract.Resolve(context.Background(), contract.Options{Path: filepath.Join(dir, ".reeve", "routes", "team.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sources) != 1 || res.Sources[0].Origin != "local" || len(res.Values) != 2 {
		t.Errorf("single edited file: %+v", res)
	}
}

func TestResolveBadInput(t *testing.T) {
	dir := project(t)
	if _, err := contract.Resolve(context.Background(), contract.Options{Path: filepath.Join(dir, "nope")}); !errors.Is(err, contract.ErrNoProject) {
		t.Errorf("missing dir: %v", err)
	}
	// A route defined twice, once locally and once by the sync, and a bad policy.
	write(t, filepath.Join(dir, ".reeve", "routes", "local.yaml"), routesYAML)
	write(t, filepath.Join(dir, ".reeve", "policy.yaml"), "version: 1\ndeny:\n  - bogus: true\n")
	res, err := contract.Resolve(context.Background(), contract.Options{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	if res.Valid || len(res.Values) != 0 || len(res.Problems) < 2 {
		t.Fatalf("invalid contract resolved: %+v", res)
	}
	for _, p := range res.Problems {
		if p.File == "" || p.Line == 0 {
			t.Errorf("unlocated problem %+v", p)
		}
	}
	write(t, filepath.Join(dir, "README"), "x")
	if _, err := contract.Resolve(context.Background(), contract.Options{Path: filepath.Join(dir, "README")}); err == nil || errors.Is(err, contract.ErrNoProject) {
		t.Errorf("file outside .reeve: %v", err)
	}
	// A hostile, huge file is refused by the bounded reader, as a problem.
	write(t, filepath.Join(dir, ".reeve", "access.yaml"), strings.Repeat("#", 9<<20))
	res, err = contract.Resolve(context.Background(), contract.Options{Path: filepath.Join(dir, ".reeve", "access.yaml")})
	if err != nil || res.Valid || len(res.Problems) == 0 {
		t.Errorf("huge file: %v %+v", err, res.Problems)
	}
}
