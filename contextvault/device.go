package contextvault

import (
	"context"
	"errors"
	"fmt"

	"reeve.dev/reeve/contextvault/seal"
	"reeve.dev/reeve/internal/keystore"
	"reeve.dev/reeve/server/sdk"
)

// InitResult is what init did.
type InitResult struct {
	Device      sdk.ContextDevice `json:"device"`
	Fingerprint string            `json:"fingerprint"`
	KeyStore    string            `json:"key_store"`
	KeyWhere    string            `json:"key_location"`
	NewIdentity bool              `json:"new_identity"`
	Vault       *Source           `json:"vault,omitempty"`
}

// Init makes sure this home has a device identity in its key store and
// that the device is enrolled (or asks for enrollment), and with
// vaultName creates a vault and publishes its first epoch.
func (v *Vault) Init(ctx context.Context, name, vaultName string) (InitResult, error) {
	res := InitResult{KeyStore: v.ks.Kind(), KeyWhere: v.ks.Where()}
	id, err := v.identity()
	if errors.Is(err, ErrNoDevice) {
		if id, err = seal.NewIdentity(); err != nil {
			return res, err
		}
		if err := v.ks.Set(identityName, id.Marshal()); err != nil {
			return res, err
		}
		v.mu.Lock()
		v.id = id
		v.mu.Unlock()
		res.NewIdentity = true
	} else if err != nil {
		return res, err
	}
	if err := v.l.setMeta("key_store", v.ks.Kind()); err != nil {
		return res, err
	}
	d, err := v.EnrollRequest(ctx, name)
	if err != nil {
		return res, err
	}
	res.Device, res.Fingerprint = d, id.Public().Fingerprint()
	if vaultName != "" {
		src, err := v.CreateVault(ctx, sdk.ContextSourceRequest{Name: vaultName})
		if err != nil {
			return res, err
		}
		res.Vault = &src
	}
	return res, nil
}

// EnrollRequest enrolls this device (asking again is harmless): active
// when it is its user's first device, else pending until another device
// of the user approves it.
func (v *Vault) EnrollRequest(ctx context.Context, name string) (sdk.ContextDevice, error) {
	srv, err := v.server()
	if err != nil {
		return sdk.ContextDevice{}, err
	}
	pub, err := v.Public()
	if err != nil {
		return sdk.ContextDevice{}, err
	}
	d, err := srv.Enroll(ctx, sdk.ContextEnrollRequest{Name: name, Recipient: pub.Recipient, SigningKey: pub.SigningKey})
	if err != nil {
		return d, apiErr("enroll this device", err)
	}
	if d.Recipient != pub.Recipient || d.SigningKey != pub.SigningKey {
		return d, fmt.Errorf("%w: the server enrolled other keys than this device's", ErrRefused)
	}
	if err := v.l.setMeta("device_id", d.ID); err != nil {
		return d, err
	}
	if err := v.l.setMeta("workspace_id", d.WorkspaceID); err != nil {
		return d, err
	}
	return d, v.learnDevices([]sdk.ContextDevice{d})
}

// Enrollments lists the workspace's devices, pinning them.
func (v *Vault) Enrollments(ctx context.Context) ([]sdk.ContextDevice, error) {
	return v.refreshDevices(ctx)
}

// Approval is what approving a device did.
type Approval struct {
	Device sdk.ContextDevice `json:"device"`
	Keys   int               `json:"keys_wrapped"`
}

// EnrollApprove approves a pending device of this user after the person
// compared its fingerprint: every key this device holds of the vaults
// they share is wrapped to it. A fingerprint that does not match refuses
// before anything is sent.
func (v *Vault) EnrollApprove(ctx context.Context, deviceID, fingerprint string) (Approval, error) {
	srv, err := v.server()
	if err != nil {
		return Approval{}, err
	}
	if fingerprint == "" {
		return Approval{}, fmt.Errorf("%w: --fingerprint is required: compare it with what the new machine printed", ErrUnconfirmed)
	}
	if _, err := v.refreshDevices(ctx); err != nil {
		return Approval{}, err
	}
	target, err := srv.Device(ctx, deviceID)
	if err != nil {
		return Approval{}, apiErr("read device "+deviceID, err)
	}
	pub := seal.Public{Recipient: target.Recipient, SigningKey: target.SigningKey}
	if !pub.FingerprintMatches(fingerprint) {
		return Approval{}, fmt.Errorf("%w: fingerprint mismatch: device %s has fingerprint %s, you typed %s; do not approve it", ErrDenied, deviceID, pub.Fingerprint(), fingerprint)
	}
	if target.State != sdk.DevicePending {
		return Approval{}, fmt.Errorf("%w: device %s is %s, not pending", ErrRefused, deviceID, target.State)
	}
	if _, err := v.Refresh(ctx); err != nil {
		return Approval{}, err
	}
	keys, err := v.wrapAllFor(target)
	if err != nil {
		return Approval{}, err
	}
	d, err := srv.Approve(ctx, deviceID, sdk.ContextApproveRequest{Fingerprint: fingerprint, Keys: keys})
	if err != nil {
		return Approval{}, apiErr("approve "+deviceID, err)
	}
	return Approval{Device: d, Keys: len(keys)}, nil
}

// wrapAllFor wraps every key this device holds, of every source it
// belongs to, to d.
func (v *Vault) wrapAllFor(d sdk.ContextDevice) ([]sdk.ContextWrappedKey, error) {
	srcs, err := v.l.sources()
	if err != nil {
		return nil, err
	}
	var out []sdk.ContextWrappedKey
	for _, s := range srcs {
		if s.Gone || s.Kind != sdk.ContextKindVault {
			continue
		}
		ks, err := v.wrapSourceFor(s.ID, 0, d)
		if err != nil {
			return nil, err
		}
		out = append(out, ks...)
	}
	return out, nil
}

// wrapSourceFor wraps the keys of a source this device holds (every
// epoch, or only one) to d.
func (v *Vault) wrapSourceFor(sourceID string, only int64, d sdk.ContextDevice) ([]sdk.ContextWrappedKey, error) {
	id, err := v.identity()
	if err != nil {
		return nil, err
	}
	lks, err := v.l.keys(sourceID)
	if err != nil {
		return nil, err
	}
	to := seal.Public{Recipient: d.Recipient, SigningKey: d.SigningKey}
	var out []sdk.ContextWrappedKey
	for _, lk := range lks {
		if only != 0 && lk.Epoch != only {
			continue
		}
		key, err := v.epochKey(sourceID, lk.Epoch)
		if err != nil {
			return nil, err
		}
		w, err := id.Wrap(seal.KeyLabel{VaultID: sourceID, Epoch: lk.Epoch}, key, to, v.DeviceID())
		if err != nil {
			return nil, err
		}
		out = append(out, sdk.ContextWrappedKey{VaultID: sourceID, Epoch: lk.Epoch, DeviceID: d.ID, Wrapped: w})
	}
	return out, nil
}

// Accepted is what accepting an enrollment did.
type Accepted struct {
	Device  sdk.ContextDevice `json:"device"`
	Refresh RefreshResult     `json:"refresh"`
}

// EnrollAccept takes the keys an approving device wrapped for this one
// and completes the enrollment.
func (v *Vault) EnrollAccept(ctx context.Context) (Accepted, error) {
	var res Accepted
	srv, err := v.server()
	if err != nil {
		return res, err
	}
	me, err := srv.Device(ctx, v.DeviceID())
	if err != nil {
		return res, apiErr("read this device", err)
	}
	res.Device = me
	if me.State == sdk.DevicePending {
		return res, fmt.Errorf("%w: device %s is still pending: on another device of yours run `reeve context device-enroll-approve %s --fingerprint %s`", ErrRefused, me.ID, me.ID, me.Fingerprint)
	}
	if res.Refresh, err = v.Refresh(ctx); err != nil {
		return res, err
	}
	if me.State == sdk.DeviceApproved {
		if res.Device, err = srv.Materialized(ctx, me.ID); err != nil {
			return res, apiErr("accept the enrollment", err)
		}
	}
	return res, nil
}

// DevReset forgets this device: its identity leaves the key store, its
// local state is deleted, and the server revokes it when reachable.
// Without confirm it refuses and changes nothing.
func (v *Vault) DevReset(ctx context.Context, confirm bool) ([]string, error) {
	if !confirm {
		return nil, fmt.Errorf("%w: dev-reset-crypto deletes this device's key (in %s) and its local vault copy; entries only this device holds are lost. Pass --i-understand to do it", ErrUnconfirmed, v.ks.Where())
	}
	var done []string
	if id := v.DeviceID(); id != "" && v.o.Server != nil {
		if _, err := v.o.Server.Revoke(ctx, sdk.ContextRevokeRequest{DeviceID: id}); err != nil {
			done = append(done, fmt.Sprintf("could not revoke device %s on the server (%v); revoke it from another device", id, err))
		} else {
			done = append(done, "revoked device "+id+" on the server")
		}
	}
	if err := v.ks.Delete(identityName); err == nil {
		done = append(done, "deleted the device key from "+v.ks.Where())
	} else if !errors.Is(err, keystore.ErrNotFound) {
		return done, err
	}
	for _, t := range []string{"keys", "events", "sources", "pins", "meta"} {
		if _, err := v.l.db.Exec(`DELETE FROM ` + t); err != nil {
			return done, err
		}
	}
	v.mu.Lock()
	v.id, v.keys, v.signer = nil, map[string][]byte{}, map[string]*seal.Public{}
	v.mu.Unlock()
	done = append(done, "deleted the local vault state in "+v.dir)
	return done, nil
}
