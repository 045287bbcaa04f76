package agenttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// GeminiOptions configures a Gemini API (generativelanguage v1beta) server.
type GeminiOptions struct {
	// Turns is the main conversation's script. Turn i answers the request
	// whose history already holds i model turns (runs of "model" contents),
	// so retries and --resume land on the right turn.
	Turns []Turn
	// Logf, when set, logs every request.
	Logf func(format string, args ...any)
}

// GeminiServer is a scripted Gemini API on 127.0.0.1, for Gemini CLI via
// GOOGLE_GEMINI_BASE_URL.
type GeminiServer struct {
	// URL is the base URL, e.g. http://127.0.0.1:PORT (the client adds
	// /v1beta/models/...).
	URL string

	opts GeminiOptions
	rec  recorder
	http *httpServer
}

// NewGeminiServer starts a server and closes it when the test ends.
func NewGeminiServer(t testing.TB, o GeminiOptions) *GeminiServer {
	t.Helper()
	s, err := StartGeminiServer(o)
	if err != nil {
		t.Fatalf("start gemini server: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// StartGeminiServer starts a server; the caller must Close it.
func StartGeminiServer(o GeminiOptions) (*GeminiServer, error) {
	s := &GeminiServer{opts: o, rec: recorder{logf: o.Logf}}
	h, err := startHTTP(http.HandlerFunc(s.serve))
	if err != nil {
		return nil, fmt.Errorf("start gemini server: %w", err)
	}
	s.http, s.URL = h, h.URL
	return s, nil
}

// Close stops the server.
func (s *GeminiServer) Close() error { return s.http.close() }

// Requests returns every request received so far, in arrival order.
func (s *GeminiServer) Requests() []Request { return s.rec.snapshot() }

// MainRequests returns the requests that were served from the script.
func (s *GeminiServer) MainRequests() []Request { return filterKind(s.rec.snapshot(), KindMain) }

// Problems lists requests the script could not answer.
func (s *GeminiServer) Problems() []string { return s.rec.snapshotProblems() }

// GeminiContent is one entry of a request's contents.
type GeminiContent struct {
	Role  string       `json:"role"`
	Parts []GeminiPart `json:"parts"`
}

// GeminiPart is one part of a content: text, a function call or a
// function response.
type GeminiPart struct {
	Text         string `json:"text,omitempty"`
	FunctionCall *struct {
		ID   string          `json:"id,omitempty"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall,omitempty"`
	FunctionResponse *struct {
		ID       string          `json:"id,omitempty"`
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse,omitempty"`
}

type geminiRequest struct {
	Contents []GeminiContent `json:"contents"`
	Tools    []struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
	GenerationConfig struct {
		ResponseMimeType string `json:"responseMimeType"`
	} `json:"generationConfig"`
}

// GeminiContents decodes the contents of a request body.
func GeminiContents(body []byte) ([]GeminiContent, error) {
	var req geminiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("decode gemini request: %w", err)
	}
	return req.Contents, nil
}

func (r geminiRequest) completedTurns() int {
	n, prev := 0, ""
	for _, c := range r.Contents {
		if c.Role == "model" && prev != "model" {
			n++
		}
		prev = c.Role
	}
	return n
}

func (s *GeminiServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	rec := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone(), Body: body, Kind: KindOther, Turn: -1}
	model, method, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1beta/models/"), ":")
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1beta/models/") || model == "" {
		s.rec.record(rec)
		s.rec.problem("unhandled %s %s", r.Method, r.URL.Path)
		writeJSON(w, http.StatusNotFound, geminiError(404, "agenttest: no route for "+r.Method+" "+r.URL.Path))
		return
	}
	if method == "countTokens" {
		rec.Kind = KindCountTokens
		s.rec.record(rec)
		writeJSON(w, http.StatusOK, map[string]any{"totalTokens": len(body)/4 + 1})
		return
	}
	if method != "generateContent" && method != "streamGenerateContent" {
		s.rec.record(rec)
		s.rec.problem("unhandled method %s", method)
		writeJSON(w, http.StatusNotFound, geminiError(404, "agenttest: no method "+method))
		return
	}
	var req geminiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.rec.record(rec)
		writeJSON(w, http.StatusBadRequest, geminiError(400, "agenttest: "+err.Error()))
		return
	}
	stream := method == "streamGenerateContent"
	// Only the main loop offers tools. Side requests (model routing, the
	// next-speaker check, summaries) get an answer that ends the loop:
	// for JSON requests one object that satisfies the schemas Gemini CLI
	// sends (a low routing score, the user speaks next).
	if len(req.Tools) == 0 {
		rec.Kind = KindSide
		s.rec.record(rec)
		text := "ok"
		if req.GenerationConfig.ResponseMimeType == "application/json" {
			text = `{"complexity_reasoning":"agenttest","complexity_score":10,"reasoning":"agenttest","next_speaker":"user"}`
		}
		s.respond(w, model, Turn{Text: text, InputTokens: 1, OutputTokens: 1}, "side", stream)
		return
	}
	idx := req.completedTurns()
	rec.Kind, rec.Turn = KindMain, idx
	s.rec.record(rec)
	if idx >= len(s.opts.Turns) {
		s.rec.problem("main request for turn %d but the script has %d turns", idx, len(s.opts.Turns))
		s.respond(w, model, Turn{Text: "agenttest: script exhausted"}, fmt.Sprintf("x%d", idx), stream)
		return
	}
	turn := s.opts.Turns[idx]
	if err := sleepCtx(r.Context(), turn.Delay); err != nil {
		return
	}
	s.respond(w, model, turn, fmt.Sprint(idx), stream)
}

func geminiError(code int, msg string) map[string]any {
	return map[string]any{"error": map[string]any{"code": code, "message": msg, "status": "NOT_FOUND"}}
}

// respond answers with the turn: for streamGenerateContent as SSE chunks
// (the text in two, each call in its own), else as one JSON response.
func (s *GeminiServer) respond(w http.ResponseWriter, model string, turn Turn, tag string, stream bool) {
	in, out := turn.usage()
	var parts []map[string]any
	if turn.Text != "" {
		half := len(turn.Text) / 2
		for _, p := range []string{turn.Text[:half], turn.Text[half:]} {
			if p != "" {
				parts = append(parts, map[string]any{"text": p})
			}
		}
	}
	for i, c := range turn.Calls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_agenttest_%s_%d", tag, i)
		}
		parts = append(parts, map[string]any{"functionCall": map[string]any{"id": id, "name": c.Name, "args": json.RawMessage(marshalInput(c.Input))}})
	}
	usage := map[string]any{"promptTokenCount": in, "candidatesTokenCount": out, "totalTokenCount": in + out}
	chunk := func(ps []map[string]any, last bool) map[string]any {
		cand := map[string]any{"content": map[string]any{"role": "model", "parts": ps}, "index": 0}
		m := map[string]any{"candidates": []any{cand}, "modelVersion": model, "responseId": "resp_agenttest_" + tag}
		if last {
			cand["finishReason"] = "STOP"
			m["usageMetadata"] = usage
		}
		return m
	}
	if !stream {
		writeJSON(w, http.StatusOK, chunk(parts, true))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	for i, p := range parts {
		b, _ := json.Marshal(chunk([]map[string]any{p}, i == len(parts)-1))
		fmt.Fprintf(w, "data: %s\n\n", b)
		if f != nil {
			f.Flush()
		}
	}
}

// RunShell is a Gemini CLI run_shell_command tool call.
func RunShell(command string) ToolCall {
	return ToolCall{Name: "run_shell_command", Input: map[string]any{"command": command, "description": "Run " + command}}
}

// WriteFile is a Gemini CLI write_file tool call.
func WriteFile(path, content string) ToolCall {
	return ToolCall{Name: "write_file", Input: map[string]any{"file_path": path, "content": content}}
}
