package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Invitations are records of the "invitations" collection of a workspace.
// The accept token names its workspace and invitation, so accepting needs
// no lookup across workspaces; only the SHA-256 of its secret is stored.
const (
	invitationCollection = "invitations"
	invitationPrefix     = "rvi_"
	// DefaultInvitationTTL is how long an accept link works unless the
	// request says otherwise.
	DefaultInvitationTTL = 7 * 24 * time.Hour
	maxInvitationTTL     = 30 * 24 * time.Hour
)

// Invitation states.
const (
	invitePending  = "pending"
	inviteAccepted = "accepted"
	inviteRevoked  = "revoked"
)

// InvitationNotice is what the operator's console is told about a new
// invitation until the server sends mail.
type InvitationNotice struct {
	WorkspaceID, WorkspaceName, Email, Role, Link string
	ExpiresAt                                     time.Time
}

type invitationAttrs struct {
	Email      string     `json:"email"`
	Role       string     `json:"role"`
	State      string     `json:"state"`
	ExpiresAt  time.Time  `json:"expires_at"`
	InvitedBy  string     `json:"invited_by"`
	TokenHash  string     `json:"token_hash"`
	AcceptedBy *int64     `json:"accepted_by,omitempty"`
	AcceptedAt *time.Time `json:"accepted_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// InvitationOptions is one invitation to create.
type InvitationOptions struct {
	WorkspaceID string
	Email       string
	Role        string
	TTL         time.Duration // 0: DefaultInvitationTTL
	InvitedBy   string        // the audit actor ("user:3", "operator")
	// AppURL is the origin of the accept page.
	AppURL string
	Now    time.Time
}

// CreatedInvitation is a new invitation with its accept link; the token
// is shown this once.
type CreatedInvitation struct {
	Invitation sdk.Invitation
	Token      string
	Link       string
}

// validWorkspaceRole reports whether r is a workspace role.
func validWorkspaceRole(r string) bool {
	return r == sdk.RoleOwner || r == sdk.RoleAdmin || r == sdk.RoleMember
}

// CreateInvitation stores an invitation and returns its single-use link.
// The API and the operator command (`reeve server invite`) share it.
func CreateInvitation(ctx context.Context, st store.Store, o InvitationOptions) (CreatedInvitation, error) {
	email := strings.TrimSpace(o.Email)
	if at := strings.IndexByte(email, '@'); at <= 0 || at == len(email)-1 || strings.ContainsAny(email, " \t\r\n<>") {
		return CreatedInvitation{}, fmt.Errorf("%q is not an email address", o.Email)
	}
	if !validWorkspaceRole(o.Role) {
		return CreatedInvitation{}, fmt.Errorf("role %q is not one of owner, admin, member", o.Role)
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = DefaultInvitationTTL
	}
	if ttl < 0 || ttl > maxInvitationTTL {
		return CreatedInvitation{}, fmt.Errorf("an invitation lives between a minute and %d days", int(maxInvitationTTL.Hours()/24))
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return CreatedInvitation{}, err
	}
	id := newRecordID()
	token := invitationPrefix + o.WorkspaceID + "." + id + "." + base64.RawURLEncoding.EncodeToString(secret)
	now := o.Now.UTC()
	a := invitationAttrs{Email: email, Role: o.Role, State: invitePending, ExpiresAt: now.Add(ttl), InvitedBy: o.InvitedBy, TokenHash: auth.Hash(token)}
	b, err := json.Marshal(a)
	if err != nil {
		return CreatedInvitation{}, err
	}
	rec := store.Record{ID: id, WorkspaceID: o.WorkspaceID, Collection: invitationCollection, Attributes: b, CreatedBy: o.InvitedBy, CreatedAt: now, UpdatedAt: now}
	audit := store.AuditEntry{WorkspaceID: o.WorkspaceID, Actor: o.InvitedBy, Action: "invitation.create", Target: invitationCollection + "/" + id, CreatedAt: now}
	audit.Detail, _ = json.Marshal(map[string]any{"email": email, "role": o.Role, "expires_at": a.ExpiresAt})
	if err := st.CreateRecord(ctx, &rec, audit); err != nil {
		return CreatedInvitation{}, fmt.Errorf("store invitation: %w", err)
	}
	inv, err := invitationJSON(rec)
	if err != nil {
		return CreatedInvitation{}, err
	}
	return CreatedInvitation{Invitation: inv, Token: token, Link: InvitationLink(o.AppURL, token)}, nil
}

// InvitationLink is the accept page of a token.
func InvitationLink(appURL, token string) string {
	return strings.TrimRight(appURL, "/") + "/invite?token=" + url.QueryEscape(token)
}

func decodeInvitation(r store.Record) (invitationAttrs, error) {
	var a invitationAttrs
	if err := json.Unmarshal(r.Attributes, &a); err != nil {
		return a, fmt.Errorf("decode invitation %s: %w", r.ID, err)
	}
	return a, nil
}

// invitationJSON is the public view: never the token hash.
func invitationJSON(r store.Record) (sdk.Invitation, error) {
	a, err := decodeInvitation(r)
	if err != nil {
		return sdk.Invitation{}, err
	}
	return sdk.Invitation{ID: r.ID, WorkspaceID: r.WorkspaceID, Email: a.Email, Role: a.Role, State: a.State, ExpiresAt: a.ExpiresAt,
		InvitedBy: a.InvitedBy, AcceptedBy: a.AcceptedBy, AcceptedAt: a.AcceptedAt, RevokedAt: a.RevokedAt, CreatedAt: r.CreatedAt}, nil
}

// effectiveState reports an expired pending invitation as expired.
func effectiveState(a invitationAttrs, now time.Time) string {
	if a.State == invitePending && !now.Before(a.ExpiresAt) {
		return "expired"
	}
	return a.State
}

func (s *Server) listInvitations(c *call) (int, any, error) {
	limit := int(queryInt(c, "limit", 100))
	recs, err := s.st.Records(c.ctx(), c.ws.ID, invitationCollection, store.ListOptions{After: queryInt(c, "after", 0), Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	out := sdk.InvitationCollectionResponse{Data: []sdk.Invitation{}}
	for _, r := range recs {
		inv, err := invitationJSON(r)
		if err != nil {
			return 0, nil, err
		}
		a, _ := decodeInvitation(r)
		inv.State = effectiveState(a, c.now())
		out.Data = append(out.Data, inv)
	}
	out.Meta.Count = len(out.Data)
	if limit > 0 && len(recs) == limit {
		out.Meta.NextAfter = recs[len(recs)-1].Seq
	}
	return 200, out, nil
}

func (s *Server) createInvitation(c *call) (int, any, error) {
	role, _ := c.body["role"].(string)
	email, _ := c.body["email"].(string)
	// Only an owner makes owners, as with role changes.
	if role == sdk.RoleOwner && c.role != sdk.RoleOwner {
		return 0, nil, forbidden("only an owner invites an owner")
	}
	ttl := DefaultInvitationTTL
	if h, ok := numberOf(c.body["expires_in_hours"]); ok {
		ttl = time.Duration(h) * time.Hour
	}
	if u, err := s.st.UserByEmail(c.ctx(), strings.TrimSpace(email)); err == nil {
		if _, err := s.st.Role(c.ctx(), c.ws.ID, u.ID); err == nil {
			return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "%s is already a member of this workspace", email)
		}
	}
	inv, err := CreateInvitation(c.ctx(), s.st, InvitationOptions{WorkspaceID: c.ws.ID, Email: email, Role: role, TTL: ttl, InvitedBy: c.p.Actor(), AppURL: s.opts.AppURL, Now: c.now()})
	if err != nil {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/email", Message: err.Error()})
	}
	if s.opts.Invitations != nil {
		s.opts.Invitations(InvitationNotice{WorkspaceID: c.ws.ID, WorkspaceName: c.ws.Name, Email: inv.Invitation.Email, Role: role, Link: inv.Link, ExpiresAt: inv.Invitation.ExpiresAt})
	}
	return 201, sdk.InvitationCreatedResponse{Data: inv.Invitation, Token: inv.Token, AcceptURL: inv.Link}, nil
}

func (s *Server) revokeInvitation(c *call) (int, any, error) {
	id := c.r.PathValue("invitation")
	rec, err := s.st.UpdateRecordIf(c.ctx(), c.ws.ID, invitationCollection, id, func(r *store.Record) error {
		a, err := decodeInvitation(*r)
		if err != nil {
			return err
		}
		if a.State != invitePending {
			return errorf(http.StatusConflict, sdk.CodeConflict, "the invitation is %s; only a pending invitation can be revoked", a.State)
		}
		now := c.now()
		a.State, a.RevokedAt = inviteRevoked, &now
		r.Attributes, err = json.Marshal(a)
		r.UpdatedAt = now
		return err
	}, c.audit("invitation.revoke", invitationCollection+"/"+id, nil))
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, notFound("no invitation %q", id)
	}
	if err != nil {
		return 0, nil, err
	}
	inv, err := invitationJSON(rec)
	return 200, sdk.InvitationResponse{Data: inv}, err
}

// parseInvitationToken splits rvi_<workspace>.<invitation>.<secret>.
func parseInvitationToken(tok string) (ws, id string, ok bool) {
	rest, found := strings.CutPrefix(tok, invitationPrefix)
	if !found {
		return "", "", false
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 || !validULID(parts[0]) || !validULID(parts[1]) || parts[2] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

var errBadInvitation = errorf(http.StatusNotFound, sdk.CodeInvitationInvalid, "the invitation link is not valid")

// acceptInvitation makes the signed-in user a member with the invited
// role. The invitation is consumed in one transaction that checks its
// state, expiry and email, so two accepts cannot both succeed.
func (s *Server) acceptInvitation(c *call) (int, any, error) {
	tok, _ := c.body["token"].(string)
	wsID, id, ok := parseInvitationToken(strings.TrimSpace(tok))
	if !ok {
		return 0, nil, errBadInvitation
	}
	ws, err := s.st.Workspace(c.ctx(), wsID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, errBadInvitation
		}
		return 0, nil, err
	}
	hash := auth.Hash(strings.TrimSpace(tok))
	cur, err := s.st.Record(c.ctx(), wsID, invitationCollection, id)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, errBadInvitation
	}
	if err != nil {
		return 0, nil, err
	}
	ca, err := decodeInvitation(cur)
	if err != nil {
		return 0, nil, err
	}
	if subtle.ConstantTimeCompare([]byte(ca.TokenHash), []byte(hash)) != 1 {
		return 0, nil, errBadInvitation
	}
	if role, err := s.st.Role(c.ctx(), wsID, c.p.UserID); err == nil {
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "you are already a member of this workspace (%s)", role)
	} else if !errors.Is(err, store.ErrNotFound) {
		return 0, nil, err
	}
	now := c.now()
	// One transaction: the invitation turns accepted, the membership is
	// created and both are audited, or nothing is. Of concurrent accepts
	// of one link exactly one sees it pending.
	var role string
	err = s.st.InTx(c.ctx(), func(tx store.RecordTx) error {
		r, err := tx.Record(wsID, invitationCollection, id)
		if errors.Is(err, store.ErrNotFound) {
			return errBadInvitation
		}
		if err != nil {
			return err
		}
		a, err := decodeInvitation(r)
		if err != nil {
			return err
		}
		if subtle.ConstantTimeCompare([]byte(a.TokenHash), []byte(hash)) != 1 {
			return errBadInvitation
		}
		switch effectiveState(a, now) {
		case invitePending:
		case "expired":
			return errorf(http.StatusGone, sdk.CodeExpired, "the invitation expired at %s", a.ExpiresAt.Format(time.RFC3339))
		default:
			return errorf(http.StatusGone, sdk.CodeInvitationUsed, "the invitation was %s", a.State)
		}
		if !strings.EqualFold(strings.TrimSpace(a.Email), strings.TrimSpace(c.p.Email)) {
			return forbidden("the invitation is for another email address; sign in as that address")
		}
		uid := c.p.UserID
		a.State, a.AcceptedBy, a.AcceptedAt = inviteAccepted, &uid, &now
		if r.Attributes, err = json.Marshal(a); err != nil {
			return err
		}
		r.UpdatedAt = now
		if err := tx.Update(&r); err != nil {
			return err
		}
		if err := tx.AddMember(wsID, uid, a.Role, now); errors.Is(err, store.ErrConflict) {
			return errorf(http.StatusConflict, sdk.CodeConflict, "you are already a member of this workspace")
		} else if err != nil {
			return err
		}
		role = a.Role
		if err := tx.Audit(store.AuditEntry{WorkspaceID: wsID, Actor: c.p.Actor(), Action: "invitation.accept", Target: invitationCollection + "/" + id, CreatedAt: now}); err != nil {
			return err
		}
		return tx.Audit(store.AuditEntry{WorkspaceID: wsID, Actor: c.p.Actor(), Action: "member.add", Target: "members/" + itoa(uid),
			Detail: json.RawMessage(fmt.Sprintf(`{"role":%q,"invitation":%q}`, a.Role, id)), CreatedAt: now})
	})
	if err != nil {
		return 0, nil, err
	}
	s.forgetRoles(wsID)
	return 200, sdk.InvitationAcceptedResponse{Data: sdk.InvitationAccepted{WorkspaceID: wsID, WorkspaceName: ws.Name, Role: role, UserID: c.p.UserID, InvitationID: id}}, nil
}

func (s *Server) listMembers(c *call) (int, any, error) {
	ms, err := s.st.Members(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	out := sdk.MemberCollectionResponse{Data: make([]sdk.Member, 0, len(ms))}
	for _, m := range ms {
		out.Data = append(out.Data, sdk.Member{UserID: m.UserID, Email: m.Email, Role: m.Role})
	}
	out.Meta.Count = len(out.Data)
	return 200, out, nil
}
