package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"reeve.dev/reeve/server/secrets"
)

// MasterKeyRotation is what RotateMasterKey did.
type MasterKeyRotation struct {
	File      string `json:"file"`
	OldKeyID  string `json:"old_key_id"`
	NewKeyID  string `json:"new_key_id"`
	Rewrapped int    `json:"rewrapped"` // sealed values re-wrapped under the new key
	Dropped   int    `json:"dropped"`   // old keys removed from the file (--drop-old)
}

// RotateMasterKey puts a fresh master key at the head of the key file and
// re-wraps every data key the store keeps (signing keys, provider keys)
// under it in ONE transaction: if any record fails, none changes and the
// file keeps both keys, so every server still opens everything. With
// dropOld the old keys then leave the file; do that only when every
// server has restarted with the new file (running servers hold the keys
// they loaded at start).
func RotateMasterKey(ctx context.Context, o Options, dropOld bool) (MasterKeyRotation, error) {
	if strings.TrimSpace(os.Getenv(secrets.EnvMasterKey)) != "" {
		return MasterKeyRotation{}, fmt.Errorf("the master key comes from %s: rotate it there (put the new key first, comma separated, re-wrap with a server start, then drop the old) or use a key file", secrets.EnvMasterKey)
	}
	file := o.masterKeyFile()
	r := MasterKeyRotation{File: file}
	old, err := Keyring(o, true)
	if err != nil {
		return r, err
	}
	r.OldKeyID = old.KeyID()
	st, err := OpenStore(ctx, o)
	if err != nil {
		return r, err
	}
	defer st.Close()
	ring, err := secrets.Rotate(file, nil)
	if err != nil {
		return r, err
	}
	r.NewKeyID = ring.KeyID()
	if r.Rewrapped, err = st.RewrapSecrets(ctx, ring.RewrapRecord); err != nil {
		return r, fmt.Errorf("%w (the key file keeps the old key beside the new one; nothing was re-wrapped)", err)
	}
	if dropOld {
		if r.Dropped, err = secrets.KeepFirst(file); err != nil {
			return r, errors.Join(errors.New("re-wrapped, but the old keys are still in the file"), err)
		}
	}
	return r, nil
}
