package api

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

func (s *Server) runtimeHandlers() map[string]handlerFunc {
	return map[string]handlerFunc{
		"getApiWorkspacesWorkspaceInstalls":                  s.listInstalls,
		"postApiWorkspacesWorkspaceInstalls":                 s.createInstall,
		"getApiWorkspacesWorkspaceInstallsInstall":           s.getInstall,
		"deleteApiWorkspacesWorkspaceInstallsInstall":        s.deleteInstall,
		"postApiWorkspacesWorkspaceInstallsInstallHeartbeat": s.heartbeat,
		"postApiWorkspacesWorkspaceRelayToken":               s.clientRelayToken,
		"postApiRuntimeRelayToken":                           s.daemonRelayToken,
		"postApiRuntimeInternalRelayValidate":                s.relayValidate,
		"postApiWorkspacesWorkspacePairingCodes":             s.browserPairingCode,
		"postApiPairingCodes":                                s.daemonPairingCode,
		"postApiPairingCodesCodeClaim":                       s.claimPairingCode,
		"getApiPairingCodesCodeStatus":                       s.pairingStatus,
		"postApiPairingCodesCodeApprove":                     s.approvePairingCode,
	}
}

func installJSON(in store.Install) sdk.Install {
	return sdk.Install{ID: in.ID, WorkspaceID: in.WorkspaceID, Name: in.Name, CreatedAt: in.CreatedAt, LastSeenAt: in.LastSeenAt}
}

func (s *Server) listInstalls(c *call) (int, any, error) {
	ins, err := s.st.Installs(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	out := map[string]any{}
	list := make([]sdk.Install, 0, len(ins))
	for _, in := range ins {
		list = append(list, installJSON(in))
	}
	out["data"], out["meta"] = list, sdk.ListMeta{Count: len(list)}
	return 200, out, nil
}

// newInstall registers a machine and returns it with its issue token, the
// only time the plaintext exists.
func (s *Server) newInstall(c *call, workspaceID, name string) (sdk.Install, error) {
	plain, err := auth.NewToken(auth.PrefixInstall)
	if err != nil {
		return sdk.Install{}, err
	}
	if name == "" {
		name = "machine"
	}
	in := store.Install{ID: newRecordID(), WorkspaceID: workspaceID, Name: name, TokenHash: auth.Hash(plain), CreatedBy: c.p.Actor(), CreatedAt: c.now()}
	a := c.audit("install.create", "installs/"+in.ID, map[string]any{"name": name})
	a.WorkspaceID = workspaceID
	if err := s.st.CreateInstall(c.ctx(), in, a); err != nil {
		return sdk.Install{}, err
	}
	out := installJSON(in)
	out.IssueToken = plain
	return out, nil
}

func (s *Server) createInstall(c *call) (int, any, error) {
	name, _ := c.body["name"].(string)
	in, err := s.newInstall(c, c.ws.ID, name)
	if err != nil {
		return 0, nil, err
	}
	c.w.Header().Set("Cache-Control", "no-store")
	return 201, sdk.InstallResponse{Data: in}, nil
}

func (s *Server) install(c *call) (store.Install, error) {
	in, err := s.st.Install(c.ctx(), c.ws.ID, c.r.PathValue("install"))
	if errors.Is(err, store.ErrNotFound) {
		return in, notFound("no install %q", c.r.PathValue("install"))
	}
	return in, err
}

func (s *Server) getInstall(c *call) (int, any, error) {
	in, err := s.install(c)
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.InstallResponse{Data: installJSON(in)}, nil
}

func (s *Server) deleteInstall(c *call) (int, any, error) {
	id := c.r.PathValue("install")
	if err := s.st.RevokeInstall(c.ctx(), c.ws.ID, id, c.now(), c.audit("install.detach", "installs/"+id, nil)); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, notFound("no install %q", id)
		}
		return 0, nil, err
	}
	s.creds.drop(func(_ string, p auth.Principal) bool { return p.InstallID == id })
	return 204, nil, nil
}

func (s *Server) heartbeat(c *call) (int, any, error) {
	in, err := s.install(c)
	if err != nil {
		return 0, nil, err
	}
	now := c.now()
	if err := s.st.TouchInstall(c.ctx(), in.ID, now); err != nil {
		return 0, nil, err
	}
	in.LastSeenAt = &now
	return 200, sdk.InstallResponse{Data: installJSON(in)}, nil
}

func (s *Server) relayToken(subject, workspace, role, target string) (any, error) {
	if s.opts.Signer == nil {
		return nil, errors.New("relay signing is not configured")
	}
	tok, exp, err := s.opts.Signer.Sign(subject, workspace, role, target)
	if err != nil {
		return nil, err
	}
	return sdk.RelayTokenResponse{Data: sdk.RelayToken{Token: tok, ExpiresAt: exp.UTC(), RelayURL: s.opts.RelayURL}}, nil
}

func (s *Server) clientRelayToken(c *call) (int, any, error) {
	out, err := s.relayToken(c.p.Actor(), c.ws.ID, auth.RelayRoleClient, "")
	return 201, out, err
}

func (s *Server) daemonRelayToken(c *call) (int, any, error) {
	out, err := s.relayToken(c.p.InstallID, c.p.Workspace, auth.RelayRoleDaemon, c.p.InstallID)
	return 201, out, err
}

// relayValidate answers whether the presented JWT (already verified by
// authentication) admits the connection the relay describes.
func (s *Server) relayValidate(c *call) (int, any, error) {
	if w, _ := c.body["workspace_id"].(string); w != "" && w != c.p.Workspace {
		return 0, nil, forbidden("the relay token is for another workspace")
	}
	if r, _ := c.body["role"].(string); r != "" && r != c.p.Role {
		return 0, nil, forbidden("the relay token is for role %s", c.p.Role)
	}
	if t, _ := c.body["runtime_target_id"].(string); t != "" && c.p.Role == auth.RelayRoleDaemon && t != c.p.InstallID {
		return 0, nil, forbidden("the relay token is for another runtime target")
	}
	return 200, map[string]any{"data": map[string]any{"valid": true, "workspace_id": c.p.Workspace, "role": c.p.Role, "subject": c.p.InstallID}}, nil
}

// ---- pairing (spec 3.1) ----
//
// A pairing code is a record in the server-wide scope (workspace ""),
// keyed by the code. Its state moves pending → claimed → approved. Status
// tokens and issue tokens are stored only as hashes. Approval returns the
// new install's issue token once (spec 3.1); the daemon's first status poll
// after approval rotates that token and returns the new plaintext once, so
// the credential the daemon keeps is one nobody else has seen.

const pairingCollection = "pairing-codes"

// pairingTTL bounds how long a code can be claimed and approved.
const pairingTTL = 15 * time.Minute

// codeAlphabet avoids look-alike characters (0/O, 1/I/L).
const codeAlphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"

func newPairingCode() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	for i := range b {
		b[i] = codeAlphabet[int(b[i])%len(codeAlphabet)]
	}
	return string(b[:]), nil
}

type pairing struct {
	Code            string  `json:"code"`
	State           string  `json:"state"`
	Initiator       string  `json:"initiator"`
	WorkspaceID     *string `json:"workspace_id"`
	Name            string  `json:"name"`
	ExpiresAt       string  `json:"expires_at"`
	StatusTokenHash string  `json:"status_token_hash,omitempty"`
	InstallID       string  `json:"install_id,omitempty"`
	// Delivered is set once the daemon's poll has received its credential.
	Delivered bool `json:"delivered,omitempty"`
}

func (p pairing) answer(statusToken string, creds *sdk.Install, relayURL string) map[string]any {
	d := map[string]any{"code": p.Code, "state": p.State, "expires_at": p.ExpiresAt, "approved": p.State == "approved", "workspace_id": p.WorkspaceID, "relay_credentials": nil}
	if statusToken != "" {
		d["status_token"] = statusToken
	}
	if creds != nil {
		d["relay_credentials"] = map[string]any{"install_id": creds.ID, "workspace_id": creds.WorkspaceID, "issue_token": creds.IssueToken, "relay_url": relayURL}
	}
	return map[string]any{"data": d}
}

func (s *Server) createPairing(c *call, initiator string, workspace *string) (pairing, string, error) {
	code, err := newPairingCode()
	if err != nil {
		return pairing{}, "", err
	}
	name, _ := c.body["name"].(string)
	p := pairing{Code: code, State: "pending", Initiator: initiator, WorkspaceID: workspace, Name: name, ExpiresAt: c.now().Add(pairingTTL).Format(time.RFC3339)}
	var statusToken string
	if initiator == "daemon" {
		// Roles swap: the daemon that minted the code is the one that polls.
		if statusToken, err = auth.NewToken("rvt_"); err != nil {
			return pairing{}, "", err
		}
		p.StatusTokenHash = auth.Hash(statusToken)
	}
	if err := s.putPairing(c, p, true); err != nil {
		return pairing{}, "", err
	}
	return p, statusToken, nil
}

func (s *Server) putPairing(c *call, p pairing, create bool) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	now := c.now()
	if create {
		rec := store.Record{ID: newRecordID(), Collection: pairingCollection, NaturalKey: p.Code, Attributes: b, CreatedBy: c.p.Actor(), CreatedAt: now, UpdatedAt: now}
		return s.st.CreateRecord(c.ctx(), &rec, store.AuditEntry{})
	}
	rec, err := s.st.RecordByKey(c.ctx(), "", pairingCollection, p.Code)
	if err != nil {
		return err
	}
	rec.Attributes, rec.UpdatedAt = b, now
	return s.st.UpdateRecord(c.ctx(), &rec, store.AuditEntry{})
}

func (s *Server) loadPairing(c *call) (pairing, error) {
	code := strings.ToUpper(c.r.PathValue("code"))
	rec, err := s.st.RecordByKey(c.ctx(), "", pairingCollection, code)
	if errors.Is(err, store.ErrNotFound) {
		return pairing{}, notFound("no pairing code %q", code)
	}
	if err != nil {
		return pairing{}, err
	}
	var p pairing
	if err := json.Unmarshal(rec.Attributes, &p); err != nil {
		return pairing{}, err
	}
	if exp, err := time.Parse(time.RFC3339, p.ExpiresAt); err == nil && c.now().After(exp) && p.State != "approved" {
		return pairing{}, notFound("pairing code %q has expired", code)
	}
	return p, nil
}

func (s *Server) browserPairingCode(c *call) (int, any, error) {
	id := c.ws.ID
	p, _, err := s.createPairing(c, "browser", &id)
	if err != nil {
		return 0, nil, err
	}
	return 201, p.answer("", nil, ""), nil
}

func (s *Server) daemonPairingCode(c *call) (int, any, error) {
	p, tok, err := s.createPairing(c, "daemon", nil)
	if err != nil {
		return 0, nil, err
	}
	c.w.Header().Set("Cache-Control", "no-store")
	return 201, p.answer(tok, nil, ""), nil
}

// optionalUser authenticates a user on a public route when a credential is
// present.
func (s *Server) optionalUser(c *call) error {
	tok := bearer(c.r)
	if tok == "" {
		return unauthenticated("a user bearer credential is required to claim this code")
	}
	p, err := s.userPrincipal(c, tok)
	if err != nil {
		return err
	}
	c.p = p
	return nil
}

func (s *Server) claimPairingCode(c *call) (int, any, error) {
	p, err := s.loadPairing(c)
	if err != nil {
		return 0, nil, err
	}
	if p.State != "pending" {
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "pairing code is already %s", p.State)
	}
	var statusToken string
	if p.Initiator == "daemon" {
		// A user claims a daemon's code for one of their workspaces.
		if err := s.optionalUser(c); err != nil {
			return 0, nil, err
		}
		wid, _ := c.body["workspace"].(string)
		if wid == "" {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "/workspace", Message: "is required to claim a daemon's code"})
		}
		role, err := s.st.Role(c.ctx(), wid, c.p.UserID)
		if err != nil || auth.RoleRank(role) < auth.RoleRank(sdk.RoleAdmin) {
			return 0, nil, forbidden("pairing needs the admin role in the workspace")
		}
		p.WorkspaceID = &wid
	} else {
		if statusToken, err = auth.NewToken("rvt_"); err != nil {
			return 0, nil, err
		}
		p.StatusTokenHash = auth.Hash(statusToken)
		if n, _ := c.body["name"].(string); n != "" {
			p.Name = n
		}
	}
	p.State = "claimed"
	if err := s.putPairing(c, p, false); err != nil {
		return 0, nil, err
	}
	c.w.Header().Set("Cache-Control", "no-store")
	return 200, p.answer(statusToken, nil, ""), nil
}

func (s *Server) pairingStatus(c *call) (int, any, error) {
	p, err := s.loadPairing(c)
	if err != nil {
		return 0, nil, err
	}
	tok := bearer(c.r)
	if tok == "" || p.StatusTokenHash == "" || subtle.ConstantTimeCompare([]byte(auth.Hash(tok)), []byte(p.StatusTokenHash)) != 1 {
		return 0, nil, unauthenticated("the pairing status token is missing or wrong")
	}
	var creds *sdk.Install
	if p.State == "approved" && !p.Delivered {
		plain, err := auth.NewToken(auth.PrefixInstall)
		if err != nil {
			return 0, nil, err
		}
		if err := s.st.SetInstallToken(c.ctx(), *p.WorkspaceID, p.InstallID, auth.Hash(plain)); err != nil {
			return 0, nil, err
		}
		id := p.InstallID
		s.creds.drop(func(_ string, pr auth.Principal) bool { return pr.InstallID == id })
		creds = &sdk.Install{ID: p.InstallID, WorkspaceID: *p.WorkspaceID, IssueToken: plain}
		p.Delivered = true
		if err := s.putPairing(c, p, false); err != nil {
			return 0, nil, err
		}
	}
	c.w.Header().Set("Cache-Control", "no-store")
	return 200, p.answer("", creds, s.opts.RelayURL), nil
}

func (s *Server) approvePairingCode(c *call) (int, any, error) {
	p, err := s.loadPairing(c)
	if err != nil {
		return 0, nil, err
	}
	if p.State != "claimed" {
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "pairing code is %s, not claimed", p.State)
	}
	role, err := s.st.Role(c.ctx(), *p.WorkspaceID, c.p.UserID)
	if err != nil || auth.RoleRank(role) < auth.RoleRank(sdk.RoleAdmin) {
		return 0, nil, forbidden("approving a pairing needs the admin role in the workspace")
	}
	// Retire the previous install of this machine in this workspace.
	if olds, err := s.st.Installs(c.ctx(), *p.WorkspaceID); err == nil {
		for _, o := range olds {
			if o.Name == p.Name && p.Name != "" {
				_ = s.st.RevokeInstall(c.ctx(), *p.WorkspaceID, o.ID, c.now(), store.AuditEntry{WorkspaceID: *p.WorkspaceID, Actor: c.p.Actor(), Action: "install.retire", Target: "installs/" + o.ID, CreatedAt: c.now()})
				s.creds.drop(func(_ string, pr auth.Principal) bool { return pr.InstallID == o.ID })
			}
		}
	}
	in, err := s.newInstall(c, *p.WorkspaceID, p.Name)
	if err != nil {
		return 0, nil, err
	}
	p.State, p.InstallID = "approved", in.ID
	if err := s.putPairing(c, p, false); err != nil {
		return 0, nil, err
	}
	c.w.Header().Set("Cache-Control", "no-store")
	return 200, p.answer("", &in, s.opts.RelayURL), nil
}
