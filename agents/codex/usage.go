package codex

import (
	"os"
	"path/filepath"
	"strings"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// Usage is reported per turn, as a delta. Codex's thread/tokenUsage/updated
// carries the thread's running total (a resumed thread's totals include
// its earlier turns) and the last model call's usage; the thread's total
// before the turn is the first notification's total less its last call,
// so the turn's usage is the final total less that.

// tokenTotals is a thread's usage, or a turn's.
type tokenTotals struct {
	In, Cached, CacheWrite, Out int64
}

func (t tokenTotals) minus(o tokenTotals) tokenTotals {
	return tokenTotals{In: t.In - o.In, Cached: t.Cached - o.Cached, CacheWrite: t.CacheWrite - o.CacheWrite, Out: t.Out - o.Out}
}

// emitUsage emits the turn's usage.
func (m *mapper) emitUsage(d tokenTotals) {
	if d.In < 0 || d.Out < 0 || d.Cached < 0 || d.CacheWrite < 0 {
		d = m.total // not a running total after all
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
