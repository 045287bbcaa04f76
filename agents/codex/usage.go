package codex

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// Usage is reported per turn, as a delta. Codex's turn.completed usage is
// the thread's running total (observed in 0.169.0: a resumed thread's
// second turn reports the first's tokens plus its own), so the turn's
// usage is that total less the thread's total before the turn, which
// Codex keeps in its rollout file: the last token_count event's
// total_token_usage.

// tokenTotals is a thread's usage, or a turn's.
type tokenTotals struct {
	In, Cached, CacheWrite, Out int64
}

func (t tokenTotals) minus(o tokenTotals) tokenTotals {
	return tokenTotals{In: t.In - o.In, Cached: t.Cached - o.Cached, CacheWrite: t.CacheWrite - o.CacheWrite, Out: t.Out - o.Out}
}

// emitUsage emits the turn's usage from the thread's total at its end.
func (m *mapper) emitUsage(total tokenTotals) {
	if m.baseErr != nil {
		// Reporting the thread's total would count earlier turns again.
		m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{
			Message: fmt.Sprintf("codex: this turn's usage is unknown (the thread's earlier total could not be read: %v)", m.baseErr),
		}})
		return
	}
	d := total.minus(m.base)
	if d.In < 0 || d.Out < 0 || d.Cached < 0 || d.CacheWrite < 0 {
		// Not a running total after all (a Codex that reports per turn).
		d = total
	}
	m.emit(agents.Event{Kind: wire.KindUsage, Data: wire.Usage{
		Model: m.model, InputTokens: d.In, OutputTokens: d.Out, CacheReadTokens: d.Cached, CacheWriteTokens: d.CacheWrite,
	}})
}

// codexHome is $CODEX_HOME of the turn's environment, else ~/.codex.
func codexHome(env []string) string {
	if env == nil {
		env = os.Environ()
	}
	home := ""
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "CODEX_HOME":
			if v != "" {
				return v
			}
		case "HOME":
			home = v
		}
	}
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".codex")
}

// threadTotals reads a thread's usage so far from its rollout file,
// $CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread_id>.jsonl. A
// thread that has made no model call yet has none.
func threadTotals(home, threadID string) (tokenTotals, error) {
	files, _ := filepath.Glob(filepath.Join(home, "sessions", "[0-9]*", "[0-9]*", "[0-9]*", "rollout-*-"+threadID+".jsonl"))
	if len(files) == 0 {
		return tokenTotals{}, fmt.Errorf("no rollout file of thread %s under %s", threadID, filepath.Join(home, "sessions"))
	}
	f, err := os.Open(files[len(files)-1])
	if err != nil {
		return tokenTotals{}, err
	}
	defer f.Close()
	var last tokenTotals
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"token_count"`)) {
			continue
		}
		var l struct {
			Type    string `json:"type"`
			Payload struct {
				Type string `json:"type"`
				Info *struct {
					Total struct {
						InputTokens           int64 `json:"input_tokens"`
						CachedInputTokens     int64 `json:"cached_input_tokens"`
						CacheWriteInputTokens int64 `json:"cache_write_input_tokens"`
						OutputTokens          int64 `json:"output_tokens"`
					} `json:"total_token_usage"`
				} `json:"info"`
			} `json:"payload"`
		}
		if json.Unmarshal(line, &l) != nil || l.Type != "event_msg" || l.Payload.Type != "token_count" || l.Payload.Info == nil {
			continue
		}
		t := l.Payload.Info.Total
		last = tokenTotals{In: t.InputTokens, Cached: t.CachedInputTokens, CacheWrite: t.CacheWriteInputTokens, Out: t.OutputTokens}
	}
	if err := sc.Err(); err != nil {
		return tokenTotals{}, fmt.Errorf("read rollout of thread %s: %w", threadID, err)
	}
	return last, nil
}
