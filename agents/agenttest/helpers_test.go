package agenttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agentTimeout bounds every agent process: a hung agent must fail its test,
// never hang the suite.
const agentTimeout = 90 * time.Second

type runResult struct {
	stdout []byte
	stderr []byte
	events []map[string]any
}

// runAgent runs exe to completion with a deadline and parses stdout as JSON
// lines. A non-zero exit fails the test with stderr attached.
func runAgent(t *testing.T, exe, dir string, env, args []string) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = nil
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: timed out after %s\nstdout:\n%s\nstderr:\n%s", filepath.Base(exe), strings.Join(args, " "), agentTimeout, stdout.Bytes(), tail(stderr.String(), 4000))
	}
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(exe), strings.Join(args, " "), err, stdout.Bytes(), tail(stderr.String(), 4000))
	}
	return runResult{stdout: stdout.Bytes(), stderr: stderr.Bytes(), events: parseJSONL(t, stdout.Bytes())}
}

func parseJSONL(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("stdout line is not JSON: %v: %s", err, line)
		}
		out = append(out, m)
	}
	return out
}

// get walks a decoded JSON value by object keys and array indexes.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k < 0 || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := get(v, path...).(string)
	return s
}

func num(v any, path ...any) float64 {
	f, _ := get(v, path...).(float64)
	return f
}

// find returns the events for which match is true.
func find(events []map[string]any, match func(map[string]any) bool) []map[string]any {
	var out []map[string]any
	for _, e := range events {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

func mustExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("expected %s to exist: %v", path, err)
	}
}

func mustNotExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("expected %s not to exist, stat err = %v", path, err)
	}
}

func checkNoProblems(t *testing.T, problems []string) {
	t.Helper()
	for _, p := range problems {
		t.Errorf("scripted server: %s", p)
	}
}

// hookScript writes an executable hook that saves its stdin to
// <dir>/<event>-<n>.json and prints reply. It is a shell script on purpose:
// the agents run hooks through a shell, like the reeve hook command will be.
func hookScript(t *testing.T, dir, reply string) string {
	t.Helper()
	path := filepath.Join(dir, "hook.sh")
	script := "#!/bin/sh\n" +
		"event=$1\n" +
		"n=$(ls \"" + dir + "\" | grep -c \"^$event-\")\n" +
		"cat > \"" + dir + "/$event-$n.json\"\n" +
		"if [ \"$event\" = PreToolUse ]; then printf '%s\\n' '" + reply + "'; fi\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func readHookInputs(t *testing.T, dir, event string) []map[string]any {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, event+"-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("hook %s stdin is not JSON: %v: %s", event, err, b)
		}
		out = append(out, m)
	}
	return out
}

func preToolUseReply(decision, reason string) string {
	b, _ := json.Marshal(map[string]any{"hookSpecificOutput": map[string]any{
		"hookEventName":            "PreToolUse",
		"permissionDecision":       decision,
		"permissionDecisionReason": reason,
	}})
	return string(b)
}
