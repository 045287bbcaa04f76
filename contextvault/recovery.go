package contextvault

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"reeve.dev/reeve/contextvault/seal"
	"reeve.dev/reeve/server/sdk"
)

// A recovery backup is this device's identity sealed with a recovery key
// (age's scrypt passphrase encryption) and kept on the server, which
// cannot open it. With the identity back, a new machine receives again
// every key that was ever wrapped to the device.

// MinRecoveryKey is the shortest recovery key accepted.
const MinRecoveryKey = 12

type backupPayload struct {
	DeviceID    string `json:"device_id"`
	WorkspaceID string `json:"workspace_id"`
	Identity    []byte `json:"identity"`
}

// NewRecoveryKey makes a random recovery key (160 bits, in groups).
func NewRecoveryKey() string {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	s := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b)
	var groups []string
	for i := 0; i < len(s); i += 4 {
		groups = append(groups, s[i:min(i+4, len(s))])
	}
	return "RVK-" + strings.Join(groups, "-")
}

// Backup is a stored backup.
type Backup struct {
	DeviceID   string `json:"device_id"`
	Generation int64  `json:"generation"`
}

// RecoveryBackup seals this device's identity with the recovery key and
// uploads it, replacing the device's earlier backup.
func (v *Vault) RecoveryBackup(ctx context.Context, recoveryKey string) (Backup, error) {
	srv, err := v.server()
	if err != nil {
		return Backup{}, err
	}
	if len(recoveryKey) < MinRecoveryKey {
		return Backup{}, fmt.Errorf("%w: a recovery key has at least %d characters (a random one: %s)", ErrRefused, MinRecoveryKey, NewRecoveryKey())
	}
	id, err := v.identity()
	if err != nil {
		return Backup{}, err
	}
	if v.DeviceID() == "" {
		return Backup{}, fmt.Errorf("%w: this device is not enrolled; run `reeve context init`", ErrNoDevice)
	}
	plain, _ := json.Marshal(backupPayload{DeviceID: v.DeviceID(), WorkspaceID: v.l.meta("workspace_id"), Identity: id.Marshal()})
	sealed, err := seal.SealWithPassphrase(plain, recoveryKey, v.o.ScryptWorkFactor)
	if err != nil {
		return Backup{}, err
	}
	b, err := srv.PutBackup(ctx, sdk.ContextBackup{Sealed: sealed})
	if err != nil {
		return Backup{}, apiErr("upload the backup", err)
	}
	return Backup{DeviceID: b.DeviceID, Generation: b.Generation}, nil
}

// Restored is what a restore did.
type Restored struct {
	Device    sdk.ContextDevice `json:"device"`
	Refresh   RefreshResult     `json:"refresh"`
	Pulled    []PullResult      `json:"pulled"`
	NewBackup Backup            `json:"new_backup"`
}

// RecoveryRestore opens this user's backup with the recovery key, makes
// its identity this machine's device, takes every key wrapped to it and
// the vaults' events, and uploads a fresh backup (sealed anew, with
// newKey when given). A wrong key changes nothing.
func (v *Vault) RecoveryRestore(ctx context.Context, recoveryKey, newKey string) (Restored, error) {
	var res Restored
	srv, err := v.server()
	if err != nil {
		return res, err
	}
	if newKey != "" && len(newKey) < MinRecoveryKey {
		return res, fmt.Errorf("%w: a recovery key has at least %d characters", ErrRefused, MinRecoveryKey)
	}
	bs, err := srv.Backups(ctx)
	if err != nil {
		return res, apiErr("read backups", err)
	}
	if len(bs) == 0 {
		return res, fmt.Errorf("%w: there is no recovery backup for your account in this workspace", ErrNotFound)
	}
	var p backupPayload
	opened := false
	for _, b := range bs {
		plain, err := seal.OpenWithPassphrase(b.Sealed, recoveryKey)
		if errors.Is(err, seal.ErrPassphrase) {
			continue
		}
		if err != nil {
			return res, err
		}
		if err := json.Unmarshal(plain, &p); err != nil {
			return res, fmt.Errorf("the backup is damaged: %w", err)
		}
		opened = true
		break
	}
	if !opened {
		return res, fmt.Errorf("%w: the recovery key does not open any of your %d backup(s); nothing was changed", ErrDenied, len(bs))
	}
	id, err := seal.ParseIdentity(p.Identity)
	if err != nil {
		return res, err
	}
	if cur, err := v.identity(); err == nil && cur.Public() != id.Public() {
		return res, fmt.Errorf("%w: this home already has another device key (%s); restore into a fresh home, or run dev-reset-crypto first", ErrRefused, cur.Public().Fingerprint())
	}
	d, err := srv.Restore(ctx, p.DeviceID)
	if err != nil {
		return res, apiErr("move device "+p.DeviceID+" to this machine", err)
	}
	if err := v.ks.Set(identityName, id.Marshal()); err != nil {
		return res, err
	}
	for k, val := range map[string]string{"key_store": v.ks.Kind(), "device_id": d.ID, "workspace_id": d.WorkspaceID} {
		if err := v.l.setMeta(k, val); err != nil {
			return res, err
		}
	}
	v.mu.Lock()
	v.id = id
	v.mu.Unlock()
	res.Device = d
	if res.Refresh, err = v.Refresh(ctx); err != nil {
		return res, err
	}
	if res.Pulled, err = v.SyncPull(ctx, ""); err != nil {
		return res, err
	}
	key := recoveryKey
	if newKey != "" {
		key = newKey
	}
	res.NewBackup, err = v.RecoveryBackup(ctx, key)
	return res, err
}
