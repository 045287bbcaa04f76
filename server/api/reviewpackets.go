package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"reeve.dev/reeve/internal/redact"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Review packets (spec 4.12 Review Packets; docs/insights.md): evidence
// links gathered for one decision, made directly or by converting an
// accepted insight. An owner or admin approves or rejects a packet once;
// its export is a signed bundle `reeve evidence verify` checks. The
// placeholder spellings under /api/review-packets twin these routes.

func reviewPacketRoutes() []Route {
	rp := "/api/resources/{workspace}/review-packets"
	const tag = "Review Packets"
	return []Route{
		typed("GET", rp, "listResourceReviewPackets", tag, 200, "ReviewPacketCollectionResponse").
			query(qStr("status", "pending, approved or rejected"), qInt("after", "packets after this seq"), qInt("limit", "at most this many (1 to 1000)")).
			summary("List the workspace's review packets"),
		typed("POST", rp, "createResourceReviewPacket", tag, 201, "ReviewPacketResponse").body("ReviewPacketCreateRequest", true).role("admin").errs(404).
			summary("Gather evidence links (sessions, runs, ledger periods, installs, audit entries of this workspace) into a pending packet; 404 when a linked record does not exist"),
		typed("GET", rp+"/{reviewPacket}", "getResourceReviewPacket", tag, 200, "ReviewPacketResponse").errs(404),
		typed("PATCH", rp+"/{reviewPacket}/decision", "decideResourceReviewPacket", tag, 200, "ReviewPacketResponse").body("ReviewPacketDecisionRequest", true).role("admin").errs(404, 409).
			summary("Approve or reject a pending packet, once (409 already_decided after); audited"),
		typed("GET", rp+"/{reviewPacket}/export", "exportResourceReviewPacket", tag, 200, "ReviewPacketExportResponse").errs(404).
			summary("The packet and its evidence as a signed bundle (kind review-packet), verifiable offline with `reeve evidence verify`"),
	}
}

var (
	packetStatuses = []string{sdk.PacketPending, sdk.PacketApproved, sdk.PacketRejected}
	evidenceKinds  = []string{"session", "run", "ledger_period", "install", "audit"}
	// Compiled on first use, not in the init every command pays for.
	periodKeyRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]{4}-[0-9]{2}(-[0-9]{2})?$`) })
	auditIDRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(ulidPattern) })
)

func packetOut(p store.ReviewPacket) sdk.ReviewPacket {
	detail := p.Detail
	if len(detail) == 0 {
		detail = json.RawMessage(`{}`)
	}
	return sdk.ReviewPacket{ID: p.ID, WorkspaceID: p.WorkspaceID, Title: p.Title, Summary: p.Summary, Status: p.Status, InsightID: p.InsightID,
		Evidence: evidenceOut(p.Evidence), Detail: detail, CreatedBy: p.CreatedBy, CreatedAt: p.CreatedAt, DecidedBy: p.DecidedBy,
		DecidedAt: p.DecidedAt, DecisionReason: p.DecisionReason, Seq: p.Seq, UpdatedAt: p.UpdatedAt}
}

func (s *Server) listReviewPackets(c *call) (int, any, error) {
	st, err := s.insightStore()
	if err != nil {
		return 0, nil, err
	}
	status := c.r.URL.Query().Get("status")
	if status != "" && !slices.Contains(packetStatuses, status) {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "query:status", Message: "status is one of " + strings.Join(packetStatuses, ", ")})
	}
	limit := int(min(queryInt(c, "limit", 100), 1000))
	list, err := st.ReviewPackets(c.ctx(), c.ws.ID, status, store.ListOptions{After: queryInt(c, "after", 0), Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	out := sdk.ReviewPacketCollectionResponse{Data: make([]sdk.ReviewPacket, 0, len(list))}
	for _, p := range list {
		out.Data = append(out.Data, packetOut(p))
	}
	out.Meta.Count = len(out.Data)
	if len(list) == limit {
		out.Meta.NextAfter = list[len(list)-1].Seq
	}
	return 200, out, nil
}

// checkEvidence makes sure each link names a record of this workspace.
func (s *Server) checkEvidence(c *call, links []sdk.EvidenceLink) ([]store.EvidenceLink, error) {
	out := make([]store.EvidenceLink, 0, len(links))
	seen := map[string]bool{}
	for i, l := range links {
		field := "/evidence/" + itoa(int64(i))
		var err error
		switch l.Kind {
		case "session":
			var rec store.Record
			if rec, err = s.st.Record(c.ctx(), c.ws.ID, "sessions", l.ID); err == nil {
				// Linking a session shows it to every reader of the
				// packet: only one the caller may view (its session
				// access, capped by the project's access.yaml).
				ok, verr := s.mayViewSession(c, rec)
				if verr != nil {
					return nil, verr
				}
				if !ok {
					return nil, forbidden("evidence %d: you have no access to session %q", i, l.ID)
				}
			}
		case "run":
			wf, ok := s.st.(store.Workflows)
			if !ok {
				return nil, invalid(sdk.ErrorDetail{Field: field + "/kind", Message: "this server keeps no workflow runs"})
			}
			_, err = wf.Run(c.ctx(), c.ws.ID, l.ID)
		case "install":
			_, err = s.st.Install(c.ctx(), c.ws.ID, l.ID)
		case "ledger_period":
			if !periodKeyRE().MatchString(l.ID) {
				return nil, invalid(sdk.ErrorDetail{Field: field + "/id", Message: "a ledger period is YYYY-MM or YYYY-MM-DD"})
			}
		case "audit":
			if !auditIDRE().MatchString(l.ID) {
				return nil, invalid(sdk.ErrorDetail{Field: field + "/id", Message: "an audit entry id is a ULID"})
			}
		default:
			return nil, invalid(sdk.ErrorDetail{Field: field + "/kind", Message: "kind is one of " + strings.Join(evidenceKinds, ", ")})
		}
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound("evidence %d: no %s %q in this workspace", i, l.Kind, l.ID)
		}
		if err != nil {
			return nil, err
		}
		if k := l.Kind + "/" + l.ID; !seen[k] {
			seen[k] = true
			out = append(out, store.EvidenceLink{Kind: l.Kind, ID: l.ID, Note: l.Note, At: l.At})
		}
	}
	return out, nil
}

func (s *Server) createReviewPacket(c *call) (int, any, error) {
	st, err := s.insightStore()
	if err != nil {
		return 0, nil, err
	}
	var req sdk.ReviewPacketCreateRequest
	if err := c.decode(&req); err != nil {
		return 0, nil, err
	}
	if strings.TrimSpace(req.Title) == "" {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/title", Message: "a title is required"})
	}
	ev, err := s.checkEvidence(c, req.Evidence)
	if err != nil {
		return 0, nil, err
	}
	now := c.now()
	p := store.ReviewPacket{WorkspaceID: c.ws.ID, Title: strings.TrimSpace(req.Title), Summary: req.Summary, Status: store.PacketPending,
		Evidence: ev, CreatedBy: c.p.Actor(), CreatedAt: now, UpdatedAt: now}
	if err := st.CreateReviewPacket(c.ctx(), &p, c.audit("review_packet.create", "", map[string]any{"evidence": len(ev)})); err != nil {
		return 0, nil, err
	}
	return 201, sdk.ReviewPacketResponse{Data: packetOut(p)}, nil
}

func (s *Server) reviewPacket(c *call) (store.ReviewPacket, error) {
	st, err := s.insightStore()
	if err != nil {
		return store.ReviewPacket{}, err
	}
	id := c.r.PathValue("reviewPacket")
	p, err := st.ReviewPacket(c.ctx(), c.ws.ID, id)
	if errors.Is(err, store.ErrNotFound) {
		return p, notFound("no review packet %q", id)
	}
	return p, err
}

func (s *Server) getReviewPacket(c *call) (int, any, error) {
	p, err := s.reviewPacket(c)
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.ReviewPacketResponse{Data: packetOut(p)}, nil
}

func (s *Server) decideReviewPacket(c *call) (int, any, error) {
	st, err := s.insightStore()
	if err != nil {
		return 0, nil, err
	}
	var req sdk.ReviewPacketDecisionRequest
	if err := c.decode(&req); err != nil {
		return 0, nil, err
	}
	to := map[string]string{"approve": sdk.PacketApproved, "reject": sdk.PacketRejected}[req.Decision]
	if to == "" {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/decision", Message: "decision is approve or reject"})
	}
	id, now := c.r.PathValue("reviewPacket"), c.now()
	p, err := st.DecideReviewPacket(c.ctx(), c.ws.ID, id, func(p *store.ReviewPacket) error {
		if p.Status != store.PacketPending {
			return errorf(http.StatusConflict, sdk.CodeAlreadyDecided, "the review packet was already %s by %s", p.Status, p.DecidedBy)
		}
		p.Status, p.DecidedBy, p.DecidedAt, p.UpdatedAt = to, c.p.Actor(), &now, now
		if req.Reason != nil {
			p.DecisionReason = *req.Reason
		}
		return nil
	}, c.audit("review_packet.decide", "review-packets/"+id, map[string]any{"decision": to}))
	if err != nil {
		return 0, nil, insightError(err, "review packet", id)
	}
	return 200, sdk.ReviewPacketResponse{Data: packetOut(p)}, nil
}

// evidenceSnapshot is what the export says of a linked record today: a
// redacted, small view, or nil when it is gone or has nothing to add.
func (s *Server) evidenceSnapshot(c *call, l store.EvidenceLink) any {
	switch l.Kind {
	case "session":
		if r, err := s.st.Record(c.ctx(), c.ws.ID, "sessions", l.ID); err == nil {
			// The session as the exporter may see it: a reader of the
			// packet without access to the session gets only its id.
			if ok, err := s.mayViewSession(c, r); err != nil || !ok {
				return map[string]any{"id": r.ID, "withheld": "you have no access to this session"}
			}
			return map[string]any{"id": r.ID, "created_at": r.CreatedAt, "updated_at": r.UpdatedAt, "attributes": json.RawMessage(redact.JSON(r.Attributes))}
		}
	case "run":
		if wf, ok := s.st.(store.Workflows); ok {
			if r, err := wf.Run(c.ctx(), c.ws.ID, l.ID); err == nil {
				return map[string]any{"id": r.ID, "status": r.Status, "agent": r.Agent, "attempt": r.Attempt, "created_at": r.CreatedAt, "finished_at": r.FinishedAt,
					"outcome": json.RawMessage(redact.JSON(r.Outcome))}
			}
		}
	case "install":
		if in, err := s.st.Install(c.ctx(), c.ws.ID, l.ID); err == nil {
			return map[string]any{"id": in.ID, "name": in.Name, "created_at": in.CreatedAt, "last_seen_at": in.LastSeenAt}
		}
	case "ledger_period":
		if p, err := s.st.LedgerPeriod(c.ctx(), c.ws.ID, l.ID); err == nil {
			return map[string]any{"period": p.Period, "total_usd": p.Total.String(), "entries": p.Entries}
		}
	}
	return nil
}

// exportReviewPacket signs the packet with its evidence: each link is an
// event of the bundle's hash chain (seq 1, 2, ...), its payload the link
// and a redacted snapshot of the record; the decision is the bundle's
// decision.
func (s *Server) exportReviewPacket(c *call) (int, any, error) {
	if s.opts.Evidence == nil {
		return 0, nil, errorf(http.StatusServiceUnavailable, sdk.CodeInternal, "this server has no evidence signing key")
	}
	p, err := s.reviewPacket(c)
	if err != nil {
		return 0, nil, err
	}
	packet, err := json.Marshal(packetOut(p))
	if err != nil {
		return 0, nil, err
	}
	b := sdk.EvidenceBundle{Format: sdk.EvidenceFormat, Kind: "review-packet", WorkspaceID: c.ws.ID, IssuedAt: c.now(), ReviewPacketID: p.ID,
		Packet: packet, Events: []sdk.EvidenceEvent{}, Decisions: []json.RawMessage{}}
	prev := ""
	for i, l := range p.Evidence {
		payload, err := json.Marshal(map[string]any{"link": l, "record": s.evidenceSnapshot(c, l)})
		if err != nil {
			return 0, nil, err
		}
		at := p.CreatedAt
		if l.At != nil {
			at = *l.At
		}
		e := sdk.EvidenceEvent{Seq: int64(i + 1), Kind: l.Kind, At: at, Payload: payload}
		e.Digest = sdk.DigestOf(payload)
		e.Chain = sdk.ChainLink(prev, e.Seq, e.Digest)
		prev = e.Chain
		b.Events = append(b.Events, e)
	}
	b.ChainHead = prev
	if p.Status != store.PacketPending {
		d, _ := json.Marshal(map[string]any{"status": p.Status, "decided_by": p.DecidedBy, "decided_at": p.DecidedAt, "reason": p.DecisionReason})
		b.Decisions = append(b.Decisions, d)
	}
	payload, err := json.Marshal(b)
	if err != nil {
		return 0, nil, err
	}
	signed, err := s.opts.Evidence.Sign(c.ctx(), payload)
	if err != nil {
		return 0, nil, err
	}
	c.w.Header().Set("Content-Disposition", `attachment; filename="review-packet-`+p.ID+`.json"`)
	return 200, sdk.EvidenceEnvelope{Data: signed}, nil
}
