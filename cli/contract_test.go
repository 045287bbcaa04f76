package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/hookbridge/contract"
)

func contractProject(t *testing.T, policy string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".reeve", "routes"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"policy.yaml":      policy,
		"routes/team.yaml": "version: 1\nroutes:\n  - name: bugfix\n    on: {trigger: issue}\n    agent: claude\n    prompt: x\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, ".reeve", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := exec.LookPath("git"); err == nil {
		for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "Sync team resources (default v3)"}} {
			if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
	}
	return dir
}

func TestContractResolveHumanAndJSON(t *testing.T) {
	dir := contractProject(t, "version: 1\ndeny:\n  - name: no-push\n    commands: [\"git push *\"]\n")
	env, out, errb := configTestEnv(nil)
	if err := runContractResolve(context.Background(), &contractOptions{env: env, path: dir}); err != nil {
		t.Fatalf("%v (stderr %q)", err, errb)
	}
	for _, want := range []string{"policy.deny.no-push  " + filepath.Join(dir, ".reeve", "policy.yaml") + ":3", "routes.bugfix  ", "routes.v1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := exec.LookPath("git"); err == nil && !strings.Contains(out.String(), "(bundle default v3)") {
		t.Errorf("output lacks the bundle:\n%s", out)
	}

	env, out, _ = configTestEnv(nil)
	if err := runContractResolve(context.Background(), &contractOptions{env: env, path: dir, json: true}); err != nil {
		t.Fatal(err)
	}
	var res contract.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !res.Valid || len(res.Values) != 2 || len(res.Sources) != 2 {
		t.Errorf("json = %+v", res)
	}
}

func TestContractResolveBadInput(t *testing.T) {
	env, _, _ := configTestEnv(nil)
	err := runContractResolve(context.Background(), &contractOptions{env: env, path: filepath.Join(t.TempDir(), "missing")})
	if code := exitCode(err); code != ExitNotFound {
		t.Errorf("missing directory: exit %d (%v), want %d", code, err, ExitNotFound)
	}

	dir := contractProject(t, "version: 1\ndeny:\n  - name: x\n    nonsense: 1\n")
	env, out, errb := configTestEnv(nil)
	err = runContractResolve(context.Background(), &contractOptions{env: env, path: filepath.Join(dir, ".reeve", "policy.yaml")})
	if code := exitCode(err); code != ExitInvalid {
		t.Fatalf("invalid policy: exit %d (%v), want %d", code, err, ExitInvalid)
	}
	if want := filepath.Join(dir, ".reeve", "policy.yaml") + ":4:"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("problem %q not located at %s (stderr %q)", out, want, errb)
	}

	// Through the command line, too.
	env, _, _ = configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"contract", "resolve", "--path", dir, "--json"}); code != ExitInvalid {
		t.Errorf("reeve contract resolve on an invalid contract: exit %d", code)
	}
}
