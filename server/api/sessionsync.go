package api

import (
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
	key := "daemon:" + req.Session.ID
	rec, err := s.upsertDaemonSession(c, key, req, in)
	if err != nil {
		return 0, nil, err
	}
	acked := accessSynced(rec)
	res := sdk.SyncResult{SessionID: rec.ID, AckedSeq: acked}
	if len(req.Events) > 0 && req.Events[0].Seq > acked+1 {
		e := errorf(http.StatusConflict, sdk.CodeSyncGap, "the batch starts at seq %d but the control plane holds up to %d; send from %d", req.Events[0].Seq, acked, acked+1)
		e.Extra = map[string]any{"data": res}
		return 0, nil, e
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
			return 0, nil, err
		}
		r := store.Record{ID: newRecordID(), WorkspaceID: c.ws.ID, Collection: coll, NaturalKey: strconv.FormatInt(ev.Seq, 10), Attributes: raw,
			CreatedBy: c.p.Actor(), CreatedAt: c.now(), UpdatedAt: c.now()}
		// Events are data, not decisions: the session's sync is audited,
		// not each event.
		err = s.st.CreateRecord(c.ctx(), &r, c.syncEventAudit(rec.ID, ev, req.UploadMode))
		switch {
		case errors.Is(err, store.ErrConflict):
			res.Duplicate++ // stored by an earlier request that lost its answer
		case err != nil:
			return 0, nil, err
		default:
			res.Stored++
		}
		last = ev.Seq
	}
	if last > acked {
		_, err := s.st.UpdateRecordIf(c.ctx(), c.ws.ID, "sessions", rec.ID, func(r *store.Record) error {
			var a map[string]any
			if err := json.Unmarshal(r.Attributes, &a); err != nil {
				return err
			}
			if cur, _ := numberOf(a["synced_seq"]); cur < last {
				a["synced_seq"] = last
			}
			b, err := json.Marshal(a)
			r.Attributes = b
			return err
		}, store.AuditEntry{})
		if err != nil {
			return 0, nil, err
		}
		res.AckedSeq = last
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

// upsertDaemonSession creates or refreshes the session record of a
// daemon session; another install's session of the same id is refused.
func (s *Server) upsertDaemonSession(c *call, key string, req sdk.SyncRequest, in store.Install) (store.Record, error) {
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
		"governance": map[string]any{"effective_policy_hash": ss.PolicyHash, "mode": ss.Mode, "guarded": ss.Guarded},
	}
	for {
		cur, err := s.st.RecordByKey(c.ctx(), c.ws.ID, "sessions", key)
		if errors.Is(err, store.ErrNotFound) {
			a := map[string]any{}
			for k, v := range fields {
				a[k] = v
			}
			owner, _ := strconv.ParseInt(strings.TrimPrefix(in.CreatedBy, "user:"), 10, 64)
			a["owner_user_id"], a["visibility_scope"], a["acl"], a["synced_seq"] = owner, visWorkspace, map[string]aclEntry{}, 0
			raw, err := json.Marshal(a)
			if err != nil {
				return store.Record{}, err
			}
			r := store.Record{ID: newRecordID(), WorkspaceID: c.ws.ID, Collection: "sessions", NaturalKey: key, Attributes: raw, CreatedBy: c.p.Actor(), CreatedAt: c.now(), UpdatedAt: c.now()}
			err = s.st.CreateRecord(c.ctx(), &r, sessionCreatedAudit(c.audit("session.sync.create", "sessions/"+r.ID, map[string]any{"daemon_session_id": ss.ID, "install_id": in.ID}), r.ID, ss))
			if errors.Is(err, store.ErrConflict) {
				continue // a concurrent sync created it
			}
			return r, err
		}
		if err != nil {
			return store.Record{}, err
		}
		return s.st.UpdateRecordIf(c.ctx(), c.ws.ID, "sessions", cur.ID, func(r *store.Record) error {
			var a map[string]any
			if err := json.Unmarshal(r.Attributes, &a); err != nil {
				return err
			}
			if a["install_id"] != in.ID {
				return errorf(http.StatusConflict, sdk.CodeConflict, "session %s belongs to another install", ss.ID)
			}
			for k, v := range fields {
				a[k] = v
			}
			raw, err := json.Marshal(a)
			r.Attributes, r.UpdatedAt = raw, c.now()
			return err
		}, c.sessionUpdateAudit(cur, ss))
	}
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
