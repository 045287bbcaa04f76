package agenttest

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestZZExploreControl(t *testing.T) {
	exe := Claude(t)
	dir := t.TempDir()
	if os.Getenv("ZZREAD") == "IN" {
		os.Setenv("ZZREAD", filepath.Join(dir, "in.txt"))
		os.WriteFile(filepath.Join(dir, "in.txt"), []byte("inside"), 0o644)
	}
	srv := NewAnthropicServer(t, AnthropicOptions{Turns: []Turn{
		{Text: "run", Calls: []ToolCall{Bash(os.Getenv("ZZCMD")), {Name: "Read", Input: map[string]any{"file_path": os.Getenv("ZZREAD")}}}},
		{Text: "done"},
	}})

	state := t.TempDir()
	hookLog := filepath.Join(state, "hook.log")
	hook := func(ev, out string) string {
		if os.Getenv("ZZMISSING") != "" {
			return "/nonexistent/reeve hook " + ev
		}
		return "cat >> " + hookLog + "; echo >> " + hookLog + "; echo '" + out + "'"
	}
	settings := map[string]any{"hooks": map[string]any{
		"PreToolUse":        []any{map[string]any{"matcher": "*", "hooks": []any{map[string]any{"type": "command", "command": hook("PreToolUse", os.Getenv("ZZPRE"))}}}},
		"PermissionRequest": []any{map[string]any{"matcher": "*", "hooks": []any{map[string]any{"type": "command", "command": hook("PermissionRequest", os.Getenv("ZZPR"))}}}},
	}}
	if os.Getenv("ZZASKALL") != "" {
		settings["permissions"] = map[string]any{"ask": strings.Split(os.Getenv("ZZASKALL"), ",")}
	}
	b, _ := json.Marshal(settings)
	sf := filepath.Join(state, "s.json")
	os.WriteFile(sf, b, 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-p", "--input-format", "stream-json", "--output-format", "stream-json",
		"--verbose", "--model", claudeModel, "--permission-prompt-tool", "stdio", "--settings", sf)
	cmd.Dir, cmd.Env = dir, ClaudeEnv(srv.URL, t.TempDir())
	cmd.WaitDelay = 5 * time.Second
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	write := func(v any) {
		line, _ := json.Marshal(v)
		t.Logf(">>> %s", line)
		stdin.Write(append(line, '\n'))
	}
	write(map[string]any{"type": "control_request", "request_id": "init1", "request": map[string]any{"subtype": "initialize"}})
	write(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": "go"}})
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		if len(line) > 1500 {
			line = line[:1500]
		}
		t.Logf("<<< %s", line)
		var e map[string]any
		json.Unmarshal(sc.Bytes(), &e)
		if e["type"] == "control_request" {
			req := e["request"].(map[string]any)
			if req["subtype"] == "can_use_tool" {
				beh := os.Getenv("ZZBEH")
				if beh == "" {
					beh = "allow"
				}
				resp := map[string]any{"behavior": beh}
				if beh == "allow" {
					resp["updatedInput"] = req["input"]
				} else {
					resp["message"] = "no by reeve"
				}
				write(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "success", "request_id": e["request_id"], "response": resp}})
			}
		}
		if e["type"] == "result" {
			stdin.Close()
		}
	}
	hl, _ := os.ReadFile(hookLog)
	t.Logf("hooks:\n%s", hl)
	t.Logf("stderr: %s", stderr.String())
	_, err := os.Stat(filepath.Join(dir, "made.txt"))
	t.Logf("made.txt: %v", err)
}
