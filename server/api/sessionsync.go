package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// syncSession stores a daemon's session and the next events of its log.
// The session is a "sessions" record like a REST-created one (source
// "daemon"), keyed by the daemon's session id and owned by whoever paired
// the install. Events are kept under their daemon seq, gap-free: a batch
// must start at most one past the acknowledged seq (else 409 sync_gap with
// the acked seq), and events already held are acknowledged again, so a
// retried or replayed batch stores nothing twice.
func (s *Server) syncSession(c *call) (int, any, error) {
	var req sdk.SyncRequest
	b, _ := json.Marshal(c.body)
	if err := json.Unmarshal(b, &req); err != nil {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "", Message: err.Error()})
	}
	for i := 1; i < len(req.Events); i++ {
		if req.Events[i].Seq != req.Events[i-1].Seq+1 {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "/events/" + strconv.Itoa(i) + "/seq", Message: "events must be consecutive seqs in order"})
		}
	}
	if req.UploadMode == "" {
		req.UploadMode = sdk.UploadRedacted
	}
	in, err := s.st.Install(c.ctx(), c.ws.ID, c.p.InstallID)
	if err != nil {
		return 0, nil, err
	}
	key := syncedSessionKey(req.Session.ID)
	var res sdk.SyncResult
	// One transaction for the whole request: the session's fields, every
	// new event and the acknowledged seq commit together (a crash leaves
	// all or none), and a batch costs one commit instead of one per event.
	err = s.st.InTx(c.ctx(), func(tx store.RecordTx) error {
		res = sdk.SyncResult{} // the function may run again on a retry
		rec, created, err := s.upsertDaemonSession(c, tx, key, req, in)
		if err != nil {
			return err
		}
		acked := accessSynced(rec)
		res.SessionID, res.AckedSeq = rec.ID, acked
		if len(req.Events) > 0 && req.Events[0].Seq > acked+1 {
			e := errorf(http.StatusConflict, sdk.CodeSyncGap, "the batch starts at seq %d but the control plane holds up to %d; send from %d", req.Events[0].Seq, acked, acked+1)
			e.Extra = map[string]any{"data": res}
			return e
		}
		coll := "sessions/" + rec.ID + "/events"
		last := acked
		for _, ev := range req.Events {
			if ev.Seq <= acked {
				res.Duplicate++
				continue
			}
			a := map[string]any{"seq": ev.Seq, "kind": ev.Kind, "ts": ev.TS}
			if req.UploadMode != sdk.UploadMetadata && len(ev.Data) > 0 {
				a["data"] = json.RawMessage(ev.Data)
			}
			raw, err := json.Marshal(a)
			if err != nil {
				return err
			}
			r := store.Record{ID: newRecordID(), WorkspaceID: c.ws.ID, Collection: coll, NaturalKey: strconv.FormatInt(ev.Seq, 10), Attributes: raw,
				CreatedBy: c.p.Actor(), CreatedAt: c.now(), UpdatedAt: c.now()}
			// Events are data, not decisions: most are not audited; a
			// permission request or decision is, with its outbound event.
			switch err := tx.Create(&r); {
			case errors.Is(err, store.ErrConflict):
				res.Duplicate++ // held beyond synced_seq: a restored backup
			case err != nil:
				return err
			default:
				res.Stored++
				if err := tx.Audit(c.syncEventAudit(rec.ID, ev, req.UploadMode)); err != nil {
					return err
				}
			}
			last = ev.Seq
		}
		if last > acked {
			var a map[string]any
			if err := json.Unmarshal(rec.Attributes, &a); err != nil {
				return err
			}
			a["synced_seq"] = last
			if rec.Attributes, err = json.Marshal(a); err != nil {
				return err
			}
			rec.UpdatedAt = c.now()
			if err := tx.Update(&rec); err != nil {
				return err
			}
			res.AckedSeq = last
		}
		if created {
			return tx.Audit(sessionCreatedAudit(c.audit("session.sync.create", "sessions/"+rec.ID, map[string]any{"daemon_session_id": req.Session.ID, "install_id": in.ID}), rec.ID, req.Session))
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.SyncResponse{Data: res}, nil
}

func accessSynced(r store.Record) int64 {
	var a struct {
		Synced json.Number `json:"synced_seq"`
	}
	_ = json.Unmarshal(r.Attributes, &a)
	n, _ := a.Synced.Int64()
	return n
}

// upsertDaemonSession creates or refreshes, in tx, the session record of
// a daemon session; another install's session of the same id is refused.
// The refreshed fields are written when the caller updates the record, or
// here when no event moves synced_seq.
func (s *Server) upsertDaemonSession(c *call, tx store.RecordTx, key string, req sdk.SyncRequest, in store.Install) (store.Record, bool, error) {
	ss := req.Session
	title := ss.Agent + " session"
	if ss.DirectoryName != "" {
		title = ss.Agent + " in " + ss.DirectoryName
	}
	fields := map[string]any{
		"title": title, "source_kind": "daemon", "source": "daemon", "source_ref": ss.ID, "install_id": in.ID,
		"daemon_session_id": ss.ID, "directory_name": ss.DirectoryName, "agent": ss.Agent, "model": ss.Model, "status": ss.Status,
		"turns": ss.Turns, "worktree_branch": ss.WorktreeBranch, "started_at": ss.CreatedAt, "daemon_updated_at": ss.UpdatedAt,
		"ended_at": ss.EndedAt, "upload_mode": req.UploadMode,
		// The project's access.yaml as the daemon last read it; null
		// when the checkout has none (roleOf then caps nothing).
		"project_access": ss.Access,
		"governance":     map[string]any{"effective_policy_hash": ss.PolicyHash, "current_policy_hash": ss.CurrentPolicyHash, "mode": ss.Mode, "guarded": ss.Guarded},
		"adapter":        map[string]any{"agent": ss.Agent, "version": ss.AgentVersion, "command_line": ss.CommandLine, "evidence_files": ss.EvidenceFiles},
	}
	cur, err := tx.RecordByKey(c.ws.ID, "sessions", key)
	if errors.Is(err, store.ErrNotFound) {
		a := map[string]any{}
		for k, v := range fields {
			a[k] = v
		}
		owner, _ := strconv.ParseInt(strings.TrimPrefix(in.CreatedBy, "user:"), 10, 64)
		a["owner_user_id"], a["visibility_scope"], a["acl"], a["synced_seq"] = owner, visWorkspace, map[string]aclEntry{}, 0
		raw, err := json.Marshal(a)
		if err != nil {
			return store.Record{}, false, err
		}
		r := store.Record{ID: newRecordID(), WorkspaceID: c.ws.ID, Collection: "sessions", NaturalKey: key, Attributes: raw, CreatedBy: c.p.Actor(), CreatedAt: c.now(), UpdatedAt: c.now()}
		// Concurrent first syncs of one session are serialized by the
		// transaction (SQLite's one writer; PostgreSQL retries the loser,
		// which then finds the record).
		if err := tx.Create(&r); err != nil {
			return store.Record{}, false, err
		}
		return r, true, nil
	}
	if err != nil {
		return store.Record{}, false, err
	}
	var a map[string]any
	if err := json.Unmarshal(cur.Attributes, &a); err != nil {
		return store.Record{}, false, err
	}
	if a["install_id"] != in.ID {
		return store.Record{}, false, errorf(http.StatusConflict, sdk.CodeConflict, "session %s belongs to another install", ss.ID)
	}
	for k, v := range fields {
		a[k] = v
	}
	raw, err := json.Marshal(a)
	if err != nil {
		return store.Record{}, false, err
	}
	if bytes.Equal(raw, cur.Attributes) {
		return cur, false, nil
	}
	// The session's end is audited once, with its outbound event.
	audit := c.sessionUpdateAudit(cur, ss)
	cur.Attributes, cur.UpdatedAt = raw, c.now()
	if err := tx.Update(&cur); err != nil {
		return store.Record{}, false, err
	}
	return cur, false, tx.Audit(audit)
}

// daemonEvents answers the events of a synced session by the daemon's own
// seq: after_sequence=N returns seq N+1 onwards, gap-free.
func (s *Server) daemonEvents(c *call, sid string) (int, any, error) {
	limit := int(queryInt(c, "limit", 100))
	coll := "sessions/" + sid + "/events"
	after := int64(0)
	if n := queryInt(c, "after_sequence", 0); n > 0 {
		r, err := s.st.RecordByKey(c.ctx(), c.ws.ID, coll, strconv.FormatInt(n, 10))
		switch {
		case err == nil:
			after = r.Seq
		case errors.Is(err, store.ErrNotFound):
			// Past the end: nothing yet.
			return 200, sdk.RecordCollectionResponse{Data: []sdk.Record{}}, nil
		default:
			return 0, nil, err
		}
	}
	recs, err := s.st.Records(c.ctx(), c.ws.ID, coll, store.ListOptions{After: after, Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	out := c.collection(recs, limit)
	if out.Meta.NextAfter != 0 && len(out.Data) > 0 {
		if n, ok := numberOf(out.Data[len(out.Data)-1].Attributes["seq"]); ok {
			out.Meta.NextAfter = n
		}
	}
	return 200, out, nil
}
