package agenttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// OpenAIOptions configures an OpenAI Responses API server.
type OpenAIOptions struct {
	// Turns is the main conversation's script. Turn i answers the request
	// whose input already holds i model turns (see completedTurns), so
	// retries and `codex exec resume` land on the right turn.
	Turns []Turn
	// SideText answers side requests (no tools offered). Default "ok".
	SideText string
	// Logf, when set, logs every request.
	Logf func(format string, args ...any)
}

// OpenAIServer is a scripted OpenAI Responses API on 127.0.0.1, for Codex
// through a model provider in $CODEX_HOME/config.toml (see CodexHome).
type OpenAIServer struct {
	// URL is the base URL including /v1, e.g. http://127.0.0.1:PORT/v1,
	// as a provider's base_url wants it.
	URL string

	opts OpenAIOptions
	rec  recorder
	http *httpServer
}

// NewOpenAIServer starts a server and closes it when the test ends.
func NewOpenAIServer(t testing.TB, o OpenAIOptions) *OpenAIServer {
	t.Helper()
	s, err := StartOpenAIServer(o)
	if err != nil {
		t.Fatalf("start openai server: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// StartOpenAIServer starts a server; the caller must Close it.
func StartOpenAIServer(o OpenAIOptions) (*OpenAIServer, error) {
	if o.SideText == "" {
		o.SideText = "ok"
	}
	s := &OpenAIServer{opts: o, rec: recorder{logf: o.Logf}}
	h, err := startHTTP(http.HandlerFunc(s.serve))
	if err != nil {
		return nil, fmt.Errorf("start openai server: %w", err)
	}
	s.http, s.URL = h, h.URL+"/v1"
	return s, nil
}

// Close stops the server, cutting any response still in progress.
func (s *OpenAIServer) Close() error { return s.http.close() }

// Requests returns every request received so far, in arrival order.
func (s *OpenAIServer) Requests() []Request { return s.rec.snapshot() }

// MainRequests returns the requests that were served from the script.
func (s *OpenAIServer) MainRequests() []Request { return filterKind(s.rec.snapshot(), KindMain) }

// Problems lists requests the script could not answer.
func (s *OpenAIServer) Problems() []string { return s.rec.snapshotProblems() }

// ResponsesItem is one item of a Responses request's input, as far as the
// server and tests need it.
type ResponsesItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role,omitempty"`
	Content json.RawMessage `json:"content,omitempty"`
	// function_call
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	CallID    string `json:"call_id,omitempty"`
	// function_call_output
	Output json.RawMessage `json:"output,omitempty"`
}

type responsesRequest struct {
	Model  string          `json:"model"`
	Stream bool            `json:"stream"`
	Input  []ResponsesItem `json:"input"`
	Tools  []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tools"`
}

// modelItem reports whether an input item is something a model produced.
func modelItem(it ResponsesItem) bool {
	switch it.Type {
	case "function_call", "reasoning", "custom_tool_call", "local_shell_call", "web_search_call":
		return true
	case "message":
		return it.Role == "assistant"
	}
	return false
}

// completedTurns counts runs of model-produced items: a scripted turn's
// outputs come back as one run, and tool outputs or user messages separate
// runs.
func (r responsesRequest) completedTurns() int {
	n, prev := 0, false
	for _, it := range r.Input {
		m := modelItem(it)
		if m && !prev {
			n++
		}
		prev = m
	}
	return n
}

func (s *OpenAIServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	rec := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone(), Body: body, Kind: KindOther, Turn: -1}

	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		// Codex asks which models the provider offers; an empty list makes
		// it fall back to its built-in model metadata.
		s.rec.record(rec)
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{}, "models": []any{}})
		return
	case r.Method == http.MethodPost && r.URL.Path == "/v1/responses":
	default:
		s.rec.record(rec)
		s.rec.problem("unhandled %s %s", r.Method, r.URL.Path)
		writeJSON(w, http.StatusNotFound, openAIError("agenttest: no route for "+r.Method+" "+r.URL.Path))
		return
	}

	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.rec.record(rec)
		writeJSON(w, http.StatusBadRequest, openAIError("agenttest: "+err.Error()))
		return
	}
	if len(req.Tools) == 0 {
		rec.Kind = KindSide
		s.rec.record(rec)
		s.respond(w, req, Turn{Text: s.opts.SideText, InputTokens: 1, OutputTokens: 1}, "side")
		return
	}

	idx := req.completedTurns()
	rec.Kind, rec.Turn = KindMain, idx
	s.rec.record(rec)
	if idx >= len(s.opts.Turns) {
		s.rec.problem("main request for turn %d but the script has %d turns", idx, len(s.opts.Turns))
		s.respond(w, req, Turn{Text: "agenttest: script exhausted"}, fmt.Sprintf("x%d", idx))
		return
	}
	turn := s.opts.Turns[idx]
	if err := sleepCtx(r.Context(), turn.Delay); err != nil {
		return
	}
	s.respond(w, req, turn, fmt.Sprint(idx))
}

func openAIError(msg string) map[string]any {
	return map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}}
}

func (s *OpenAIServer) respond(w http.ResponseWriter, req responsesRequest, turn Turn, tag string) {
	in, out := turn.usage()
	model := req.Model
	if model == "" {
		model = "gpt-agenttest"
	}
	var items []map[string]any
	if turn.Text != "" {
		items = append(items, map[string]any{
			"type": "message", "id": "msg_agenttest_" + tag, "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": turn.Text, "annotations": []any{}}},
		})
	}
	for i, c := range turn.Calls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_agenttest_%s_%d", tag, i)
		}
		if text, ok := c.Input.(string); ok {
			// A freeform tool (Codex's apply_patch): its input is the
			// raw text, not JSON arguments.
			items = append(items, map[string]any{
				"type": "custom_tool_call", "id": fmt.Sprintf("ctc_agenttest_%s_%d", tag, i), "status": "completed",
				"call_id": id, "name": c.Name, "input": text,
			})
			continue
		}
		items = append(items, map[string]any{
			"type": "function_call", "id": fmt.Sprintf("fc_agenttest_%s_%d", tag, i), "status": "completed",
			"call_id": id, "name": c.Name, "arguments": string(marshalInput(c.Input)),
		})
	}
	respID := "resp_agenttest_" + tag
	usage := map[string]any{
		"input_tokens":          in,
		"input_tokens_details":  map[string]any{"cached_tokens": 0},
		"output_tokens":         out,
		"output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens":          in + out,
	}
	response := func(status string, output []map[string]any, usage any) map[string]any {
		return map[string]any{
			"id": respID, "object": "response", "created_at": 0, "status": status,
			"model": model, "output": output, "usage": usage,
		}
	}

	if !req.Stream {
		writeJSON(w, http.StatusOK, response("completed", items, usage))
		return
	}
	e := newSSE(w)
	seq := 0
	ev := func(name string, data map[string]any) {
		data["type"] = name
		data["sequence_number"] = seq
		seq++
		e.event(name, data)
	}
	ev("response.created", map[string]any{"response": response("in_progress", []map[string]any{}, nil)})
	for i, it := range items {
		added := map[string]any{}
		for k, v := range it {
			added[k] = v
		}
		added["status"] = "in_progress"
		ev("response.output_item.added", map[string]any{"output_index": i, "item": added})
		if it["type"] == "message" {
			ev("response.output_text.delta", map[string]any{"output_index": i, "item_id": it["id"], "content_index": 0, "delta": turn.Text})
		}
		ev("response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	ev("response.completed", map[string]any{"response": response("completed", items, usage)})
}

// ResponsesInput decodes the input items of a recorded Responses request.
func ResponsesInput(body []byte) ([]ResponsesItem, error) {
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("decode responses request: %w", err)
	}
	return req.Input, nil
}
