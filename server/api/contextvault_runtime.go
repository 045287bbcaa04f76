package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"reeve.dev/reeve/contextvault/seal"
	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// The runtime routes a device uses, with its machine's issue token. The
// device is always the one bound to the calling install.

// ---- enrollment (docs/context-vault.md: "Devices") ----

func (s *Server) cvDevices(c *call) (int, any, error) {
	cv, err := c.cvStore()
	if err != nil {
		return 0, nil, err
	}
	ds, err := cv.ContextDevices(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	return 200, list(cvDevicesJSON(ds)), nil
}

func (s *Server) cvDevice(c *call) (int, any, error) {
	cv, err := c.cvStore()
	if err != nil {
		return 0, nil, err
	}
	d, err := cv.ContextDevice(c.ctx(), c.ws.ID, c.r.PathValue("enrollment"))
	if err != nil {
		return 0, nil, cvError(err)
	}
	return 200, data(cvDeviceJSON(d)), nil
}

// cvEnroll registers this machine's device: active when it is its user's
// first, else pending until another device of the user approves it.
func (s *Server) cvEnroll(c *call) (int, any, error) {
	cv, err := c.cvStore()
	if err != nil {
		return 0, nil, err
	}
	if c.p.Kind != auth.KindDaemon {
		return 0, nil, forbidden("a device enrolls through its machine's install")
	}
	var req sdk.ContextEnrollRequest
	if err := c.decode(&req); err != nil {
		return 0, nil, err
	}
	pub := seal.Public{Recipient: req.Recipient, SigningKey: req.SigningKey}
	if err := pub.Check(); err != nil {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/recipient", Message: err.Error()})
	}
	in, err := s.st.Install(c.ctx(), c.ws.ID, c.p.InstallID)
	if err != nil {
		return 0, nil, cvError(err)
	}
	user, ok := userOfInstall(in)
	if !ok {
		return 0, nil, invalid(sdk.ErrorDetail{Message: "this install was not paired by a person, so its device has no owner"})
	}
	if prev, err := cv.ContextDeviceByInstall(c.ctx(), c.ws.ID, in.ID); err == nil {
		if prev.Recipient == req.Recipient {
			return 200, data(cvDeviceJSON(prev)), nil // asked again: same answer
		}
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "this machine already has device %s (%s); revoke it before enrolling another", prev.ID, prev.State)
	} else if !errors.Is(err, store.ErrNotFound) {
		return 0, nil, err
	}
	name := req.Name
	if name == "" {
		name = in.Name
	}
	now := c.now()
	d := store.ContextDevice{ID: newRecordID(), WorkspaceID: c.ws.ID, UserID: user, InstallID: in.ID, Name: name,
		Recipient: pub.Recipient, SigningKey: pub.SigningKey, Fingerprint: pub.Fingerprint(), CreatedAt: now, UpdatedAt: now}
	if err := cv.CreateContextDevice(c.ctx(), &d, c.audit("context_device.enroll", cvTarget("devices", d.ID), nil)); err != nil {
		return 0, nil, cvError(err)
	}
	return 201, data(cvDeviceJSON(d)), nil
}

// cvApprove: an approved or active device of the same user vouches for a
// pending one, after its person compared the fingerprint the new device
// shows, and hands it the keys it holds.
func (s *Server) cvApprove(c *call) (int, any, error) {
	var req sdk.ContextApproveRequest
	cv, me, err := c.deviceCall(&req)
	if err != nil {
		return 0, nil, err
	}
	id := c.r.PathValue("enrollment")
	target, err := cv.ContextDevice(c.ctx(), c.ws.ID, id)
	if err != nil {
		return 0, nil, cvError(err)
	}
	if me.State != sdk.DeviceActive && me.State != sdk.DeviceApproved {
		return 0, nil, forbidden("device %s is %s: only an approved device approves others", me.ID, me.State)
	}
	if target.UserID != me.UserID {
		return 0, nil, forbidden("a device approves only devices of its own user; share a vault with another person with team-grant-create")
	}
	if target.State != sdk.DevicePending {
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "device %s is %s, not pending", target.ID, target.State)
	}
	pub := seal.Public{Recipient: target.Recipient, SigningKey: target.SigningKey}
	if !pub.FingerprintMatches(req.Fingerprint) {
		return 0, nil, &apiError{Status: http.StatusUnprocessableEntity, Code: sdk.CodeFingerprintMismatch,
			Message: "the fingerprint does not match the device asking to enroll: do not approve it; compare again with what the new machine prints",
			Details: []sdk.ErrorDetail{{Field: "/fingerprint", Message: "does not match"}}}
	}
	keys, err := c.checkWraps(cv, me, req.Keys, func(k sdk.ContextWrappedKey) error {
		if k.DeviceID != target.ID {
			return fmt.Errorf("a wrap for device %s in the approval of %s", k.DeviceID, target.ID)
		}
		return nil
	}, true)
	if err != nil {
		return 0, nil, err
	}
	out, err := cv.UpdateContextDevice(c.ctx(), c.ws.ID, target.ID, func(d *store.ContextDevice) error {
		if d.State != sdk.DevicePending {
			return errorf(http.StatusConflict, sdk.CodeConflict, "device %s is %s, not pending", d.ID, d.State)
		}
		d.State, d.ApprovedBy, d.UpdatedAt = sdk.DeviceApproved, me.ID, c.now()
		return nil
	}, keys, c.audit("context_device.approve", cvTarget("devices", target.ID), map[string]any{"approved_by": me.ID, "keys": len(keys)}))
	if err != nil {
		return 0, nil, cvError(err)
	}
	return 200, data(cvDeviceJSON(out)), nil
}

// checkWraps turns wraps from a device into stored keys: each for a vault
// whose key of that epoch the sender holds, to a device eligible for it
// (needEligible) — a revoked device or a stranger gets nothing.
func (c *call) checkWraps(cv store.ContextVaults, from store.ContextDevice, in []sdk.ContextWrappedKey, extra func(sdk.ContextWrappedKey) error, memberOnly bool) ([]store.ContextKey, error) {
	held, err := cv.ContextKeysOf(c.ctx(), c.ws.ID, from.ID)
	if err != nil {
		return nil, err
	}
	has := map[string]bool{}
	for _, k := range held {
		has[fmt.Sprintf("%s/%d", k.SourceID, k.Epoch)] = true
	}
	eligible := map[string]map[string]bool{}
	var out []store.ContextKey
	for i, k := range in {
		field := fmt.Sprintf("/keys/%d", i)
		if err := extra(k); err != nil {
			return nil, invalid(sdk.ErrorDetail{Field: field, Message: err.Error()})
		}
		if !has[fmt.Sprintf("%s/%d", k.VaultID, k.Epoch)] {
			return nil, invalid(sdk.ErrorDetail{Field: field, Message: fmt.Sprintf("this device does not hold epoch %d of %s, so it cannot give it", k.Epoch, k.VaultID)})
		}
		if memberOnly {
			el, ok := eligible[k.VaultID]
			if !ok {
				ds, err := cv.EligibleContextDevices(c.ctx(), c.ws.ID, k.VaultID)
				if err != nil {
					return nil, err
				}
				el = map[string]bool{}
				for _, d := range ds {
					el[d.ID] = true
				}
				eligible[k.VaultID] = el
			}
			// A pending device being approved is not eligible yet; its
			// user's membership is what counts.
			if !el[k.DeviceID] {
				if err := c.pendingOfMember(cv, k); err != nil {
					return nil, err
				}
			}
		}
		out = append(out, store.ContextKey{SourceID: k.VaultID, Epoch: k.Epoch, DeviceID: k.DeviceID, Wrapped: k.Wrapped, WrappedBy: from.ID, CreatedAt: c.now()})
	}
	return out, nil
}

// pendingOfMember accepts a wrap for a pending device whose user is an
// active member of the vault (an enrollment being approved).
func (c *call) pendingOfMember(cv store.ContextVaults, k sdk.ContextWrappedKey) error {
	d, err := cv.ContextDevice(c.ctx(), c.ws.ID, k.DeviceID)
	if err != nil {
		return notEligible(k.DeviceID, "is unknown")
	}
	if d.State != sdk.DevicePending {
		return notEligible(d.ID, "is "+d.State)
	}
	ms, err := cv.ContextMembers(c.ctx(), k.VaultID)
	if err != nil {
		return err
	}
	if memberRole(ms, d.UserID) == "" {
		return notEligible(d.ID, "belongs to a user who is not a member of "+k.VaultID)
	}
	return nil
}

func notEligible(deviceID, why string) *apiError {
	return &apiError{Status: http.StatusUnprocessableEntity, Code: sdk.CodeDeviceNotEligible,
		Message: fmt.Sprintf("device %s %s: it gets no key", deviceID, why)}
}

// cvAccept: the new device has unwrapped its keys and is now active.
func (s *Server) cvAccept(c *call) (int, any, error) {
	cv, me, err := c.deviceCall(nil)
	if err != nil {
		return 0, nil, err
	}
	id := c.r.PathValue("enrollment")
	if id != me.ID {
		return 0, nil, forbidden("only device %s accepts its own enrollment", id)
	}
	out, err := cv.UpdateContextDevice(c.ctx(), c.ws.ID, id, func(d *store.ContextDevice) error {
		switch d.State {
		case sdk.DeviceActive:
			return nil
		case sdk.DeviceApproved:
			d.State, d.UpdatedAt = sdk.DeviceActive, c.now()
			return nil
		}
		return errorf(http.StatusConflict, sdk.CodeConflict, "device %s is %s: another device of yours must approve it first (reeve context device-enroll-approve)", d.ID, d.State)
	}, nil, c.audit("context_device.accept", cvTarget("devices", id), nil))
	if err != nil {
		return 0, nil, cvError(err)
	}
	return 200, data(cvDeviceJSON(out)), nil
}

// ---- vaults as a device sees them ----

func (c *call) deviceVault(cv store.ContextVaults, src store.ContextSource, me store.ContextDevice, keys []store.ContextKey) (sdk.ContextDeviceVault, error) {
	j, err := c.sourceWithMembers(cv, src)
	if err != nil {
		return sdk.ContextDeviceVault{}, err
	}
	j.Role = ""
	for _, m := range j.Members {
		if m.UserID == me.UserID && m.State == "active" {
			j.Role = m.Role
		}
	}
	v := sdk.ContextDeviceVault{ContextSource: j, Keys: []sdk.ContextWrappedKey{}}
	for _, k := range keys {
		if k.SourceID == src.ID {
			v.Keys = append(v.Keys, cvKeyJSON(k))
		}
	}
	el, err := cv.EligibleContextDevices(c.ctx(), c.ws.ID, src.ID)
	if err != nil {
		return v, err
	}
	v.Recipients = cvDevicesJSON(el)
	ps, err := cv.ContextProposals(c.ctx(), c.ws.ID, "")
	if err != nil {
		return v, err
	}
	for _, p := range ps {
		if p.SourceID == src.ID && (p.State == sdk.ProposalPending || p.State == sdk.ProposalPreviewed) {
			v.PendingProposals++
		}
	}
	return v, nil
}

func (s *Server) cvDeviceVaults(c *call) (int, any, error) {
	cv, me, err := c.deviceCall(nil)
	if err != nil {
		return 0, nil, err
	}
	srcs, err := cv.ContextSources(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	keys, err := cv.ContextKeysOf(c.ctx(), c.ws.ID, me.ID)
	if err != nil {
		return 0, nil, err
	}
	out := []sdk.ContextDeviceVault{}
	for _, src := range srcs {
		ms, err := cv.ContextMembers(c.ctx(), src.ID)
		if err != nil {
			return 0, nil, err
		}
		if memberRole(ms, me.UserID) == "" {
			continue
		}
		v, err := c.deviceVault(cv, src, me, keys)
		if err != nil {
			return 0, nil, err
		}
		out = append(out, v)
	}
	return 200, list(out), nil
}

func (s *Server) cvDeviceVault(c *call) (int, any, error) {
	cv, me, err := c.deviceCall(nil)
	if err != nil {
		return 0, nil, err
	}
	src, err := c.source(cv, c.r.PathValue("contextVault"), "")
	if err != nil {
		return 0, nil, err
	}
	ms, err := cv.ContextMembers(c.ctx(), src.ID)
	if err != nil {
		return 0, nil, err
	}
	if memberRole(ms, me.UserID) == "" {
		return 0, nil, notFound("no context source %q you are a member of", c.r.PathValue("contextVault"))
	}
	keys, err := cv.ContextKeysOf(c.ctx(), c.ws.ID, me.ID)
	if err != nil {
		return 0, nil, err
	}
	v, err := c.deviceVault(cv, src, me, keys)
	if err != nil {
		return 0, nil, err
	}
	return 200, data(v), nil
}

// cvDeviceCreateVault creates a source owned by the device's user. A
// vault starts at epoch 0: its creator publishes epoch 1 next.
func (s *Server) cvDeviceCreateVault(c *call) (int, any, error) {
	cv, me, err := c.deviceCall(nil)
	if err != nil {
		return 0, nil, err
	}
	if me.State != sdk.DeviceActive && me.State != sdk.DeviceApproved {
		return 0, nil, forbidden("device %s is %s: approve it first", me.ID, me.State)
	}
	var req sdk.ContextSourceRequest
	if err := c.decode(&req); err != nil {
		return 0, nil, err
	}
	if _, err := c.newSource(cv, req, me.UserID); err != nil {
		return 0, nil, err
	}
	src, err := cv.ContextSourceByName(c.ctx(), c.ws.ID, strings.TrimSpace(req.Name))
	if err != nil {
		return 0, nil, err
	}
	v, err := c.deviceVault(cv, src, me, nil)
	if err != nil {
		return 0, nil, err
	}
	return 201, data(v), nil
}

// cvPublishEpoch makes the vault's next epoch, with a wrap for exactly
// the devices eligible now: none missing (they could not read new
// entries), none extra (a revoked device or a stranger gets nothing).
func (s *Server) cvPublishEpoch(c *call) (int, any, error) {
	cv, me, err := c.deviceCall(nil)
	if err != nil {
		return 0, nil, err
	}
	src, err := c.source(cv, c.r.PathValue("contextVault"), "")
	if err != nil {
		return 0, nil, err
	}
	if src.Kind != sdk.ContextKindVault {
		return 0, nil, invalid(sdk.ErrorDetail{Message: "a git source has no epochs"})
	}
	if err := c.eligible(cv, me, src.ID); err != nil {
		return 0, nil, err
	}
	var req sdk.ContextEpochRequest
	if err := c.decode(&req); err != nil {
		return 0, nil, err
	}
	if req.Epoch != src.Epoch+1 {
		return 0, nil, errorf(http.StatusConflict, sdk.CodeEpochTaken, "the vault is at epoch %d; the next is %d, not %d", src.Epoch, src.Epoch+1, req.Epoch)
	}
	if src.Epoch > 0 {
		held, err := cv.ContextKeysOf(c.ctx(), c.ws.ID, me.ID)
		if err != nil {
			return 0, nil, err
		}
		ok := false
		for _, k := range held {
			ok = ok || (k.SourceID == src.ID && k.Epoch == src.Epoch)
		}
		if !ok {
			return 0, nil, forbidden("this device does not hold the vault's current epoch %d; accept your grants first", src.Epoch)
		}
	}
	reason := req.Reason
	if reason == "" {
		reason = map[bool]string{true: "first", false: "rotation"}[src.Epoch == 0]
	}
	keys := make([]store.ContextKey, 0, len(req.Keys))
	for i, k := range req.Keys {
		if k.VaultID != src.ID || k.Epoch != req.Epoch {
			return 0, nil, invalid(sdk.ErrorDetail{Field: fmt.Sprintf("/keys/%d", i), Message: fmt.Sprintf("a wrap of %s epoch %d in the publication of %s epoch %d", k.VaultID, k.Epoch, src.ID, req.Epoch)})
		}
		keys = append(keys, store.ContextKey{SourceID: src.ID, Epoch: req.Epoch, DeviceID: k.DeviceID, Wrapped: k.Wrapped, WrappedBy: me.ID, CreatedAt: c.now()})
	}
	e := store.ContextEpoch{SourceID: src.ID, Epoch: req.Epoch, CreatedBy: me.ID, Reason: reason, CreatedAt: c.now()}
	err = cv.PublishContextEpoch(c.ctx(), c.ws.ID, e, keys, func(el []store.ContextDevice) error {
		want := map[string]bool{}
		for _, d := range el {
			want[d.ID] = true
		}
		got := map[string]bool{}
		for _, k := range keys {
			if !want[k.DeviceID] {
				d, err := cv.ContextDevice(c.ctx(), c.ws.ID, k.DeviceID)
				if err == nil && d.State == sdk.DeviceRevoked {
					return notEligible(k.DeviceID, "is revoked")
				}
				return notEligible(k.DeviceID, "is not an approved device of a member of this vault")
			}
			if got[k.DeviceID] {
				return invalid(sdk.ErrorDetail{Field: "/keys", Message: "two wraps for device " + k.DeviceID})
			}
			got[k.DeviceID] = true
		}
		var missing []string
		for _, d := range el {
			if !got[d.ID] {
				missing = append(missing, d.ID)
			}
		}
		if len(missing) > 0 {
			return &apiError{Status: http.StatusUnprocessableEntity, Code: sdk.CodeMissingWrap,
				Message: "the new epoch leaves eligible devices without its key: " + strings.Join(missing, ", ") + "; refresh the vault and wrap for them too"}
		}
		return nil
	}, c.audit("context_vault.epoch", cvTarget("vaults", src.ID), map[string]any{"epoch": req.Epoch, "reason": reason, "recipients": len(keys)}))
	if errors.Is(err, store.ErrConflict) {
		return 0, nil, errorf(http.StatusConflict, sdk.CodeEpochTaken, "another device published epoch %d first; refresh and check whether a rotation is still due", req.Epoch)
	}
	if err != nil {
		return 0, nil, cvError(err)
	}
	return 201, data(sdk.ContextEpoch{VaultID: src.ID, Epoch: e.Epoch, CreatedBy: me.ID, Reason: reason, Recipients: len(keys), CreatedAt: e.CreatedAt}), nil
}

// ---- events ----

// eventDigest commits to everything an event says, so a replay of its id
// with any other content is told apart.
func eventDigest(e sdk.ContextEvent) string {
	return seal.Digest(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%d\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s", e.EventID, e.EntryID, e.Kind, e.Epoch, e.Base, e.UseWhen, e.UpdateWhen, e.Path, e.Commit, e.Ciphertext))
}

func (s *Server) cvPush(c *call) (int, any, error) {
	var req sdk.ContextPushRequest
	cv, me, err := c.deviceCall(&req)
	if err != nil {
		return 0, nil, err
	}
	src, err := c.eligibleSource(cv, me, req.VaultID)
	if err != nil {
		return 0, nil, err
	}
	evs := make([]store.ContextEvent, len(req.Events))
	for i, e := range req.Events {
		field := fmt.Sprintf("/events/%d", i)
		switch src.Kind {
		case sdk.ContextKindVault:
			if e.Kind != sdk.EventPut && e.Kind != sdk.EventDelete {
				return 0, nil, invalid(sdk.ErrorDetail{Field: field + "/kind", Message: "a vault takes put and delete events"})
			}
			if e.Ciphertext == "" {
				return 0, nil, invalid(sdk.ErrorDetail{Field: field + "/ciphertext", Message: "a vault event is sealed: the ciphertext is required"})
			}
		case sdk.ContextKindGit:
			if e.Kind != sdk.EventDoc && e.Kind != sdk.EventDelete {
				return 0, nil, invalid(sdk.ErrorDetail{Field: field + "/kind", Message: "a git source takes doc and delete events"})
			}
			if e.Ciphertext != "" {
				return 0, nil, invalid(sdk.ErrorDetail{Field: field + "/ciphertext", Message: "a git source's content stays in git"})
			}
		}
		evs[i] = store.ContextEvent{SourceID: src.ID, EventID: e.EventID, EntryID: e.EntryID, Kind: e.Kind, Epoch: e.Epoch, Base: e.Base,
			UseWhen: e.UseWhen, UpdateWhen: e.UpdateWhen, Path: e.Path, Commit: e.Commit, Ciphertext: e.Ciphertext,
			Digest: eventDigest(e), DeviceID: me.ID, CreatedAt: c.now()}
	}
	res, head, err := cv.AppendContextEvents(c.ctx(), c.ws.ID, src.ID, evs, func(cur store.ContextSource) error {
		if cur.Kind != sdk.ContextKindVault {
			return nil
		}
		for i, e := range evs {
			if e.Epoch != cur.Epoch {
				// Replays of events already stored pass the store's own check.
				if _, err := cv.ContextEvent(c.ctx(), src.ID, e.EventID); err == nil {
					continue
				}
				return &apiError{Status: http.StatusConflict, Code: sdk.CodeStaleEpoch,
					Message: fmt.Sprintf("event %d is sealed under epoch %d but the vault is at epoch %d: pull, take the new key and seal it again", i, e.Epoch, cur.Epoch)}
			}
		}
		return nil
	})
	if errors.Is(err, store.ErrConflict) {
		return 0, nil, errorf(http.StatusConflict, sdk.CodeEventReplayed, "%s: refused, nothing was written", strings.TrimSuffix(err.Error(), ": "+store.ErrConflict.Error()))
	}
	if err != nil {
		return 0, nil, cvError(err)
	}
	out := sdk.ContextPush{HeadSeq: head, Accepted: make([]sdk.ContextPushResult, len(res))}
	for i, r := range res {
		out.Accepted[i] = sdk.ContextPushResult{EventID: r.EventID, Seq: r.Seq, Duplicate: r.Duplicate}
	}
	if src.Kind == sdk.ContextKindGit {
		// A device that pushed a git source's documents has synced it.
		commit := ""
		for _, e := range evs {
			if e.Commit != "" {
				commit = e.Commit
			}
		}
		if _, err := cv.UpdateContextSource(c.ctx(), c.ws.ID, src.ID, func(cur *store.ContextSource) error {
			cur.SyncState = "synced"
			if commit != "" {
				cur.HeadCommit = commit
			}
			return nil
		}, store.AuditEntry{}); err != nil {
			return 0, nil, err
		}
	}
	return 200, data(out), nil
}

func (s *Server) cvPull(c *call) (int, any, error) {
	var req sdk.ContextPullRequest
	cv, me, err := c.deviceCall(&req)
	if err != nil {
		return 0, nil, err
	}
	src, err := c.eligibleSource(cv, me, req.VaultID)
	if err != nil {
		return 0, nil, err
	}
	limit := req.Limit
	if limit <= 0 || limit > 1000 {
		limit = 500
	}
	evs, err := cv.ContextEvents(c.ctx(), src.ID, req.AfterSeq, limit+1)
	if err != nil {
		return 0, nil, err
	}
	out := sdk.ContextPull{HeadSeq: src.HeadSeq, Events: []sdk.ContextEvent{}}
	if len(evs) > limit {
		evs, out.More = evs[:limit], true
	}
	for _, e := range evs {
		out.Events = append(out.Events, cvEventJSON(e))
	}
	return 200, data(out), nil
}

// ---- grants ----

func (s *Server) cvGrantsPending(c *call) (int, any, error) {
	cv, me, err := c.deviceCall(nil)
	if err != nil {
		return 0, nil, err
	}
	obl, err := cv.ContextObligations(c.ctx(), c.ws.ID, me.ID)
	if err != nil {
		return 0, nil, err
	}
	out := make([]sdk.ContextGrantObligation, len(obl))
	for i, o := range obl {
		out[i] = sdk.ContextGrantObligation{VaultID: o.SourceID, Epoch: o.Epoch, Device: cvDeviceJSON(o.Device)}
	}
	return 200, list(out), nil
}

// cvEmit stores wraps the device made for others; with a member it first
// grants the vault to that user (only a vault owner may).
func (s *Server) cvEmit(c *call) (int, any, error) {
	var req sdk.ContextEmitRequest
	cv, me, err := c.deviceCall(&req)
	if err != nil {
		return 0, nil, err
	}
	src, err := c.eligibleSource(cv, me, req.VaultID)
	if err != nil {
		return 0, nil, err
	}
	if req.Member != nil {
		ms, err := cv.ContextMembers(c.ctx(), src.ID)
		if err != nil {
			return 0, nil, err
		}
		if memberRole(ms, me.UserID) != sdk.ContextMemberOwner {
			return 0, nil, forbidden("only an owner of %s shares it", src.Name)
		}
		uid, err := c.workspaceUser(req.Member.UserID, req.Member.Email)
		if err != nil {
			return 0, nil, err
		}
		// Every wrap must be for the new member's approved devices.
		for i, k := range req.Keys {
			d, err := cv.ContextDevice(c.ctx(), c.ws.ID, k.DeviceID)
			if err != nil || d.UserID != uid {
				return 0, nil, invalid(sdk.ErrorDetail{Field: fmt.Sprintf("/keys/%d", i), Message: "a team grant wraps only for the new member's devices"})
			}
			if d.State != sdk.DeviceActive && d.State != sdk.DeviceApproved {
				return 0, nil, notEligible(d.ID, "is "+d.State)
			}
		}
		role := req.Member.Role
		if role == "" {
			role = sdk.ContextMemberMember
		}
		if err := cv.PutContextMember(c.ctx(), store.ContextMember{SourceID: src.ID, UserID: uid, Role: role, AddedBy: c.p.Actor() + " device:" + me.ID, AddedAt: c.now()},
			c.audit("context_source.member_add", cvTarget("sources", src.ID), map[string]any{"user_id": uid, "role": role})); err != nil {
			return 0, nil, err
		}
	}
	for i, k := range req.Keys {
		if k.VaultID != src.ID {
			return 0, nil, invalid(sdk.ErrorDetail{Field: fmt.Sprintf("/keys/%d", i), Message: "a wrap of another vault"})
		}
	}
	keys, err := c.checkWraps(cv, me, req.Keys, func(sdk.ContextWrappedKey) error { return nil }, false)
	if err != nil {
		return 0, nil, err
	}
	added, err := cv.EmitContextKeys(c.ctx(), c.ws.ID, src.ID, keys, func(el []store.ContextDevice) error {
		ok := map[string]bool{}
		for _, d := range el {
			ok[d.ID] = true
		}
		for _, k := range keys {
			if !ok[k.DeviceID] {
				d, err := cv.ContextDevice(c.ctx(), c.ws.ID, k.DeviceID)
				if err == nil && d.State == sdk.DeviceRevoked {
					return notEligible(k.DeviceID, "is revoked")
				}
				return notEligible(k.DeviceID, "is not an approved device of a member of this vault")
			}
		}
		return nil
	}, c.audit("context_vault.grant", cvTarget("vaults", src.ID), map[string]any{"keys": len(keys)}))
	if err != nil {
		return 0, nil, cvError(err)
	}
	return 200, list(cvKeysJSON(added)), nil
}

// workspaceUser resolves a member of the workspace by id or email.
func (c *call) workspaceUser(id int64, email string) (int64, error) {
	ms, err := c.s.st.Members(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, err
	}
	for _, m := range ms {
		if (id != 0 && m.UserID == id) || (email != "" && strings.EqualFold(m.Email, email)) {
			return m.UserID, nil
		}
	}
	return 0, errorf(http.StatusNotFound, sdk.CodePrincipalUnavailable, "no member %s of this workspace", or(email, itoa(id)))
}

func (s *Server) cvMaterialized(c *call) (int, any, error) {
	var req sdk.ContextMaterializedRequest
	cv, me, err := c.deviceCall(&req)
	if err != nil {
		return 0, nil, err
	}
	refs := make([]store.ContextKey, len(req.Keys))
	for i, k := range req.Keys {
		refs[i] = store.ContextKey{SourceID: k.VaultID, Epoch: k.Epoch}
	}
	out, err := cv.MaterializeContextKeys(c.ctx(), me.ID, refs, c.now())
	if err != nil {
		return 0, nil, cvError(err)
	}
	return 200, list(cvKeysJSON(out)), nil
}

func (s *Server) cvRevocationsPending(c *call) (int, any, error) {
	cv, me, err := c.deviceCall(nil)
	if err != nil {
		return 0, nil, err
	}
	hs, err := cv.ContextHolders(c.ctx(), c.ws.ID, me.ID)
	if err != nil {
		return 0, nil, err
	}
	return 200, list(holdersJSON(hs)), nil
}

func holdersJSON(hs []store.ContextHolder) []sdk.ContextRevocation {
	out := make([]sdk.ContextRevocation, len(hs))
	for i, h := range hs {
		kind := "member"
		if h.Device.State == sdk.DeviceRevoked {
			kind = "device"
		}
		out[i] = sdk.ContextRevocation{VaultID: h.SourceID, Kind: kind, DeviceID: h.Device.ID, UserID: h.Device.UserID, Epoch: h.Epoch, RevokedAt: h.Device.RevokedAt}
	}
	return out
}

// cvRevoke revokes a device (its user's own devices, or any for a
// workspace admin), or removes a member from a vault (an owner removes
// anyone; a member may leave). The vaults it could read are marked due
// for rotation; the answer lists what must be rotated away from.
func (s *Server) cvRevoke(c *call) (int, any, error) {
	var req sdk.ContextRevokeRequest
	cv, me, err := c.deviceCall(&req)
	if err != nil {
		return 0, nil, err
	}
	now := c.now()
	var affected []string
	switch {
	case req.DeviceID != "":
		d, err := cv.ContextDevice(c.ctx(), c.ws.ID, req.DeviceID)
		if err != nil {
			return 0, nil, cvError(err)
		}
		if d.UserID != me.UserID {
			role, err := c.s.st.Role(c.ctx(), c.ws.ID, me.UserID)
			if err != nil || auth.RoleRank(role) < auth.RoleRank(sdk.RoleAdmin) {
				return 0, nil, forbidden("only the device's own user or a workspace admin revokes it")
			}
		}
		keys, err := cv.ContextKeysOf(c.ctx(), c.ws.ID, d.ID)
		if err != nil {
			return 0, nil, err
		}
		for _, k := range keys {
			affected = append(affected, k.SourceID)
		}
		rev := store.ContextRevocation{WorkspaceID: c.ws.ID, Kind: "device", DeviceID: d.ID, UserID: d.UserID, RevokedBy: "device:" + me.ID, RevokedAt: now}
		if err := cv.RevokeContextDevice(c.ctx(), c.ws.ID, d.ID, rev, c.audit("context_device.revoke", cvTarget("devices", d.ID), nil)); err != nil {
			return 0, nil, cvError(err)
		}
	case req.VaultID != "":
		src, err := c.source(cv, req.VaultID, "")
		if err != nil {
			return 0, nil, err
		}
		uid, err := c.workspaceUserOrFormer(cv, src.ID, req.UserID, req.Email)
		if err != nil {
			return 0, nil, err
		}
		ms, err := cv.ContextMembers(c.ctx(), src.ID)
		if err != nil {
			return 0, nil, err
		}
		if uid != me.UserID && memberRole(ms, me.UserID) != sdk.ContextMemberOwner {
			return 0, nil, forbidden("only an owner of %s removes other members", src.Name)
		}
		rev := store.ContextRevocation{WorkspaceID: c.ws.ID, SourceID: src.ID, Kind: "member", UserID: uid, RevokedBy: "device:" + me.ID, RevokedAt: now}
		if err := cv.RemoveContextMember(c.ctx(), c.ws.ID, src.ID, uid, rev, c.audit("context_source.member_remove", cvTarget("sources", src.ID), map[string]any{"user_id": uid})); err != nil {
			return 0, nil, cvError(err)
		}
		affected = []string{src.ID}
	default:
		return 0, nil, invalid(sdk.ErrorDetail{Message: "name a device_id, or a vault_id with a user_id or email"})
	}
	seen := map[string]bool{}
	for _, id := range affected {
		if seen[id] {
			continue
		}
		seen[id] = true
		if _, err := cv.UpdateContextSource(c.ctx(), c.ws.ID, id, func(s *store.ContextSource) error {
			if s.Kind == sdk.ContextKindVault && s.Epoch > 0 {
				s.RotationRequestedAt = &now
			}
			return nil
		}, store.AuditEntry{}); err != nil {
			return 0, nil, err
		}
	}
	hs, err := cv.ContextHolders(c.ctx(), c.ws.ID, me.ID)
	if err != nil {
		return 0, nil, err
	}
	return 200, list(holdersJSON(hs)), nil
}

// workspaceUserOrFormer resolves a user by id or email among the
// workspace's members and the source's members (who may have left the
// workspace already).
func (c *call) workspaceUserOrFormer(cv store.ContextVaults, sourceID string, id int64, email string) (int64, error) {
	if uid, err := c.workspaceUser(id, email); err == nil {
		return uid, nil
	}
	if id != 0 {
		ms, err := cv.ContextMembers(c.ctx(), sourceID)
		if err != nil {
			return 0, err
		}
		for _, m := range ms {
			if m.UserID == id {
				return id, nil
			}
		}
	}
	if email != "" {
		if u, err := c.s.st.UserByEmail(c.ctx(), email); err == nil {
			return u.ID, nil
		}
	}
	return 0, errorf(http.StatusNotFound, sdk.CodePrincipalUnavailable, "no user %s", or(email, itoa(id)))
}

// ---- proposals, previews and writebacks ----

func (s *Server) cvProposals(c *call) (int, any, error) {
	cv, me, err := c.deviceCall(nil)
	if err != nil {
		return 0, nil, err
	}
	ps, err := cv.ContextProposals(c.ctx(), c.ws.ID, c.r.URL.Query().Get("state"))
	if err != nil {
		return 0, nil, err
	}
	roles := map[string]string{}
	out := []sdk.ContextProposal{}
	for _, p := range ps {
		role, ok := roles[p.SourceID]
		if !ok {
			ms, err := cv.ContextMembers(c.ctx(), p.SourceID)
			if err != nil {
				return 0, nil, err
			}
			role = memberRole(ms, me.UserID)
			roles[p.SourceID] = role
		}
		if role == "" {
			continue
		}
		mine := false
		for _, d := range p.SealedTo {
			mine = mine || d == me.ID
		}
		out = append(out, cvProposalJSON(p, mine))
	}
	return 200, list(out), nil
}

func (s *Server) proofMAC(c *call, p store.ContextProof) (string, error) {
	key, err := s.secret(c.ctx(), "context-preview-proof", func() ([]byte, error) { return seal.NewKey(), nil })
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s\x00%s\x00%s\x00%s\x00%s\x00%d\x00%s\x00%s", p.ID, p.WorkspaceID, p.ProposalID, p.SourceID, p.CandidateDigest, p.BaseSeq, p.DeviceID, p.IssuedAt.UTC().Format("2006-01-02T15:04:05.000000000Z"))
	return hex.EncodeToString(m.Sum(nil)), nil
}

// cvPreviewProof records that a device showed a person what a candidate
// adds to a vault as of base_seq; accepting a proposal needs one.
func (s *Server) cvPreviewProof(c *call) (int, any, error) {
	var req sdk.ContextPreviewRequest
	cv, me, err := c.deviceCall(&req)
	if err != nil {
		return 0, nil, err
	}
	src, err := c.eligibleSource(cv, me, req.VaultID)
	if err != nil {
		return 0, nil, err
	}
	if req.BaseSeq > src.HeadSeq || req.BaseSeq < 0 {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/base_seq", Message: fmt.Sprintf("the vault's head is %d", src.HeadSeq)})
	}
	if req.ProposalID != "" {
		p, err := cv.ContextProposal(c.ctx(), c.ws.ID, req.ProposalID)
		if err != nil {
			return 0, nil, cvError(err)
		}
		if p.SourceID != src.ID {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "/proposal_id", Message: "the proposal is for another source"})
		}
		if p.State == sdk.ProposalAccepted || p.State == sdk.ProposalRejected {
			return 0, nil, errorf(http.StatusConflict, sdk.CodeAlreadyDecided, "the proposal was %s", p.State)
		}
		if !hmac.Equal([]byte(p.Digest), []byte(req.CandidateDigest)) {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "/candidate_digest", Message: "the candidate is not the proposal's content"})
		}
	}
	proof := store.ContextProof{ID: newRecordID(), WorkspaceID: c.ws.ID, ProposalID: req.ProposalID, SourceID: src.ID, CandidateDigest: req.CandidateDigest,
		BaseSeq: req.BaseSeq, DeviceID: me.ID, IssuedAt: c.now()}
	if proof.MAC, err = s.proofMAC(c, proof); err != nil {
		return 0, nil, err
	}
	if err := cv.CreateContextProof(c.ctx(), proof, nil, c.audit("context_proposal.preview", cvTarget("proofs", proof.ID), map[string]any{
		"proposal_id": req.ProposalID, "adds": req.Adds, "changes": req.Changes, "duplicates": req.Duplicates})); err != nil {
		return 0, nil, err
	}
	return 201, data(sdk.ContextPreviewProof{ID: proof.ID, ProposalID: proof.ProposalID, VaultID: src.ID, CandidateDigest: proof.CandidateDigest,
		BaseSeq: proof.BaseSeq, DeviceID: me.ID, IssuedAt: proof.IssuedAt, MAC: proof.MAC}), nil
}

// cvWriteback accepts a previewed proposal once it is written: an event
// of the vault, or a pull request of a git source. The sealed content is
// dropped: the server keeps the digest and where it went.
func (s *Server) cvWriteback(c *call) (int, any, error) {
	var req sdk.ContextWritebackRequest
	cv, me, err := c.deviceCall(&req)
	if err != nil {
		return 0, nil, err
	}
	id := c.r.PathValue("proposal")
	p, err := cv.ContextProposal(c.ctx(), c.ws.ID, id)
	if err != nil {
		return 0, nil, cvError(err)
	}
	if err := c.eligible(cv, me, p.SourceID); err != nil {
		return 0, nil, err
	}
	proof, err := cv.ContextProof(c.ctx(), c.ws.ID, req.ProofID)
	if err != nil {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/proof_id", Message: "no such preview proof; run candidate-preview first"})
	}
	mac, err := s.proofMAC(c, proof)
	if err != nil {
		return 0, nil, err
	}
	if !hmac.Equal([]byte(mac), []byte(proof.MAC)) || proof.ProposalID != p.ID || !hmac.Equal([]byte(proof.CandidateDigest), []byte(req.CandidateDigest)) || proof.CandidateDigest != p.Digest {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/proof_id", Message: "the preview proof is for another proposal or candidate"})
	}
	src, err := cv.ContextSource(c.ctx(), c.ws.ID, p.SourceID)
	if err != nil {
		return 0, nil, err
	}
	writeback := req.URL
	switch src.Kind {
	case sdk.ContextKindVault:
		ev, err := cv.ContextEvent(c.ctx(), src.ID, req.EventID)
		if err != nil || ev.Kind != sdk.EventPut {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "/event_id", Message: "the vault has no put event " + req.EventID + "; push it first"})
		}
		writeback = "event:" + ev.EventID
	case sdk.ContextKindGit:
		if req.Branch == "" && req.URL == "" {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "/branch", Message: "a git source's writeback names the pushed branch or the pull request"})
		}
		if writeback == "" {
			writeback = "branch:" + req.Branch
		}
	}
	out, err := cv.UpdateContextProposal(c.ctx(), c.ws.ID, id, func(p *store.ContextProposal) error {
		switch p.State {
		case sdk.ProposalPending:
			return errorf(http.StatusConflict, sdk.CodeConflict, "the proposal was not previewed; run candidate-preview first")
		case sdk.ProposalAccepted, sdk.ProposalRejected:
			return errorf(http.StatusConflict, sdk.CodeAlreadyDecided, "the proposal was %s", p.State)
		}
		now := c.now()
		p.State, p.Sealed, p.EventID, p.Writeback, p.DecidedBy, p.DecidedAt = sdk.ProposalAccepted, "", req.EventID, writeback, "device:"+me.ID, &now
		return nil
	}, c.audit("context_proposal.accept", cvTarget("proposals", id), map[string]any{"writeback": writeback, "proof_id": proof.ID}))
	if err != nil {
		return 0, nil, cvError(err)
	}
	return 200, data(cvProposalJSON(out, false)), nil
}

func (s *Server) cvDecide(c *call) (int, any, error) {
	var req sdk.ContextDecisionRequest
	cv, me, err := c.deviceCall(&req)
	if err != nil {
		return 0, nil, err
	}
	id := c.r.PathValue("proposal")
	p, err := cv.ContextProposal(c.ctx(), c.ws.ID, id)
	if err != nil {
		return 0, nil, cvError(err)
	}
	if err := c.eligible(cv, me, p.SourceID); err != nil {
		return 0, nil, err
	}
	out, err := cv.UpdateContextProposal(c.ctx(), c.ws.ID, id, func(p *store.ContextProposal) error {
		if p.State == sdk.ProposalAccepted || p.State == sdk.ProposalRejected {
			return errorf(http.StatusConflict, sdk.CodeAlreadyDecided, "the proposal was %s", p.State)
		}
		now := c.now()
		p.State, p.Sealed, p.DecidedBy, p.DecidedAt, p.Reason = sdk.ProposalRejected, "", "device:"+me.ID, &now, req.Reason
		return nil
	}, c.audit("context_proposal.reject", cvTarget("proposals", id), map[string]any{"reason": req.Reason}))
	if err != nil {
		return 0, nil, cvError(err)
	}
	return 200, data(cvProposalJSON(out, false)), nil
}

// ---- recovery ----

func (s *Server) cvBackups(c *call) (int, any, error) {
	cv, err := c.cvStore()
	if err != nil {
		return 0, nil, err
	}
	in, err := s.st.Install(c.ctx(), c.ws.ID, c.p.InstallID)
	if err != nil {
		return 0, nil, cvError(err)
	}
	user, ok := userOfInstall(in)
	if !ok {
		return 200, list([]sdk.ContextBackup{}), nil
	}
	bs, err := cv.ContextBackups(c.ctx(), c.ws.ID, user)
	if err != nil {
		return 0, nil, err
	}
	out := make([]sdk.ContextBackup, len(bs))
	for i, b := range bs {
		out[i] = sdk.ContextBackup{DeviceID: b.DeviceID, UserID: b.UserID, Sealed: b.Sealed, Generation: b.Generation, CreatedAt: b.CreatedAt}
	}
	return 200, list(out), nil
}

func (s *Server) cvPutBackup(c *call) (int, any, error) {
	var req sdk.ContextBackup
	cv, me, err := c.deviceCall(&req)
	if err != nil {
		return 0, nil, err
	}
	b := store.ContextBackup{WorkspaceID: c.ws.ID, DeviceID: me.ID, UserID: me.UserID, Sealed: req.Sealed, CreatedAt: c.now()}
	if err := cv.PutContextBackup(c.ctx(), &b, c.audit("context_device.backup", cvTarget("devices", me.ID), nil)); err != nil {
		return 0, nil, err
	}
	return 200, data(sdk.ContextBackup{DeviceID: b.DeviceID, UserID: b.UserID, Generation: b.Generation, CreatedAt: b.CreatedAt}), nil
}

// cvRestore moves a device whose identity was restored from a backup to
// the calling machine (the same user's new install).
func (s *Server) cvRestore(c *call) (int, any, error) {
	cv, err := c.cvStore()
	if err != nil {
		return 0, nil, err
	}
	id, _ := c.body["device_id"].(string)
	in, err := s.st.Install(c.ctx(), c.ws.ID, c.p.InstallID)
	if err != nil {
		return 0, nil, cvError(err)
	}
	user, _ := userOfInstall(in)
	d, err := cv.ContextDevice(c.ctx(), c.ws.ID, id)
	if err != nil {
		return 0, nil, cvError(err)
	}
	if d.UserID != user {
		return 0, nil, forbidden("device %s belongs to another user", id)
	}
	if d.State == sdk.DeviceRevoked {
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "device %s was revoked; enroll a new device instead", id)
	}
	out, err := cv.RebindContextDevice(c.ctx(), c.ws.ID, id, in.ID, c.audit("context_device.restore", cvTarget("devices", id), map[string]string{"install_id": in.ID}))
	if err != nil {
		return 0, nil, cvError(err)
	}
	return 200, data(cvDeviceJSON(out)), nil
}
