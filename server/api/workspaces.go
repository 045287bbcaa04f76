package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"time"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

func (s *Server) workspaceHandlers() map[string]handlerFunc {
	return map[string]handlerFunc{
		"listWorkspaces":                                    s.listWorkspaces,
		"createWorkspace":                                   s.createWorkspace,
		"getWorkspace":                                      s.getWorkspace,
		"updateWorkspace":                                   s.updateWorkspace(true),
		"putApiWorkspacesWorkspace":                         s.updateWorkspace(false),
		"deleteApiWorkspacesWorkspace":                      s.deleteWorkspace,
		"getApiWorkspacesWorkspaceAudit":                    s.listAudit,
		"getApiWorkspacesWorkspaceAuditExport":              s.exportAudit,
		"patchApiWorkspacesWorkspaceMembersMember":          s.updateMember,
		"deleteApiWorkspacesWorkspaceMembersMember":         s.removeMember,
		"postApiWorkspacesWorkspaceMembersTransferOwner":    s.transferOwner,
		"listWorkspaceMembers":                              s.listMembers,
		"getApiWorkspacesWorkspaceInvitations":              s.listInvitations,
		"postApiWorkspacesWorkspaceInvitations":             s.createInvitation,
		"deleteApiWorkspacesWorkspaceInvitationsInvitation": s.revokeInvitation,
		"acceptWorkspaceInvitation":                         s.acceptInvitation,
	}
}

func workspaceJSON(w store.Workspace, role string, members []store.Member) sdk.Workspace {
	out := sdk.Workspace{ID: w.ID, Name: w.Name, Description: w.Description, Labels: w.Labels, PolicyMode: w.PolicyMode,
		NotificationPolicy: w.NotificationPolicy, BudgetPolicy: w.BudgetPolicy, CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt, Role: role}
	if w.AuditRetentionDays != nil {
		d := int(*w.AuditRetentionDays)
		out.AuditRetentionDays = &d
	}
	for _, m := range members {
		out.Members = append(out.Members, sdk.Member{UserID: m.UserID, Email: m.Email, Role: m.Role})
	}
	return out
}

func (s *Server) listWorkspaces(c *call) (int, any, error) {
	if c.p.Kind != auth.KindUser {
		return 0, nil, forbidden("only users list workspaces")
	}
	ms, err := s.st.Memberships(c.ctx(), c.p.UserID)
	if err != nil {
		return 0, nil, err
	}
	out := sdk.WorkspaceCollectionResponse{Data: []sdk.Workspace{}}
	for _, m := range ms {
		out.Data = append(out.Data, workspaceJSON(m.Workspace, m.Role, nil))
	}
	out.Meta.Count = len(out.Data)
	return 200, out, nil
}

// CreateWorkspace creates a workspace owned by userID; shared with the
// operator command that bootstraps the first owner.
func CreateWorkspace(ctx context.Context, st store.Store, userID int64, name string, description *string, now time.Time) (store.Workspace, error) {
	ws := store.Workspace{ID: newRecordID(), Name: name, Description: description, PolicyMode: sdk.PolicyOpenAccess, CreatedAt: now.UTC(), UpdatedAt: now.UTC()}
	if err := st.CreateWorkspace(ctx, ws, userID); err != nil {
		return store.Workspace{}, err
	}
	return ws, nil
}

func (s *Server) createWorkspace(c *call) (int, any, error) {
	name, _ := c.body["name"].(string)
	var desc *string
	if d, ok := c.body["description"].(string); ok {
		desc = &d
	}
	ws, err := CreateWorkspace(c.ctx(), s.st, c.p.UserID, name, desc, c.now())
	if err != nil {
		return 0, nil, err
	}
	return 201, sdk.WorkspaceResponse{Data: workspaceJSON(ws, sdk.RoleOwner, nil)}, nil
}

func (s *Server) getWorkspace(c *call) (int, any, error) {
	members, err := s.st.Members(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.WorkspaceResponse{Data: workspaceJSON(*c.ws, c.role, members)}, nil
}

// updateWorkspace applies a WorkspaceUpdateRequest. PATCH changes only
// the fields present; PUT replaces the settings (absent nullable fields are
// cleared, the name stays when absent).
func (s *Server) updateWorkspace(patch bool) handlerFunc {
	return func(c *call) (int, any, error) {
		ws := *c.ws
		if !patch {
			ws.Description, ws.Labels, ws.NotificationPolicy, ws.BudgetPolicy, ws.AuditRetentionDays = nil, nil, nil, nil, nil
			ws.PolicyMode = sdk.PolicyOpenAccess
		}
		raw := func(v any) json.RawMessage {
			if v == nil {
				return nil
			}
			b, _ := json.Marshal(v)
			return b
		}
		for k, v := range c.body {
			switch k {
			case "name":
				ws.Name = v.(string)
			case "description":
				if v == nil {
					ws.Description = nil
				} else {
					d := v.(string)
					ws.Description = &d
				}
			case "labels":
				ws.Labels = raw(v)
			case "policy_mode":
				ws.PolicyMode = v.(string)
			case "notification_policy":
				ws.NotificationPolicy = raw(v)
			case "budget_policy":
				// A cap that does not parse is refused, never stored as
				// no cap (store.ParseBudgetPolicy names the field).
				ws.BudgetPolicy = raw(v)
				if _, err := store.ParseBudgetPolicy(ws.BudgetPolicy); err != nil {
					var pe *store.PolicyError
					if errors.As(err, &pe) {
						return 0, nil, invalid(sdk.ErrorDetail{Field: "/budget_policy" + pe.Field, Message: pe.Message})
					}
					return 0, nil, invalid(sdk.ErrorDetail{Field: "/budget_policy", Message: err.Error()})
				}
			case "audit_retention_days":
				// null clears; any other value is a whole number of days
				// or refused — never silently erased.
				if v == nil {
					ws.AuditRetentionDays = nil
				} else if n, ok := numberOf(v); ok && n >= 1 && n <= maxRetentionDays {
					ws.AuditRetentionDays = &n
				} else {
					return 0, nil, invalid(sdk.ErrorDetail{Field: "/audit_retention_days", Message: fmt.Sprintf("want a whole number of days from 1 to %d, or null", maxRetentionDays)})
				}
			}
		}
		ws.UpdatedAt = c.now()
		if err := s.st.UpdateWorkspace(c.ctx(), ws, c.audit("workspace.update", "workspaces/"+ws.ID, c.body)); err != nil {
			return 0, nil, err
		}
		s.forgetWorkspace(ws.ID)
		if ws.AuditRetentionDays != nil {
			// A shorter retention applies now, not at the next sweep.
			if _, err := s.PruneAudit(c.ctx()); err != nil {
				s.log.Warn("prune audit", "err", err)
			}
		}
		return 200, sdk.WorkspaceResponse{Data: workspaceJSON(ws, c.role, nil)}, nil
	}
}

func (s *Server) deleteWorkspace(c *call) (int, any, error) {
	if err := s.st.DeleteWorkspace(c.ctx(), c.ws.ID, c.now()); err != nil {
		return 0, nil, err
	}
	wid := c.ws.ID
	s.forgetWorkspace(wid)
	s.creds.drop(func(_ string, p auth.Principal) bool { return p.Workspace == wid })
	return 204, nil, nil
}

func auditJSON(es []store.AuditEntry) []map[string]any {
	out := make([]map[string]any, 0, len(es))
	for _, e := range es {
		m := map[string]any{"seq": e.Seq, "id": e.ID, "actor": e.Actor, "action": e.Action, "target": e.Target, "created_at": e.CreatedAt}
		if len(e.Detail) > 0 {
			m["detail"] = e.Detail
		}
		out = append(out, m)
	}
	return out
}

func (s *Server) listAudit(c *call) (int, any, error) {
	limit := int(queryInt(c, "limit", 100))
	es, err := s.st.Audit(c.ctx(), c.ws.ID, store.ListOptions{After: queryInt(c, "after", 0), Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	meta := sdk.ListMeta{Count: len(es)}
	if len(es) == limit && limit > 0 {
		meta.NextAfter = es[len(es)-1].Seq
	}
	return 200, map[string]any{"data": auditJSON(es), "meta": meta}, nil
}

// exportAudit returns the whole log (up to 10k entries per call, paged by
// ?after=) as one document for download.
func (s *Server) exportAudit(c *call) (int, any, error) {
	es, err := s.st.Audit(c.ctx(), c.ws.ID, store.ListOptions{After: queryInt(c, "after", 0), Limit: 1000})
	if err != nil {
		return 0, nil, err
	}
	c.w.Header().Set("Content-Disposition", `attachment; filename="audit-`+c.ws.ID+`.json"`)
	return 200, map[string]any{"data": auditJSON(es), "meta": sdk.ListMeta{Count: len(es)}}, nil
}

func (s *Server) memberParam(c *call) (int64, error) {
	id, err := strconv.ParseInt(c.r.PathValue("member"), 10, 64)
	if err != nil {
		return 0, notFound("no member %q", c.r.PathValue("member"))
	}
	return id, nil
}

func (s *Server) forgetRoles(workspaceID string) {
	s.creds.drop(func(k string, p auth.Principal) bool { return p.Workspace == workspaceID && p.Kind == auth.KindNone })
}

func memberErr(err error, id int64) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound("no member %d", id)
	case errors.Is(err, store.ErrConflict):
		return errorf(http.StatusConflict, sdk.CodeConflict, "%v", err)
	}
	return err
}

func (s *Server) updateMember(c *call) (int, any, error) {
	id, err := s.memberParam(c)
	if err != nil {
		return 0, nil, err
	}
	role := c.body["role"].(string)
	// Only an owner may create or unmake owners.
	if c.role != sdk.RoleOwner {
		cur, err := s.st.Role(c.ctx(), c.ws.ID, id)
		if err != nil {
			return 0, nil, memberErr(err, id)
		}
		if role == sdk.RoleOwner || cur == sdk.RoleOwner {
			return 0, nil, forbidden("only an owner changes ownership")
		}
	}
	if err := s.st.SetRole(c.ctx(), c.ws.ID, id, role, c.audit("member.role", "members/"+itoa(id), c.body)); err != nil {
		return 0, nil, memberErr(err, id)
	}
	s.forgetRoles(c.ws.ID)
	return 200, map[string]any{"data": sdk.Member{UserID: id, Role: role, Email: s.email(c, id)}}, nil
}

func (s *Server) email(c *call, id int64) string {
	u, err := s.st.User(c.ctx(), id)
	if err != nil {
		return ""
	}
	return u.Email
}

func (s *Server) removeMember(c *call) (int, any, error) {
	id, err := s.memberParam(c)
	if err != nil {
		return 0, nil, err
	}
	if c.role != sdk.RoleOwner {
		cur, err := s.st.Role(c.ctx(), c.ws.ID, id)
		if err != nil {
			return 0, nil, memberErr(err, id)
		}
		if cur == sdk.RoleOwner {
			return 0, nil, forbidden("only an owner removes an owner")
		}
	}
	if err := s.st.RemoveMember(c.ctx(), c.ws.ID, id, c.audit("member.remove", "members/"+itoa(id), nil)); err != nil {
		return 0, nil, memberErr(err, id)
	}
	s.forgetRoles(c.ws.ID)
	return 200, map[string]any{"data": map[string]any{"user_id": id, "removed": true}}, nil
}

func (s *Server) transferOwner(c *call) (int, any, error) {
	id, _ := numberOf(c.body["user_id"])
	if _, err := s.st.Role(c.ctx(), c.ws.ID, id); err != nil {
		return 0, nil, memberErr(err, id)
	}
	if err := s.st.SetRole(c.ctx(), c.ws.ID, id, sdk.RoleOwner, c.audit("member.transfer_owner", "members/"+itoa(id), nil)); err != nil {
		return 0, nil, memberErr(err, id)
	}
	if id != c.p.UserID {
		if err := s.st.SetRole(c.ctx(), c.ws.ID, c.p.UserID, sdk.RoleAdmin, c.audit("member.role", "members/"+itoa(c.p.UserID), map[string]any{"role": "admin"})); err != nil {
			return 0, nil, memberErr(err, c.p.UserID)
		}
	}
	s.forgetRoles(c.ws.ID)
	return 200, map[string]any{"data": map[string]any{"owner_user_id": id}}, nil
}

// numberOf reads a JSON number decoded by the validator (json.Number) or
// by encoding/json (float64) as an int64. Every spelling of an integer
// counts (100, 1e2, 100.0); a fraction or a value beyond int64 does not.
func numberOf(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return i, true
		}
		r, ok := new(big.Rat).SetString(n.String())
		if !ok || !r.IsInt() || !r.Num().IsInt64() {
			return 0, false
		}
		return r.Num().Int64(), true
	case float64:
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	}
	return 0, false
}

// maxRetentionDays bounds audit_retention_days (100 years).
const maxRetentionDays = 36500

// PruneAudit deletes audit entries older than their workspace's
// audit_retention_days; the host runs it at start and hourly.
func (s *Server) PruneAudit(ctx context.Context) (int64, error) {
	n, err := s.st.PruneAudit(ctx, s.opts.Now())
	if n > 0 {
		s.log.Info("pruned audit entries past retention", "count", n)
	}
	return n, err
}
