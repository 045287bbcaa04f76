package cli

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestGuardCheck(t *testing.T) {
	dir := t.TempDir()
	writeProjectFile(t, dir, ".reeve/policy.yaml", goodPolicy+"  - tools: [Read]\n    paths: [\"**\"]\n")
	writeProjectFile(t, dir, "src/main.go", "package main\n")
	tests := []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"allowed", []string{"--path", filepath.Join(dir, "src/main.go")}, ExitOK, "allowed: " + filepath.Join(dir, "src/main.go") + " (rule allow[0]: allowed by project policy rule allow[0])"},
		{"not yet existing file", []string{"--path", filepath.Join(dir, "src/new/file.go")}, ExitOK, "allowed: "},
		{"denied", []string{"--path", filepath.Join(dir, "secrets/key")}, ExitDenied, "denied: " + filepath.Join(dir, "secrets/key") + " (rule secrets: no secrets)"},
		{"traversal out of the project", []string{"--path", dir + "/src/../../x", "--project", dir}, ExitDenied, "(rule deny[1]: denied by project policy rule deny[1])"},
		{"ask", []string{"--path", filepath.Join(dir, "deploy/prod.yaml")}, ExitDenied, "ask: " + filepath.Join(dir, "deploy/prod.yaml") + " needs a human's approval (rule ask[0]: deploy files need review)"},
		{"no rule", []string{"--path", filepath.Join(dir, "README.md")}, ExitOK, "no rule: the session's mode decides"},
		// With --tool the rule for that tool answers: Read is allowed anywhere inside.
		{"tool-specific", []string{"--path", filepath.Join(dir, "README.md"), "--tool", "Read"}, ExitOK, "allowed: "},
		{"tool-specific deny still wins", []string{"--path", filepath.Join(dir, "secrets/key"), "--tool", "Read"}, ExitDenied, "denied: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, out, errb := configTestEnv(nil)
			code := Execute(context.Background(), env, append([]string{"guard", "check"}, tt.args...))
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tt.code, out, errb)
			}
			if !strings.Contains(out.String(), tt.out) {
				t.Errorf("stdout %q, want %q", out, tt.out)
			}
		})
	}
}

func TestGuardCheckJSONAndProjectDiscovery(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	outer := t.TempDir()
	// A .reeve above the repository must not be taken as its policy.
	writeProjectFile(t, outer, ".reeve/policy.yaml", "version: 1\ndeny:\n  - paths: [\"**\"]\n")
	repo := filepath.Join(outer, "repo")
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	file := writeProjectFile(t, repo, "pkg/a.go", "package a\n")

	env, out, errb := configTestEnv(nil)
	if err := runGuardCheck(&guardCheckOptions{env: env, path: file, json: true}); err != nil {
		t.Fatalf("err %v, stderr %q", err, errb)
	}
	var rep guardReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rep.Project != repo || rep.Policy != "" || rep.Action != "" || !rep.Allowed || !strings.Contains(rep.Reason, "no rule") {
		t.Errorf("report %+v, want no rule in %s", rep, repo)
	}

	// With --project the outer policy applies, and denies.
	env, out, _ = configTestEnv(nil)
	err := runGuardCheck(&guardCheckOptions{env: env, path: file, project: outer, json: true})
	if exitCode(err) != ExitDenied {
		t.Fatalf("exit %d, want %d", exitCode(err), ExitDenied)
	}
	rep = guardReport{}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Action != "deny" || rep.Rule != "deny[0]" || rep.Allowed || rep.Policy != filepath.Join(outer, ".reeve", "policy.yaml") {
		t.Errorf("report %+v", rep)
	}
}

func TestGuardCheckBadPolicyAndUsage(t *testing.T) {
	// A space in the project: the printed `reeve check DIR` quotes it.
	dir := filepath.Join(t.TempDir(), "my project")
	pol := writeProjectFile(t, dir, ".reeve/policy.yaml", "version: 1\ndeny:\n  - paths: [\"../x\"]\n")
	env, out, errb := configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"guard", "check", "--path", filepath.Join(dir, "a"), "--project", dir}); code != ExitInvalid {
		t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, ExitInvalid, out, errb)
	}
	if !strings.Contains(errb.String(), pol+":3:13: /deny/0/paths/0: ") {
		t.Errorf("stderr %q, want the located problem", errb)
	}
	if !strings.Contains(errb.String(), "run `reeve check '"+dir+"'`") {
		t.Errorf("stderr %q, want the check hint with the project quoted", errb)
	}
	env, _, _ = configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"guard", "check"}); code != ExitUsage {
		t.Errorf("missing --path: exit %d, want %d", code, ExitUsage)
	}
	env, _, _ = configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"guard", "check", "--path", "x", "--project", filepath.Join(dir, "nope")}); code != ExitNotFound {
		t.Errorf("missing project: exit %d, want %d", code, ExitNotFound)
	}
}
