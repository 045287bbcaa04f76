package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Session access (spec 3.2, 3.3, 4.4). A session's record carries its
// owner, visibility and ACL, so one read decides a caller's effective role
// and the session list filters without a query per session. Teams are
// share groups (4.12): an ACL subject of type team or share_group, and a
// session's primary_owning_team_id, name a share group by its record seq
// (the integer every record has) or, for primary_owning_team_id, its id.

// Session roles, ordered.
const (
	sessViewer    = "viewer"
	sessCommenter = "commenter"
	sessSteerer   = "steerer"
	sessApprover  = "approver"
	sessOwner     = "owner"
)

func sessionRank(role string) int {
	switch role {
	case sessViewer:
		return 1
	case sessCommenter:
		return 2
	case sessSteerer:
		return 3
	case sessApprover:
		return 4
	case sessOwner:
		return 5
	}
	return 0
}

// Visibility scopes.
const (
	visPrivate   = "private"
	visTeam      = "team"
	visWorkspace = "workspace"
)

// aclEntry is one grant on a session, kept in its record under "acl",
// keyed by subject ("user:7", "share_group:12").
type aclEntry struct {
	ID          string `json:"id"`
	SubjectType string `json:"subject_type"`
	SubjectID   int64  `json:"subject_id"`
	// GroupID is the share group a team or share_group subject resolved to.
	GroupID   string `json:"group_id,omitempty"`
	Role      string `json:"role"`
	GrantedBy string `json:"granted_by"`
	GrantedAt any    `json:"granted_at"`
}

// sessionAccess is the access part of a session's attributes.
type sessionAccess struct {
	OwnerUserID int64               `json:"owner_user_id"`
	Visibility  string              `json:"visibility_scope"`
	Team        string              `json:"primary_owning_team_id"`
	TeamGroupID string              `json:"owning_group_id"`
	ACL         map[string]aclEntry `json:"acl"`
	// Project is the project's .reeve/access.yaml of a synced daemon
	// session (nil: none, nothing capped): it caps every caller's role.
	Project *sdk.ProjectAccess `json:"project_access"`
}

func accessOf(raw json.RawMessage) sessionAccess {
	var a sessionAccess
	_ = json.Unmarshal(raw, &a)
	if a.Visibility == "" {
		a.Visibility = visWorkspace
	}
	return a
}

// accessOfAttrs is accessOf for attributes already decoded into a map (a
// number is a float64 there), so that a list does not decode a session's
// attributes twice. TestAccessOfAttrsAgrees holds the two equal.
func accessOfAttrs(m map[string]any) sessionAccess {
	str := func(m map[string]any, k string) string { v, _ := m[k].(string); return v }
	num := func(m map[string]any, k string) int64 { v, _ := m[k].(float64); return int64(v) }
	a := sessionAccess{
		OwnerUserID: num(m, "owner_user_id"), Visibility: str(m, "visibility_scope"),
		Team: str(m, "primary_owning_team_id"), TeamGroupID: str(m, "owning_group_id"),
	}
	if acl, ok := m["acl"].(map[string]any); ok {
		a.ACL = make(map[string]aclEntry, len(acl))
		for k, v := range acl {
			e, _ := v.(map[string]any)
			a.ACL[k] = aclEntry{
				ID: str(e, "id"), SubjectType: str(e, "subject_type"), SubjectID: num(e, "subject_id"),
				GroupID: str(e, "group_id"), Role: str(e, "role"), GrantedBy: str(e, "granted_by"), GrantedAt: e["granted_at"],
			}
		}
	}
	if p, ok := m["project_access"].(map[string]any); ok {
		pa := &sdk.ProjectAccess{DefaultRole: str(p, "default_role"), Invalid: str(p, "invalid")}
		if ms, ok := p["members"].([]any); ok {
			pa.Members = make([]sdk.ProjectAccessMember, 0, len(ms))
			for _, v := range ms {
				e, _ := v.(map[string]any)
				pa.Members = append(pa.Members, sdk.ProjectAccessMember{User: str(e, "user"), Team: str(e, "team"), Role: str(e, "role")})
			}
		}
		a.Project = pa
	}
	if a.Visibility == "" {
		a.Visibility = visWorkspace
	}
	return a
}

// sessionNeed is the least session role each session operation needs,
// keyed by method and the path below {agentSession}. Every route under
// /sessions/{agentSession} must be listed: the gate refuses unknown ones.
// Made on first use, like every table only the server reads: each command
// of the binary runs package init.
var sessionNeed = sync.OnceValue(func() map[string]string {
	return map[string]string{
		"GET ":                      sessViewer,
		"POST /access":              sessOwner,
		"DELETE /access/{aclEntry}": sessOwner,
		"POST /access-requests":     "", // any member: asking is how one gets a role
		"POST /access-requests/{accessRequestId}/decision": sessApprover,
		"GET /adapter-receipts":                            sessViewer,
		"GET /approval-audit":                              sessViewer,
		"POST /attempt-graph":                              sessSteerer,
		"GET /collaboration":                               sessViewer,
		"POST /collaboration-events":                       sessCommenter,
		"GET /compute-evidence":                            sessViewer,
		"POST /context-corrections":                        sessCommenter,
		"POST /context-working-set":                        sessViewer,
		"GET /effective-policy":                            sessViewer,
		"GET /events":                                      sessViewer,
		"POST /fan-in-review":                              sessSteerer,
		"GET /governance":                                  sessViewer,
		"GET /guardrail-evidence":                          sessViewer,
		"GET /mcp-tools":                                   sessViewer,
		"POST /memory-retrieval":                           sessViewer,
		"POST /model-routing-decision":                     sessSteerer,
		"POST /policy-change-proposals":                    sessSteerer,
		"POST /policy-change-proposals/open-pr":            sessApprover,
		"GET /readiness":                                   sessViewer,
		"GET /receipt-export":                              sessViewer,
		"GET /room":                                        sessViewer,
		"POST /routing-decisions":                          sessSteerer,
		"POST /run-attempts":                               sessSteerer,
		"GET /spend":                                       sessViewer,
		"GET /support-debug":                               sessViewer,
		"GET /trace-export":                                sessViewer,
		"POST /verification-attempts":                      sessSteerer,
		"POST /verification-pack":                          sessSteerer,
		"POST /verification-repair-handoffs":               sessSteerer,
	}
})

// sessionSuffix is the part of a session route below {agentSession}, or
// ok=false for routes that are not about one session.
func sessionSuffix(r *Route) (string, bool) {
	const seg = "/{agentSession}"
	i := strings.Index(r.Path, seg)
	if i < 0 {
		return "", false
	}
	return r.Method + " " + r.Path[i+len(seg):], true
}

// SessionRoleNeeded reports the least session role of a route ("" when any
// member may call it) and whether the route is about one session.
func SessionRoleNeeded(r Route) (role string, isSession bool) {
	k, ok := sessionSuffix(&r)
	if !ok {
		return "", false
	}
	return sessionNeed()[k], true
}

// gateSession loads the route's session and checks the caller's effective
// role: 404 for no such session, 403 below the operation's role.
func (s *Server) gateSession(c *call) error {
	k, ok := sessionSuffix(c.route)
	if !ok {
		return nil
	}
	need, known := sessionNeed()[k]
	if !known {
		return forbidden("no session role is defined for %s", k)
	}
	rec, err := s.st.Record(c.ctx(), c.ws.ID, "sessions", c.r.PathValue("agentSession"))
	if errors.Is(err, store.ErrNotFound) {
		return notFound("no session %q", c.r.PathValue("agentSession"))
	}
	if err != nil {
		return err
	}
	c.sess = &rec
	if c.support != nil {
		c.sessRole = sessViewer // a support operator admitted by a run_read grant (supportGate)
		return nil
	}
	if c.p.Kind != auth.KindUser {
		return nil // daemons reach sessions only through runtime routes of their workspace
	}
	role, err := s.sessionRole(c, rec, map[string]bool{})
	if err != nil {
		return err
	}
	c.sessRole = role
	if sessionRank(role) < sessionRank(need) {
		if role == "" {
			return forbidden("you have no access to this session; request it with POST .../access-requests")
		}
		return forbidden("this operation needs the %s session role; you are %s", need, role)
	}
	return nil
}

// sessionRole is the caller's effective role on a session: owner for the
// workspace's owners and admins and the session's owner, else the highest
// of the visibility's base (viewer) and the ACL grants that reach them;
// then capped by the project's access.yaml when the session carries one.
// groups memoizes share-group membership across sessions of one request.
func (s *Server) sessionRole(c *call, rec store.Record, groups map[string]bool) (string, error) {
	return s.roleOf(c, accessOf(rec.Attributes), rec.CreatedBy, groups)
}

// mayViewSession reports whether the caller may read a session outside its
// own routes (a review packet's evidence): a user needs a role on it, as
// the session gate decides; other principals are held to their routes'
// own gates, as in gateSession.
func (s *Server) mayViewSession(c *call, rec store.Record) (bool, error) {
	if c.p.Kind != auth.KindUser {
		return true, nil
	}
	role, err := s.sessionRole(c, rec, map[string]bool{})
	return role != "", err
}

// roleOf is sessionRole for a session whose access is already decoded
// (a is its access, createdBy its record's creator).
func (s *Server) roleOf(c *call, a sessionAccess, createdBy string, groups map[string]bool) (string, error) {
	role, err := s.grantedRole(c, a, createdBy, groups)
	if err != nil || role == "" || a.Project == nil {
		return role, err
	}
	// The daemon caps a remote client's role by the same file, for the
	// same claims (email, teams), whatever the workspace role: workspace
	// owners and admins included (daemon/control roleIn). One rule,
	// sdk.ProjectAccess, so that REST and the daemon never disagree.
	id, err := s.identity(c)
	if err != nil {
		return "", err
	}
	role = a.Project.CapSessionRole(role, id.email, id.teams)
	if sessionRank(role) == 0 {
		return "", nil
	}
	return role, nil
}

// grantedRole is the role the control plane's own records give: the
// workspace role, the session's owner, visibility and ACL.
func (s *Server) grantedRole(c *call, a sessionAccess, createdBy string, groups map[string]bool) (string, error) {
	if c.role == sdk.RoleOwner || c.role == sdk.RoleAdmin {
		return sessOwner, nil
	}
	if a.OwnerUserID == c.p.UserID || (a.OwnerUserID == 0 && createdBy == c.p.Actor()) {
		return sessOwner, nil
	}
	best := ""
	raise := func(r string) {
		if sessionRank(r) > sessionRank(best) {
			best = r
		}
	}
	switch a.Visibility {
	case visWorkspace:
		raise(sessViewer)
	case visTeam:
		if a.TeamGroupID != "" {
			in, err := s.inGroup(c, a.TeamGroupID, groups)
			if err != nil {
				return "", err
			}
			if in {
				raise(sessViewer)
			}
		}
	}
	if e, ok := a.ACL["user:"+strconv.FormatInt(c.p.UserID, 10)]; ok {
		raise(e.Role)
	}
	for _, e := range a.ACL {
		if e.GroupID == "" || sessionRank(e.Role) <= sessionRank(best) {
			continue
		}
		in, err := s.inGroup(c, e.GroupID, groups)
		if err != nil {
			return "", err
		}
		if in {
			raise(e.Role)
		}
	}
	return best, nil
}

// callerIdentity is who a project's access.yaml knows a user as: their
// email and their teams, exactly the email and teams claims of the access
// token a daemon checks (accessToken builds those from this).
type callerIdentity struct {
	email string
	teams []string
}

// identity reads the caller's identity once per request.
func (s *Server) identity(c *call) (callerIdentity, error) {
	if c.ident != nil {
		return *c.ident, nil
	}
	var id callerIdentity
	if u, err := s.st.User(c.ctx(), c.p.UserID); err == nil {
		id.email = u.Email
	} else if !errors.Is(err, store.ErrNotFound) {
		return id, err
	}
	teams, err := s.teamsOf(c)
	if err != nil {
		return id, err
	}
	id.teams = teams
	c.ident = &id
	return id, nil
}

// teamsOf is the caller's teams as access.yaml names them: each share
// group they are in, by id and by name (the file's team is a slug, so a
// group named like one is matched by its name).
func (s *Server) teamsOf(c *call) ([]string, error) {
	ps, err := s.principals(c)
	if err != nil {
		return nil, err
	}
	var teams []string
	for _, p := range ps {
		gid, ok := strings.CutPrefix(p, "group:")
		if !ok {
			continue
		}
		teams = append(teams, gid)
		g, err := s.st.Record(c.ctx(), c.ws.ID, shareGroups, gid)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var a struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(g.Attributes, &a) == nil && a.Name != "" && a.Name != gid {
			teams = append(teams, a.Name)
		}
	}
	return teams, nil
}

// ---- share groups (teams) ----

const shareGroups = "share-groups"

func groupMembers(gid string) string { return shareGroups + "/" + gid + "/members" }

func (s *Server) inGroup(c *call, gid string, memo map[string]bool) (bool, error) {
	if v, ok := memo[gid]; ok {
		return v, nil
	}
	_, err := s.st.RecordByKey(c.ctx(), c.ws.ID, groupMembers(gid), strconv.FormatInt(c.p.UserID, 10))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	memo[gid] = err == nil
	return err == nil, nil
}

// resolveGroup finds a share group by id or by its record seq.
func (s *Server) resolveGroup(c *call, ref string) (string, bool, error) {
	if ref == "" {
		return "", false, nil
	}
	if validULID(ref) {
		if _, err := s.st.Record(c.ctx(), c.ws.ID, shareGroups, ref); err == nil {
			return ref, true, nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return "", false, err
		}
		return "", false, nil
	}
	seq, err := strconv.ParseInt(ref, 10, 64)
	if err != nil || seq <= 0 {
		return "", false, nil
	}
	// Records are in seq order: the group is in the page that starts just
	// before its seq.
	recs, err := s.st.Records(c.ctx(), c.ws.ID, shareGroups, store.ListOptions{After: seq - 1, Limit: 1})
	if err != nil {
		return "", false, err
	}
	if len(recs) == 1 && recs[0].Seq == seq {
		return recs[0].ID, true, nil
	}
	return "", false, nil
}

func (s *Server) addGroupMember(c *call) (int, any, error) {
	gid := c.r.PathValue("shareGroup")
	if _, err := s.st.Record(c.ctx(), c.ws.ID, shareGroups, gid); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, notFound("no share group %q", gid)
		}
		return 0, nil, err
	}
	uid, _ := numberOf(c.body["user_id"])
	if _, err := s.st.Role(c.ctx(), c.ws.ID, uid); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, errorf(http.StatusNotFound, sdk.CodePrincipalUnavailable, "user %d is not a member of this workspace", uid)
		}
		return 0, nil, err
	}
	key := strconv.FormatInt(uid, 10)
	if cur, err := s.st.RecordByKey(c.ctx(), c.ws.ID, groupMembers(gid), key); err == nil {
		out, err := toSDK(cur)
		return 200, sdk.RecordResponse{Data: out}, err
	}
	rec, err := c.createRecord(groupMembers(gid), key, map[string]any{"user_id": uid})
	if err != nil {
		return 0, nil, err
	}
	return 201, sdk.RecordResponse{Data: rec}, nil
}

func (s *Server) removeGroupMember(c *call) (int, any, error) {
	gid, user := c.r.PathValue("shareGroup"), c.r.PathValue("user")
	cur, err := s.st.RecordByKey(c.ctx(), c.ws.ID, groupMembers(gid), user)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, notFound("user %q is not in share group %q", user, gid)
	}
	if err != nil {
		return 0, nil, err
	}
	rec, err := c.deleteRecord(groupMembers(gid), cur.ID)
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.RecordResponse{Data: rec}, nil
}

// ---- sessions ----

func (s *Server) createAgentSession(c *call) (int, any, error) {
	a := map[string]any{}
	for k, v := range c.body {
		a[k] = v
	}
	vis, _ := a["visibility_scope"].(string)
	if vis == "" {
		vis = visWorkspace
	}
	a["visibility_scope"] = vis
	if team, _ := a["primary_owning_team_id"].(string); team != "" {
		gid, ok, err := s.resolveGroup(c, team)
		if err != nil {
			return 0, nil, err
		}
		if !ok {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "/primary_owning_team_id", Message: "no share group " + team + " in this workspace (teams are share groups)"})
		}
		a["owning_group_id"] = gid
	}
	a["owner_user_id"] = c.p.UserID
	a["acl"] = map[string]aclEntry{}
	a["status"] = "active"
	a["source"] = "rest"
	rec, err := c.createRecord("sessions", "", a)
	if err != nil {
		return 0, nil, err
	}
	return 201, sdk.RecordResponse{Data: rec}, nil
}

// sessionAccessVersion versions sessionPrincipals: changing what it
// returns needs a new version, so stores rebuild the index on start.
const sessionAccessVersion = "sessions-1"

// sessionPrincipals is the access index of a session record: "*" when
// every member sees it, "user:N" for its owner and each user in its ACL,
// "group:ID" for its owning team (visibility team) and each share group in
// its ACL. It lists who may see the session at all; sessionRole still
// decides the role.
func sessionPrincipals(r store.Record) []string {
	a := accessOf(r.Attributes)
	var out []string
	switch a.Visibility {
	case visPrivate:
	case visTeam:
		if a.TeamGroupID != "" {
			out = append(out, "group:"+a.TeamGroupID)
		}
	default:
		out = append(out, "*")
	}
	if a.OwnerUserID != 0 {
		out = append(out, "user:"+strconv.FormatInt(a.OwnerUserID, 10))
	} else if strings.HasPrefix(r.CreatedBy, "user:") {
		out = append(out, r.CreatedBy)
	}
	for _, e := range a.ACL {
		switch {
		case e.GroupID != "":
			out = append(out, "group:"+e.GroupID)
		case e.SubjectType == "user":
			out = append(out, "user:"+strconv.FormatInt(e.SubjectID, 10))
		}
	}
	return out
}

// principals are the caller's entries in the session access index: "*",
// themself and the share groups they belong to.
func (s *Server) principals(c *call) ([]string, error) {
	uid := strconv.FormatInt(c.p.UserID, 10)
	colls, err := s.st.KeyedCollections(c.ctx(), c.ws.ID, shareGroups+"/", uid)
	if err != nil {
		return nil, err
	}
	out := []string{"*", "user:" + uid}
	for _, coll := range colls {
		if gid, ok := strings.CutSuffix(strings.TrimPrefix(coll, shareGroups+"/"), "/members"); ok && !strings.Contains(gid, "/") {
			out = append(out, "group:"+gid)
		}
	}
	return out, nil
}

func (s *Server) listAgentSessions(c *call) (int, any, error) {
	limit := int(queryInt(c, "limit", 100))
	q := c.r.URL.Query()
	status, kind, source := q.Get("status"), q.Get("source_kind"), q.Get("source")
	out := sdk.RecordCollectionResponse{Data: []sdk.Record{}}
	after := queryInt(c, "after", 0)
	groups := map[string]bool{}
	// Workspace owners and admins see every session; anyone else reads
	// only the sessions the access index gives their principals.
	page := func(after int64, n int) ([]store.Record, error) {
		return s.st.Records(c.ctx(), c.ws.ID, "sessions", store.ListOptions{After: after, Limit: n})
	}
	if c.role != sdk.RoleOwner && c.role != sdk.RoleAdmin {
		ps, err := s.principals(c)
		if err != nil {
			return 0, nil, err
		}
		page = func(after int64, n int) ([]store.Record, error) {
			return s.st.RecordsFor(c.ctx(), c.ws.ID, "sessions", ps, store.ListOptions{After: after, Limit: n})
		}
	}
	// Filters apply to attributes, so page until the page is full. The
	// first read is the size of the answer, which is all an unfiltered
	// list needs (sessions carry their ACL: reading 500 to answer 100
	// cost most of the time); further reads take 500.
	size := min(max(limit, 1), 500)
	for len(out.Data) < limit {
		recs, err := page(after, size)
		if err != nil {
			return 0, nil, err
		}
		for _, r := range recs {
			if len(out.Data) >= limit {
				break
			}
			after = r.Seq
			// The attributes are decoded once, for the answer; the access
			// is read from that decoding. (A member's sessions carry
			// their ACL, and most of those read are visible: the access
			// index chose them.)
			sr, err := toSDK(r)
			if err != nil {
				return 0, nil, err
			}
			role, err := s.roleOf(c, accessOfAttrs(sr.Attributes), r.CreatedBy, groups)
			if err != nil {
				return 0, nil, err
			}
			if role == "" {
				continue
			}
			if (status == "" || attrs(sr, "status") == status) && (kind == "" || attrs(sr, "source_kind") == kind) && (source == "" || attrs(sr, "source") == source) {
				out.Data = append(out.Data, sr)
			}
		}
		if len(recs) < size {
			break
		}
		size = 500
	}
	out.Meta.Count = len(out.Data)
	if len(out.Data) == limit {
		out.Meta.NextAfter = out.Data[len(out.Data)-1].Seq
	}
	return 200, out, nil
}

// grant sets (or raises/lowers) the ACL entry of a subject on the current
// session, in one transaction on the session record. It reports whether
// the entry is new.
func (s *Server) grant(c *call, subjectType string, subjectID int64, role, action string) (aclEntry, bool, error) {
	var gid string
	switch subjectType {
	case "user":
		if _, err := s.st.Role(c.ctx(), c.ws.ID, subjectID); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return aclEntry{}, false, errorf(http.StatusNotFound, sdk.CodePrincipalUnavailable, "user %d is not a member of this workspace", subjectID)
			}
			return aclEntry{}, false, err
		}
	case "team", "share_group":
		id, ok, err := s.resolveGroup(c, strconv.FormatInt(subjectID, 10))
		if err != nil {
			return aclEntry{}, false, err
		}
		if !ok {
			return aclEntry{}, false, errorf(http.StatusNotFound, sdk.CodePrincipalUnavailable, "no share group %d in this workspace (teams are share groups)", subjectID)
		}
		gid = id
	default:
		return aclEntry{}, false, invalid(sdk.ErrorDetail{Field: "/subject_type", Message: "unknown subject type " + subjectType})
	}
	key := subjectType + ":" + strconv.FormatInt(subjectID, 10)
	var entry aclEntry
	created := false
	sid := c.sess.ID
	_, err := s.st.UpdateRecordIf(c.ctx(), c.ws.ID, "sessions", sid, func(r *store.Record) error {
		var a map[string]any
		if err := json.Unmarshal(r.Attributes, &a); err != nil {
			return err
		}
		acl := accessOf(r.Attributes).ACL
		if acl == nil {
			acl = map[string]aclEntry{}
		}
		e, ok := acl[key]
		if !ok {
			e = aclEntry{ID: newRecordID(), SubjectType: subjectType, SubjectID: subjectID, GroupID: gid}
			created = true
		}
		e.Role, e.GrantedBy, e.GrantedAt = role, c.p.Actor(), c.now()
		acl[key] = e
		a["acl"] = acl
		b, err := json.Marshal(a)
		r.Attributes, r.UpdatedAt = b, c.now()
		entry = e
		return err
	}, c.audit(action, "sessions/"+sid+"/access/"+key, map[string]any{"role": role}))
	return entry, created, err
}

func aclJSON(sessionID string, e aclEntry) map[string]any {
	return map[string]any{"id": e.ID, "session_id": sessionID, "subject_type": e.SubjectType, "subject_id": e.SubjectID, "role": e.Role,
		"granted_by": e.GrantedBy, "granted_at": e.GrantedAt, "attributes": map[string]any{"subject_type": e.SubjectType, "subject_id": e.SubjectID, "role": e.Role}}
}

func (s *Server) shareSessionAccess(c *call) (int, any, error) {
	subjectType := c.body["subject_type"].(string)
	subjectID, _ := numberOf(c.body["subject_id"])
	role := c.body["role"].(string)
	// Only a session owner grants; nobody grants above their own role.
	if sessionRank(role) > sessionRank(c.sessRole) && c.p.Kind == auth.KindUser {
		return 0, nil, forbidden("you cannot grant %s: you are %s", role, c.sessRole)
	}
	e, created, err := s.grant(c, subjectType, subjectID, role, "session.access.grant")
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return status, map[string]any{"data": aclJSON(c.sess.ID, e)}, nil
}

func (s *Server) revokeSessionAccess(c *call) (int, any, error) {
	id := c.r.PathValue("aclEntry")
	sid := c.sess.ID
	var gone aclEntry
	_, err := s.st.UpdateRecordIf(c.ctx(), c.ws.ID, "sessions", sid, func(r *store.Record) error {
		var a map[string]any
		if err := json.Unmarshal(r.Attributes, &a); err != nil {
			return err
		}
		acl := accessOf(r.Attributes).ACL
		for k, e := range acl {
			if e.ID == id {
				gone = e
				delete(acl, k)
				a["acl"] = acl
				b, err := json.Marshal(a)
				r.Attributes, r.UpdatedAt = b, c.now()
				return err
			}
		}
		return notFound("no access entry %q on this session", id)
	}, c.audit("session.access.revoke", "sessions/"+sid+"/access/"+id, nil))
	if err != nil {
		return 0, nil, err
	}
	return 200, map[string]any{"data": map[string]any{"id": id, "revoked": true, "subject_type": gone.SubjectType, "subject_id": gone.SubjectID}}, nil
}

func (s *Server) requestSessionAccess(c *call) (int, any, error) {
	a := map[string]any{"requested_role": c.body["requested_role"], "reason": c.body["reason"], "state": "pending", "requester": c.p.Actor(), "requester_user_id": c.p.UserID}
	rec, err := c.createRecord("sessions/"+c.sess.ID+"/access-requests", "", a)
	if err != nil {
		return 0, nil, err
	}
	return 201, sdk.RecordResponse{Data: rec}, nil
}

// decideSessionAccess: a session owner, an approver or a workspace admin
// decides (the route's gate), never the requester; approval grants the
// role through the ACL.
func (s *Server) decideSessionAccess(c *call) (int, any, error) {
	coll := "sessions/" + c.sess.ID + "/access-requests"
	id := c.r.PathValue("accessRequestId")
	decision := c.body["decision"].(string)
	var requester int64
	var granted string
	rec, err := s.st.UpdateRecordIf(c.ctx(), c.ws.ID, coll, id, func(r *store.Record) error {
		var a map[string]any
		if err := json.Unmarshal(r.Attributes, &a); err != nil {
			return err
		}
		if a["requester"] == c.p.Actor() {
			return forbidden("you cannot decide your own access request")
		}
		if a["state"] != "pending" {
			return errorf(http.StatusConflict, sdk.CodeAlreadyDecided, "the access request was already decided (%v)", a["state"])
		}
		a["state"] = map[string]string{"approve": "approved", "deny": "denied"}[decision]
		a["decided_by"], a["decided_at"] = c.p.Actor(), c.now()
		a["decision_reason"] = c.body["reason"]
		if decision == "approve" {
			role, _ := c.body["role"].(string)
			if role == "" {
				role, _ = a["requested_role"].(string)
			}
			if sessionRank(role) == 0 {
				return invalid(sdk.ErrorDetail{Field: "/role", Message: "not a session role: " + role})
			}
			if sessionRank(role) > sessionRank(c.sessRole) {
				return forbidden("you cannot grant %s: you are %s", role, c.sessRole)
			}
			a["granted_role"] = role
			granted = role
			requester, _ = numberOf(a["requester_user_id"])
			if requester == 0 {
				if n, err := strconv.ParseInt(strings.TrimPrefix(toString(a["requester"]), "user:"), 10, 64); err == nil {
					requester = n
				}
			}
		}
		b, err := json.Marshal(a)
		r.Attributes, r.UpdatedAt = b, c.now()
		return err
	}, c.audit("session.access_request."+decision, coll+"/"+id, c.body))
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, notFound("no access request %q", id)
	}
	if err != nil {
		return 0, nil, err
	}
	if granted != "" && requester != 0 {
		if _, _, err := s.grant(c, "user", requester, granted, "session.access.grant"); err != nil {
			return 0, nil, err
		}
	}
	out, err := toSDK(rec)
	return 200, sdk.RecordResponse{Data: out}, err
}
