package api

import (
	"encoding/json"
	"errors"

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
		"getApiRuntimeInstall":                               s.runtimeInstall,
		"syncDaemonSession":                                  s.syncSession,
		"postApiWorkspacesWorkspacePairingCodes":             s.guarded(false, s.browserPairingCode),
		"postApiPairingCodes":                                s.guarded(true, s.daemonPairingCode),
		"postApiPairingCodesCodeClaim":                       s.guarded(false, s.claimPairingCode),
		"getApiPairingCodesCodeStatus":                       s.guarded(false, s.pairingStatus),
		"getApiPairingCodesCode":                             s.guarded(false, s.getPairingCode),
		"postApiPairingCodesCodeApprove":                     s.guarded(false, s.approvePairingCode),
		"postApiPairingCodesCodeDeny":                        s.guarded(false, s.denyPairingCode),
	}
}

func installJSON(in store.Install, m machine) sdk.Install {
	return sdk.Install{ID: in.ID, WorkspaceID: in.WorkspaceID, Name: in.Name, CreatedAt: in.CreatedAt, LastSeenAt: in.LastSeenAt,
		AnchorFingerprint: m.Fingerprint, AnchorPublicKey: m.AnchorKey, Worker: m.Worker, Transport: m.Transport}
}

// installWithMachine answers one install with the machine it was paired
// from, when it was paired.
func (s *Server) installWithMachine(c *call, in store.Install) (sdk.Install, error) {
	var m machine
	rec, err := s.st.RecordByKey(c.ctx(), in.WorkspaceID, machineCollection, in.ID)
	switch {
	case err == nil:
		if err := json.Unmarshal(rec.Attributes, &m); err != nil {
			return sdk.Install{}, err
		}
	case !errors.Is(err, store.ErrNotFound):
		return sdk.Install{}, err
	}
	return installJSON(in, m), nil
}

func (s *Server) listInstalls(c *call) (int, any, error) {
	ins, err := s.st.Installs(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	machines, err := s.machines(c, c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	out := map[string]any{}
	list := make([]sdk.Install, 0, len(ins))
	for _, in := range ins {
		list = append(list, installJSON(in, machines[in.ID]))
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
	a = emit(a, sdk.EventInstallPaired, map[string]any{"install_id": in.ID, "name": in.Name, "via": "registration"})
	if err := s.st.CreateInstall(c.ctx(), in, a); err != nil {
		return sdk.Install{}, err
	}
	out := installJSON(in, machine{})
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
	out, err := s.installWithMachine(c, in)
	return 200, sdk.InstallResponse{Data: out}, err
}

// runtimeInstall lets a daemon read its own install: a read-only check that
// its issue token still works (reeve doctor).
func (s *Server) runtimeInstall(c *call) (int, any, error) {
	in, err := s.st.Install(c.ctx(), c.p.Workspace, c.p.InstallID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, errBadCredential
	}
	if err != nil {
		return 0, nil, err
	}
	out, err := s.installWithMachine(c, in)
	return 200, sdk.InstallResponse{Data: out}, err
}

func (s *Server) deleteInstall(c *call) (int, any, error) {
	id := c.r.PathValue("install")
	if err := s.st.RevokeInstall(c.ctx(), c.ws.ID, id, c.now(), emit(c.audit("install.detach", "installs/"+id, nil), sdk.EventInstallDetached, map[string]any{"install_id": id})); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, notFound("no install %q", id)
		}
		return 0, nil, err
	}
	s.creds.drop(func(_ string, p auth.Principal) bool { return p.InstallID == id })
	return 204, nil, nil
}

// heartbeat is the daemon reporting it is alive, with its own issue token;
// it may only speak for itself.
func (s *Server) heartbeat(c *call) (int, any, error) {
	if c.r.PathValue("install") != c.p.InstallID {
		return 0, nil, forbidden("an install may only send its own heartbeat")
	}
	in, err := s.install(c)
	if err != nil {
		return 0, nil, err
	}
	now := c.now()
	if err := s.st.TouchInstall(c.ctx(), in.ID, now); err != nil {
		return 0, nil, err
	}
	in.LastSeenAt = &now
	out, err := s.installWithMachine(c, in)
	return 200, sdk.InstallResponse{Data: out}, err
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
	if err != nil {
		return 0, nil, err
	}
	// The access token rides along for the daemon (access_token.go).
	if target, _ := c.body["runtime_target_id"].(string); target != "" {
		rt := out.(sdk.RelayTokenResponse)
		if rt.Data.AccessToken, err = s.accessToken(c, target, rt.Data.ExpiresAt); err != nil {
			return 0, nil, err
		}
		out = rt
	}
	return 201, out, nil
}

func (s *Server) daemonRelayToken(c *call) (int, any, error) {
	out, err := s.relayToken(c.p.InstallID, c.p.Workspace, auth.RelayRoleDaemon, c.p.InstallID)
	if err != nil {
		return 0, nil, err
	}
	// An exchange is a sign of life as good as a heartbeat.
	if err := s.st.TouchInstall(c.ctx(), c.p.InstallID, c.now()); err != nil {
		s.log.Warn("touch install", "install", c.p.InstallID, "err", err)
	}
	return 201, out, nil
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

// installActive reports whether a relay JWT's install is still attached:
// a detached or retired install's JWTs stop working at once, not when they
// expire. Answers are cached like credentials, and dropped on detach.
func (s *Server) installActive(c *call, workspace, id string) (bool, error) {
	key := "install:" + id
	now := s.opts.Now()
	gen := s.creds.generation()
	if _, ok := s.creds.get(key, now); ok {
		return true, nil
	}
	_, err := s.st.Install(c.ctx(), workspace, id)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	s.creds.put(key, auth.Principal{Kind: auth.KindDaemon, InstallID: id, Workspace: workspace}, nil, now, gen)
	return true, nil
}
