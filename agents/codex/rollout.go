package codex

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// Calls that never ran leave no item in app-server's notifications: a
// command its PreToolUse hook blocked, or a call Codex refused before it
// made an item (a tool invoked with a payload it cannot read). Codex's rollout file has
// every call the model made (function_call, with its call_id, which is
// also the tool_use_id its hooks see) and what the model was told
// (function_call_output), and an item event for each call that ran. At the
// end of a turn the adapter reads the rollout's new part and puts every
// call that did not run on the record, under its call_id, so that the
// hook's decision for it links to it.

// rolloutPath is the rollout file of a thread; "" when there is none.
func rolloutPath(home, threadID string) string {
	if threadID == "" {
		return ""
	}
	files, _ := filepath.Glob(filepath.Join(home, "sessions", "[0-9]*", "[0-9]*", "[0-9]*", "rollout-*-"+threadID+".jsonl"))
	if len(files) == 0 {
		return ""
	}
	return files[len(files)-1]
}

// rolloutSize is where a thread's rollout ends before a turn.
func rolloutSize(home, threadID string) int64 {
	if p := rolloutPath(home, threadID); p != "" {
		if st, err := os.Stat(p); err == nil {
			return st.Size()
		}
	}
	return 0
}

// itemTools are the tools whose execution Codex reports as an item: a
// call of one of them without an item did not run.
var itemTools = map[string]bool{"exec_command": true, "shell": true, "local_shell": true, "apply_patch": true}

// hookBlocked is how Codex tells the model its PreToolUse hook blocked a
// call; reeve decided those, the rest Codex refused by itself.
const hookBlocked = "blocked by PreToolUse hook"

// reportUnrun emits a tool-call and an error tool-result for each call of
// this turn that did not run, and for those Codex refused itself (no hook
// involved) a permission-decision by the agent.
// A call with no output either is reported only when the turn completed
// (every call of it has finished): Codex dropped it, as it does a tool
// invoked with a payload it cannot read.
func (m *mapper) reportUnrun(completed bool) {
	path := rolloutPath(m.home, m.threadID)
	if path == "" {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(m.rolloutStart, io.SeekStart); err != nil {
		return
	}
	type call struct {
		id, name string
		input    json.RawMessage
	}
	var calls []call
	outputs := map[string]string{}
	ran := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var l struct {
			Type    string `json:"type"`
			Payload struct {
				Type      string          `json:"type"`
				Name      string          `json:"name"`
				Arguments string          `json:"arguments"`
				Input     json.RawMessage `json:"input"`
				CallID    string          `json:"call_id"`
				Output    json.RawMessage `json:"output"`
				Item      *struct {
					ID string `json:"id"`
				} `json:"item"`
			} `json:"payload"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		p := l.Payload
		switch {
		case l.Type == "response_item" && (p.Type == "function_call" || p.Type == "custom_tool_call") && p.CallID != "":
			input := json.RawMessage(p.Arguments)
			if p.Type == "custom_tool_call" {
				input = p.Input
			}
			if !json.Valid(input) {
				input, _ = json.Marshal(map[string]string{"input": string(input)})
			}
			calls = append(calls, call{id: p.CallID, name: p.Name, input: compactJSON(input)})
		case l.Type == "response_item" && (p.Type == "function_call_output" || p.Type == "custom_tool_call_output") && p.CallID != "":
			outputs[p.CallID] = outputText(p.Output)
		case l.Type == "event_msg" && p.Item != nil && p.Item.ID != "":
			ran[p.Item.ID] = true
		}
	}
	m.mu.Lock()
	for id := range m.seen {
		ran[id] = true
	}
	m.mu.Unlock()
	for _, c := range calls {
		out, answered := outputs[c.id]
		if !itemTools[c.name] || ran[c.id] || (!answered && !completed) {
			continue
		}
		if !answered {
			out = "codex did not run this call and reported no output for it"
		}
		m.emit(agents.Event{Kind: wire.KindToolCall, Data: wire.ToolCall{ID: c.id, Name: c.name, Input: c.input}})
		m.emit(agents.Event{Kind: wire.KindToolResult, Data: wire.ToolResult{ID: c.id, Output: out, IsError: true}})
		if !strings.Contains(out, hookBlocked) {
			m.emit(agents.Event{Kind: wire.KindPermissionDecision, Data: wire.PermissionDecision{
				Tool: c.name, ToolUseID: c.id, Decision: "deny", DecidedBy: "agent", Reason: out, Channel: "codex", At: now(),
			}})
		}
	}
}

// outputText is a function_call_output's text: a string, or content items.
func outputText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return string(raw)
}
