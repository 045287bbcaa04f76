package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateValidFile(t *testing.T) {
	dir := t.TempDir()
	path := writeConfigFile(t, dir, "config.yaml", "version: 1\nprofile: relay\nauth: true\n")
	env, out, errb := configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"validate", "--path", path}); code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errb)
	}
	if want := path + ": valid (config schema v1)\n"; out.String() != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
}

func TestValidateReportsEveryProblemWithLocation(t *testing.T) {
	dir := t.TempDir()
	path := writeConfigFile(t, dir, "config.yaml", "listen: 7070\nprofile: wan\nauth: maybe\nextra: 1\nhook_timeout_seconds: 2.5\n")
	env, out, errb := configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"validate", "--path", path}); code != ExitInvalid {
		t.Fatalf("exit %d, want %d (stderr %q)", code, ExitInvalid, errb)
	}
	want := []string{
		path + `:2:10: /profile: value must be one of "local", "lan", "relay", got "wan"`,
		path + `:3:7: /auth: got string, want boolean`,
		path + `:4:1: /extra: unknown key "extra"`,
		path + `:5:23: /hook_timeout_seconds: got number, want integer`,
	}
	got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("line %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
	if !strings.Contains(errb.String(), "4 problems") {
		t.Errorf("stderr %q, want a count of 4 problems", errb)
	}
}

func TestValidateJSON(t *testing.T) {
	dir := t.TempDir()
	path := writeConfigFile(t, dir, "config.json", "{\n  \"profile\": \"lan\",\n  \"listen\": \"host:\"\n}\n")
	env, out, errb := configTestEnv(nil)
	opts := &validateOptions{env: env, path: path, json: true}
	err := runValidate(opts)
	if exitCode(err) != ExitInvalid {
		t.Fatalf("exit %d (err %v), want %d; stderr %q", exitCode(err), err, ExitInvalid, errb)
	}
	var rep struct {
		File     string `json:"file"`
		Schema   string `json:"schema"`
		Valid    bool   `json:"valid"`
		Problems []struct {
			File    string `json:"file"`
			Line    int    `json:"line"`
			Column  int    `json:"column"`
			Pointer string `json:"pointer"`
			Message string `json:"message"`
		} `json:"problems"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if rep.File != path || rep.Schema != "v1" || rep.Valid || len(rep.Problems) != 1 {
		t.Fatalf("report = %+v", rep)
	}
	p := rep.Problems[0]
	if p.Line != 3 || p.Column != 13 || p.Pointer != "/listen" || !strings.Contains(p.Message, "port is missing") {
		t.Errorf("problem = %+v, want 3:13 /listen port is missing", p)
	}

	valid := writeConfigFile(t, dir, "ok.json", "{}")
	env, out, _ = configTestEnv(nil)
	if err := runValidate(&validateOptions{env: env, path: valid, json: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"valid": true`) || !strings.Contains(out.String(), `"problems": []`) {
		t.Errorf("valid report = %s", out)
	}
}

func TestValidateMalformedYAML(t *testing.T) {
	path := writeConfigFile(t, t.TempDir(), "config.yaml", "listen: a\nprofile: [lan\n")
	env, out, _ := configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"validate", "--path", path}); code != ExitInvalid {
		t.Fatalf("exit %d, want %d", code, ExitInvalid)
	}
	if want := path + ":2: invalid YAML: did not find expected ',' or ']'"; strings.TrimSpace(out.String()) != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
}

func TestValidateDefaultPathAndMissing(t *testing.T) {
	home := t.TempDir()
	env, _, errb := configTestEnv(map[string]string{"REEVE_HOME": home})
	if code := Execute(context.Background(), env, []string{"validate"}); code != ExitNotFound {
		t.Fatalf("missing default file: exit %d, want %d", code, ExitNotFound)
	}
	if want := filepath.Join(home, "config.yaml") + " does not exist"; !strings.Contains(errb.String(), want) {
		t.Errorf("stderr %q lacks %q", errb, want)
	}

	writeConfigFile(t, home, "config.yaml", "auth: true\n")
	env, out, errb := configTestEnv(map[string]string{"REEVE_HOME": home})
	if code := Execute(context.Background(), env, []string{"validate"}); code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errb)
	}
	if !strings.HasPrefix(out.String(), filepath.Join(home, "config.yaml")+": valid") {
		t.Errorf("stdout %q, want the home's config file reported valid", out)
	}

	// REEVE_CONFIG names the default file when set.
	other := writeConfigFile(t, t.TempDir(), "other.yml", "auth: 3\n")
	env, out, _ = configTestEnv(map[string]string{"REEVE_HOME": home, "REEVE_CONFIG": other})
	if code := Execute(context.Background(), env, []string{"validate"}); code != ExitInvalid {
		t.Fatalf("REEVE_CONFIG file: exit %d, want %d", code, ExitInvalid)
	}
	if !strings.HasPrefix(out.String(), other+":1:7: /auth:") {
		t.Errorf("stdout %q, want the REEVE_CONFIG file's problem", out)
	}

	env, _, errb = configTestEnv(nil)
	if code := Execute(context.Background(), env, []string{"validate", "--path", filepath.Join(home, "none.json")}); code != ExitNotFound {
		t.Errorf("missing --path: exit %d, want %d (stderr %q)", code, ExitNotFound, errb)
	}
}
