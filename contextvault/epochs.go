package contextvault

import (
	"context"
	"errors"
	"fmt"

	"reeve.dev/reeve/contextvault/seal"
	"reeve.dev/reeve/server/sdk"
)

// RefreshResult says what a refresh brought.
type RefreshResult struct {
	Sources  int      `json:"sources"`
	NewKeys  int      `json:"new_keys"`
	Gone     []string `json:"gone,omitempty"`
	Refused  []string `json:"refused,omitempty"`
	NewNames []string `json:"new_sources,omitempty"`
}

// Refresh reads the sources this device belongs to and the keys wrapped
// to it: every new wrap is opened (its signature checked against the
// wrapping device's pinned keys) before it is kept, and acknowledged as
// materialized. A wrap that does not open is refused and reported.
func (v *Vault) Refresh(ctx context.Context) (RefreshResult, error) {
	var res RefreshResult
	srv, err := v.server()
	if err != nil {
		return res, err
	}
	if _, err := v.refreshDevices(ctx); err != nil {
		return res, err
	}
	vaults, err := srv.Vaults(ctx)
	if err != nil {
		return res, apiErr("list vaults", err)
	}
	id, err := v.identity()
	if err != nil {
		return res, err
	}
	known, err := v.l.sources()
	if err != nil {
		return res, err
	}
	listed := map[string]bool{}
	var acks []sdk.ContextKeyRef
	for _, cv := range vaults {
		listed[cv.ID] = true
		isNew := true
		for _, k := range known {
			isNew = isNew && k.ID != cv.ID
		}
		if isNew {
			res.NewNames = append(res.NewNames, cv.Name)
		}
		if err := v.l.putSource(sourceOf(cv)); err != nil {
			return res, err
		}
		if err := v.learnDevices(cv.Recipients); err != nil {
			return res, err
		}
		for _, k := range cv.Keys {
			if _, err := v.l.key(cv.ID, k.Epoch); err == nil {
				if k.State == sdk.KeyEmitted {
					acks = append(acks, sdk.ContextKeyRef{VaultID: cv.ID, Epoch: k.Epoch})
				}
				continue
			}
			u, err := id.Unwrap(k.Wrapped, seal.KeyLabel{VaultID: cv.ID, Epoch: k.Epoch}, v.signerOf)
			if err != nil {
				res.Refused = append(res.Refused, fmt.Sprintf("%s epoch %d: %v", cv.Name, k.Epoch, err))
				continue
			}
			if err := v.l.putKey(localKey{SourceID: cv.ID, Epoch: k.Epoch, Wrapped: k.Wrapped, WrappedBy: u.WrappedBy}); err != nil {
				return res, err
			}
			res.NewKeys++
			acks = append(acks, sdk.ContextKeyRef{VaultID: cv.ID, Epoch: k.Epoch})
		}
	}
	for _, k := range known {
		if !listed[k.ID] && !k.Gone {
			res.Gone = append(res.Gone, k.Name)
			if err := v.l.markGone(k.ID); err != nil {
				return res, err
			}
		}
	}
	res.Sources = len(vaults)
	if len(acks) > 0 {
		if _, err := srv.MarkMaterialized(ctx, acks); err != nil {
			return res, apiErr("acknowledge keys", err)
		}
	}
	return res, nil
}

func sourceOf(cv sdk.ContextDeviceVault) Source {
	return Source{ID: cv.ID, Kind: cv.Kind, Name: cv.Name, Epoch: cv.Epoch, Role: cv.Role, UseWhen: cv.UseWhen, UpdateWhen: cv.UpdateWhen,
		RepoURL: cv.RepoURL, Provider: cv.Provider, Branch: cv.Branch, HeadCommit: cv.HeadCommit, SyncState: cv.SyncState,
		RotationDue: cv.RotationDue, PendingProposals: cv.PendingProposals}
}

// CreateVault creates a vault owned by this device's user and publishes
// its first epoch, wrapped to every device of the user.
func (v *Vault) CreateVault(ctx context.Context, req sdk.ContextSourceRequest) (Source, error) {
	srv, err := v.server()
	if err != nil {
		return Source{}, err
	}
	req.Kind = sdk.ContextKindVault
	cv, err := srv.CreateVault(ctx, req)
	if err != nil {
		return Source{}, apiErr("create vault "+req.Name, err)
	}
	if err := v.l.putSource(sourceOf(cv)); err != nil {
		return Source{}, err
	}
	if _, err := v.rotate(ctx, cv.ID, "first"); err != nil {
		return Source{}, err
	}
	return v.l.source(cv.ID)
}

// EpochResult is one epoch published.
type EpochResult struct {
	Vault      string   `json:"vault"`
	VaultID    string   `json:"vault_id"`
	Epoch      int64    `json:"epoch"`
	Reason     string   `json:"reason"`
	Recipients []string `json:"recipients"`
	Granted    int      `json:"granted,omitempty"`
}

// rotate publishes a source's next epoch with a fresh key wrapped to
// exactly the devices eligible now (the server refuses any other set).
// When eligibility changed meanwhile it reads the vault again and tries
// once more.
func (v *Vault) rotate(ctx context.Context, sourceID, reason string) (EpochResult, error) {
	srv, err := v.server()
	if err != nil {
		return EpochResult{}, err
	}
	id, err := v.identity()
	if err != nil {
		return EpochResult{}, err
	}
	for attempt := 0; ; attempt++ {
		cv, err := srv.Vault(ctx, sourceID)
		if err != nil {
			return EpochResult{}, apiErr("read vault "+sourceID, err)
		}
		if cv.Kind != sdk.ContextKindVault {
			return EpochResult{}, fmt.Errorf("%w: %s is a git source: it has no epochs", ErrRefused, cv.Name)
		}
		if err := v.learnDevices(cv.Recipients); err != nil {
			return EpochResult{}, err
		}
		next := cv.Epoch + 1
		key := seal.NewKey()
		label := seal.KeyLabel{VaultID: cv.ID, Epoch: next}
		res := EpochResult{Vault: cv.Name, VaultID: cv.ID, Epoch: next, Reason: reason}
		var keys []sdk.ContextWrappedKey
		var mine string
		for _, d := range cv.Recipients {
			w, err := id.Wrap(label, key, seal.Public{Recipient: d.Recipient, SigningKey: d.SigningKey}, v.DeviceID())
			if err != nil {
				return res, err
			}
			keys = append(keys, sdk.ContextWrappedKey{VaultID: cv.ID, Epoch: next, DeviceID: d.ID, Wrapped: w})
			res.Recipients = append(res.Recipients, d.ID)
			if d.ID == v.DeviceID() {
				mine = w
			}
		}
		if mine == "" {
			return res, fmt.Errorf("%w: this device is not among the vault's eligible devices", ErrRefused)
		}
		_, err = srv.PublishEpoch(ctx, cv.ID, sdk.ContextEpochRequest{Epoch: next, Reason: reason, Keys: keys})
		if err != nil {
			if attempt == 0 && (Code(err) == sdk.CodeMissingWrap || Code(err) == sdk.CodeDeviceNotEligible) {
				continue // the recipients changed under us: read them again
			}
			return res, apiErr(fmt.Sprintf("publish epoch %d of %s", next, cv.Name), err)
		}
		if err := v.l.putKey(localKey{SourceID: cv.ID, Epoch: next, Wrapped: mine, WrappedBy: v.DeviceID()}); err != nil {
			return res, err
		}
		src := sourceOf(cv)
		src.Epoch, src.RotationDue = next, false
		if err := v.l.putSource(src); err != nil {
			return res, err
		}
		// Events waiting in the outbox are sealed again under the new key,
		// so that nobody cut off by this rotation can read them.
		if err := v.reseal(ctx, cv.ID, next); err != nil {
			return res, err
		}
		v.logf("published epoch %d of %s for %d device(s) (%s)", next, cv.Name, len(keys), reason)
		return res, nil
	}
}

// EpochPublish publishes a vault's first epoch, or gives its current
// epoch key to eligible devices that lack it.
func (v *Vault) EpochPublish(ctx context.Context, ref string) (EpochResult, error) {
	srv, err := v.server()
	if err != nil {
		return EpochResult{}, err
	}
	if _, err := v.Refresh(ctx); err != nil {
		return EpochResult{}, err
	}
	src, err := v.l.source(ref)
	if err != nil {
		return EpochResult{}, err
	}
	if src.Epoch == 0 {
		return v.rotate(ctx, src.ID, "first")
	}
	cv, err := srv.Vault(ctx, src.ID)
	if err != nil {
		return EpochResult{}, apiErr("read vault", err)
	}
	res := EpochResult{Vault: cv.Name, VaultID: cv.ID, Epoch: cv.Epoch, Reason: "publish"}
	obl, err := srv.PendingGrants(ctx)
	if err != nil {
		return res, apiErr("list pending grants", err)
	}
	var keys []sdk.ContextWrappedKey
	for _, o := range obl {
		if o.VaultID != cv.ID || o.Epoch != cv.Epoch {
			continue
		}
		if err := v.learnDevices([]sdk.ContextDevice{o.Device}); err != nil {
			return res, err
		}
		ks, err := v.wrapSourceFor(cv.ID, cv.Epoch, o.Device)
		if err != nil {
			return res, err
		}
		keys = append(keys, ks...)
		res.Recipients = append(res.Recipients, o.Device.ID)
	}
	if len(keys) > 0 {
		if _, err := srv.Emit(ctx, sdk.ContextEmitRequest{VaultID: cv.ID, Keys: keys}); err != nil {
			return res, apiErr("publish the epoch key", err)
		}
	}
	res.Granted = len(keys)
	return res, nil
}

// EpochRotate publishes a vault's next epoch now.
func (v *Vault) EpochRotate(ctx context.Context, ref, reason string) (EpochResult, error) {
	if _, err := v.Refresh(ctx); err != nil {
		return EpochResult{}, err
	}
	src, err := v.l.source(ref)
	if err != nil {
		return EpochResult{}, err
	}
	if reason == "" {
		reason = "manual"
	}
	return v.rotate(ctx, src.ID, reason)
}

// RotationsProcess rotates every vault of this device whose rotation is
// due (requested by a person, or after a revocation).
func (v *Vault) RotationsProcess(ctx context.Context) ([]EpochResult, error) {
	if _, err := v.Refresh(ctx); err != nil {
		return nil, err
	}
	srcs, err := v.l.sources()
	if err != nil {
		return nil, err
	}
	var out []EpochResult
	for _, s := range srcs {
		if s.Gone || s.Kind != sdk.ContextKindVault || !s.RotationDue || s.Epoch == 0 {
			continue
		}
		r, err := v.rotate(ctx, s.ID, "requested")
		if Code(err) == sdk.CodeEpochTaken {
			continue // another device rotated it first
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// RevokeTarget names what to revoke: a device, or a member of a vault.
type RevokeTarget struct {
	DeviceID string
	Vault    string
	Member   string // email or user id
}

// RevokesResult is what revokes-process did.
type RevokesResult struct {
	Revoked  []sdk.ContextRevocation `json:"revoked"`
	Rotated  []EpochResult           `json:"rotated"`
	Untouchd []string                `json:"not_rotated,omitempty"`
}

// RevokesProcess files a revocation when t names one, then rotates every
// vault that a revoked device or removed member can still read, so they
// get no key to what is written next (they keep what they had).
func (v *Vault) RevokesProcess(ctx context.Context, t RevokeTarget) (RevokesResult, error) {
	var res RevokesResult
	srv, err := v.server()
	if err != nil {
		return res, err
	}
	if t.DeviceID != "" || t.Vault != "" {
		req := sdk.ContextRevokeRequest{DeviceID: t.DeviceID}
		if t.Vault != "" {
			src, err := v.l.source(t.Vault)
			if err != nil {
				return res, err
			}
			req.VaultID = src.ID
			if n, ok := parseUserID(t.Member); ok {
				req.UserID = n
			} else {
				req.Email = t.Member
			}
		}
		if _, err := srv.Revoke(ctx, req); err != nil {
			return res, apiErr("revoke", err)
		}
	}
	pending, err := srv.PendingRevocations(ctx)
	if err != nil {
		return res, apiErr("list pending revocations", err)
	}
	res.Revoked = pending
	done := map[string]bool{}
	for _, p := range pending {
		if done[p.VaultID] {
			continue
		}
		done[p.VaultID] = true
		r, err := v.rotate(ctx, p.VaultID, "revocation")
		if Code(err) == sdk.CodeEpochTaken {
			continue
		}
		if err != nil {
			return res, err
		}
		res.Rotated = append(res.Rotated, r)
	}
	if _, err := v.Refresh(ctx); err != nil && !errors.Is(err, ErrNotPaired) {
		return res, err
	}
	return res, nil
}

// GrantsResult is what grants-process did.
type GrantsResult struct {
	Granted []sdk.ContextWrappedKey `json:"granted"`
}

// GrantsProcess wraps, for every eligible device that lacks one, each key
// this device holds of the vaults they share.
func (v *Vault) GrantsProcess(ctx context.Context) (GrantsResult, error) {
	var res GrantsResult
	srv, err := v.server()
	if err != nil {
		return res, err
	}
	if _, err := v.Refresh(ctx); err != nil {
		return res, err
	}
	obl, err := srv.PendingGrants(ctx)
	if err != nil {
		return res, apiErr("list pending grants", err)
	}
	byVault := map[string][]sdk.ContextWrappedKey{}
	var order []string
	for _, o := range obl {
		if err := v.learnDevices([]sdk.ContextDevice{o.Device}); err != nil {
			return res, err
		}
		ks, err := v.wrapSourceFor(o.VaultID, o.Epoch, o.Device)
		if errors.Is(err, ErrNoKey) {
			continue
		}
		if err != nil {
			return res, err
		}
		if _, ok := byVault[o.VaultID]; !ok {
			order = append(order, o.VaultID)
		}
		byVault[o.VaultID] = append(byVault[o.VaultID], ks...)
	}
	for _, id := range order {
		added, err := srv.Emit(ctx, sdk.ContextEmitRequest{VaultID: id, Keys: byVault[id]})
		if err != nil {
			return res, apiErr("deliver grants", err)
		}
		res.Granted = append(res.Granted, added...)
	}
	return res, nil
}

// TeamGrant is what sharing a vault did.
type TeamGrant struct {
	Vault   string              `json:"vault"`
	UserID  int64               `json:"user_id"`
	Devices []sdk.ContextDevice `json:"devices"`
	Keys    int                 `json:"keys_wrapped"`
}

// TeamGrantCreate shares a vault with another member of the workspace:
// every key of it this device holds is wrapped to each of their approved
// devices (whose fingerprints the answer lists, to compare). A member
// without a device yet gets the keys from grants-process once they enroll.
func (v *Vault) TeamGrantCreate(ctx context.Context, ref, member, role string) (TeamGrant, error) {
	srv, err := v.server()
	if err != nil {
		return TeamGrant{}, err
	}
	if _, err := v.Refresh(ctx); err != nil {
		return TeamGrant{}, err
	}
	src, err := v.l.source(ref)
	if err != nil {
		return TeamGrant{}, err
	}
	ds, err := v.refreshDevices(ctx)
	if err != nil {
		return TeamGrant{}, err
	}
	grant := &sdk.ContextMemberGrant{Role: role}
	if n, ok := parseUserID(member); ok {
		grant.UserID = n
	} else {
		grant.Email = member
	}
	res := TeamGrant{Vault: src.Name}
	// The server resolves emails; devices are matched by user id, which
	// a first grant without keys reveals.
	if grant.UserID == 0 {
		if _, err := srv.Emit(ctx, sdk.ContextEmitRequest{VaultID: src.ID, Member: grant, Keys: []sdk.ContextWrappedKey{}}); err != nil {
			return res, apiErr("share "+src.Name, err)
		}
		cv, err := srv.Vault(ctx, src.ID)
		if err != nil {
			return res, apiErr("read vault", err)
		}
		for _, m := range cv.Members {
			if m.Email != "" && equalFold(m.Email, member) {
				grant.UserID = m.UserID
			}
		}
		grant.Email = ""
	}
	res.UserID = grant.UserID
	var keys []sdk.ContextWrappedKey
	for _, d := range ds {
		if d.UserID != grant.UserID || (d.State != sdk.DeviceActive && d.State != sdk.DeviceApproved) {
			continue
		}
		if src.Kind == sdk.ContextKindVault {
			ks, err := v.wrapSourceFor(src.ID, 0, d)
			if err != nil {
				return res, err
			}
			keys = append(keys, ks...)
		}
		res.Devices = append(res.Devices, d)
	}
	if keys == nil {
		keys = []sdk.ContextWrappedKey{}
	}
	if _, err := srv.Emit(ctx, sdk.ContextEmitRequest{VaultID: src.ID, Member: grant, Keys: keys}); err != nil {
		return res, apiErr("share "+src.Name, err)
	}
	res.Keys = len(keys)
	return res, nil
}

// TeamGrantsAccept takes the vaults shared with this device's user and
// the keys wrapped for it.
func (v *Vault) TeamGrantsAccept(ctx context.Context) (RefreshResult, error) {
	return v.Refresh(ctx)
}
