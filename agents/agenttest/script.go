package agenttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Turn is one scripted model response in the main conversation.
type Turn struct {
	// Text is said before any tool calls. A turn without Calls ends the
	// agent's turn, so it needs Text.
	Text string
	// Calls are tool calls the model makes, in order.
	Calls []ToolCall
	// InputTokens and OutputTokens are reported as usage. Zero means a
	// small fixed default, so usage assertions stay deterministic.
	InputTokens, OutputTokens int
	// Delay holds the response back before the first byte, so tests can
	// kill an agent mid-run. The wait ends early when the agent hangs up.
	Delay time.Duration
}

// ToolCall is one tool call in a Turn.
type ToolCall struct {
	// ID is the tool-use / call id. Empty means one derived from the turn
	// and call index, stable across runs.
	ID string
	// Name is the agent's tool name: "Bash" for Claude Code,
	// "exec_command" for Codex.
	Name string
	// Input is marshalled to JSON as the call's arguments; a string is
	// a freeform tool's raw input (OpenAI's custom_tool_call).
	Input any
}

// Bash is a Claude Code Bash tool call.
func Bash(command string) ToolCall {
	return ToolCall{Name: "Bash", Input: map[string]any{"command": command, "description": "Run " + command}}
}

// ApplyPatch is a Codex apply_patch call, a freeform tool whose input is
// the patch text (a custom_tool_call in the Responses API).
func ApplyPatch(patch string) ToolCall {
	return ToolCall{Name: "apply_patch", Input: patch}
}

// ExecCommand is a Codex exec_command tool call.
func ExecCommand(cmd string) ToolCall {
	return ToolCall{Name: "exec_command", Input: map[string]any{"cmd": cmd}}
}

const (
	defaultInputTokens  = 100
	defaultOutputTokens = 20
)

func (t Turn) usage() (in, out int) {
	in, out = t.InputTokens, t.OutputTokens
	if in == 0 {
		in = defaultInputTokens
	}
	if out == 0 {
		out = defaultOutputTokens
	}
	return in, out
}

// Request is one recorded HTTP request to a scripted server.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	Header http.Header
	Body   []byte
	// Kind says how the server classified it: KindMain for the scripted
	// conversation, anything else for side traffic it answered itself.
	Kind string
	// Turn is the index of the scripted turn served, or -1.
	Turn int
}

// Request kinds.
const (
	KindMain        = "main"
	KindSubagent    = "subagent"
	KindCountTokens = "count_tokens"
	KindSide        = "side"
	KindOther       = "other"
)

// JSON decodes the request body into v.
func (r Request) JSON(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("decode %s %s body: %w", r.Method, r.Path, err)
	}
	return nil
}

// recorder is the request log and listener shared by both servers.
type recorder struct {
	mu       sync.Mutex
	requests []Request
	problems []string
	logf     func(format string, args ...any)
}

func (r *recorder) record(req Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, req)
	if r.logf != nil {
		r.logf("agenttest: %s %s?%s kind=%s turn=%d body=%s", req.Method, req.Path, req.Query.Encode(), req.Kind, req.Turn, truncate(string(req.Body), 400))
	}
}

// problem notes something the script did not cover, such as a request for
// a turn past its end. Tests check Problems so a drifted agent fails loudly
// instead of hanging on a response it does not understand.
func (r *recorder) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	r.problems = append(r.problems, msg)
	if r.logf != nil {
		r.logf("agenttest: problem: %s", msg)
	}
}

func (r *recorder) snapshot() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.requests...)
}

func (r *recorder) snapshotProblems() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.problems...)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// httpServer is a minimal httptest.Server on 127.0.0.1 only: the agents get
// a plain http:// base URL and nothing listens beyond loopback.
type httpServer struct {
	URL    string
	srv    *http.Server
	ln     net.Listener
	cancel context.CancelFunc
	done   chan struct{}
}

func startHTTP(h http.Handler) (*httpServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	// Handlers see this context, so Close ends a Turn.Delay wait at once.
	ctx, cancel := context.WithCancel(context.Background())
	s := &httpServer{
		URL:    "http://" + ln.Addr().String(),
		ln:     ln,
		cancel: cancel,
		done:   make(chan struct{}),
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return ctx },
		},
	}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

func (s *httpServer) close() error {
	s.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	<-s.done
	return err
}

// sse writes Server-Sent Events and flushes each one, as the real APIs do.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (s *sse) event(name string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(fmt.Sprintf("agenttest: marshal %s event: %v", name, err))
	}
	fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, b)
	if s.f != nil {
		s.f.Flush()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func marshalInput(in any) []byte {
	if in == nil {
		return []byte("{}")
	}
	b, err := json.Marshal(in)
	if err != nil {
		panic(fmt.Sprintf("agenttest: marshal tool input: %v", err))
	}
	return b
}
