package api

import "reeve.dev/reeve/server/sdk"

// Schemas of insights and review packets (server/sdk/insights.go is
// their Go shape).

func evidenceLinkSchema() schema {
	return object([]string{"kind", "id"}, schema{
		"kind": enum("session", "run", "ledger_period", "install", "audit"),
		"id":   described(schema{"type": "string", "minLength": 1, "maxLength": 200}, "The record's id; a ledger period's key (YYYY-MM or YYYY-MM-DD)."),
		"note": schema{"type": "string", "maxLength": 1000},
		"at":   schema{"type": "string", "format": "date-time"},
	})
}

func insightSchema() schema {
	dt := schema{"type": "string", "format": "date-time"}
	return object([]string{"id", "workspace_id", "rule", "subject", "status", "title", "severity", "detail", "evidence", "count", "first_seen_at", "last_seen_at", "seq", "created_at", "updated_at"}, schema{
		"id": tString(), "workspace_id": tString(),
		"rule":          enum(sdk.InsightRules...),
		"subject":       described(tString(), "What the rule is about: tool:<name>, period:<key>, install:<id>, workflow:<id or name>, agent:<name>."),
		"status":        enum(sdk.InsightOpen, sdk.InsightAccepted, sdk.InsightDismissed, sdk.InsightConverted),
		"title":         tString(),
		"severity":      enum("info", "warning", "critical"),
		"detail":        described(tObject(), "The rule's facts at the last detection."),
		"evidence":      arrayOf(evidenceLinkSchema()),
		"count":         described(tInt(), "Occurrences the rule counted at the last detection (denials, failed runs, unguarded sessions, ledger entries; 1 for a stale install)."),
		"first_seen_at": dt, "last_seen_at": dt,
		"status_changed_by": tString(), "status_changed_at": dt, "status_reason": tString(),
		"review_packet_id": described(tString(), "The packet a converted insight became."),
		"seq":              tInt(), "created_at": dt, "updated_at": dt,
	})
}

func reviewPacketSchema() schema {
	dt := schema{"type": "string", "format": "date-time"}
	return object([]string{"id", "workspace_id", "title", "summary", "status", "evidence", "detail", "created_by", "created_at", "seq", "updated_at"}, schema{
		"id": tString(), "workspace_id": tString(), "title": tString(), "summary": tString(),
		"status":     enum(sdk.PacketPending, sdk.PacketApproved, sdk.PacketRejected),
		"insight_id": described(tString(), "The insight it was converted from."),
		"evidence":   arrayOf(evidenceLinkSchema()),
		"detail":     tObject(),
		"created_by": tString(), "created_at": dt,
		"decided_by": tString(), "decided_at": dt, "decision_reason": tString(),
		"seq": tInt(), "updated_at": dt,
	})
}

func insightRequestSchemas() map[string]schema {
	return map[string]schema{
		"InsightUpdateRequest": described(object([]string{"status"}, schema{
			"status": enum(sdk.InsightOpen, sdk.InsightAccepted, sdk.InsightDismissed),
			"reason": schema{"type": []any{"string", "null"}, "maxLength": 2000},
		}), "The new status; converted is reached only through convert."),
		"ReviewPacketCreateRequest": object([]string{"title", "evidence"}, schema{
			"title":    schema{"type": "string", "minLength": 1, "maxLength": 300},
			"summary":  schema{"type": "string", "maxLength": 10000},
			"evidence": schema{"type": "array", "items": evidenceLinkSchema(), "maxItems": 100},
		}),
		"ReviewPacketDecisionRequest": object([]string{"decision"}, schema{
			"decision": enum("approve", "reject"),
			"reason":   schema{"type": []any{"string", "null"}, "maxLength": 2000},
		}),
	}
}

func insightResponseSchemas() map[string]schema {
	ledger := orNull(object([]string{"period", "spent_usd", "hard_cap_usd", "remaining_usd", "fraction_used", "warn_at_fraction", "entries", "periods"}, schema{
		"period": tString(), "spent_usd": tString(), "hard_cap_usd": typ("string", "null"), "remaining_usd": typ("string", "null"),
		"fraction_used": typ("number", "null"), "warn_at_fraction": typ("number"), "entries": tInt(),
		"periods": arrayOf(object([]string{"period", "total_usd", "entries"}, schema{"period": tString(), "total_usd": tString(), "entries": tInt()})),
	}))
	counts := schema{"type": "object", "additionalProperties": tInt()}
	return map[string]schema{
		"InsightResponse": object([]string{"data"}, schema{"data": insightSchema()}),
		"InsightCollectionResponse": object([]string{"data", "meta"}, schema{"data": arrayOf(insightSchema()), "meta": object([]string{"count"}, schema{
			"count": tInt(), "next_after": tInt(),
			"created": described(tInt(), "detect: insights raised"), "updated": described(tInt(), "detect: insights whose facts changed"),
			"unchanged": described(tInt(), "detect: findings that changed nothing"),
			"resolved":  described(tInt(), "detect: open insights whose condition cleared, now dismissed by system:insights with reason resolved"),
		})}),
		"InsightSummaryResponse": object([]string{"data"}, schema{"data": object([]string{"total", "by_status", "by_rule", "review_packets", "ledger"}, schema{
			"total": tInt(), "by_status": counts, "by_rule": schema{"type": "object", "additionalProperties": counts}, "review_packets": counts,
			"ledger": described(ledger, "The current period against the hard cap; null for members (the ledger is for owners and admins)."),
		})}),
		"ReviewPacketResponse":           object([]string{"data"}, schema{"data": reviewPacketSchema()}),
		"ReviewPacketCollectionResponse": object([]string{"data", "meta"}, schema{"data": arrayOf(reviewPacketSchema()), "meta": ref("ListMeta")}),
		"ReviewPacketExportResponse": described(object([]string{"data"}, schema{"data": ref("EvidenceSigned")}),
			"Signed bundle (kind review-packet): the packet, its evidence links as a hash chain with redacted snapshots, and its decision."),
	}
}
