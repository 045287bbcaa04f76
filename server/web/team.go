package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"reeve.dev/reeve/server/sdk"
)

// The team and audit pages: server-rendered over the team control-plane
// routes, as the signed-in person, so each form is refused exactly where
// the API refuses it.

type aclView struct {
	ID, Subject, Role string
}

type accessRequestView struct {
	ID, Session, SessionTitle, Requester, Role, Reason string
}

type teamSession struct {
	sessionView
	ACL []aclView
}

type auditView struct {
	Seq                             int64
	At, Actor, Action, Target, Note string
}

type decisionView struct {
	At, Tool, Decision, DecidedBy, Reason, Target string
}

type teamPage struct {
	page
	Workspace      sdk.Workspace
	Admin          bool
	Members        []sdk.Member
	Invitations    []sdk.Invitation
	InviteLink     string
	Sessions       []teamSession
	AccessRequests []accessRequestView
	Audit          []auditView
	NextAfter      int64
	Decisions      map[string][]decisionView
	Section        string
}

// workspaceFor finds the path's workspace among the person's, or renders
// why not.
func (h *Handler) workspaceFor(w http.ResponseWriter, r *http.Request) (string, teamPage, bool) {
	s, ws, ok := h.signedIn(w, r)
	if !ok {
		return "", teamPage{}, false
	}
	p := teamPage{page: page{SignedIn: true, CSRF: csrfFor(s)}}
	for _, x := range ws {
		if x.ID == r.PathValue("workspace") {
			p.Workspace = x
			p.Admin = x.Role == sdk.RoleAdmin || x.Role == sdk.RoleOwner
			return s, p, true
		}
	}
	p.Title, p.Error = "Not found", "You are not a member of this workspace, or it does not exist."
	h.render(w, r, http.StatusNotFound, "message.html", p)
	return "", p, false
}

func (h *Handler) teamPage(w http.ResponseWriter, r *http.Request) {
	s, p, ok := h.workspaceFor(w, r)
	if !ok {
		return
	}
	fl := h.takeFlash(w, r, s)
	fl.apply(&p.page)
	p.InviteLink = fl.InviteLink
	h.renderTeam(w, r, s, p)
}

func (h *Handler) renderTeam(w http.ResponseWriter, r *http.Request, s string, p teamPage) {
	c := h.client(r, s)
	ws := p.Workspace.ID
	p.Title = "Team · " + p.Workspace.Name
	var err error
	if p.Members, err = c.ListMembers(r.Context(), ws); err != nil {
		p.Error = joinErr(p.Error, "The members could not be listed: "+apiMessage(err))
	}
	if p.Admin {
		if p.Invitations, err = c.ListInvitations(r.Context(), ws); err != nil {
			p.Error = joinErr(p.Error, "The invitations could not be listed: "+apiMessage(err))
		}
	}
	names := map[int64]string{}
	for _, m := range p.Members {
		names[m.UserID] = m.Email
	}
	recs, err := c.ListRecords(r.Context(), "/api/resources/"+url.PathEscape(ws)+"/sessions?limit=50")
	if err != nil {
		p.Error = joinErr(p.Error, "The sessions could not be listed: "+apiMessage(err))
	}
	titles := map[string]string{}
	for i := len(recs) - 1; i >= 0; i-- {
		rec := recs[i]
		a := rec.Attributes
		ts := teamSession{sessionView: sessionView{ID: rec.ID, Title: str(a, "title"), Status: str(a, "status"), Agent: str(a, "agent")}}
		if ts.Title == "" {
			ts.Title = rec.ID
		}
		titles[rec.ID] = ts.Title
		if acl, ok := a["acl"].(map[string]any); ok {
			for _, v := range acl {
				e, _ := v.(map[string]any)
				id, _ := e["id"].(string)
				st, _ := e["subject_type"].(string)
				sid, _ := e["subject_id"].(float64)
				role, _ := e["role"].(string)
				subj := st + " " + strconv.FormatInt(int64(sid), 10)
				if n, ok := names[int64(sid)]; ok && st == "user" {
					subj = n
				}
				ts.ACL = append(ts.ACL, aclView{ID: id, Subject: subj, Role: role})
			}
			sort.Slice(ts.ACL, func(i, j int) bool { return ts.ACL[i].Subject < ts.ACL[j].Subject })
		}
		p.Sessions = append(p.Sessions, ts)
	}
	// Pending session access requests: the spec has no route that lists
	// them, so they are read from the workspace's audit log (created, and
	// not yet decided), which admins can read.
	if p.Admin {
		p.AccessRequests = h.pendingAccessRequests(r, c, ws, titles)
		for i, ar := range p.AccessRequests {
			if n, err := strconv.ParseInt(strings.TrimPrefix(ar.Requester, "user:"), 10, 64); err == nil && names[n] != "" {
				p.AccessRequests[i].Requester = names[n]
			}
		}
	}
	h.render(w, r, http.StatusOK, "team.html", p)
}

func (h *Handler) pendingAccessRequests(r *http.Request, c *sdk.Client, ws string, titles map[string]string) []accessRequestView {
	type entry struct {
		Seq    int64           `json:"seq"`
		Actor  string          `json:"actor"`
		Action string          `json:"action"`
		Target string          `json:"target"`
		Detail json.RawMessage `json:"detail"`
	}
	pending := map[string]accessRequestView{}
	var order []string
	after := int64(0)
	for range 20 {
		var out struct {
			Data []entry `json:"data"`
		}
		if _, err := c.Do(r.Context(), http.MethodGet, fmt.Sprintf("/api/workspaces/%s/audit?limit=500&after=%d", url.PathEscape(ws), after), nil, &out); err != nil || len(out.Data) == 0 {
			break
		}
		for _, e := range out.Data {
			after = e.Seq
			parts := strings.Split(e.Target, "/")
			if len(parts) != 4 || parts[0] != "sessions" || parts[2] != "access-requests" {
				continue
			}
			switch {
			case e.Action == "record.create":
				pending[parts[3]] = accessRequestView{ID: parts[3], Session: parts[1], SessionTitle: titles[parts[1]], Requester: e.Actor}
				order = append(order, parts[3])
			case strings.HasPrefix(e.Action, "session.access_request."):
				delete(pending, parts[3])
			}
		}
		if len(out.Data) < 500 {
			break
		}
	}
	var list []accessRequestView
	for _, id := range order {
		if v, ok := pending[id]; ok {
			list = append(list, v)
		}
	}
	return list
}

// teamAction handles the team page's forms. Whatever happens it answers
// with a redirect to the team page (see flash.go), so a reload there
// never sends an invitation twice or changes a role again.
func (h *Handler) teamAction(w http.ResponseWriter, r *http.Request) {
	s, p, ok := h.workspaceFor(w, r)
	if !ok || !h.checkPost(w, r, s) {
		return
	}
	c := h.client(r, s)
	ws := p.Workspace.ID
	f := r.PostFormValue
	base := "/api/resources/" + url.PathEscape(ws) + "/sessions/"
	var (
		out flash
		err error
	)
	switch f("action") {
	case "invite":
		var res sdk.InvitationCreatedResponse
		res, err = c.CreateInvitation(r.Context(), ws, sdk.InvitationCreateRequest{Email: strings.TrimSpace(f("email")), Role: f("role")})
		if err == nil {
			out.InviteLink = res.AcceptURL
			out.Notice = "Invitation created for " + res.Data.Email + ". Give them this single-use link:"
		} else {
			out.Form = map[string]string{"invite-email": f("email"), "invite-role": f("role")}
		}
	case "revoke-invitation":
		_, err = c.RevokeInvitation(r.Context(), ws, f("id"))
		out.Notice = "Invitation revoked."
	case "role":
		var uid int64
		uid, err = strconv.ParseInt(f("user"), 10, 64)
		if err == nil {
			err = c.SetMemberRole(r.Context(), ws, uid, f("role"))
		}
		out.Notice = "Role changed."
	case "share":
		var uid int64
		uid, err = strconv.ParseInt(f("user"), 10, 64)
		if err == nil {
			_, err = c.Do(r.Context(), http.MethodPost, base+url.PathEscape(f("session"))+"/access", map[string]any{"subject_type": "user", "subject_id": uid, "role": f("role")}, nil)
		}
		out.Notice = "Session shared."
	case "unshare":
		_, err = c.Do(r.Context(), http.MethodDelete, base+url.PathEscape(f("session"))+"/access/"+url.PathEscape(f("entry")), nil, nil)
		out.Notice = "Access removed."
	case "request-access":
		_, err = c.Do(r.Context(), http.MethodPost, base+url.PathEscape(f("session"))+"/access-requests", map[string]any{"requested_role": f("role"), "reason": f("reason")}, nil)
		out.Notice = "Access requested; an owner, approver or admin of the session decides."
		if err != nil {
			out.Form = map[string]string{"ra-reason": f("reason")}
		}
	case "decide-access":
		_, err = c.Do(r.Context(), http.MethodPost, base+url.PathEscape(f("session"))+"/access-requests/"+url.PathEscape(f("id"))+"/decision", map[string]any{"decision": f("decision")}, nil)
		out.Notice = "Access request " + map[string]string{"approve": "approved", "deny": "denied"}[f("decision")] + "."
	default:
		out.Error = "Unknown action."
	}
	if err != nil {
		out.Notice = ""
		out.Error = "Refused: " + apiMessage(err)
	}
	h.redirectWith(w, r, s, "/w/"+url.PathEscape(ws)+"/team", out)
}

func apiMessage(err error) string {
	if ae, ok := err.(*sdk.APIError); ok {
		if len(ae.Body.Details) > 0 && ae.Body.Details[0].Message != "" {
			return ae.Body.Message + " (" + strings.TrimPrefix(ae.Body.Details[0].Field+" ", " ") + ae.Body.Details[0].Message + ")"
		}
		return ae.Body.Message
	}
	return err.Error()
}

// auditPage shows the workspace's audit log (admins) and the permission
// decisions of its sessions, with their signed evidence exports.
func (h *Handler) auditPage(w http.ResponseWriter, r *http.Request) {
	s, p, ok := h.workspaceFor(w, r)
	if !ok {
		return
	}
	c := h.client(r, s)
	ws := p.Workspace.ID
	p.Title = "Audit · " + p.Workspace.Name
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	if p.Admin {
		var out struct {
			Data []struct {
				Seq       int64           `json:"seq"`
				Actor     string          `json:"actor"`
				Action    string          `json:"action"`
				Target    string          `json:"target"`
				Detail    json.RawMessage `json:"detail"`
				CreatedAt time.Time       `json:"created_at"`
			} `json:"data"`
			Meta sdk.ListMeta `json:"meta"`
		}
		if _, err := c.Do(r.Context(), http.MethodGet, fmt.Sprintf("/api/workspaces/%s/audit?limit=100&after=%d", url.PathEscape(ws), after), nil, &out); err != nil {
			p.Error = "The audit log could not be read: " + apiMessage(err)
		}
		for _, e := range out.Data {
			note := string(e.Detail)
			if len(note) > 200 {
				note = note[:200] + "…"
			}
			p.Audit = append(p.Audit, auditView{Seq: e.Seq, At: e.CreatedAt.UTC().Format("2006-01-02 15:04:05"), Actor: e.Actor, Action: e.Action, Target: e.Target, Note: note})
		}
		p.NextAfter = out.Meta.NextAfter
	}
	recs, err := c.ListRecords(r.Context(), "/api/resources/"+url.PathEscape(ws)+"/sessions?limit=20")
	if err != nil {
		p.Error = "The sessions could not be listed: " + apiMessage(err)
	}
	p.Decisions = map[string][]decisionView{}
	for i := len(recs) - 1; i >= 0; i-- {
		rec := recs[i]
		ts := teamSession{sessionView: sessionView{ID: rec.ID, Title: str(rec.Attributes, "title"), Status: str(rec.Attributes, "status"), Agent: str(rec.Attributes, "agent")}}
		if ts.Title == "" {
			ts.Title = rec.ID
		}
		p.Sessions = append(p.Sessions, ts)
		var out struct {
			Data struct {
				Decisions []struct {
					At        string `json:"at"`
					Tool      string `json:"tool"`
					Decision  string `json:"decision"`
					DecidedBy string `json:"decided_by"`
					Reason    string `json:"reason"`
					Target    any    `json:"target"`
				} `json:"decisions"`
			} `json:"data"`
		}
		if _, err := c.Do(r.Context(), http.MethodGet, "/api/resources/"+url.PathEscape(ws)+"/sessions/"+url.PathEscape(rec.ID)+"/approval-audit", nil, &out); err != nil {
			continue
		}
		for _, d := range out.Data.Decisions {
			t := ""
			if m, ok := d.Target.(map[string]any); ok {
				for _, v := range m {
					t = fmt.Sprint(v)
				}
			}
			p.Decisions[rec.ID] = append(p.Decisions[rec.ID], decisionView{At: d.At, Tool: d.Tool, Decision: d.Decision, DecidedBy: d.DecidedBy, Reason: d.Reason, Target: t})
		}
	}
	h.render(w, r, http.StatusOK, "audit.html", p)
}

// exportDownload hands the person a session's signed evidence export (or
// the workspace audit export, or a review packet's) as a file, fetched as
// them.
func (h *Handler) exportDownload(w http.ResponseWriter, r *http.Request) {
	s, p, ok := h.workspaceFor(w, r)
	if !ok {
		return
	}
	ws := p.Workspace.ID
	kind := r.PathValue("kind")
	var path, name string
	switch kind {
	case "receipt", "trace":
		sid := r.URL.Query().Get("session")
		path = "/api/resources/" + url.PathEscape(ws) + "/sessions/" + url.PathEscape(sid) + "/" + kind + "-export"
		name = kind + "-" + sid + ".json"
	case "audit":
		path = "/api/workspaces/" + url.PathEscape(ws) + "/audit/export"
		name = "audit-" + ws + ".json"
	case "review-packet":
		id := r.URL.Query().Get("packet")
		path = "/api/resources/" + url.PathEscape(ws) + "/review-packets/" + url.PathEscape(id) + "/export"
		name = "review-packet-" + id + ".json"
	default:
		http.NotFound(w, r)
		return
	}
	var raw json.RawMessage
	if _, err := h.client(r, s).Do(r.Context(), http.MethodGet, path, nil, &raw); err != nil {
		p.Title, p.Error = "Export refused", apiMessage(err)
		h.render(w, r, statusOr(err, http.StatusBadGateway), "message.html", p)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	w.Write(raw)
}
