package agenttest

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// These tests drive the scripted servers with plain HTTP, so their wire
// format and turn selection are checked even where no agent can install.

type sseEvent struct {
	name string
	data map[string]any
}

func post(t *testing.T, ctx context.Context, url string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readSSE(t *testing.T, resp *http.Response) []sseEvent {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var out []sseEvent
	var name string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var m map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m); err != nil {
				t.Fatalf("bad data line %q: %v", line, err)
			}
			if m["type"] != name {
				t.Fatalf("event %q carries data type %v", name, m["type"])
			}
			out = append(out, sseEvent{name, m})
		}
	}
	return out
}

func names(evs []sseEvent) string {
	var n []string
	for _, e := range evs {
		n = append(n, e.name)
	}
	return strings.Join(n, " ")
}

func anthropicBody(msgs ...map[string]any) map[string]any {
	return map[string]any{
		"model": "m", "stream": true, "max_tokens": 100,
		"tools":    []any{map[string]any{"name": "Bash"}},
		"messages": msgs,
	}
}

func TestAnthropicServerScript(t *testing.T) {
	srv := NewAnthropicServer(t, AnthropicOptions{Turns: []Turn{
		{Text: "hello", Calls: []ToolCall{Bash("echo hi")}},
		{Text: "bye", InputTokens: 7, OutputTokens: 3},
	}})
	ctx := context.Background()
	user := map[string]any{"role": "user", "content": "go"}

	evs := readSSE(t, post(t, ctx, srv.URL+"/v1/messages?beta=true", anthropicBody(user)))
	want := "message_start content_block_start content_block_delta content_block_delta content_block_stop " +
		"content_block_start content_block_delta content_block_stop message_delta message_stop"
	if got := names(evs); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	if text := str(evs[2].data, "delta", "text") + str(evs[3].data, "delta", "text"); text != "hello" {
		t.Errorf("text deltas join to %q", text)
	}
	if str(evs[5].data, "content_block", "name") != "Bash" || str(evs[5].data, "content_block", "id") != "toolu_agenttest_0_0" {
		t.Errorf("tool_use start = %v", evs[5].data)
	}
	var input map[string]any
	if err := json.Unmarshal([]byte(str(evs[6].data, "delta", "partial_json")), &input); err != nil || input["command"] != "echo hi" {
		t.Errorf("tool input = %v (%v)", input, err)
	}
	if str(evs[8].data, "delta", "stop_reason") != "tool_use" || num(evs[8].data, "usage", "output_tokens") != defaultOutputTokens {
		t.Errorf("message_delta = %v", evs[8].data)
	}

	// The same first request again (a retry) gets turn 0 again; a history
	// with one assistant turn, split over two messages, gets turn 1.
	readSSE(t, post(t, ctx, srv.URL+"/v1/messages", anthropicBody(user)))
	evs = readSSE(t, post(t, ctx, srv.URL+"/v1/messages", anthropicBody(user,
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "hello"}}},
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_agenttest_0_0", "name": "Bash", "input": map[string]any{}}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_agenttest_0_0", "content": "hi\n"}}},
	)))
	if str(evs[0].data, "message", "id") != "msg_agenttest_1" || num(evs[0].data, "message", "usage", "input_tokens") != 7 {
		t.Errorf("third request message_start = %v, want turn 1 with 7 input tokens", evs[0].data)
	}
	if str(evs[len(evs)-2].data, "delta", "stop_reason") != "end_turn" {
		t.Errorf("final turn stop_reason = %v", evs[len(evs)-2].data)
	}

	// Side traffic: no tools, token counting, the connectivity probe.
	side := readSSE(t, post(t, ctx, srv.URL+"/v1/messages", map[string]any{"model": "m", "stream": true, "messages": []any{user}}))
	if str(side[2].data, "delta", "text")+str(side[3].data, "delta", "text") != "ok" {
		t.Errorf("side answer = %v", side)
	}
	var count map[string]any
	if err := json.NewDecoder(post(t, ctx, srv.URL+"/v1/messages/count_tokens", anthropicBody(user)).Body).Decode(&count); err != nil || num(count, "input_tokens") <= 0 {
		t.Errorf("count_tokens = %v (%v)", count, err)
	}
	req, _ := http.NewRequest(http.MethodHead, srv.URL+"/api/hello", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("HEAD /api/hello = %v %v", resp, err)
	}

	// Non-streaming requests get one JSON message.
	nb := anthropicBody(user)
	nb["stream"] = false
	var msg map[string]any
	if err := json.NewDecoder(post(t, ctx, srv.URL+"/v1/messages", nb).Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if str(msg, "content", 1, "type") != "tool_use" || str(msg, "content", 1, "input", "command") != "echo hi" || str(msg, "stop_reason") != "tool_use" {
		t.Errorf("non-streaming message = %v", msg)
	}

	kinds := map[string]int{}
	for _, r := range srv.Requests() {
		kinds[r.Kind]++
	}
	if kinds[KindMain] != 4 || kinds[KindSide] != 2 || kinds[KindCountTokens] != 1 {
		t.Errorf("request kinds = %v", kinds)
	}
	if p := srv.Problems(); len(p) != 0 {
		t.Errorf("problems: %v", p)
	}
	results, err := ToolResults(srv.MainRequests()[2].Body)
	if err != nil || len(results) != 1 || results[0].Content != "hi\n" || results[0].ToolUseID != "toolu_agenttest_0_0" {
		t.Errorf("ToolResults = %+v, %v", results, err)
	}
}

func TestAnthropicServerProblems(t *testing.T) {
	srv := NewAnthropicServer(t, AnthropicOptions{Turns: []Turn{{Text: "only"}}})
	ctx := context.Background()
	evs := readSSE(t, post(t, ctx, srv.URL+"/v1/messages", anthropicBody(
		map[string]any{"role": "user", "content": "a"},
		map[string]any{"role": "assistant", "content": "only"},
		map[string]any{"role": "user", "content": "b"},
	)))
	if len(evs) == 0 || len(srv.Problems()) != 1 {
		t.Fatalf("exhausted script: events %q, problems %v", names(evs), srv.Problems())
	}
	if resp := post(t, ctx, srv.URL+"/v1/other", map[string]any{}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown route status %d", resp.StatusCode)
	}
	if len(srv.Problems()) != 2 {
		t.Errorf("problems = %v, want the unknown route too", srv.Problems())
	}
}

// TestServerDelayEndsOnClose: a Turn.Delay holds the response (so a test
// can kill the agent mid-run) but never outlives the server.
func TestServerDelayEndsOnClose(t *testing.T) {
	srv, err := StartAnthropicServer(AnthropicOptions{Turns: []Turn{{Text: "late", Delay: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		b, _ := json.Marshal(anthropicBody(map[string]any{"role": "user", "content": "a"}))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(string(b)))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	// Wait until the request is in the handler, then close.
	for len(srv.Requests()) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("request never arrived")
		case <-time.After(10 * time.Millisecond):
		}
	}
	closed := make(chan struct{})
	go func() { _ = srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the delayed turn")
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("client still waiting after Close")
	}
}

func responsesBody(input ...map[string]any) map[string]any {
	return map[string]any{
		"model": "m", "stream": true,
		"tools": []any{map[string]any{"type": "function", "name": "exec_command"}},
		"input": input,
	}
}

func TestOpenAIServerScript(t *testing.T) {
	srv := NewOpenAIServer(t, OpenAIOptions{Turns: []Turn{
		{Text: "running", Calls: []ToolCall{ExecCommand("ls")}},
		{Text: "done"},
	}})
	if !strings.HasSuffix(srv.URL, "/v1") || !strings.HasPrefix(srv.URL, "http://127.0.0.1:") {
		t.Fatalf("URL %q, want http://127.0.0.1:PORT/v1", srv.URL)
	}
	ctx := context.Background()
	dev := map[string]any{"type": "message", "role": "developer", "content": []any{}}
	user := map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "go"}}}

	evs := readSSE(t, post(t, ctx, srv.URL+"/responses", responsesBody(dev, user)))
	want := "response.created response.output_item.added response.output_text.delta response.output_item.done " +
		"response.output_item.added response.output_item.done response.completed"
	if got := names(evs); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	fc := evs[5].data["item"]
	if str(fc, "type") != "function_call" || str(fc, "name") != "exec_command" || str(fc, "call_id") != "call_agenttest_0_0" {
		t.Errorf("function_call item = %v", fc)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(str(fc, "arguments")), &args); err != nil || args["cmd"] != "ls" {
		t.Errorf("arguments = %q", str(fc, "arguments"))
	}
	last := evs[len(evs)-1].data
	if num(last, "response", "usage", "input_tokens") != defaultInputTokens || num(last, "response", "usage", "total_tokens") != defaultInputTokens+defaultOutputTokens {
		t.Errorf("response.completed usage = %v", get(last, "response", "usage"))
	}
	for i, e := range evs {
		if num(e.data, "sequence_number") != float64(i) {
			t.Errorf("event %d sequence_number = %v", i, e.data["sequence_number"])
		}
	}

	evs = readSSE(t, post(t, ctx, srv.URL+"/responses", responsesBody(dev, user,
		map[string]any{"type": "message", "role": "assistant", "content": []any{}},
		map[string]any{"type": "function_call", "name": "exec_command", "call_id": "call_agenttest_0_0", "arguments": `{"cmd":"ls"}`},
		map[string]any{"type": "function_call_output", "call_id": "call_agenttest_0_0", "output": "a\nb\n"},
	)))
	if str(evs[len(evs)-1].data, "response", "output", 0, "content", 0, "text") != "done" {
		t.Errorf("second turn = %v", evs[len(evs)-1].data)
	}
	in, err := ResponsesInput(srv.MainRequests()[1].Body)
	if err != nil || lastOfType(in, "function_call_output") == nil {
		t.Errorf("ResponsesInput = %+v, %v", in, err)
	}
	if got := srv.MainRequests()[1].Turn; got != 1 {
		t.Errorf("second request served turn %d", got)
	}
	if p := srv.Problems(); len(p) != 0 {
		t.Errorf("problems: %v", p)
	}
}

func TestCodexHomeConfig(t *testing.T) {
	dir := CodexHome(t, CodexHomeOptions{BaseURL: "http://127.0.0.1:1/v1", Extra: `approval_policy = "never"`})
	b, err := os.ReadFile(filepath.Join(dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for _, want := range []string{
		`model_provider = "agenttest"`, `base_url = "http://127.0.0.1:1/v1"`, `wire_api = "responses"`,
		`supports_websockets = false`, `env_key = "` + CodexAPIKeyEnv + `"`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config.toml lacks %s:\n%s", want, cfg)
		}
	}
	// Extra's bare keys must land before the first table header, or TOML
	// would file them under that table.
	if strings.Index(cfg, "approval_policy") > strings.Index(cfg, "[") {
		t.Errorf("Extra placed after a table:\n%s", cfg)
	}
	if err := WriteCodexHome(CodexHomeOptions{Dir: t.TempDir()}); err == nil {
		t.Error("WriteCodexHome without BaseURL succeeded")
	}
}
