package api

import (
	"encoding/json"
	"net/http"
	"sort"

	"reeve.dev/reeve/internal/redact"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Session evidence: signed bundles (receipt-export: digests only;
// trace-export: redacted payloads) and redacted views (compute-evidence,
// support-debug). The events of a session are its synced daemon events
// and its collaboration events, in sequence order.

// sessionEventCollections are where a session's events live.
func sessionEventCollections(sid string) []string {
	return []string{"sessions/" + sid + "/events", "sessions/" + sid + "/collaboration-events"}
}

// maxEvidenceEvents bounds one bundle.
const maxEvidenceEvents = 50000

// sessionEvents reads every event of a session in seq order. Synced
// events carry the daemon's own seq; collaboration events the record's.
func (s *Server) allSessionEvents(c *call, sid string) ([]sdk.EvidenceEvent, error) {
	var out []sdk.EvidenceEvent
	for _, coll := range sessionEventCollections(sid) {
		var after int64
		for {
			recs, err := s.st.Records(c.ctx(), c.ws.ID, coll, store.ListOptions{After: after, Limit: 1000})
			if err != nil {
				return nil, err
			}
			for _, r := range recs {
				var a map[string]any
				_ = json.Unmarshal(r.Attributes, &a)
				seq := r.Seq
				if n, ok := numberOf(a["seq"]); ok && coll == sessionEventCollections(sid)[0] {
					seq = n
				}
				kind, _ := a["kind"].(string)
				if kind == "" {
					kind, _ = a["event_kind"].(string)
				}
				out = append(out, sdk.EvidenceEvent{Seq: seq, Kind: kind, At: r.CreatedAt, Payload: redact.JSON(r.Attributes)})
				if len(out) > maxEvidenceEvents {
					return nil, errorf(http.StatusUnprocessableEntity, sdk.CodeValidation, "the session has more than %d events; export is limited to that many", maxEvidenceEvents)
				}
			}
			if len(recs) < 1000 {
				break
			}
			after = recs[len(recs)-1].Seq
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

// sessionDecisions are the access decisions and grants of a session.
func (s *Server) sessionDecisions(c *call, sid string) ([]json.RawMessage, error) {
	out := []json.RawMessage{}
	recs, err := s.st.Records(c.ctx(), c.ws.ID, "sessions/"+sid+"/access-requests", store.ListOptions{Limit: 1000})
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		out = append(out, redact.JSON(r.Attributes))
	}
	return out, nil
}

func (s *Server) bundle(c *call, kind string, withPayloads bool) (sdk.EvidenceBundle, error) {
	sid := c.sess.ID
	evs, err := s.allSessionEvents(c, sid)
	if err != nil {
		return sdk.EvidenceBundle{}, err
	}
	prev := ""
	for i := range evs {
		evs[i].Digest = sdk.DigestOf(evs[i].Payload)
		evs[i].Chain = sdk.ChainLink(prev, evs[i].Seq, evs[i].Digest)
		prev = evs[i].Chain
		if !withPayloads {
			evs[i].Payload = nil
		}
	}
	if evs == nil {
		evs = []sdk.EvidenceEvent{}
	}
	dec, err := s.sessionDecisions(c, sid)
	if err != nil {
		return sdk.EvidenceBundle{}, err
	}
	sess, err := json.Marshal(map[string]any{"id": sid, "seq": c.sess.Seq, "created_by": c.sess.CreatedBy, "created_at": c.sess.CreatedAt,
		"updated_at": c.sess.UpdatedAt, "attributes": json.RawMessage(redact.JSON(c.sess.Attributes))})
	if err != nil {
		return sdk.EvidenceBundle{}, err
	}
	return sdk.EvidenceBundle{Format: sdk.EvidenceFormat, Kind: kind, WorkspaceID: c.ws.ID, SessionID: sid, IssuedAt: c.now(),
		Session: sess, Events: evs, Decisions: dec, ChainHead: prev}, nil
}

func (s *Server) signedExport(kind string, withPayloads bool) handlerFunc {
	return func(c *call) (int, any, error) {
		if s.opts.Evidence == nil {
			return 0, nil, errorf(http.StatusServiceUnavailable, sdk.CodeInternal, "this server has no evidence signing key")
		}
		b, err := s.bundle(c, kind, withPayloads)
		if err != nil {
			return 0, nil, err
		}
		payload, err := json.Marshal(b)
		if err != nil {
			return 0, nil, err
		}
		signed, err := s.opts.Evidence.Sign(c.ctx(), payload)
		if err != nil {
			return 0, nil, err
		}
		c.w.Header().Set("Content-Disposition", `attachment; filename="`+kind+`-`+c.sess.ID+`.json"`)
		return 200, sdk.EvidenceEnvelope{Data: signed}, nil
	}
}

// computeEvidence is what a session ran and spent, redacted: its record,
// the per-event kinds and digests, and the redacted events.
func (s *Server) computeEvidence(c *call) (int, any, error) {
	b, err := s.bundle(c, "compute", true)
	if err != nil {
		return 0, nil, err
	}
	return 200, map[string]any{"data": map[string]any{"session": b.Session, "events": b.Events, "chain_head": b.ChainHead, "redacted": true}}, nil
}

// supportDebug is what support may see of a session: its redacted record,
// its last events (redacted) and its access configuration without people.
func (s *Server) supportDebug(c *call) (int, any, error) {
	b, err := s.bundle(c, "support", true)
	if err != nil {
		return 0, nil, err
	}
	evs := b.Events
	if len(evs) > 200 {
		evs = evs[len(evs)-200:]
	}
	a := accessOf(c.sess.Attributes)
	return 200, map[string]any{"data": map[string]any{"session": b.Session, "recent_events": evs, "event_count": len(b.Events),
		"visibility_scope": a.Visibility, "acl_entries": len(a.ACL), "redacted": true}}, nil
}

func (s *Server) jwks(c *call) (int, any, error) {
	if s.opts.Evidence == nil {
		return 200, sdk.JWKS{Keys: []sdk.JWK{}}, nil
	}
	k, err := s.opts.Evidence.JWKS(c.ctx())
	if err != nil {
		return 0, nil, err
	}
	c.w.Header().Set("Cache-Control", "public, max-age=300")
	return 200, k, nil
}
