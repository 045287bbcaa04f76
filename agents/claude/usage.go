package claude

import (
	"encoding/json"
	"sort"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
)

// Usage is reported per result, as a delta: what the session used since
// the previous result, subagents included. Claude Code's result carries
// three accounts (observed in 2.1.329):
//
//   - usage: the main thread's tokens of this result only; a subagent's
//     tokens are not in it;
//   - modelUsage and total_cost_usd: the session's totals, earlier (resumed)
//     turns and subagents included;
//   - model_usage_since_last_result: per model, tokens and cost since the
//     previous result, subagents included. A turn can end in several
//     results (a background subagent's notification starts another), and
//     these add up to the turn.
//
// So the delta is model_usage_since_last_result; a version without it gets
// usage, with total_cost_usd as the cost only when the turn resumed
// nothing (otherwise the session's total is not this turn's cost).

// modelUsage is one model's entry in modelUsage or
// model_usage_since_last_result.
type modelUsage struct {
	InputTokens              int64    `json:"inputTokens"`
	OutputTokens             int64    `json:"outputTokens"`
	CacheReadInputTokens     int64    `json:"cacheReadInputTokens"`
	CacheCreationInputTokens int64    `json:"cacheCreationInputTokens"`
	CostUSD                  *float64 `json:"costUSD"`
}

// emitUsage emits the usage of one result: one event per model that used
// anything since the previous result.
func (m *mapper) emitUsage(ev streamEvent) {
	if ev.UsageSinceLast != nil {
		models := make([]string, 0, len(ev.UsageSinceLast))
		for k := range ev.UsageSinceLast {
			models = append(models, k)
		}
		sort.Strings(models)
		for _, model := range models {
			var mu modelUsage
			if json.Unmarshal(ev.UsageSinceLast[model], &mu) != nil {
				continue
			}
			if mu.InputTokens == 0 && mu.OutputTokens == 0 && mu.CacheReadInputTokens == 0 && mu.CacheCreationInputTokens == 0 {
				continue
			}
			m.emit(agents.Event{Kind: wire.KindUsage, Data: wire.Usage{
				Model: model, InputTokens: mu.InputTokens, OutputTokens: mu.OutputTokens,
				CacheReadTokens: mu.CacheReadInputTokens, CacheWriteTokens: mu.CacheCreationInputTokens, CostUSD: mu.CostUSD,
			}})
		}
		return
	}
	if ev.Usage == nil && ev.CostUSD == nil {
		return
	}
	u := wire.Usage{Model: m.usageModel(ev.ModelUsage)}
	if !m.resumed {
		u.CostUSD = ev.CostUSD
	}
	if ev.Usage != nil {
		u.InputTokens = ev.Usage.InputTokens
		u.OutputTokens = ev.Usage.OutputTokens
		u.CacheReadTokens = ev.Usage.CacheReadInputTokens
		u.CacheWriteTokens = ev.Usage.CacheCreationInputTokens
	}
	m.emit(agents.Event{Kind: wire.KindUsage, Data: u})
}
