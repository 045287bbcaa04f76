package api

import (
	"encoding/json"
	"strings"

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
		"listSupportAccessRequests":                 s.listSupportRequests,
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
