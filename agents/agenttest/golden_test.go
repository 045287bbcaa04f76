package agenttest

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -update rewrites testdata/*.jsonl from the current pinned agents:
//
//	go test ./agents/agenttest -run 'TestClaudeBypass|TestCodexExec' -update
var update = flag.Bool("update", false, "rewrite golden agent output fixtures in testdata/")

const (
	claudeGolden = "claude-stream-json.jsonl"
	codexGolden  = "codex-exec.jsonl"
)

// literalKeys keep their values in a skeleton: they carry the event
// structure adapters switch on, and the scripted texts are deterministic.
var literalKeys = map[string]bool{
	"type": true, "subtype": true, "role": true, "name": true,
	"stop_reason": true, "status": true, "terminal_reason": true,
	"text": true, "result": true, "permissionMode": true,
}

// skeleton replaces volatile values (ids, timestamps, paths, durations)
// with their JSON type, keeping keys, nesting and literalKeys. Arrays of
// scalars collapse to "array" because their length (tool lists, slash
// commands) is not structure adapters depend on.
func skeleton(v any, key string) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, vv := range x {
			out[k] = skeleton(vv, k)
		}
		return out
	case []any:
		objects := false
		for _, e := range x {
			if _, ok := e.(map[string]any); ok {
				objects = true
			}
		}
		if !objects {
			return "array"
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = skeleton(e, "")
		}
		return out
	case string:
		if literalKeys[key] {
			return x
		}
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

func skeletonLines(t *testing.T, events []map[string]any) []string {
	t.Helper()
	out := make([]string, len(events))
	for i, e := range events {
		b, err := json.Marshal(skeleton(e, "")) // map keys marshal sorted
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	return out
}

// checkGolden compares a real run's JSON lines with the recorded fixture by
// skeleton, or rewrites the fixture under -update. replace maps run-specific
// strings (temp folders) to stable placeholders in the stored fixture.
func checkGolden(t *testing.T, name string, stdout []byte, replace map[string]string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		out := string(stdout)
		for from, to := range replace {
			out = strings.ReplaceAll(out, from, to)
		}
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", path)
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden fixture (re-record with -update): %v", err)
	}
	got := skeletonLines(t, parseJSONL(t, stdout))
	exp := skeletonLines(t, parseJSONL(t, want))
	for i := 0; i < len(got) || i < len(exp); i++ {
		var g, e string
		if i < len(got) {
			g = got[i]
		}
		if i < len(exp) {
			e = exp[i]
		}
		if g != e {
			t.Fatalf("%s line %d no longer matches what the pinned agent produces "+
				"(if the agent changed on purpose, re-record with -update and tell the adapter owners):\n got: %s\nwant: %s",
				path, i+1, g, e)
		}
	}
}

// TestGoldenFixturesContent checks, without running any agent, that the
// fixtures hold the events adapter tests rely on. It keeps a re-recording
// from silently dropping, say, the tool result.
func TestGoldenFixturesContent(t *testing.T) {
	t.Run("claude", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join("testdata", claudeGolden))
		if err != nil {
			t.Fatal(err)
		}
		checkClaudeBashEvents(t, parseJSONL(t, b))
	})
	t.Run("codex", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join("testdata", codexGolden))
		if err != nil {
			t.Fatal(err)
		}
		checkCodexExecEvents(t, parseJSONL(t, b), "touch made-by-codex.txt")
	})
}

func TestSkeletonIgnoresVolatileValues(t *testing.T) {
	a := []byte(`{"type":"result","session_id":"a","usage":{"input_tokens":1},"tools":["x","y"],"content":[{"type":"text","text":"hi"}]}`)
	b := []byte(`{"type":"result","session_id":"b","usage":{"input_tokens":9},"tools":["z"],"content":[{"type":"text","text":"hi"}]}`)
	c := []byte(`{"type":"result","session_id":"b","usage":{"input_tokens":9},"tools":["z"],"content":[{"type":"tool_use","text":"hi"}]}`)
	sa := skeletonLines(t, parseJSONL(t, a))
	sb := skeletonLines(t, parseJSONL(t, b))
	sc := skeletonLines(t, parseJSONL(t, c))
	if sa[0] != sb[0] {
		t.Errorf("volatile values changed the skeleton:\n%s\n%s", sa[0], sb[0])
	}
	if sb[0] == sc[0] {
		t.Errorf("a changed content block type did not change the skeleton: %s", sc[0])
	}
	if !bytes.Contains([]byte(sa[0]), []byte(`"session_id":"string"`)) {
		t.Errorf("skeleton kept an id: %s", sa[0])
	}
}
