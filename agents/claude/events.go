package claude

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// streamEvent is the part of a stream-json line the mapping reads. Claude
// Code adds fields freely; unknown ones are ignored.
type streamEvent struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	Model     string `json:"model"`
	// Message is an object on assistant and user lines, a string on
	// some system lines (permission_denied).
	Message       json.RawMessage `json:"message"`
	ToolName      string          `json:"tool_name"`
	ToolUseID     string          `json:"tool_use_id"`
	Tag           string          `json:"tag"`
	Content       json.RawMessage `json:"content"`
	HookNoVerdict *struct {
		HookEvent string `json:"hook_event"`
		ToolUseID string `json:"tool_use_id"`
		TimedOut  bool   `json:"timed_out"`
	} `json:"hook_no_verdict"`
	ToolUseResult json.RawMessage `json:"tool_use_result"`
	IsError       bool            `json:"is_error"`
	Result        json.RawMessage `json:"result"`
	Errors        json.RawMessage `json:"errors"`
	CostUSD       *float64        `json:"total_cost_usd"`
	Usage         *struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	} `json:"usage"`
	ModelUsage map[string]json.RawMessage `json:"modelUsage"`
	// UsageSinceLast is the usage since the previous result, subagents
	// included, per model (see usage.go); nil when the version has none.
	UsageSinceLast map[string]json.RawMessage `json:"model_usage_since_last_result"`
}

type message struct {
	Role string `json:"role"`
	// Content is a list of blocks, or a plain string for user text.
	Content json.RawMessage `json:"content"`
}

type block struct {
	Type string `json:"type"`
	// text
	Text string `json:"text"`
	// tool_use
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// tool_result
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// mapper turns stream-json lines into session updates. Its methods run on
// the one goroutine reading stdout; its state is read after the process
// ended.
type mapper struct {
	emit     agents.Emit
	stateDir string   // where full tool outputs are kept; "" keeps none
	control  *control // the in-band channel; nil in tests of the mapping alone

	sessionID string
	model     string // from system/init, for usage when modelUsage is unclear
	gotResult bool
	failure   error // the turn failed, as the agent reported it
	resumed   bool  // the turn continues an earlier session (see usage.go)
}

func (m *mapper) line(raw []byte) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return
	}
	var ev streamEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		if !json.Valid(raw) {
			m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{
				Message: fmt.Sprintf("claude printed a line that is not stream-json: %s", clip(string(raw), 300)),
			}})
			return
		}
		// Valid JSON of a shape this version does not expect: kept as
		// evidence, read for what it can tell.
		var head struct{ Type, Subtype string }
		json.Unmarshal(raw, &head)
		ev = streamEvent{Type: head.Type, Subtype: head.Subtype}
	}
	switch ev.Type {
	case "control_request", "control_response", "control_cancel_request":
		if m.control == nil {
			return
		}
		if err := m.control.handle(raw, m.sessionID); err != nil {
			m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{Message: "claude control channel: " + err.Error()}})
		}
		return
	}
	if m.sessionID == "" && ev.SessionID != "" {
		m.sessionID = ev.SessionID
	}
	switch ev.Type {
	case "system":
		switch ev.Subtype {
		case "init":
			if ev.SessionID != "" {
				m.sessionID = ev.SessionID
			}
			m.model = ev.Model
		case "permission_denied":
			// Claude Code refused a tool use itself (a rule, a hook's
			// deny): on the record with the call it belongs to.
			var msg string
			json.Unmarshal(ev.Message, &msg)
			m.emit(agents.Event{Kind: wire.KindPermissionDecision, Data: wire.PermissionDecision{
				Tool: ev.ToolName, ToolUseID: ev.ToolUseID, Decision: "deny", DecidedBy: "agent", Reason: msg, Channel: "claude", At: time.Now().UTC(),
			}})
		case "informational":
			if ev.HookNoVerdict != nil {
				// A hook that failed to answer: the in-band channel still
				// decides, but the second layer is down and that is news.
				m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{Message: fmt.Sprintf(
					"claude's %s hook gave no verdict for tool use %s (timed out: %v); the in-band channel decided it",
					ev.HookNoVerdict.HookEvent, ev.HookNoVerdict.ToolUseID, ev.HookNoVerdict.TimedOut)}})
			}
		}
	case "assistant":
		for _, b := range blocks(ev.Message) {
			switch b.Type {
			case "text":
				if strings.TrimSpace(b.Text) != "" {
					m.emit(agents.Event{Kind: wire.KindAgentMessage, Data: wire.AgentMessage{Text: b.Text}})
				}
			case "tool_use":
				m.emit(agents.Event{Kind: wire.KindToolCall, Data: wire.ToolCall{ID: b.ID, Name: b.Name, Input: compact(b.Input)}})
			}
			// thinking and redacted_thinking blocks are the model's, not
			// addressed to the user.
		}
	case "user":
		// Plain user text is the prompt, which the session records itself.
		for _, b := range blocks(ev.Message) {
			if b.Type == "tool_result" {
				r := wire.ToolResult{ID: b.ToolUseID, Output: resultText(b.Content), IsError: b.IsError}
				r.Evidence, r.EvidenceBytes = m.keepFullOutput(b.ToolUseID, r.Output, ev.ToolUseResult)
				m.emit(agents.Event{Kind: wire.KindToolResult, Data: r})
			}
		}
	case "result":
		m.result(ev)
		if m.control != nil {
			// One prompt per process: closing stdin lets Claude Code exit.
			m.control.closeInput()
		}
	}
}

func (m *mapper) result(ev streamEvent) {
	m.gotResult = true
	m.emitUsage(ev)
	if !ev.IsError && ev.Subtype == "success" {
		return
	}
	msg := ""
	var s string
	if json.Unmarshal(ev.Result, &s) == nil {
		msg = strings.TrimSpace(s)
	}
	if msg == "" {
		var errs []string
		if json.Unmarshal(ev.Errors, &errs) == nil {
			msg = strings.Join(errs, "; ")
		}
	}
	if msg == "" {
		msg = "the turn failed"
	}
	if ev.Subtype != "" && ev.Subtype != "success" {
		msg = fmt.Sprintf("%s (%s)", msg, ev.Subtype)
	}
	m.failure = fmt.Errorf("claude: %s", msg)
	m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{Message: msg}})
}

// usageModel names the model a turn's usage belongs to: the only model in
// modelUsage, or the one system/init announced when several served it
// (e.g. a small model for side tasks).
func (m *mapper) usageModel(models map[string]json.RawMessage) string {
	if len(models) == 1 {
		for k := range models {
			return k
		}
	}
	if _, ok := models[m.model]; ok || len(models) == 0 {
		return m.model
	}
	keys := make([]string, 0, len(models))
	for k := range models {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func blocks(raw json.RawMessage) []block {
	var msg message
	if len(raw) == 0 || json.Unmarshal(raw, &msg) != nil {
		return nil
	}
	var bs []block
	if json.Unmarshal(msg.Content, &bs) != nil {
		return nil // a plain string
	}
	return bs
}

// resultText is a tool_result's content: a string, or the text of its
// blocks joined by newlines (images are noted, not inlined).
func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var bs []block
	if json.Unmarshal(raw, &bs) != nil {
		return string(raw)
	}
	parts := make([]string, 0, len(bs))
	for _, b := range bs {
		switch b.Type {
		case "text":
			parts = append(parts, b.Text)
		case "":
		default:
			parts = append(parts, "["+b.Type+"]")
		}
	}
	return strings.Join(parts, "\n")
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
