package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// typedHandlers are the named operations whose behaviour goes beyond the
// record engine: state transitions with 404/409, idempotency, admission.
func (s *Server) typedHandlers() map[string]handlerFunc {
	return map[string]handlerFunc{
		"listAgentSessions":                         s.listAgentSessions,
		"createAgentSession":                        s.createAgentSession,
		"exportAgentSessionReceipt":                 s.signedExport("receipt", false),
		"exportAgentSessionTrace":                   s.signedExport("trace", true),
		"exportAgentSessionComputeEvidence":         s.computeEvidence,
		"getAgentSessionApprovalAudit":              s.sessionView("approval-audit"),
		"exportAgentSessionGuardrailEvidence":       s.sessionView("guardrail-evidence"),
		"getAgentSessionGovernance":                 s.sessionView("governance"),
		"exportAgentSessionSpend":                   s.sessionView("spend"),
		"exportAgentSessionAdapterReceipts":         s.sessionView("adapter-receipts"),
		"exportAgentSessionMcpTools":                s.sessionView("mcp-tools"),
		"exportAgentSessionReadiness":               s.sessionView("readiness"),
		"getAgentSessionSupportDebug":               s.supportDebug,
		"postApiShareGroupsShareGroupMembers":       s.addGroupMember,
		"deleteApiShareGroupsShareGroupMembersUser": s.removeGroupMember,
		"shareAgentSessionAccess":                   s.shareSessionAccess,
		"revokeAgentSessionAccess":                  s.revokeSessionAccess,
		"requestAgentSessionAccess":                 s.requestSessionAccess,
		"decideAgentSessionAccessRequest":           s.decideSessionAccess,
		"listAgentSessionEvents":                    s.sessionEvents,
		"showAgentSessionCollaboration":             s.sessionEvents,
		"getResourceSupportWorkspacePosture":        s.posture,
		"getSupportWorkspacePosture":                s.posture,
		"createSupportAccessRequest":                s.createSupportRequest,
		"approveSupportAccessRequest":               s.decideSupport("pending", "approved"),
		"denySupportAccessRequest":                  s.decideSupport("pending", "denied"),
		"revokeSupportAccessRequest":                s.decideSupport("approved", "revoked"),
	}
}

// session loads the {agentSession} of the path: 404 when unknown.
func (c *call) session() (sdk.Record, error) {
	return c.getRecord("sessions", c.r.PathValue("agentSession"))
}

func attrs(r sdk.Record, key string) string {
	v, _ := r.Attributes[key].(string)
	return v
}

// sessionEvents serves the event delta feed and the collaboration view:
// collaboration events in sequence order after after_sequence.
func (s *Server) sessionEvents(c *call) (int, any, error) {
	sess, err := c.session()
	if err != nil {
		return 0, nil, err
	}
	if attrs(sess, "source") == "daemon" && strings.HasSuffix(c.route.Path, "/events") {
		return s.daemonEvents(c, sess.ID)
	}
	limit := int(queryInt(c, "limit", 100))
	recs, err := s.st.Records(c.ctx(), c.ws.ID, "sessions/"+sess.ID+"/collaboration-events", store.ListOptions{After: queryInt(c, "after_sequence", 0), Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	return 200, c.collection(recs, limit), nil
}

func queryIntValue(v any, def int64) int64 {
	if n, ok := numberOf(v); ok && n > 0 {
		return n
	}
	return def
}

// posture is the redacted workspace posture: counts and modes, no ids of
// people, no secrets.
func (s *Server) posture(c *call) (int, any, error) {
	members, err := s.st.Members(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	installs, err := s.st.Installs(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	reqs, err := s.st.Records(c.ctx(), c.ws.ID, "support/access-requests", store.ListOptions{Limit: 500})
	if err != nil {
		return 0, nil, err
	}
	approved := 0
	for _, r := range reqs {
		if strings.Contains(string(r.Attributes), `"state":"approved"`) {
			approved++
		}
	}
	acct, err := s.st.BillingAccount(c.ctx(), c.ws.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return 0, nil, err
	}
	return 200, map[string]any{"data": map[string]any{
		"workspace_id": c.ws.ID, "policy_mode": c.ws.PolicyMode, "member_count": len(members), "install_count": len(installs),
		"approved_support_access": approved, "billing_customer_reconciled": acct.CustomerRef != "", "billing_status": acct.Status, "audit_retention_days": c.ws.AuditRetentionDays,
	}}, nil
}

func (s *Server) createSupportRequest(c *call) (int, any, error) {
	a := map[string]any{"reason": c.body["reason"], "requested_scopes": c.body["requested_scopes"], "expires_in_minutes": c.body["expires_in_minutes"], "state": "pending", "requester": c.p.Actor()}
	rec, err := c.createRecord("support/access-requests", "", a)
	if err != nil {
		return 0, nil, err
	}
	return 201, sdk.RecordResponse{Data: rec}, nil
}

// decideSupport moves a support access request from one state to the
// next (spec 3.4); any other current state is 409.
func (s *Server) decideSupport(from, to string) handlerFunc {
	return func(c *call) (int, any, error) {
		id := c.r.PathValue("supportAccessRequest")
		rec, err := s.st.UpdateRecordIf(c.ctx(), c.ws.ID, "support/access-requests", id, func(r *store.Record) error {
			var a map[string]any
			if err := json.Unmarshal(r.Attributes, &a); err != nil {
				return err
			}
			if a["state"] != from {
				return errorf(http.StatusConflict, sdk.CodeConflict, "the support access request is %v; only a %s request can become %s", a["state"], from, to)
			}
			a["state"], a["decided_by"], a["decided_at"], a["decision_reason"] = to, c.p.Actor(), c.now(), c.body["decision_reason"]
			if to == "approved" {
				mins := queryIntValue(c.body["expires_in_minutes"], queryIntValue(a["expires_in_minutes"], 60))
				a["expires_at"] = c.now().Add(time.Duration(mins) * time.Minute)
			}
			b, err := json.Marshal(a)
			r.Attributes, r.UpdatedAt = b, c.now()
			return err
		}, c.audit("support_access."+to, "support/access-requests/"+id, c.body))
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, notFound("no support access request %q", id)
		}
		if err != nil {
			return 0, nil, err
		}
		out, err := toSDK(rec)
		return 200, sdk.RecordResponse{Data: out}, err
	}
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	}
	b, _ := json.Marshal(v)
	return string(b)
}
