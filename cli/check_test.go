package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeProjectFile writes a file under dir, creating its directories.
func writeProjectFile(t *testing.T, dir, rel, content string) string {
	t.Helper()
	path := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const goodPolicy = `version: 1
deny:
  - name: secrets
    paths: ["secrets/"]
    reason: no secrets
  - outside_workdir: true
ask:
  - paths: ["deploy/**"]
    reason: deploy files need review
allow:
  - paths: ["src/**"]
`

func TestCheckValidProject(t *testing.T) {
	dir := t.TempDir()
	writeProjectFile(t, dir, ".reeve/policy.yaml", goodPolicy)
	writeProjectFile(t, dir, ".reeve/routes/bugs.yaml", "version: 1\nroutes:\n  - name: bugs\n    on: {trigger: issue, labels: [bug]}\n    agent: claude\n    prompt: fix it\n")
	writeProjectFile(t, dir, ".reeve/access.yaml", "version: 1\nmembers:\n  - team: platform\n    role: approver\n")
	env, out, errb := configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"check", dir}); code != ExitOK {
		t.Fatalf("exit %d, stdout %q stderr %q", code, out, errb)
	}
	want := filepath.Join(dir, ".reeve") + ": valid (1 policy.v1, 1 routes.v1, 1 access.v1)\n"
	if out.String() != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	if errb.Len() != 0 {
		t.Errorf("stderr %q, want nothing (not a git repository)", errb)
	}
}

func TestCheckReportsLocatedProblems(t *testing.T) {
	dir := t.TempDir()
	pol := writeProjectFile(t, dir, ".reeve/policy.yaml", "version: 1\ndeny:\n  - tools: Bash\n    commands: [\"rm *\"]\n")
	r1 := writeProjectFile(t, dir, ".reeve/routes/a.yaml", "version: 1\nroutes:\n  - name: one\n    on: {trigger: manual}\n    agent: claude\n    prompt: x\n")
	r2 := writeProjectFile(t, dir, ".reeve/routes/b.yaml", "version: 1\nroutes:\n  - name: one\n    on: {trigger: manual}\n    agent: claude\n    prompt: [x\n")
	r3 := writeProjectFile(t, dir, ".reeve/routes/c.yaml", "version: 1\nroutes:\n  - name: one\n    on: {trigger: manual}\n    agent: claude\n    prompt: y\n")
	acc := writeProjectFile(t, dir, ".reeve/access.yaml", "version: 1\nmembers:\n  - user: al\n    role: god\n")
	writeProjectFile(t, dir, ".reeve/routes/notes.txt", "not a route file")

	env, out, errb := configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"check", dir}); code != ExitInvalid {
		t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, ExitInvalid, out, errb)
	}
	want := []string{
		pol + ":3:12: /deny/0/tools: got string, want array",
		r2 + ":6: invalid YAML: did not find expected ',' or ']'",
		// r2 defines "one" too, but does not parse; r1 was first.
		r3 + `:3: route "one" is already defined at ` + r1 + ":3",
		acc + `:4:11: /members/0/role: value must be one of`,
	}
	got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("line %d = %q\nwant prefix %q", i, got[i], want[i])
		}
	}
	if !strings.Contains(errb.String(), ": 4 problems") {
		t.Errorf("stderr %q, want a count of 4 problems", errb)
	}
}

func TestCheckJSONAndGitIgnoredWarning(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	writeProjectFile(t, dir, ".gitignore", "build/\n.reeve\n")
	pol := writeProjectFile(t, dir, ".reeve/policy.yaml", "version: 1\nallow:\n  - tools: [Read]\n    colour: red\n")

	env, out, errb := configTestEnv(nil)
	err := runCheck(&checkOptions{env: env, dir: dir, json: true})
	if exitCode(err) != ExitInvalid {
		t.Fatalf("exit %d (%v), want %d", exitCode(err), err, ExitInvalid)
	}
	var rep struct {
		Project  string `json:"project"`
		Valid    bool   `json:"valid"`
		Files    []struct{ File, Schema string }
		Problems []struct {
			File    string `json:"file"`
			Line    int    `json:"line"`
			Column  int    `json:"column"`
			Pointer string `json:"pointer"`
			Message string `json:"message"`
		} `json:"problems"`
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rep.Valid || len(rep.Files) != 1 || rep.Files[0].Schema != "policy.v1" || len(rep.Problems) != 1 {
		t.Fatalf("report %+v", rep)
	}
	if p := rep.Problems[0]; p.File != pol || p.Line != 4 || p.Column != 5 || p.Pointer != "/allow/0/colour" {
		t.Errorf("problem %+v", p)
	}
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "ignored by git") || !strings.Contains(rep.Warnings[0], ".gitignore:2:.reeve") {
		t.Errorf("warnings %q", rep.Warnings)
	}
	if !strings.Contains(errb.String(), "reeve: warning: ") || !strings.Contains(errb.String(), "ignored by git") {
		t.Errorf("stderr %q, want the git-ignored warning", errb)
	}

	// Not ignored any more: no warning, and a valid file passes.
	writeProjectFile(t, dir, ".gitignore", "build/\n")
	writeProjectFile(t, dir, ".reeve/policy.yaml", goodPolicy)
	env, out, errb = configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"check", dir, "--json"}); code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errb)
	}
	if strings.Contains(out.String(), "ignored by git") || errb.Len() != 0 {
		t.Errorf("unexpected warning: stdout %s stderr %q", out, errb)
	}
}

func TestCheckMissingPolicyAndBadPath(t *testing.T) {
	dir := t.TempDir()
	env, out, errb := configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"check", dir}); code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errb)
	}
	if !strings.Contains(out.String(), "valid (no governance files)") || !strings.Contains(errb.String(), "does not exist: no policy rules") {
		t.Errorf("stdout %q stderr %q", out, errb)
	}
	env, _, errb = configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"check", filepath.Join(dir, "nope")}); code != ExitNotFound {
		t.Errorf("missing dir: exit %d, stderr %q", code, errb)
	}
	env, _, _ = configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"check", dir, dir}); code != ExitUsage {
		t.Errorf("two arguments: exit %d, want %d", code, ExitUsage)
	}
}
