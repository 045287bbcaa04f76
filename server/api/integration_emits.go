package api

import (
	"encoding/json"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// The outbound events of synced sessions, attached to the audit entries of
// the writes that record them (store.AuditEntry.Emit), so a delivery
// exists exactly when its change committed.

// sessionCreatedAudit announces a session the control plane sees for the
// first time: started, and ended too when it was synced after it ended.
func sessionCreatedAudit(a store.AuditEntry, sessionID string, ss sdk.SyncSession) store.AuditEntry {
	data := map[string]any{"session_id": sessionID, "daemon_session_id": ss.ID, "agent": ss.Agent, "model": ss.Model, "status": ss.Status, "started_at": ss.CreatedAt}
	a = emit(a, sdk.EventSessionStarted, data)
	if ss.EndedAt != nil {
		a = emit(a, sdk.EventSessionEnded, map[string]any{"session_id": sessionID, "daemon_session_id": ss.ID, "status": ss.Status, "ended_at": ss.EndedAt})
	}
	return a
}

// sessionUpdateAudit is the audit of a sync that refreshes a session: none,
// unless this sync is the one that reports its end.
func (c *call) sessionUpdateAudit(cur store.Record, ss sdk.SyncSession) store.AuditEntry {
	var before struct {
		EndedAt any `json:"ended_at"`
	}
	_ = json.Unmarshal(cur.Attributes, &before)
	if ss.EndedAt == nil || before.EndedAt != nil {
		return store.AuditEntry{}
	}
	a := c.audit("session.end", "sessions/"+cur.ID, map[string]any{"status": ss.Status})
	return emit(a, sdk.EventSessionEnded, map[string]any{"session_id": cur.ID, "daemon_session_id": ss.ID, "status": ss.Status, "ended_at": ss.EndedAt})
}

// syncEventAudit is the audit of one synced event: none for most (events
// are data), an entry with its outbound event for a permission request or
// decision.
func (c *call) syncEventAudit(sessionID string, ev sdk.SyncEvent, mode string) store.AuditEntry {
	kind := ""
	switch ev.Kind {
	case wire.KindPermissionRequest:
		kind = sdk.EventPermissionRequested
	case wire.KindPermissionDecision:
		kind = sdk.EventPermissionDecided
	default:
		return store.AuditEntry{}
	}
	data := map[string]any{"session_id": sessionID, "seq": ev.Seq, "source": "session", "at": ev.TS}
	if mode != sdk.UploadMetadata && len(ev.Data) > 0 {
		data["detail"] = json.RawMessage(ev.Data)
	}
	a := c.audit("session."+ev.Kind, "sessions/"+sessionID, map[string]any{"seq": ev.Seq})
	return emit(a, kind, data)
}
