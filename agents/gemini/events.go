package gemini

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// streamEvent is the part of a stream-json line the mapping reads.
type streamEvent struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Model     string `json:"model"`
	// message
	Role    string `json:"role"`
	Content string `json:"content"`
	Delta   bool   `json:"delta"`
	// tool_use, tool_result
	ToolName   string          `json:"tool_name"`
	ToolID     string          `json:"tool_id"`
	Parameters json.RawMessage `json:"parameters"`
	Status     string          `json:"status"`
	Output     string          `json:"output"`
	// error, and tool_result / result errors
	Severity string          `json:"severity"`
	Message  string          `json:"message"`
	Error    json.RawMessage `json:"error"`
	// result
	Stats *stats `json:"stats"`
}

// stats is a result's usage: this run's, not the session's (a resumed
// run counts from zero).
type stats struct {
	InputTokens  int64                 `json:"input_tokens"`
	OutputTokens int64                 `json:"output_tokens"`
	Cached       int64                 `json:"cached"`
	Models       map[string]modelStats `json:"models"`
}

type modelStats struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	Cached       int64 `json:"cached"`
}

// mapper turns stream-json lines into session updates, on the one
// goroutine reading stdout.
type mapper struct {
	emit agents.Emit

	sessionID string
	model     string
	text      strings.Builder // assistant deltas not yet emitted
	gotResult bool
	failure   error
}

func (m *mapper) line(raw []byte) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return
	}
	var ev streamEvent
	if err := json.Unmarshal(raw, &ev); err != nil || ev.Type == "" {
		m.flush()
		m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{
			Message: fmt.Sprintf("gemini printed a line that is not stream-json: %s", clip(string(raw), 300)),
		}})
		return
	}
	if ev.Type == "message" && ev.Role == "assistant" {
		// Deltas of one message arrive as many events; one agent-message
		// holds the whole text, sent when anything else comes.
		m.text.WriteString(ev.Content)
		if !ev.Delta {
			m.flush()
		}
		return
	}
	m.flush()
	switch ev.Type {
	case "init":
		if ev.SessionID != "" {
			m.sessionID = ev.SessionID
		}
		m.model = ev.Model
	case "tool_use":
		m.emit(agents.Event{Kind: wire.KindToolCall, Data: wire.ToolCall{ID: ev.ToolID, Name: ev.ToolName, Input: compact(ev.Parameters)}})
	case "tool_result":
		out := ev.Output
		if ev.Status != "success" && out == "" {
			out = errorText(ev.Error)
		}
		m.emit(agents.Event{Kind: wire.KindToolResult, Data: wire.ToolResult{ID: ev.ToolID, Output: out, IsError: ev.Status != "success"}})
	case "error":
		msg := ev.Message
		if msg == "" {
			msg = errorText(ev.Error)
		}
		m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{Message: msg}})
	case "result":
		m.result(ev)
	}
	// user messages (the prompt, which the session records) and new
	// event types are not session updates.
}

func (m *mapper) flush() {
	if m.text.Len() == 0 {
		return
	}
	text := m.text.String()
	m.text.Reset()
	if strings.TrimSpace(text) != "" {
		m.emit(agents.Event{Kind: wire.KindAgentMessage, Data: wire.AgentMessage{Text: text}})
	}
}

func (m *mapper) result(ev streamEvent) {
	m.gotResult = true
	if ev.Stats != nil {
		m.emit(agents.Event{Kind: wire.KindUsage, Data: usageOf(ev.Stats, m.model)})
	}
	if ev.Status == "success" {
		return
	}
	msg := errorText(ev.Error)
	if msg == "" {
		msg = "the turn failed"
	}
	if ev.Status != "" {
		msg = fmt.Sprintf("%s (%s)", msg, ev.Status)
	}
	m.failure = fmt.Errorf("gemini: %s", msg)
	m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{Message: msg}})
}

// usageOf is a run's usage. Gemini's input tokens include the cached ones
// (as OpenAI's do); it reports no cost. The model is the only one that
// served the run, else the models joined.
func usageOf(s *stats, initModel string) wire.Usage {
	u := wire.Usage{InputTokens: s.InputTokens, OutputTokens: s.OutputTokens, CacheReadTokens: s.Cached, Model: initModel}
	if len(s.Models) > 0 {
		names := make([]string, 0, len(s.Models))
		for k := range s.Models {
			names = append(names, k)
		}
		sort.Strings(names)
		u.Model = strings.Join(names, ",")
	}
	return u
}

// errorText reads an error that is a string or an object with a message.
func errorText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Message != "" {
		return o.Message
	}
	return string(raw)
}

func compact(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}
