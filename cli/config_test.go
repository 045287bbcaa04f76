package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"reeve.dev/reeve/daemon/config"
)

// configTestEnv is an Env with captured streams and only the given
// environment variables, so the developer's own REEVE_* never leak in.
func configTestEnv(vars map[string]string) (*Env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &Env{
		In:         strings.NewReader(""),
		Out:        &out,
		Err:        &errb,
		Getenv:     func(k string) string { return vars[k] },
		Executable: os.Executable,
	}, &out, &errb
}

func writeConfigFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigResolveHuman(t *testing.T) {
	home := t.TempDir()
	file := writeConfigFile(t, home, "config.yaml", "profile: lan\nallowed_hosts: [a.example, b.example]\n")
	env, _, errb := configTestEnv(map[string]string{"REEVE_AUTH": "true"})
	code := Execute(context.Background(), env, []string{"config", "resolve", "--home", home, "--listen-typo-guard-not-a-flag"})
	if code != ExitUsage {
		t.Fatalf("unknown flag: exit %d, want %d (stderr %q)", code, ExitUsage, errb)
	}

	env, out, errb := configTestEnv(map[string]string{"REEVE_AUTH": "true"})
	code = Execute(context.Background(), env, []string{"config", "resolve", "--home", home})
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errb)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	want := [][]string{
		{"home", home, "(flag)"},
		{"config_file", file, "(default)"},
		{"listen", "127.0.0.1:7070", "(default)"},
		{"profile", "lan", "(file)"},
		{"allowed_hosts", "[a.example,", "b.example]", "(file)"},
		{"allowed_origins", "[]", "(default)"},
		{"auth", "true", "(env)"},
		{"default_agent", `""`, "(default)"},
		{"hook_timeout_seconds", "600", "(default)"},
		{"default_mode", "detect", "(default)"},
		{"session_upload", "redacted", "(default)"},
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	valueCol := strings.Index(lines[0], home)
	for i, w := range want {
		if got := strings.Fields(lines[i]); !reflect.DeepEqual(got, w) {
			t.Errorf("line %d = %q, want fields %q", i, lines[i], w)
		}
		// Values start in one aligned column.
		if col := strings.Index(lines[i], w[1]); col != valueCol {
			t.Errorf("line %d: value at column %d, want %d:\n%s", i, col, valueCol, out)
		}
	}
}

func TestConfigResolveNoFile(t *testing.T) {
	home := t.TempDir()
	env, out, errb := configTestEnv(map[string]string{"REEVE_HOME": home})
	if code := Execute(context.Background(), env, []string{"config", "resolve"}); code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errb)
	}
	if !strings.Contains(out.String(), "(default, not present)") || !strings.Contains(out.String(), "(env)") {
		t.Errorf("output does not show the absent default file and the env home:\n%s", out)
	}
}

func TestConfigResolveJSON(t *testing.T) {
	home := t.TempDir()
	other := writeConfigFile(t, t.TempDir(), "other.json", `{"listen": "/tmp/reeve.sock", "hook_timeout_seconds": 30}`)
	env, out, errb := configTestEnv(map[string]string{"REEVE_HOME": home, "REEVE_ALLOWED_ORIGINS": "https://a.example, https://b.example"})
	opts := &configResolveOptions{env: env, json: true}
	cmd := newConfigResolveCmd(env)
	if err := cmd.Flags().Parse([]string{"--config", other}); err != nil {
		t.Fatal(err)
	}
	r, err := config.Load(config.LoadOptions{Flags: cmd.Flags(), Getenv: env.Getenv})
	if err != nil {
		t.Fatal(err)
	}
	opts.resolved = r
	if err := runConfigResolve(opts); err != nil {
		t.Fatalf("runConfigResolve: %v (stderr %q)", err, errb)
	}
	var got struct {
		ConfigFile string            `json:"config_file"`
		Settings   map[string]any    `json:"settings"`
		Sources    map[string]string `json:"sources"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if got.ConfigFile != other {
		t.Errorf("config_file = %q, want %q", got.ConfigFile, other)
	}
	wantSettings := map[string]any{
		"home": home, "config_file": other, "listen": "/tmp/reeve.sock", "profile": "local",
		"allowed_hosts": []any{}, "allowed_origins": []any{"https://a.example", "https://b.example"},
		"auth": false, "default_agent": "", "hook_timeout_seconds": float64(30), "default_mode": "detect", "session_upload": "redacted",
	}
	if !reflect.DeepEqual(got.Settings, wantSettings) {
		t.Errorf("settings = %v\nwant %v", got.Settings, wantSettings)
	}
	wantSources := map[string]string{
		"home": "env", "config_file": "flag", "listen": "file", "profile": "default", "allowed_hosts": "default",
		"allowed_origins": "env", "auth": "default", "default_agent": "default", "hook_timeout_seconds": "file",
		"default_mode": "default", "session_upload": "default",
	}
	if !reflect.DeepEqual(got.Sources, wantSources) {
		t.Errorf("sources = %v\nwant %v", got.Sources, wantSources)
	}
}

func TestConfigResolveExitCodes(t *testing.T) {
	home := t.TempDir()
	bad := writeConfigFile(t, home, "bad.yaml", "profile: public\nnope: 1\n")
	tests := []struct {
		name   string
		vars   map[string]string
		args   []string
		code   int
		stderr string
	}{
		{"invalid file", nil, []string{"--config", bad}, ExitInvalid, bad + ":1:10: /profile: value must be one of"},
		{"missing named file", nil, []string{"--config", filepath.Join(home, "missing.yaml")}, ExitNotFound, "missing.yaml (set by --config)"},
		{"bad env value", map[string]string{"REEVE_LISTEN": "abc"}, nil, ExitUsage, "REEVE_LISTEN: listen address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{"REEVE_HOME": home}
			for k, v := range tt.vars {
				vars[k] = v
			}
			env, out, errb := configTestEnv(vars)
			code := Execute(context.Background(), env, append([]string{"config", "resolve"}, tt.args...))
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errb)
			}
			if !strings.Contains(errb.String(), tt.stderr) {
				t.Errorf("stderr %q lacks %q", errb, tt.stderr)
			}
			if out.Len() != 0 {
				t.Errorf("stdout %q, want nothing on failure", out)
			}
		})
	}
	// Every problem is listed, not only the first.
	env, _, errb := configTestEnv(map[string]string{"REEVE_HOME": home})
	Execute(context.Background(), env, []string{"config", "resolve", "--config", bad})
	if !strings.Contains(errb.String(), bad+":2:1: /nope: unknown key") {
		t.Errorf("stderr %q does not list the second problem", errb)
	}
}

// The keys the human output shows are exactly config.Keys().
func TestConfigResolveShowsEveryKey(t *testing.T) {
	env, out, errb := configTestEnv(map[string]string{"REEVE_HOME": t.TempDir()})
	if code := Execute(context.Background(), env, []string{"config", "resolve"}); code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errb)
	}
	var keys []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		keys = append(keys, strings.Fields(line)[0])
	}
	if !reflect.DeepEqual(keys, config.Keys()) {
		t.Errorf("keys shown %v, want %v", keys, config.Keys())
	}
}
