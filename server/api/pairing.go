package api

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/e2e"
	"reeve.dev/reeve/server/store"
)

// Pairing (spec 3.1, 4.2) binds a daemon to a workspace.
//
// A pairing code is a record in the server-wide scope (workspace ""), keyed
// by the code. Two initiations share one state machine:
//
//	browser-minted: pending --daemon claims--> claimed --user approves--> approved
//	daemon-minted:  pending --user approves (choosing the workspace)--> approved
//	either:         pending|claimed --user denies--> denied
//
// A daemon-minted code may also be claimed by a user first (the spec's
// "roles swap"), which only fixes its workspace. Whoever holds the status
// token (the daemon: it minted the code, or claimed it) polls the status.
//
// The machine is identified by the fingerprint of its X25519 trust anchor,
// which the daemon sends when it mints or claims. Approval creates the
// install, records that fingerprint beside it, and retires every earlier
// install of the same fingerprint in the workspace.
//
// The issue token is minted at the first status poll after approval and its
// plaintext is returned there, once, to the status-token holder; until then
// the install has no usable credential. The approver never sees it, so the
// only copy is the daemon's.

const pairingCollection = "pairing-codes"

// statusTokenPrefix marks a pairing status token.
const statusTokenPrefix = "rvt_"

// machineCollection holds, per install (natural key: its id), the machine
// it was paired from.
const machineCollection = "install-machines"

const (
	pairPending  = "pending"
	pairClaimed  = "claimed"
	pairApproved = "approved"
	pairDenied   = "denied"
)

// DefaultPairingTTL bounds how long a code can be claimed and approved.
const DefaultPairingTTL = 15 * time.Minute

// maxPairingTTL bounds a browser-minted code's expires_in_seconds.
const maxPairingTTL = time.Hour

// codeAlphabet avoids look-alike characters (0/O, 1/I/L): 31 symbols, so
// eight of them carry about 39.6 bits.
const codeAlphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"

// CodeLength is the length of a pairing code.
const CodeLength = 8

func newPairingCode() (string, error) {
	out := make([]byte, 0, CodeLength)
	var b [16]byte
	for len(out) < CodeLength {
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		for _, x := range b {
			// Rejection sampling keeps every symbol equally likely.
			if int(x) >= 256-256%len(codeAlphabet) || len(out) == CodeLength {
				continue
			}
			out = append(out, codeAlphabet[int(x)%len(codeAlphabet)])
		}
	}
	return string(out), nil
}

// normCode accepts a code as people type it: any case, with dashes or
// spaces between groups.
func normCode(s string) string {
	s = strings.ToUpper(s)
	s = strings.NewReplacer("-", "", " ", "").Replace(s)
	return s
}

func validCode(s string) bool {
	if len(s) != CodeLength {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune(codeAlphabet, r) {
			return false
		}
	}
	return true
}

// machine is what a daemon tells about itself when it mints or claims.
type machine struct {
	Name        string `json:"name"`
	AnchorKey   string `json:"anchor_public_key"`
	Fingerprint string `json:"anchor_fingerprint"`
	Worker      bool   `json:"worker,omitempty"`
	Transport   string `json:"transport,omitempty"`
}

// machineFromBody reads and checks the daemon's description of itself.
func machineFromBody(body map[string]any) (machine, error) {
	m := machine{}
	m.Name, _ = body["name"].(string)
	m.Name = strings.TrimSpace(m.Name)
	if m.Name == "" {
		m.Name = "machine"
	}
	raw, _ := body["anchor_public_key"].(string)
	if raw == "" {
		return m, invalid(sdk.ErrorDetail{Field: "/anchor_public_key", Message: "is required: the daemon's X25519 anchor public key, base64"})
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(key) != 32 {
		return m, invalid(sdk.ErrorDetail{Field: "/anchor_public_key", Message: "must be 32 bytes, standard base64"})
	}
	m.AnchorKey = base64.StdEncoding.EncodeToString(key)
	m.Fingerprint = e2e.Fingerprint(key)
	m.Worker, _ = body["worker"].(bool)
	m.Transport, _ = body["transport"].(string)
	if m.Transport == "" {
		m.Transport = "relay"
		if m.Worker {
			m.Transport = "polling"
		}
	}
	return m, nil
}

type pairing struct {
	Code        string   `json:"code"`
	State       string   `json:"state"`
	Initiator   string   `json:"initiator"` // browser or daemon
	WorkspaceID *string  `json:"workspace_id"`
	Machine     *machine `json:"machine,omitempty"`
	ExpiresAt   string   `json:"expires_at"`
	CreatedBy   string   `json:"created_by,omitempty"`
	// StatusTokenHash is the hash of the poller's token.
	StatusTokenHash string `json:"status_token_hash,omitempty"`
	InstallID       string `json:"install_id,omitempty"`
	DecidedBy       string `json:"decided_by,omitempty"`
	DecidedAt       string `json:"decided_at,omitempty"`
	// Delivered is set once the poller has received the credential.
	Delivered bool `json:"delivered,omitempty"`
}

func (p pairing) expired(now time.Time) bool {
	exp, err := time.Parse(time.RFC3339, p.ExpiresAt)
	return err != nil || !now.Before(exp)
}

// answer is the body of every pairing route. statusToken and creds are
// set only in the one answer that hands them out.
func (s *Server) pairingAnswer(p pairing, statusToken string, creds *sdk.RelayCredentials) sdk.PairingCodeResponse {
	exp, _ := time.Parse(time.RFC3339, p.ExpiresAt)
	d := sdk.PairingCode{
		Code: p.Code, State: p.State, Approved: p.State == pairApproved, Initiator: p.Initiator,
		WorkspaceID: p.WorkspaceID, ExpiresAt: exp, InstallID: p.InstallID,
		ApprovalURL:      s.opts.AppURL + "/pair?code=" + url.QueryEscape(p.Code),
		StatusToken:      statusToken,
		RelayCredentials: creds,
	}
	if p.Machine != nil {
		d.Machine = &sdk.PairingMachine{Name: p.Machine.Name, AnchorFingerprint: p.Machine.Fingerprint, Worker: p.Machine.Worker, Transport: p.Machine.Transport}
	}
	return sdk.PairingCodeResponse{Data: d}
}

func (s *Server) createPairing(c *call, p pairing) (pairing, error) {
	for range 5 {
		code, err := newPairingCode()
		if err != nil {
			return pairing{}, err
		}
		p.Code = code
		b, err := json.Marshal(p)
		if err != nil {
			return pairing{}, err
		}
		now := c.now()
		rec := store.Record{ID: newRecordID(), Collection: pairingCollection, NaturalKey: p.Code, Attributes: b, CreatedBy: c.p.Actor(), CreatedAt: now, UpdatedAt: now}
		err = s.st.CreateRecord(c.ctx(), &rec, store.AuditEntry{})
		if errors.Is(err, store.ErrConflict) {
			continue // a live code already has this value: draw again
		}
		return p, err
	}
	return pairing{}, errors.New("create pairing code: no free code after 5 draws")
}

// loadPairing reads the code of the path: 404 for an unknown code, 410 for
// an expired one that was never approved.
func (s *Server) loadPairing(c *call) (store.Record, pairing, error) {
	code := normCode(c.r.PathValue("code"))
	if !validCode(code) {
		return store.Record{}, pairing{}, notFound("no pairing code %q", code)
	}
	rec, err := s.st.RecordByKey(c.ctx(), "", pairingCollection, code)
	if errors.Is(err, store.ErrNotFound) {
		return rec, pairing{}, notFound("no pairing code %q", code)
	}
	if err != nil {
		return rec, pairing{}, err
	}
	var p pairing
	if err := json.Unmarshal(rec.Attributes, &p); err != nil {
		return rec, pairing{}, err
	}
	if (p.State == pairPending || p.State == pairClaimed) && p.expired(c.now()) {
		return rec, pairing{}, errExpired(code)
	}
	return rec, p, nil
}

func errExpired(code string) error {
	return errorf(http.StatusGone, sdk.CodeExpired, "pairing code %s has expired; start over with a new code", code)
}

// transition applies fn to the stored code inside one write, so that two
// racing approvals or polls cannot both win.
func (s *Server) transition(c *call, rec store.Record, audit store.AuditEntry, fn func(p *pairing) error) (pairing, error) {
	var out pairing
	_, err := s.st.UpdateRecordIf(c.ctx(), "", pairingCollection, rec.ID, func(r *store.Record) error {
		var p pairing
		if err := json.Unmarshal(r.Attributes, &p); err != nil {
			return err
		}
		if err := fn(&p); err != nil {
			return err
		}
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		r.Attributes, r.UpdatedAt = b, c.now()
		out = p
		return nil
	}, audit)
	return out, err
}

func stateConflict(p pairing, want string) error {
	return errorf(http.StatusConflict, sdk.CodeConflict, "pairing code %s is %s, not %s", p.Code, p.State, want)
}

// browserPairingCode: an admin mints a code for their workspace; the daemon
// claims it with `reeve pair CODE`.
func (s *Server) browserPairingCode(c *call) (int, any, error) {
	ttl := DefaultPairingTTL
	if raw, present := c.body["expires_in_seconds"]; present {
		v, ok := numberOf(raw)
		if !ok || v < 1 || v > int64(maxPairingTTL.Seconds()) {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "/expires_in_seconds", Message: "must be a whole number of seconds from 1 to 3600"})
		}
		ttl = time.Duration(v) * time.Second
	}
	id := c.ws.ID
	p, err := s.createPairing(c, pairing{State: pairPending, Initiator: "browser", WorkspaceID: &id, CreatedBy: c.p.Actor(), ExpiresAt: c.now().Add(ttl).Format(time.RFC3339)})
	if err != nil {
		return 0, nil, err
	}
	a := c.audit("pairing.create", "pairing-codes/"+p.Code, nil)
	if err := s.st.AppendAudit(c.ctx(), a); err != nil {
		return 0, nil, err
	}
	return 201, s.pairingAnswer(p, "", nil), nil
}

// daemonPairingCode: a daemon mints a code and receives the status token
// it will poll with; the user opens {app_url}/pair?code=... to approve.
func (s *Server) daemonPairingCode(c *call) (int, any, error) {
	m, err := machineFromBody(c.body)
	if err != nil {
		return 0, nil, err
	}
	tok, err := auth.NewToken(statusTokenPrefix)
	if err != nil {
		return 0, nil, err
	}
	p, err := s.createPairing(c, pairing{State: pairPending, Initiator: "daemon", Machine: &m, StatusTokenHash: auth.Hash(tok), ExpiresAt: c.now().Add(DefaultPairingTTL).Format(time.RFC3339)})
	if err != nil {
		return 0, nil, err
	}
	c.w.Header().Set("Cache-Control", "no-store")
	return 201, s.pairingAnswer(p, tok, nil), nil
}

// claimPairingCode: for a browser-minted code the daemon claims it
// (describing itself) and receives the status token; for a daemon-minted
// code a user claims it for one of their workspaces.
func (s *Server) claimPairingCode(c *call) (int, any, error) {
	rec, p, err := s.loadPairing(c)
	if err != nil {
		return 0, nil, err
	}
	if p.State != pairPending {
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "pairing code %s is already %s; codes are single-use", p.Code, p.State)
	}
	var statusToken string
	var audit store.AuditEntry
	var apply func(q *pairing) error
	if p.Initiator == "daemon" {
		if err := s.optionalUser(c); err != nil {
			return 0, nil, err
		}
		wid, err := s.pairingWorkspace(c, p)
		if err != nil {
			return 0, nil, err
		}
		audit = s.pairingAudit(c, wid, "pairing.claim", p.Code)
		apply = func(q *pairing) error {
			if q.State != pairPending {
				return stateConflict(*q, pairPending)
			}
			q.State, q.WorkspaceID = pairClaimed, &wid
			return nil
		}
	} else {
		m, err := machineFromBody(c.body)
		if err != nil {
			return 0, nil, err
		}
		if statusToken, err = auth.NewToken(statusTokenPrefix); err != nil {
			return 0, nil, err
		}
		audit = s.pairingAudit(c, *p.WorkspaceID, "pairing.claim", p.Code)
		audit.Actor = "machine:" + m.Fingerprint
		apply = func(q *pairing) error {
			if q.State != pairPending {
				return stateConflict(*q, pairPending)
			}
			q.State, q.Machine, q.StatusTokenHash = pairClaimed, &m, auth.Hash(statusToken)
			return nil
		}
	}
	p, err = s.transition(c, rec, audit, apply)
	if err != nil {
		return 0, nil, err
	}
	c.w.Header().Set("Cache-Control", "no-store")
	return 200, s.pairingAnswer(p, statusToken, nil), nil
}

// optionalUser authenticates a user on a public route.
func (s *Server) optionalUser(c *call) error {
	tok := bearer(c.r)
	if tok == "" {
		return unauthenticated("a user bearer credential is required to claim a daemon's code")
	}
	p, err := s.userPrincipal(c, tok)
	if err != nil {
		return err
	}
	c.p = p
	return nil
}

// pairingWorkspace is the workspace a decision binds the machine to: the
// code's own, else the one named in the body. The caller must be an admin
// there.
func (s *Server) pairingWorkspace(c *call, p pairing) (string, error) {
	var wid string
	if p.WorkspaceID != nil {
		wid = *p.WorkspaceID
		if w, _ := c.body["workspace"].(string); w != "" && w != wid {
			return "", errorf(http.StatusConflict, sdk.CodeConflict, "pairing code %s belongs to workspace %s", p.Code, wid)
		}
	} else {
		wid, _ = c.body["workspace"].(string)
		if wid == "" {
			return "", invalid(sdk.ErrorDetail{Field: "/workspace", Message: "is required: the workspace (ULID) to pair the machine to"})
		}
	}
	if !validULID(wid) {
		return "", errorf(http.StatusNotFound, sdk.CodeWorkspaceNotFound, "workspace %q does not exist", wid)
	}
	if _, err := s.workspace(c, wid); errors.Is(err, store.ErrNotFound) {
		return "", errorf(http.StatusNotFound, sdk.CodeWorkspaceNotFound, "workspace %q does not exist", wid)
	} else if err != nil {
		return "", err
	}
	role, err := s.role(c, wid)
	if err != nil {
		return "", err
	}
	if auth.RoleRank(role) < auth.RoleRank(sdk.RoleAdmin) {
		return "", forbidden("pairing a machine needs the admin role in the workspace; you are %s", role)
	}
	return wid, nil
}

func (s *Server) pairingAudit(c *call, workspace, action, code string) store.AuditEntry {
	a := c.audit(action, "pairing-codes/"+code, nil)
	a.WorkspaceID = workspace
	return a
}

// pairingStatus: the status-token holder polls. The first poll after
// approval mints the issue token and returns its plaintext, once.
func (s *Server) pairingStatus(c *call) (int, any, error) {
	rec, p, err := s.loadPairing(c)
	if err != nil {
		return 0, nil, err
	}
	tok := bearer(c.r)
	if tok == "" || p.StatusTokenHash == "" || subtle.ConstantTimeCompare([]byte(auth.Hash(tok)), []byte(p.StatusTokenHash)) != 1 {
		return 0, nil, errBadStatusToken
	}
	c.w.Header().Set("Cache-Control", "no-store")
	if p.State != pairApproved || p.Delivered {
		return 200, s.pairingAnswer(p, "", nil), nil
	}
	p, err = s.transition(c, rec, store.AuditEntry{}, func(q *pairing) error {
		if q.Delivered {
			return errDelivered
		}
		q.Delivered = true
		return nil
	})
	if errors.Is(err, errDelivered) {
		// A racing poll collected it.
		_, p, err = s.loadPairing(c)
		if err != nil {
			return 0, nil, err
		}
		return 200, s.pairingAnswer(p, "", nil), nil
	}
	if err != nil {
		return 0, nil, err
	}
	plain, err := auth.NewToken(auth.PrefixInstall)
	if err != nil {
		return 0, nil, err
	}
	if err := s.st.SetInstallToken(c.ctx(), *p.WorkspaceID, p.InstallID, auth.Hash(plain)); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "install %s was detached before its credential was collected", p.InstallID)
		}
		return 0, nil, err
	}
	id := p.InstallID
	s.creds.drop(func(_ string, pr auth.Principal) bool { return pr.InstallID == id })
	creds := &sdk.RelayCredentials{InstallID: p.InstallID, WorkspaceID: *p.WorkspaceID, IssueToken: plain, RelayURL: s.opts.RelayURL, ServerURL: s.opts.BaseURL, AppURL: s.opts.AppURL}
	return 200, s.pairingAnswer(p, "", creds), nil
}

var (
	errBadStatusToken = unauthenticated("the pairing status token is missing or wrong")
	errDelivered      = errors.New("credential already delivered")
)

// getPairingCode shows a code to a signed-in user: the approval page reads
// the machine's name and anchor fingerprint from it.
func (s *Server) getPairingCode(c *call) (int, any, error) {
	_, p, err := s.loadPairing(c)
	if err != nil {
		return 0, nil, err
	}
	if p.WorkspaceID != nil {
		if _, err := s.role(c, *p.WorkspaceID); err != nil {
			return 0, nil, err
		}
	}
	return 200, s.pairingAnswer(p, "", nil), nil
}

// approvePairingCode binds the machine: it creates the install (with no
// usable credential until the daemon collects one), records the machine
// beside it, and retires the earlier installs of that machine in the
// workspace.
func (s *Server) approvePairingCode(c *call) (int, any, error) {
	rec, p, err := s.loadPairing(c)
	if err != nil {
		return 0, nil, err
	}
	switch {
	case p.State == pairApproved || p.State == pairDenied:
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "pairing code %s was already %s; codes are single-use", p.Code, p.State)
	case p.Machine == nil:
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "pairing code %s has not been claimed by a machine yet: run `reeve pair %s` on it first", p.Code, p.Code)
	}
	wid, err := s.pairingWorkspace(c, p)
	if err != nil {
		return 0, nil, err
	}
	m := *p.Machine
	unusable, err := auth.NewToken("unissued_")
	if err != nil {
		return 0, nil, err
	}
	in := store.Install{ID: newRecordID(), WorkspaceID: wid, Name: m.Name, TokenHash: auth.Hash(unusable), CreatedBy: c.p.Actor(), CreatedAt: c.now()}
	a := s.pairingAudit(c, wid, "install.create", p.Code)
	a.Target = "installs/" + in.ID
	a.Detail, _ = json.Marshal(map[string]any{"name": m.Name, "anchor_fingerprint": m.Fingerprint, "pairing_code": p.Code})
	a = emit(a, sdk.EventInstallPaired, map[string]any{"install_id": in.ID, "name": in.Name, "via": "pairing"})
	if err := s.st.CreateInstall(c.ctx(), in, a); err != nil {
		return 0, nil, err
	}
	mb, _ := json.Marshal(m)
	now := c.now()
	if err := s.st.CreateRecord(c.ctx(), &store.Record{ID: newRecordID(), WorkspaceID: wid, Collection: machineCollection, NaturalKey: in.ID, Attributes: mb, CreatedBy: c.p.Actor(), CreatedAt: now, UpdatedAt: now}, store.AuditEntry{}); err != nil {
		s.abandonInstall(c, in)
		return 0, nil, err
	}
	p, err = s.transition(c, rec, s.pairingAudit(c, wid, "pairing.approve", p.Code), func(q *pairing) error {
		if q.State != pairPending && q.State != pairClaimed {
			return stateConflict(*q, "awaiting a decision")
		}
		if q.expired(now) {
			return errExpired(q.Code)
		}
		q.State, q.WorkspaceID, q.InstallID = pairApproved, &wid, in.ID
		q.DecidedBy, q.DecidedAt = c.p.Actor(), now.Format(time.RFC3339)
		return nil
	})
	if err != nil {
		s.abandonInstall(c, in)
		return 0, nil, err
	}
	if err := s.retireMachine(c, wid, m.Fingerprint, in.ID); err != nil {
		return 0, nil, err
	}
	return 200, s.pairingAnswer(p, "", nil), nil
}

// abandonInstall revokes an install whose approval lost a race or failed.
func (s *Server) abandonInstall(c *call, in store.Install) {
	a := s.pairingAudit(c, in.WorkspaceID, "install.abandon", "")
	a.Target = "installs/" + in.ID
	if err := s.st.RevokeInstall(c.ctx(), in.WorkspaceID, in.ID, c.now(), a); err != nil {
		s.log.Warn("abandon install", "install", in.ID, "err", err)
	}
}

// retireMachine revokes every active install of the workspace paired from
// the machine with this anchor fingerprint, except keep (spec 5 rule 4).
func (s *Server) retireMachine(c *call, workspace, fingerprint, keep string) error {
	machines, err := s.machines(c, workspace)
	if err != nil {
		return err
	}
	ins, err := s.st.Installs(c.ctx(), workspace)
	if err != nil {
		return err
	}
	for _, o := range ins {
		if o.ID == keep || machines[o.ID].Fingerprint != fingerprint {
			continue
		}
		a := s.pairingAudit(c, workspace, "install.retire", "")
		a.Target = "installs/" + o.ID
		a.Detail, _ = json.Marshal(map[string]any{"replaced_by": keep, "anchor_fingerprint": fingerprint})
		if err := s.st.RevokeInstall(c.ctx(), workspace, o.ID, c.now(), a); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		id := o.ID
		s.creds.drop(func(_ string, pr auth.Principal) bool { return pr.InstallID == id })
	}
	return nil
}

// machines maps install ids of a workspace to the machines they were
// paired from. Installs created directly (POST .../installs) have none.
func (s *Server) machines(c *call, workspace string) (map[string]machine, error) {
	out := map[string]machine{}
	var after int64
	for {
		recs, err := s.st.Records(c.ctx(), workspace, machineCollection, store.ListOptions{After: after, Limit: 500})
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			var m machine
			if json.Unmarshal(r.Attributes, &m) == nil {
				out[r.NaturalKey] = m
			}
			after = r.Seq
		}
		if len(recs) < 500 {
			return out, nil
		}
	}
}

// denyPairingCode refuses a machine. A code bound to a workspace needs an
// admin there; an unbound daemon-minted code can be refused by any
// signed-in user who has it (refusing grants nothing).
func (s *Server) denyPairingCode(c *call) (int, any, error) {
	rec, p, err := s.loadPairing(c)
	if err != nil {
		return 0, nil, err
	}
	if p.State != pairPending && p.State != pairClaimed {
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "pairing code %s was already %s", p.Code, p.State)
	}
	var audit store.AuditEntry
	if p.WorkspaceID != nil {
		if _, err := s.pairingWorkspace(c, p); err != nil {
			return 0, nil, err
		}
		audit = s.pairingAudit(c, *p.WorkspaceID, "pairing.deny", p.Code)
	}
	now := c.now()
	p, err = s.transition(c, rec, audit, func(q *pairing) error {
		if q.State != pairPending && q.State != pairClaimed {
			return stateConflict(*q, "awaiting a decision")
		}
		q.State, q.DecidedBy, q.DecidedAt = pairDenied, c.p.Actor(), now.Format(time.RFC3339)
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	return 200, s.pairingAnswer(p, "", nil), nil
}
