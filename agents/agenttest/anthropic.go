package agenttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// AnthropicOptions configures an Anthropic Messages API server.
type AnthropicOptions struct {
	// Turns is the main conversation's script. Turn i answers the request
	// whose history already holds i assistant turns, so retries and
	// --resume land on the right turn no matter how many side requests
	// came first.
	Turns []Turn
	// Subagents script the conversations of subagents (Claude Code's Agent
	// tool): a request whose first user message contains a key is served
	// from that key's turns, chosen by history as the main script is.
	Subagents map[string][]Turn
	// SideText answers side requests (no tools offered: title generation,
	// quota probes and the like). Default "ok".
	SideText string
	// Logf, when set, logs every request (e.g. t.Logf) to see what an
	// agent version actually sends.
	Logf func(format string, args ...any)
}

// AnthropicServer is a scripted Anthropic Messages API on 127.0.0.1, for
// Claude Code via ANTHROPIC_BASE_URL.
type AnthropicServer struct {
	// URL is the base URL, e.g. http://127.0.0.1:PORT, without /v1.
	URL string

	opts AnthropicOptions
	rec  recorder
	http *httpServer
}

// NewAnthropicServer starts a server and closes it when the test ends.
func NewAnthropicServer(t testing.TB, o AnthropicOptions) *AnthropicServer {
	t.Helper()
	s, err := StartAnthropicServer(o)
	if err != nil {
		t.Fatalf("start anthropic server: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// StartAnthropicServer starts a server; the caller must Close it.
func StartAnthropicServer(o AnthropicOptions) (*AnthropicServer, error) {
	if o.SideText == "" {
		o.SideText = "ok"
	}
	s := &AnthropicServer{opts: o, rec: recorder{logf: o.Logf}}
	h, err := startHTTP(http.HandlerFunc(s.serve))
	if err != nil {
		return nil, fmt.Errorf("start anthropic server: %w", err)
	}
	s.http, s.URL = h, h.URL
	return s, nil
}

// Close stops the server, cutting any response still in progress.
func (s *AnthropicServer) Close() error { return s.http.close() }

// Requests returns every request received so far, in arrival order.
func (s *AnthropicServer) Requests() []Request { return s.rec.snapshot() }

// MainRequests returns the requests that were served from the script.
func (s *AnthropicServer) MainRequests() []Request { return filterKind(s.rec.snapshot(), KindMain) }

// Problems lists requests the script could not answer (e.g. past its end).
func (s *AnthropicServer) Problems() []string { return s.rec.snapshotProblems() }

func filterKind(rs []Request, kind string) []Request {
	var out []Request
	for _, r := range rs {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// anthropicRequest is the part of a Messages request the server reads.
type anthropicRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

// completedTurns counts runs of assistant messages: one scripted turn is
// one run, whether or not the client split it into several messages.
func (r anthropicRequest) completedTurns() int {
	n, prev := 0, ""
	for _, m := range r.Messages {
		if m.Role == "assistant" && prev != "assistant" {
			n++
		}
		prev = m.Role
	}
	return n
}

func (s *AnthropicServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	rec := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone(), Body: body, Kind: KindOther, Turn: -1}

	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		rec.Kind = KindCountTokens
		s.rec.record(rec)
		// A rough, deterministic estimate is all a client can use it for.
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": len(body)/4 + 1})
		return
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
	case (r.Method == http.MethodHead || r.Method == http.MethodGet) && r.URL.Path == "/api/hello":
		// Connectivity probe Claude Code sends when nonessential traffic
		// is not disabled.
		rec.Kind = KindSide
		s.rec.record(rec)
		w.WriteHeader(http.StatusOK)
		return
	default:
		s.rec.record(rec)
		s.rec.problem("unhandled %s %s", r.Method, r.URL.Path)
		writeJSON(w, http.StatusNotFound, anthropicError("not_found_error", "agenttest: no route for "+r.Method+" "+r.URL.Path))
		return
	}

	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.rec.record(rec)
		writeJSON(w, http.StatusBadRequest, anthropicError("invalid_request_error", "agenttest: "+err.Error()))
		return
	}

	// Only the main agent loop offers tools; title generation, quota
	// probes and similar side calls send none.
	if len(req.Tools) == 0 {
		rec.Kind = KindSide
		s.rec.record(rec)
		s.respond(w, r, req, Turn{Text: s.opts.SideText, InputTokens: 1, OutputTokens: 1}, "side")
		return
	}

	idx := req.completedTurns()
	if key, turns, ok := s.subagent(req); ok {
		rec.Kind, rec.Turn = KindSubagent, idx
		s.rec.record(rec)
		if idx >= len(turns) {
			s.rec.problem("subagent %q request for turn %d but its script has %d turns", key, idx, len(turns))
			s.respond(w, r, req, Turn{Text: "agenttest: script exhausted"}, fmt.Sprintf("sx%d", idx))
			return
		}
		s.respond(w, r, req, turns[idx], fmt.Sprintf("s%d", idx))
		return
	}
	rec.Kind, rec.Turn = KindMain, idx
	s.rec.record(rec)
	if idx >= len(s.opts.Turns) {
		s.rec.problem("main request for turn %d but the script has %d turns", idx, len(s.opts.Turns))
		s.respond(w, r, req, Turn{Text: "agenttest: script exhausted"}, fmt.Sprintf("x%d", idx))
		return
	}
	turn := s.opts.Turns[idx]
	if err := sleepCtx(r.Context(), turn.Delay); err != nil {
		return
	}
	s.respond(w, r, req, turn, fmt.Sprint(idx))
}

// subagent finds the subagent script whose key the request's first user
// message contains.
func (s *AnthropicServer) subagent(req anthropicRequest) (string, []Turn, bool) {
	if len(s.opts.Subagents) == 0 {
		return "", nil, false
	}
	for _, m := range req.Messages {
		if m.Role != "user" {
			continue
		}
		text := contentText(m.Content)
		for key, turns := range s.opts.Subagents {
			if strings.Contains(text, key) {
				return key, turns, true
			}
		}
		break
	}
	return "", nil, false
}

func anthropicError(typ, msg string) map[string]any {
	return map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
}

// respond answers with the turn as SSE or, for stream=false, one JSON body.
// ids derive from tag so a re-run produces identical ids.
func (s *AnthropicServer) respond(w http.ResponseWriter, r *http.Request, req anthropicRequest, turn Turn, tag string) {
	in, out := turn.usage()
	model := req.Model
	if model == "" {
		model = "claude-agenttest"
	}
	type block struct {
		typ   string
		text  string
		id    string
		name  string
		input []byte
	}
	var blocks []block
	if turn.Text != "" {
		blocks = append(blocks, block{typ: "text", text: turn.Text})
	}
	for i, c := range turn.Calls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("toolu_agenttest_%s_%d", tag, i)
		}
		blocks = append(blocks, block{typ: "tool_use", id: id, name: c.Name, input: marshalInput(c.Input)})
	}
	stop := "end_turn"
	if len(turn.Calls) > 0 {
		stop = "tool_use"
	}
	msgID := "msg_agenttest_" + tag
	usage := map[string]any{
		"input_tokens":                in,
		"output_tokens":               out,
		"cache_creation_input_tokens": 0,
		"cache_read_input_tokens":     0,
	}

	if !req.Stream {
		content := make([]map[string]any, 0, len(blocks))
		for _, b := range blocks {
			if b.typ == "text" {
				content = append(content, map[string]any{"type": "text", "text": b.text})
			} else {
				content = append(content, map[string]any{"type": "tool_use", "id": b.id, "name": b.name, "input": json.RawMessage(b.input)})
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": msgID, "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage,
		})
		return
	}

	e := newSSE(w)
	e.event("message_start", map[string]any{
		"type": "message_start",
		"message": map[string]any{
			"id": msgID, "type": "message", "role": "assistant", "model": model,
			"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": in, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
		},
	})
	for i, b := range blocks {
		switch b.typ {
		case "text":
			e.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			// Two deltas, so clients that concatenate deltas are exercised.
			half := len(b.text) / 2
			for _, part := range []string{b.text[:half], b.text[half:]} {
				if part == "" {
					continue
				}
				e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "text_delta", "text": part}})
			}
		case "tool_use":
			e.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b.id, "name": b.name, "input": map[string]any{}}})
			e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": string(b.input)}})
		}
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	e.event("message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": out},
	})
	e.event("message_stop", map[string]any{"type": "message_stop"})
}

// ToolResults returns the tool_result blocks in a Messages request body, so
// tests can check what the agent reported back after running a tool.
func ToolResults(body []byte) ([]AnthropicToolResult, error) {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("decode messages request: %w", err)
	}
	var out []AnthropicToolResult
	for _, m := range req.Messages {
		var blocks []struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			IsError   bool            `json:"is_error"`
			Content   json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue // plain-string content holds no blocks
		}
		for _, b := range blocks {
			if b.Type == "tool_result" {
				out = append(out, AnthropicToolResult{ToolUseID: b.ToolUseID, IsError: b.IsError, Content: contentText(b.Content)})
			}
		}
	}
	return out, nil
}

// AnthropicToolResult is a tool_result block as the agent sent it.
type AnthropicToolResult struct {
	ToolUseID string
	IsError   bool
	// Content is the result's text, blocks joined by newlines.
	Content string
}

func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) == nil {
		var parts []string
		for _, b := range blocks {
			if b.Text != "" {
				parts = append(parts, b.Text)
			}
		}
		return strings.Join(parts, "\n")
	}
	return string(raw)
}
