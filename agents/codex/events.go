package codex

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// threadEvent is a line of `codex exec --json`, as far as the mapping reads
// it. Codex adds fields freely; unknown ones are ignored.
type threadEvent struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id"`
	Item     *item  `json:"item"`
	Usage    *struct {
		InputTokens           int64 `json:"input_tokens"`
		CachedInputTokens     int64 `json:"cached_input_tokens"`
		CacheWriteInputTokens int64 `json:"cache_write_input_tokens"`
		OutputTokens          int64 `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	Message   string            `json:"message"`   // top-level error
	Questions []json.RawMessage `json:"questions"` // request_user_input
}

type item struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// agent_message, plan, reasoning
	Text string `json:"text"`
	// command_execution
	Command          string `json:"command"`
	AggregatedOutput string `json:"aggregated_output"`
	ExitCode         *int   `json:"exit_code"`
	Status           string `json:"status"`
	// file_change
	Changes []struct {
		Path string `json:"path"`
		Kind string `json:"kind"`
	} `json:"changes"`
	// mcp_tool_call
	Server    string          `json:"server"`
	Tool      json.RawMessage `json:"tool"` // a string, for collab_tool_call too
	Arguments json.RawMessage `json:"arguments"`
	Result    *struct {
		Content []json.RawMessage `json:"content"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	// web_search
	Query string `json:"query"`
	// todo_list
	Items []struct {
		Text      string `json:"text"`
		Completed bool   `json:"completed"`
	} `json:"items"`
	// error
	Message string `json:"message"`
}

// mapper turns Codex's JSONL into session updates. It runs on the goroutine
// reading stdout; its state is read after the process ended.
type mapper struct {
	emit  agents.Emit
	model string // the turn's model, for usage (Codex does not print it)

	threadID  string
	completed bool   // turn.completed arrived
	lastError string // the last top-level error, which may be retried
	failure   error  // turn.failed
	// base is the thread's usage before this turn (usage.go); baseErr
	// says why it is unknown.
	base    tokenTotals
	baseErr error

	// calls remembers the items whose tool-call was emitted (at
	// item.started), so item.completed emits only the result for them.
	calls map[string]bool

	// home is CODEX_HOME and rolloutStart where the thread's rollout
	// ended before this turn, for the calls that did not run (rollout.go).
	home         string
	rolloutStart int64
}

func (m *mapper) line(raw []byte) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return
	}
	var ev threadEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{
			Message: fmt.Sprintf("codex printed a line that is not JSON: %s", clip(string(raw), 300)),
		}})
		return
	}
	switch ev.Type {
	case "thread.started":
		m.threadID = ev.ThreadID
	case "item.started":
		if ev.Item != nil {
			m.started(ev.Item)
		}
	case "item.completed":
		if ev.Item != nil {
			m.itemCompleted(ev.Item)
		}
	case "turn.completed":
		m.completed = true
		m.reportUnrun()
		if ev.Usage != nil {
			m.emitUsage(tokenTotals{In: ev.Usage.InputTokens, Cached: ev.Usage.CachedInputTokens,
				CacheWrite: ev.Usage.CacheWriteInputTokens, Out: ev.Usage.OutputTokens})
		}
	case "turn.failed":
		msg := "the turn failed"
		if ev.Error != nil && ev.Error.Message != "" {
			msg = ev.Error.Message
		}
		m.failure = fmt.Errorf("codex: %s", msg)
		m.reportUnrun()
		m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{Message: msg}})
	case "error":
		// Reported as critical, but Codex may retry and still complete the
		// turn; it fails the turn only if no turn.completed follows.
		m.lastError = ev.Message
		m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{Message: ev.Message}})
	case "request_user_input":
		// exec cannot be answered; show what the agent asked.
		var qs []string
		for _, q := range ev.Questions {
			var s struct {
				Question string `json:"question"`
			}
			if json.Unmarshal(q, &s) == nil && s.Question != "" {
				qs = append(qs, s.Question)
			}
		}
		if len(qs) > 0 {
			m.emit(agents.Event{Kind: wire.KindAgentMessage, Data: wire.AgentMessage{Text: strings.Join(qs, "\n")}})
		}
	}
	// turn.started, item.updated (to-do progress) and item.plan.delta carry
	// nothing the completed items do not.
}

// started emits the tool-call of items that are tool uses.
func (m *mapper) started(it *item) {
	name, input, ok := toolCall(it)
	if !ok {
		return
	}
	if m.calls == nil {
		m.calls = map[string]bool{}
	}
	m.calls[it.ID] = true
	m.emit(agents.Event{Kind: wire.KindToolCall, Data: wire.ToolCall{ID: it.ID, Name: name, Input: input}})
}

func (m *mapper) itemCompleted(it *item) {
	switch it.Type {
	case "agent_message", "plan":
		if strings.TrimSpace(it.Text) != "" {
			m.emit(agents.Event{Kind: wire.KindAgentMessage, Data: wire.AgentMessage{Text: it.Text}})
		}
		return
	case "error":
		if strings.Contains(it.Message, "--dangerously-bypass-hook-trust") {
			// reeve passed that flag on purpose (it wrote the hooks); the
			// notice stays in the evidence, it is not an error.
			return
		}
		// Warnings (unknown model, config notices): the turn goes on.
		m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{Message: it.Message}})
		return
	}
	result, ok := toolResult(it)
	if !ok {
		return // reasoning, and item types this version does not know
	}
	if !m.calls[it.ID] {
		// Some tool items (file_change) only ever arrive completed.
		m.started(it)
	}
	delete(m.calls, it.ID)
	m.emit(agents.Event{Kind: wire.KindToolResult, Data: result})
}

// toolCall names a tool item and its input.
func toolCall(it *item) (name string, input json.RawMessage, ok bool) {
	switch it.Type {
	case "command_execution":
		return "command_execution", mustJSON(map[string]string{"command": it.Command}), true
	case "file_change":
		return "file_change", mustJSON(map[string]any{"changes": it.Changes}), true
	case "mcp_tool_call":
		return "mcp__" + it.Server + "__" + rawString(it.Tool), compactJSON(it.Arguments), true
	case "collab_tool_call":
		return "collab_" + rawString(it.Tool), nil, true
	case "web_search":
		return "web_search", mustJSON(map[string]string{"query": it.Query}), true
	case "todo_list":
		return "todo_list", mustJSON(map[string]any{"items": it.Items}), true
	}
	return "", nil, false
}

// toolResult is what a completed tool item produced.
func toolResult(it *item) (wire.ToolResult, bool) {
	r := wire.ToolResult{ID: it.ID, IsError: it.Status == "failed" || it.Status == "declined"}
	switch it.Type {
	case "command_execution":
		r.Output, r.ExitCode = it.AggregatedOutput, it.ExitCode
		if it.ExitCode != nil && *it.ExitCode != 0 {
			r.IsError = true
		}
	case "file_change":
		lines := make([]string, 0, len(it.Changes))
		for _, c := range it.Changes {
			lines = append(lines, c.Kind+" "+c.Path)
		}
		r.Output = strings.Join(lines, "\n")
	case "mcp_tool_call":
		if it.Error != nil {
			r.Output, r.IsError = it.Error.Message, true
		} else if it.Result != nil {
			r.Output = contentText(it.Result.Content)
		}
	case "collab_tool_call":
		r.Output = it.Status
	case "web_search":
		r.Output = it.Query
	case "todo_list":
		lines := make([]string, 0, len(it.Items))
		for _, t := range it.Items {
			box := "[ ]"
			if t.Completed {
				box = "[x]"
			}
			lines = append(lines, box+" "+t.Text)
		}
		r.Output = strings.Join(lines, "\n")
	default:
		return r, false
	}
	return r, true
}

// contentText joins the text of MCP content blocks; others are noted by
// type.
func contentText(blocks []json.RawMessage) string {
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		var c struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(b, &c) != nil {
			continue
		}
		if c.Type == "text" {
			parts = append(parts, c.Text)
		} else {
			parts = append(parts, "["+c.Type+"]")
		}
	}
	return strings.Join(parts, "\n")
}

func rawString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return strings.Trim(string(raw), `"`)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

func compactJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
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
