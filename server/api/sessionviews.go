package api

import (
	"encoding/json"
	"sort"
	"strings"

	"reeve.dev/reeve/server/store"
)

// Views of a session computed from its synced daemon events (kinds of
// daemon/wire): approval audit, governance, spend, adapter receipts,
// guardrail evidence, MCP tools and readiness. A session with no daemon
// events answers the same shapes, empty.

type syncedEvent struct {
	Seq  int64           `json:"seq"`
	Kind string          `json:"kind"`
	TS   string          `json:"ts"`
	Data json.RawMessage `json:"data"`
}

func (s *Server) syncedEvents(c *call) ([]syncedEvent, error) {
	var out []syncedEvent
	var after int64
	coll := "sessions/" + c.sess.ID + "/events"
	for {
		recs, err := s.st.Records(c.ctx(), c.ws.ID, coll, store.ListOptions{After: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			var e syncedEvent
			if json.Unmarshal(r.Attributes, &e) == nil {
				out = append(out, e)
			}
		}
		if len(recs) < 1000 || len(out) >= maxEvidenceEvents {
			break
		}
		after = recs[len(recs)-1].Seq
	}
	return out, nil
}

func obj(raw json.RawMessage) map[string]any {
	m := map[string]any{}
	_ = json.Unmarshal(raw, &m)
	return m
}

// target is what a tool call acted on: its command or path.
func target(input any) map[string]any {
	m, _ := input.(map[string]any)
	out := map[string]any{}
	for _, k := range []string{"command", "file_path", "path", "url", "pattern"} {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

func (s *Server) sessionView(view string) handlerFunc {
	return func(c *call) (int, any, error) {
		evs, err := s.syncedEvents(c)
		if err != nil {
			return 0, nil, err
		}
		a := map[string]any{}
		_ = json.Unmarshal(c.sess.Attributes, &a)
		requests := map[string]map[string]any{}
		for _, e := range evs {
			if e.Kind == "permission-request" {
				d := obj(e.Data)
				if id, _ := d["id"].(string); id != "" {
					requests[id] = d
				}
			}
		}
		var data any
		switch view {
		case "approval-audit", "guardrail-evidence":
			items := []map[string]any{}
			for _, e := range evs {
				if e.Kind != "permission-decision" {
					continue
				}
				d := obj(e.Data)
				by, _ := d["decided_by"].(string)
				if view == "guardrail-evidence" && !(strings.HasPrefix(by, "policy:") || d["decision"] == "deny") {
					continue
				}
				item := map[string]any{"seq": e.Seq, "at": d["at"], "tool": d["tool"], "decision": d["decision"], "decided_by": by, "reason": d["reason"]}
				if req, ok := requests[toString(d["request_id"])]; ok {
					item["target"] = target(req["input"])
					item["requested_at"] = req["created_at"]
				}
				items = append(items, item)
			}
			data = map[string]any{"decisions": items, "count": len(items)}
		case "governance":
			mode := ""
			decisions := map[string]int{}
			// The policy in force: the hash at the start and each change
			// the daemon saw while the session lived (its policy events).
			policies := []map[string]any{}
			for _, e := range evs {
				switch e.Kind {
				case "mode":
					if m, ok := obj(e.Data)["mode"].(string); ok {
						mode = m
					}
				case "permission-decision":
					decisions[toString(obj(e.Data)["decision"])]++
				case "policy":
					d := obj(e.Data)
					policies = append(policies, map[string]any{"seq": e.Seq, "change": d["change"], "hash": d["hash"], "previous": d["previous"], "at": d["at"]})
				}
			}
			g, _ := a["governance"].(map[string]any)
			if g == nil {
				g = map[string]any{}
			}
			if mode != "" {
				g["mode"] = mode
			}
			g["decisions"] = decisions
			g["policy_history"] = policies
			if g["effective_policy_hash"] == nil || g["effective_policy_hash"] == "" {
				g["effective_policy_hash"] = a["effective_policy_hash"]
			}
			if g["current_policy_hash"] == nil || g["current_policy_hash"] == "" {
				g["current_policy_hash"] = g["effective_policy_hash"]
			}
			data = g
		case "spend":
			turns := []map[string]any{}
			var in, out, cacheR, cacheW float64
			var cost float64
			for _, e := range evs {
				if e.Kind != "usage" {
					continue
				}
				d := obj(e.Data)
				turns = append(turns, map[string]any{"seq": e.Seq, "at": e.TS, "model": d["model"], "input_tokens": d["input_tokens"], "output_tokens": d["output_tokens"],
					"cache_read_tokens": d["cache_read_tokens"], "cache_write_tokens": d["cache_write_tokens"], "cost_usd": d["cost_usd"]})
				f := func(k string) float64 { v, _ := d[k].(float64); return v }
				in, out, cacheR, cacheW, cost = in+f("input_tokens"), out+f("output_tokens"), cacheR+f("cache_read_tokens"), cacheW+f("cache_write_tokens"), cost+f("cost_usd")
			}
			data = map[string]any{"turns": turns, "total": map[string]any{"input_tokens": in, "output_tokens": out, "cache_read_tokens": cacheR, "cache_write_tokens": cacheW, "cost_usd": cost}}
		case "adapter-receipts":
			kinds := map[string]int{}
			// Every turn's command line, from its launch event.
			launches := []map[string]any{}
			for _, e := range evs {
				kinds[e.Kind]++
				if e.Kind == "launch" {
					d := obj(e.Data)
					launches = append(launches, map[string]any{"seq": e.Seq, "at": e.TS, "turn": d["turn"], "argv": d["argv"], "env": d["env"], "dir": d["dir"],
						"agent_version": d["agent_version"]})
				}
			}
			ad, _ := a["adapter"].(map[string]any)
			files, _ := ad["evidence_files"].([]any)
			if files == nil {
				files = []any{}
			}
			cmd := ad["command_line"]
			if l, _ := cmd.([]any); len(l) == 0 && len(launches) > 0 {
				cmd = launches[len(launches)-1]["argv"]
			}
			data = map[string]any{"agent": a["agent"], "agent_version": ad["version"], "command_line": cmd, "launches": launches, "evidence_files": files,
				"model": a["model"], "install_id": a["install_id"], "daemon_session_id": a["daemon_session_id"], "turns": a["turns"],
				"worktree_branch": a["worktree_branch"], "event_kinds": kinds, "events": len(evs)}
		case "mcp-tools":
			tools := map[string]int{}
			for _, e := range evs {
				if e.Kind != "tool-call" {
					continue
				}
				name := toString(obj(e.Data)["name"])
				if strings.HasPrefix(name, "mcp__") || strings.HasPrefix(name, "mcp_") {
					tools[name]++
				}
			}
			list := []map[string]any{}
			for n, k := range tools {
				parts := strings.SplitN(strings.TrimPrefix(strings.TrimPrefix(n, "mcp__"), "mcp_"), "__", 2)
				list = append(list, map[string]any{"tool": n, "server": parts[0], "calls": k})
			}
			sort.Slice(list, func(i, j int) bool { return list[i]["tool"].(string) < list[j]["tool"].(string) })
			data = map[string]any{"tools": list}
		case "readiness":
			decided := map[string]bool{}
			for _, e := range evs {
				if e.Kind == "permission-decision" {
					decided[toString(obj(e.Data)["request_id"])] = true
				}
			}
			pending := 0
			for id := range requests {
				if !decided[id] {
					pending++
				}
			}
			last := ""
			if len(evs) > 0 {
				last = evs[len(evs)-1].TS
			}
			status, _ := a["status"].(string)
			data = map[string]any{"status": status, "ready": pending == 0 && status != "running" && status != "starting", "pending_permissions": pending,
				"synced_seq": a["synced_seq"], "last_event_at": last, "source": a["source"]}
		}
		return 200, map[string]any{"data": data}, nil
	}
}
