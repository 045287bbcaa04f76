package codex

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// notification is a JSON-RPC notification of `codex app-server`, as far as
// the mapping reads it. Codex adds fields freely; unknown ones are ignored.
type notification struct {
	Method string `json:"method"`
	Params struct {
		ThreadID string `json:"threadId"`
		TurnID   string `json:"turnId"`
		Item     *item  `json:"item"`
		// item/commandExecution/outputDelta
		ItemID string `json:"itemId"`
		Delta  string `json:"delta"`
		// thread/tokenUsage/updated
		TokenUsage *struct {
			Total tokenBreakdown `json:"total"`
			Last  tokenBreakdown `json:"last"`
		} `json:"tokenUsage"`
		// turn/completed
		Turn *struct {
			ID     string     `json:"id"`
			Status string     `json:"status"`
			Error  *turnError `json:"error"`
		} `json:"turn"`
		// error
		Error     *turnError `json:"error"`
		WillRetry bool       `json:"willRetry"`
		// warning
		Message string `json:"message"`
	} `json:"params"`
}

type turnError struct {
	Message           string `json:"message"`
	AdditionalDetails string `json:"additionalDetails"`
}

func (e *turnError) text() string {
	if e == nil {
		return ""
	}
	if e.AdditionalDetails != "" {
		return e.Message + ": " + e.AdditionalDetails
	}
	return e.Message
}

type tokenBreakdown struct {
	InputTokens           int64 `json:"inputTokens"`
	CachedInputTokens     int64 `json:"cachedInputTokens"`
	CacheWriteInputTokens int64 `json:"cacheWriteInputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
}

func (b tokenBreakdown) totals() tokenTotals {
	return tokenTotals{In: b.InputTokens, Cached: b.CachedInputTokens, CacheWrite: b.CacheWriteInputTokens, Out: b.OutputTokens}
}

// item is a ThreadItem of the app-server protocol (v2).
type item struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// agentMessage, plan
	Text string `json:"text"`
	// commandExecution
	Command          string  `json:"command"`
	Cwd              string  `json:"cwd"`
	AggregatedOutput *string `json:"aggregatedOutput"`
	ExitCode         *int    `json:"exitCode"`
	Status           string  `json:"status"`
	// fileChange
	Changes []fileChange `json:"changes"`
	// mcpToolCall, dynamicToolCall, collabAgentToolCall
	Server    string          `json:"server"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Result    *struct {
		Content []json.RawMessage `json:"content"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	// webSearch
	Query string `json:"query"`
}

type fileChange struct {
	Path string `json:"path"`
	Kind struct {
		Type     string `json:"type"` // add, delete, update
		MovePath string `json:"move_path"`
	} `json:"kind"`
	Diff string `json:"diff"`
}

// mapper turns app-server notifications into session updates. It runs on
// the goroutine reading stdout; the approval goroutines read the items it
// keeps (itemFor) under mu.
type mapper struct {
	emit     agents.Emit
	model    string // the turn's model, for usage (Codex does not report it per turn)
	stateDir string // for the full outputs of commands

	mu       sync.Mutex
	threadID string
	items    map[string]*item // tool items started and not completed, by id
	seen     map[string]bool  // every tool item of the turn, by id
	decided  map[string]bool  // items reeve answered an approval request for
	outputs  map[string]*os.File
	outBytes map[string]int64

	turnID    string // this turn's id, from turn/started
	completed bool   // turn/completed arrived with status completed
	ended     bool   // turn/completed arrived, whatever its status
	lastError string // the last error notification that Codex retried
	failure   error  // a failed turn

	// Usage: the thread's running total before this turn (the first
	// token-usage notification's total less its last call), and the
	// total now.
	base, total tokenTotals
	sawUsage    bool

	// home is CODEX_HOME and rolloutStart where the thread's rollout
	// ended before this turn, for the calls that did not run (rollout.go).
	home         string
	rolloutStart int64
}

func newMapper(emit agents.Emit, model, stateDir, home string) *mapper {
	return &mapper{emit: emit, model: model, stateDir: stateDir, home: home,
		items: map[string]*item{}, seen: map[string]bool{}, decided: map[string]bool{}, outputs: map[string]*os.File{}, outBytes: map[string]int64{}}
}

// notify maps one notification.
func (m *mapper) notify(raw []byte) {
	var n notification
	if err := json.Unmarshal(raw, &n); err != nil {
		m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{Message: fmt.Sprintf("codex sent a notification reeve cannot read: %v", err)}})
		return
	}
	p := n.Params
	switch n.Method {
	case "item/started":
		if p.Item != nil {
			m.started(p.Item)
		}
	case "item/completed":
		if p.Item != nil {
			m.itemCompleted(p.Item)
		}
	case "item/commandExecution/outputDelta":
		m.keepOutput(p.ItemID, p.Delta)
	case "turn/started":
		if p.Turn != nil {
			m.turnID = p.Turn.ID
		}
	case "thread/tokenUsage/updated":
		// A resumed thread restates its usage before the turn starts;
		// only this turn's calls count.
		if p.TokenUsage != nil && m.turnID != "" && p.TurnID == m.turnID {
			if !m.sawUsage {
				m.base = p.TokenUsage.Total.totals().minus(p.TokenUsage.Last.totals())
				m.sawUsage = true
			}
			m.total = p.TokenUsage.Total.totals()
		}
	case "turn/completed":
		m.ended = true
		status, msg := "", ""
		if p.Turn != nil {
			status, msg = p.Turn.Status, p.Turn.Error.text()
		}
		m.reportUnrun(status == "completed")
		switch status {
		case "completed":
			m.completed = true
		case "interrupted":
			m.failure = fmt.Errorf("codex: the turn was interrupted")
		default:
			if msg == "" {
				msg = "the turn failed"
			}
			m.failure = fmt.Errorf("codex: %s", msg)
			m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{Message: msg}})
		}
		if m.sawUsage {
			m.emitUsage(m.total.minus(m.base))
		}
	case "error":
		// Codex may retry and still complete the turn; a final one
		// fails it through turn/completed.
		msg := p.Error.text()
		if msg == "" {
			msg = "codex reported an error"
		}
		m.lastError = msg
		m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{Message: msg}})
	case "warning":
		if strings.Contains(p.Message, "bypass-hook-trust") {
			// reeve asked Codex to run the hooks it wrote without a
			// review; the notice stays in the evidence, it is no error.
			return
		}
		m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{Message: p.Message}})
	}
	// Deltas of messages and reasoning, plans, diffs, hooks, status and
	// account notices carry nothing the completed items do not; they
	// stay in the evidence.
}

// started emits the tool-call of items that are tool uses.
func (m *mapper) started(it *item) {
	name, input, ok := toolCall(it)
	if !ok {
		return
	}
	m.mu.Lock()
	m.items[it.ID] = it
	m.seen[it.ID] = true
	m.mu.Unlock()
	m.emit(agents.Event{Kind: wire.KindToolCall, Data: wire.ToolCall{ID: it.ID, Name: name, Input: input}})
}

// itemFor is a started tool item, for an approval request naming it.
func (m *mapper) itemFor(id string) *item {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.items[id]
}

// markDecided notes that reeve answered the approval request of an item,
// so a declined item is reeve's decision, not the agent's.
func (m *mapper) markDecided(id string) {
	m.mu.Lock()
	m.decided[id] = true
	m.mu.Unlock()
}

func (m *mapper) itemCompleted(it *item) {
	switch it.Type {
	case "agentMessage", "plan":
		if strings.TrimSpace(it.Text) != "" {
			m.emit(agents.Event{Kind: wire.KindAgentMessage, Data: wire.AgentMessage{Text: it.Text}})
		}
		return
	}
	result, ok := toolResult(it)
	if !ok {
		return // user messages, reasoning, and item types reeve does not map
	}
	m.mu.Lock()
	_, open := m.items[it.ID]
	delete(m.items, it.ID)
	decided := m.decided[it.ID]
	m.mu.Unlock()
	if !open {
		m.started(it) // an item that only ever arrived completed
		m.mu.Lock()
		delete(m.items, it.ID)
		m.mu.Unlock()
	}
	if path, n := m.closeOutput(it.ID, result.Output); path != "" {
		result.Evidence, result.EvidenceBytes = path, n
	}
	m.emit(agents.Event{Kind: wire.KindToolResult, Data: result})
	if it.Status == "declined" && !decided {
		// Codex refused the call without asking reeve.
		name, _, _ := toolCall(it)
		m.emit(agents.Event{Kind: wire.KindPermissionDecision, Data: wire.PermissionDecision{
			Tool: name, ToolUseID: it.ID, Decision: "deny", DecidedBy: "agent", Reason: "codex declined the call by itself",
			Channel: "codex", At: now(),
		}})
	}
}

// toolCall names a tool item and its input.
func toolCall(it *item) (name string, input json.RawMessage, ok bool) {
	switch it.Type {
	case "commandExecution":
		return "command_execution", mustJSON(map[string]string{"command": it.Command, "cwd": it.Cwd}), true
	case "fileChange":
		type change struct {
			Path     string `json:"path"`
			Kind     string `json:"kind"`
			MovePath string `json:"move_path,omitempty"`
		}
		cs := make([]change, 0, len(it.Changes))
		for _, c := range it.Changes {
			cs = append(cs, change{Path: c.Path, Kind: c.Kind.Type, MovePath: c.Kind.MovePath})
		}
		return "file_change", mustJSON(map[string]any{"changes": cs}), true
	case "mcpToolCall":
		return "mcp__" + it.Server + "__" + it.Tool, compactJSON(it.Arguments), true
	case "dynamicToolCall":
		return it.Tool, compactJSON(it.Arguments), true
	case "collabAgentToolCall":
		return "collab_" + it.Tool, nil, true
	case "webSearch":
		return "web_search", mustJSON(map[string]string{"query": it.Query}), true
	}
	return "", nil, false
}

// toolResult is what a completed tool item produced.
func toolResult(it *item) (wire.ToolResult, bool) {
	r := wire.ToolResult{ID: it.ID, IsError: it.Status == "failed" || it.Status == "declined"}
	switch it.Type {
	case "commandExecution":
		r.ExitCode = it.ExitCode
		if it.AggregatedOutput != nil {
			r.Output = *it.AggregatedOutput
		}
		if it.ExitCode != nil && *it.ExitCode != 0 {
			r.IsError = true
		}
		if it.Status == "declined" && r.Output == "" {
			r.Output = "declined: the command did not run"
		}
	case "fileChange":
		lines := make([]string, 0, len(it.Changes))
		for _, c := range it.Changes {
			lines = append(lines, c.Kind.Type+" "+c.Path)
		}
		r.Output = strings.Join(lines, "\n")
		if it.Status == "declined" {
			r.Output = "declined: the patch was not applied\n" + r.Output
		}
	case "mcpToolCall", "dynamicToolCall":
		if it.Error != nil {
			r.Output, r.IsError = it.Error.Message, true
		} else if it.Result != nil {
			r.Output = contentText(it.Result.Content)
		}
	case "collabAgentToolCall":
		r.Output = it.Status
	case "webSearch":
		r.Output = it.Query
	default:
		return r, false
	}
	return r, true
}

// maxKeptOutput bounds one command's output kept as evidence.
const maxKeptOutput = 64 << 20

// keepOutput appends a command's output as it streams to
// <state dir>/outputs/<item id>.txt: what the command printed, whole,
// whatever Codex later cuts from the output it shows the model.
func (m *mapper) keepOutput(id, delta string) {
	if m.stateDir == "" || id == "" || strings.ContainsAny(id, `/\`) || id == "." || id == ".." || delta == "" {
		return
	}
	f, ok := m.outputs[id]
	if !ok {
		dir := filepath.Join(m.stateDir, "outputs")
		if os.MkdirAll(dir, 0o700) != nil {
			return
		}
		var err error
		if f, err = os.OpenFile(filepath.Join(dir, id+".txt"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
			m.outputs[id] = nil
			return
		}
		m.outputs[id] = f
	}
	if f == nil || m.outBytes[id] >= maxKeptOutput {
		return
	}
	if room := maxKeptOutput - m.outBytes[id]; int64(len(delta)) > room {
		delta = delta[:room]
	}
	n, _ := f.WriteString(delta)
	m.outBytes[id] += int64(n)
}

// closeOutput ends a command's kept output. It stays as evidence when the
// result's output is less than it (Codex cut it); otherwise it is removed,
// the event holding it all.
func (m *mapper) closeOutput(id, shown string) (string, int64) {
	f, ok := m.outputs[id]
	delete(m.outputs, id)
	n := m.outBytes[id]
	delete(m.outBytes, id)
	if !ok || f == nil {
		return "", 0
	}
	path := f.Name()
	f.Close()
	if n <= int64(len(shown)) {
		os.Remove(path)
		return "", 0
	}
	return path, n
}

// closeAll ends every output still open (a killed turn).
func (m *mapper) closeAll() {
	for id, f := range m.outputs {
		if f != nil {
			f.Close()
		}
		delete(m.outputs, id)
	}
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

// now is when a decision was taken.
func now() time.Time { return time.Now().UTC() }

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}
