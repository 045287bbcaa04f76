package api

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"unicode"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Provider keys (spec 4.7). The secret is sealed under the master key
// (server/secrets, envelope encryption: a data key per key, wrapped by the
// master key) and never leaves the server except through
// provider-key-material, to a gateway acting for a live run of the same
// workspace. Responses carry has_secret and a fingerprint: a keyed MAC
// (HMAC-SHA-256 under a server key of its own, bound to the workspace), so
// a fingerprint cannot be checked against a guessed secret offline.

const (
	modeBYOK        = "managed_byok"
	modePassThrough = "managed_pass_through"
	// fingerprintKeyName is the sealed server key the fingerprint MAC uses.
	fingerprintKeyName = "provider-key-fingerprint"
	maxSecretBytes     = 4096
)

func (s *Server) providerKeyHandlers() map[string]handlerFunc {
	return map[string]handlerFunc{
		"listProviderKeys":           s.listProviderKeys,
		"createProviderKey":          s.createProviderKey,
		"getProviderKey":             s.getProviderKey,
		"deleteProviderKey":          s.deleteProviderKey,
		"rotateProviderKey":          s.rotateProviderKey,
		"releaseProviderKeyMaterial": s.providerKeyMaterial,
	}
}

// checkSecret refuses a secret that cannot be a provider key: empty,
// oversized, or with spaces or control characters (a pasted line break).
func checkSecret(v any) (string, error) {
	sec, _ := v.(string)
	if len(sec) < 8 || len(sec) > maxSecretBytes {
		return "", invalid(sdk.ErrorDetail{Field: "/secret", Message: "a provider key secret is 8 to 4096 characters"})
	}
	for _, r := range sec {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return "", invalid(sdk.ErrorDetail{Field: "/secret", Message: "a provider key secret has no spaces or control characters"})
		}
	}
	return sec, nil
}

// fingerprint is the keyed MAC of a secret in a workspace.
func (s *Server) fingerprint(c *call, secret string) (string, error) {
	key, err := s.secret(c.ctx(), fingerprintKeyName, func() ([]byte, error) {
		b := make([]byte, 32)
		_, err := rand.Read(b)
		return b, err
	})
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(c.ws.ID))
	m.Write([]byte{0})
	m.Write([]byte(secret))
	return "hmac-sha256:" + hex.EncodeToString(m.Sum(nil)[:12]), nil
}

// seal encrypts a key's secret under the master key, bound to its id.
func (s *Server) sealProviderSecret(id, secret string) ([]byte, error) {
	return s.opts.Secrets.Seal(store.ProviderKeySecretName(id), []byte(secret))
}

func providerKeyJSON(k store.ProviderKey) sdk.ProviderKey {
	return sdk.ProviderKey{ID: k.ID, WorkspaceID: k.WorkspaceID, Provider: k.Provider, Mode: k.Mode, TeamID: k.TeamID, KeyRef: k.KeyRef,
		HasSecret: len(k.Sealed) > 0, Fingerprint: k.Fingerprint, Version: k.Version, CreatedBy: k.CreatedBy,
		CreatedAt: k.CreatedAt, UpdatedAt: k.UpdatedAt, RotatedAt: k.RotatedAt}
}

func (s *Server) listProviderKeys(c *call) (int, any, error) {
	ks, err := s.st.ProviderKeys(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	out := sdk.ProviderKeyCollectionResponse{Data: make([]sdk.ProviderKey, 0, len(ks))}
	for _, k := range ks {
		out.Data = append(out.Data, providerKeyJSON(k))
	}
	out.Meta.Count = len(out.Data)
	return 200, out, nil
}

func (s *Server) providerKey(c *call) (store.ProviderKey, error) {
	id := c.r.PathValue("providerKey")
	k, err := s.st.ProviderKey(c.ctx(), c.ws.ID, id)
	if errors.Is(err, store.ErrNotFound) {
		return k, notFound("no provider key %q", id)
	}
	return k, err
}

func (s *Server) getProviderKey(c *call) (int, any, error) {
	k, err := s.providerKey(c)
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.ProviderKeyResponse{Data: providerKeyJSON(k)}, nil
}

// createProviderKey stores a key: a managed_byok key needs its secret (it
// could never be used without one); a pass-through key may carry one.
func (s *Server) createProviderKey(c *call) (int, any, error) {
	now := c.now()
	k := store.ProviderKey{ID: newRecordID(), WorkspaceID: c.ws.ID, Version: 1, CreatedBy: c.p.Actor(), CreatedAt: now, UpdatedAt: now}
	k.Provider, _ = c.body["provider"].(string)
	k.Mode, _ = c.body["mode"].(string)
	if n, ok := numberOf(c.body["team_id"]); ok {
		k.TeamID = &n
	}
	if r, ok := c.body["key_ref"].(string); ok {
		k.KeyRef = &r
	}
	raw, has := c.body["secret"]
	if !has && k.Mode == modeBYOK {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/secret", Message: "a managed_byok key needs its secret"})
	}
	if has {
		sec, err := checkSecret(raw)
		if err != nil {
			return 0, nil, err
		}
		if k.Fingerprint, err = s.fingerprint(c, sec); err != nil {
			return 0, nil, err
		}
		if k.Sealed, err = s.sealProviderSecret(k.ID, sec); err != nil {
			return 0, nil, err
		}
	}
	err := s.st.CreateProviderKey(c.ctx(), &k, c.audit("provider_key.create", "provider-keys/"+k.ID,
		map[string]any{"provider": k.Provider, "mode": k.Mode, "fingerprint": k.Fingerprint, "version": k.Version}))
	if err != nil {
		return 0, nil, err
	}
	return 201, sdk.ProviderKeyResponse{Data: providerKeyJSON(k)}, nil
}

// rotateProviderKey replaces the secret (a new fingerprint and version).
// Without a secret in the body a managed_byok key cannot rotate (422): a
// new version of the same secret would rotate nothing. A pass-through key
// without a secret bumps its version (its key lives with the caller).
func (s *Server) rotateProviderKey(c *call) (int, any, error) {
	id := c.r.PathValue("providerKey")
	raw, has := c.body["secret"]
	var sec string
	if has {
		var err error
		if sec, err = checkSecret(raw); err != nil {
			return 0, nil, err
		}
	}
	var fp string
	var sealed []byte
	if has {
		var err error
		if fp, err = s.fingerprint(c, sec); err != nil {
			return 0, nil, err
		}
		if sealed, err = s.sealProviderSecret(id, sec); err != nil {
			return 0, nil, err
		}
	}
	now := c.now()
	var detail map[string]any
	k, err := s.st.UpdateProviderKey(c.ctx(), c.ws.ID, id, func(k *store.ProviderKey) error {
		if !has && k.Mode == modeBYOK {
			return invalid(sdk.ErrorDetail{Field: "/secret", Message: "rotating a managed_byok key needs the new secret"})
		}
		if has {
			if fp == k.Fingerprint {
				return invalid(sdk.ErrorDetail{Field: "/secret", Message: "the new secret is the current one"})
			}
			k.Fingerprint, k.Sealed = fp, sealed
		}
		detail = map[string]any{"from_version": k.Version, "to_version": k.Version + 1, "fingerprint": k.Fingerprint}
		k.Version++
		k.UpdatedAt, k.RotatedAt = now, &now
		return nil
	}, store.AuditEntry{})
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, notFound("no provider key %q", id)
	}
	if err != nil {
		return 0, nil, err
	}
	if err := s.st.AppendAudit(c.ctx(), c.audit("provider_key.rotate", "provider-keys/"+id, detail)); err != nil {
		return 0, nil, err
	}
	return 200, sdk.ProviderKeyResponse{Data: providerKeyJSON(k)}, nil
}

func (s *Server) deleteProviderKey(c *call) (int, any, error) {
	k, err := s.providerKey(c)
	if err != nil {
		return 0, nil, err
	}
	if err := s.st.DeleteProviderKey(c.ctx(), c.ws.ID, k.ID, c.audit("provider_key.delete", "provider-keys/"+k.ID, map[string]any{"fingerprint": k.Fingerprint})); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, notFound("no provider key %q", k.ID)
		}
		return 0, nil, err
	}
	return 200, sdk.ProviderKeyResponse{Data: providerKeyJSON(k)}, nil
}

// providerKeyMaterial releases a key's secret to the gateway: a paired
// install of the workspace (the route's credential), acting for a workflow
// run of that workspace a worker holds now (and, when lease_id is given,
// under that very lease). Every release and every refusal is audited.
func (s *Server) providerKeyMaterial(c *call) (int, any, error) {
	keyID, _ := c.body["provider_key_id"].(string)
	runID, _ := c.body["run_id"].(string)
	leaseID, _ := c.body["lease_id"].(string)
	refuse := func(status int, code, msg string) (int, any, error) {
		// The refusal stands whether or not its audit line is written.
		if err := s.st.AppendAudit(c.ctx(), c.audit("provider_key.material_refused", "provider-keys/"+keyID,
			map[string]any{"run_id": runID, "lease_id": leaseID, "install_id": c.p.InstallID, "reason": msg})); err != nil {
			s.log.Warn("provider key material refused, but its audit entry was not written", "key", keyID, "err", err)
		}
		return 0, nil, errorf(status, code, "%s", msg)
	}
	wf, ok := s.st.(store.Workflows)
	if !ok {
		return refuse(http.StatusForbidden, sdk.CodeForbidden, "this server keeps no workflow runs, so no key is released")
	}
	run, err := wf.Run(c.ctx(), c.ws.ID, runID)
	if errors.Is(err, store.ErrNotFound) {
		return refuse(http.StatusForbidden, sdk.CodeForbidden, "no workflow run "+runID+" in this workspace")
	}
	if err != nil {
		return 0, nil, err
	}
	if !run.Held() {
		return refuse(http.StatusForbidden, sdk.CodeForbidden, "workflow run "+runID+" is not held by a worker ("+run.Status+")")
	}
	if leaseID != "" && leaseID != run.LeaseID {
		return refuse(http.StatusForbidden, sdk.CodeForbidden, "lease "+leaseID+" is not the run's current lease")
	}
	k, err := s.st.ProviderKey(c.ctx(), c.ws.ID, keyID)
	if errors.Is(err, store.ErrNotFound) {
		return refuse(http.StatusNotFound, sdk.CodeNotFound, "no provider key "+keyID+" in this workspace")
	}
	if err != nil {
		return 0, nil, err
	}
	if len(k.Sealed) == 0 {
		return refuse(http.StatusConflict, sdk.CodeConflict, "provider key "+keyID+" holds no secret")
	}
	plain, err := s.opts.Secrets.Open(store.ProviderKeySecretName(k.ID), k.Sealed)
	if err != nil {
		// Never the secret, never the record: only that it did not open.
		s.log.Error("provider key does not open", "key", k.ID, "err", err)
		return 0, nil, errors.New("the provider key could not be opened with this server's master key")
	}
	if err := s.st.AppendAudit(c.ctx(), c.audit("provider_key.material_released", "provider-keys/"+k.ID,
		map[string]any{"run_id": runID, "lease_id": run.LeaseID, "install_id": c.p.InstallID, "version": k.Version, "fingerprint": k.Fingerprint})); err != nil {
		return 0, nil, err
	}
	return 200, sdk.ProviderKeyMaterialResponse{Data: sdk.ProviderKeyMaterial{
		ProviderKeyID: k.ID, Provider: k.Provider, Mode: k.Mode, Version: k.Version, Fingerprint: k.Fingerprint, Secret: string(plain),
	}}, nil
}
