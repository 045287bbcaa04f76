package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Support access (spec 3.4, 4.8; docs/support.md). A support operator is
// a server-level role (store.SupportOperators), not a membership: it lets
// a user ask a workspace for access, and nothing more. The workspace's
// owners and admins approve, deny or revoke each request; an approved
// request grants exactly its scopes until its expiry, checked on every
// call against the server clock, so access ends by itself.

const supportCollection = "support/access-requests"

// Support scopes and what each opens.
const (
	scopeOperational = "operational_status" // posture
	scopeBilling     = "billing_read"       // posture's billing fields
	scopeRunRead     = "run_read"           // session support-debug
)

// Support request states. "expired" is never stored: an approved request
// whose expiry has passed reads as expired.
const (
	supportPending  = "pending"
	supportApproved = "approved"
	supportDenied   = "denied"
	supportRevoked  = "revoked"
	supportExpired  = "expired"
)

const (
	supportDefaultMinutes = 60
	supportMaxMinutes     = 7 * 24 * 60
	supportMaxReason      = 2000
)

// supportOps are the operations a support operator who is not a member
// of the workspace may reach; every other route keeps refusing them.
var supportOps = map[string]bool{
	"getResourceSupportWorkspacePosture": true,
	"getSupportWorkspacePosture":         true,
	"listSupportAccessRequests":          true,
	"createSupportAccessRequest":         true,
	"getAgentSessionSupportDebug":        true,
}

// supportGrant is what the caller's approved, unexpired requests in the
// workspace open, set on the call when an operator is admitted by a grant.
type supportGrant struct {
	scopes map[string]bool
}

func (g *supportGrant) has(scope string) bool { return g != nil && g.scopes[scope] }

// supportRequest is the stored shape of a request (record attributes).
type supportRequest struct {
	Reason           string            `json:"reason"`
	RequestedScopes  []string          `json:"requested_scopes"`
	ExpiresInMinutes int64             `json:"expires_in_minutes"`
	State            string            `json:"state"`
	Requester        string            `json:"requester"`
	RequesterUserID  int64             `json:"requester_user_id"`
	ExpiresAt        *time.Time        `json:"expires_at,omitempty"`
	DecidedBy        string            `json:"decided_by,omitempty"`
	DecidedAt        *time.Time        `json:"decided_at,omitempty"`
	DecisionReason   any               `json:"decision_reason,omitempty"`
	Decisions        []supportDecision `json:"decisions"`
}

// supportDecision is one entry of a request's history, appended by each
// approve, deny and revoke and never rewritten.
type supportDecision struct {
	Decision  string     `json:"decision"`
	By        string     `json:"by"`
	At        time.Time  `json:"at"`
	Reason    any        `json:"reason"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

func (r supportRequest) effectiveState(now time.Time) string {
	if r.State == supportApproved && r.ExpiresAt != nil && !now.Before(*r.ExpiresAt) {
		return supportExpired
	}
	return r.State
}

func (s *Server) supportStore() (store.SupportOperators, bool) {
	o, ok := s.st.(store.SupportOperators)
	return o, ok
}

// isOperator reports whether the calling user holds the support role.
func (s *Server) isOperator(c *call) (bool, error) {
	if c.p.Kind != auth.KindUser {
		return false, nil
	}
	o, ok := s.supportStore()
	if !ok {
		return false, nil
	}
	return o.IsSupportOperator(c.ctx(), c.p.UserID)
}

// admitOperator is scope's fallback for a user who is not a member: on a
// support operation a support operator passes (with no role; supportGate
// decides), anyone else gets the membership error.
func (s *Server) admitOperator(c *call, memberErr error) error {
	if !supportOps[c.route.OperationID] {
		return memberErr
	}
	ok, err := s.isOperator(c)
	if err != nil {
		return err
	}
	if !ok {
		return memberErr
	}
	return nil
}

// supportGate authorizes the support operations for users. handled means
// it decided and the route's minimum role does not apply; otherwise the
// ordinary role checks follow.
func (s *Server) supportGate(c *call) (handled bool, err error) {
	op := c.route.OperationID
	if !supportOps[op] || c.p.Kind != auth.KindUser {
		return false, nil
	}
	admin := c.role != "" && auth.RoleRank(c.role) >= auth.RoleRank(sdk.RoleAdmin)
	switch op {
	case "createSupportAccessRequest":
		ok, err := s.isOperator(c)
		if err != nil {
			return false, err
		}
		if !ok {
			return false, forbidden("only a support operator can request support access")
		}
		return true, nil
	case "listSupportAccessRequests":
		if admin {
			return false, nil
		}
		ok, err := s.isOperator(c)
		if err != nil {
			return false, err
		}
		if !ok {
			return false, forbidden("this operation needs the admin role or the support operator role")
		}
		return true, nil // the handler lists the operator's own requests only
	case "getAgentSessionSupportDebug":
		if c.role != "" {
			return false, nil // members: the session's own access rules
		}
		return true, s.requireGrant(c, scopeRunRead)
	default: // posture
		if admin {
			return false, nil
		}
		return true, s.requireGrant(c, scopeOperational)
	}
}

// requireGrant admits the caller if their approved, unexpired requests in
// this workspace include scope; it keeps the union of their scopes on the
// call for the handler.
func (s *Server) requireGrant(c *call, scope string) error {
	ok, err := s.isOperator(c)
	if err != nil {
		return err
	}
	if !ok {
		return forbidden("this operation needs the admin role or approved support access")
	}
	reqs, err := s.st.Records(c.ctx(), c.ws.ID, supportCollection, store.ListOptions{Limit: 1000})
	if err != nil {
		return err
	}
	g := &supportGrant{scopes: map[string]bool{}}
	now := c.now()
	for _, r := range reqs {
		var a supportRequest
		if json.Unmarshal(r.Attributes, &a) != nil || a.RequesterUserID != c.p.UserID || a.effectiveState(now) != supportApproved {
			continue
		}
		for _, sc := range a.RequestedScopes {
			g.scopes[sc] = true
		}
	}
	if !g.has(scope) {
		return forbidden("no approved, unexpired support access of yours in this workspace includes the %s scope", scope)
	}
	c.support = g
	return nil
}

// posture is the redacted workspace posture: counts and modes, no ids of
// people, no secrets. An operator sees the billing fields only with the
// billing_read scope.
func (s *Server) posture(c *call) (int, any, error) {
	members, err := s.st.Members(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	installs, err := s.st.Installs(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	reqs, err := s.st.Records(c.ctx(), c.ws.ID, supportCollection, store.ListOptions{Limit: 1000})
	if err != nil {
		return 0, nil, err
	}
	approved := 0
	now := c.now()
	for _, r := range reqs {
		var a supportRequest
		if json.Unmarshal(r.Attributes, &a) == nil && a.effectiveState(now) == supportApproved {
			approved++
		}
	}
	out := map[string]any{
		"workspace_id": c.ws.ID, "policy_mode": c.ws.PolicyMode, "member_count": len(members), "install_count": len(installs),
		"approved_support_access": approved, "audit_retention_days": c.ws.AuditRetentionDays,
	}
	if c.support == nil || c.support.has(scopeBilling) {
		acct, err := s.st.BillingAccount(c.ctx(), c.ws.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return 0, nil, err
		}
		out["billing_customer_reconciled"], out["billing_status"] = acct.CustomerRef != "", acct.Status
	}
	if c.support != nil {
		out["support_scopes"] = sortedKeys(c.support.scopes)
	}
	return 200, map[string]any{"data": out}, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (s *Server) createSupportRequest(c *call) (int, any, error) {
	var bad []sdk.ErrorDetail
	reason, _ := c.body["reason"].(string)
	reason = strings.TrimSpace(reason)
	if reason == "" || len(reason) > supportMaxReason {
		bad = append(bad, sdk.ErrorDetail{Field: "reason", Message: "must be 1 to 2000 characters"})
	}
	var scopes []string
	raw, _ := c.body["requested_scopes"].([]any)
	for _, v := range raw {
		sc, _ := v.(string)
		if !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	if len(scopes) == 0 {
		bad = append(bad, sdk.ErrorDetail{Field: "requested_scopes", Message: "must name at least one scope"})
	}
	mins, err := expiryMinutes(c.body["expires_in_minutes"], supportDefaultMinutes)
	if err != nil {
		bad = append(bad, *err)
	}
	if len(bad) > 0 {
		return 0, nil, invalid(bad...)
	}
	a := supportRequest{Reason: reason, RequestedScopes: scopes, ExpiresInMinutes: mins, State: supportPending,
		Requester: c.p.Actor(), RequesterUserID: c.p.UserID, Decisions: []supportDecision{}}
	m, err2 := toMap(a)
	if err2 != nil {
		return 0, nil, err2
	}
	rec, err2 := c.createRecord(supportCollection, "", m)
	if err2 != nil {
		return 0, nil, err2
	}
	return 201, sdk.RecordResponse{Data: withEffectiveState(rec, c.now())}, nil
}

// expiryMinutes reads an optional expires_in_minutes: 1 to 7 days.
func expiryMinutes(v any, def int64) (int64, *sdk.ErrorDetail) {
	if v == nil {
		return def, nil
	}
	n, ok := numberOf(v)
	if !ok || n < 1 || n > supportMaxMinutes {
		return 0, &sdk.ErrorDetail{Field: "expires_in_minutes", Message: "must be a whole number of minutes from 1 to 10080 (7 days)"}
	}
	return n, nil
}

func toMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// withEffectiveState shows an approved request past its expiry as expired.
func withEffectiveState(r sdk.Record, now time.Time) sdk.Record {
	b, err := json.Marshal(r.Attributes)
	if err != nil {
		return r
	}
	var a supportRequest
	if json.Unmarshal(b, &a) != nil {
		return r
	}
	if st := a.effectiveState(now); st != a.State {
		attrs := map[string]any{}
		for k, v := range r.Attributes {
			attrs[k] = v
		}
		attrs["state"] = st
		r.Attributes = attrs
	}
	return r
}

// listSupportRequests: admins see every request of the workspace, an
// operator only their own.
func (s *Server) listSupportRequests(c *call) (int, any, error) {
	recs, err := s.st.Records(c.ctx(), c.ws.ID, supportCollection, store.ListOptions{Limit: 1000})
	if err != nil {
		return 0, nil, err
	}
	admin := c.role != "" && auth.RoleRank(c.role) >= auth.RoleRank(sdk.RoleAdmin)
	out := sdk.RecordCollectionResponse{Data: []sdk.Record{}}
	now := c.now()
	for _, r := range recs {
		var a supportRequest
		if json.Unmarshal(r.Attributes, &a) != nil || (!admin && a.RequesterUserID != c.p.UserID) {
			continue
		}
		rec, err := toSDK(r)
		if err != nil {
			return 0, nil, err
		}
		out.Data = append(out.Data, withEffectiveState(rec, now))
	}
	return 200, out, nil
}

// decideSupport moves a support access request from one state to the
// next (spec 3.4) and appends the decision to its history; any other
// current state (an expired approval included) is 409.
func (s *Server) decideSupport(from, to string) handlerFunc {
	return func(c *call) (int, any, error) {
		id := c.r.PathValue("supportAccessRequest")
		rec, err := s.st.UpdateRecordIf(c.ctx(), c.ws.ID, supportCollection, id, func(r *store.Record) error {
			var a supportRequest
			if err := json.Unmarshal(r.Attributes, &a); err != nil {
				return err
			}
			now := c.now()
			if st := a.effectiveState(now); st != from {
				return errorf(http.StatusConflict, sdk.CodeConflict, "the support access request is %s; only a %s request can become %s", st, from, to)
			}
			d := supportDecision{Decision: to, By: c.p.Actor(), At: now, Reason: c.body["decision_reason"]}
			if to == supportApproved {
				mins, e := expiryMinutes(c.body["expires_in_minutes"], a.ExpiresInMinutes)
				if e != nil {
					return invalid(*e)
				}
				if mins == 0 {
					mins = supportDefaultMinutes
				}
				exp := now.Add(time.Duration(mins) * time.Minute)
				a.ExpiresAt, d.ExpiresAt = &exp, &exp
			}
			a.State, a.DecidedBy, a.DecidedAt, a.DecisionReason = to, d.By, &now, d.Reason
			a.Decisions = append(a.Decisions, d)
			b, err := json.Marshal(a)
			r.Attributes, r.UpdatedAt = b, now
			return err
		}, c.audit("support_access."+to, supportCollection+"/"+id, c.body))
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, notFound("no support access request %q", id)
		}
		if err != nil {
			return 0, nil, err
		}
		out, err := toSDK(rec)
		return 200, sdk.RecordResponse{Data: withEffectiveState(out, c.now())}, err
	}
}
