package host

import (
	"context"
	"fmt"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
)

// EvidenceKeysResult is the evidence key set after EvidenceKeys: the
// public keys, current first, and the key a rotation made.
type EvidenceKeysResult struct {
	Keys    []sdk.JWK
	Rotated string // the new current key id; "" without rotation
}

// EvidenceKeys lists, and with rotate first rotates, the evidence signing
// keys of a data directory's (or database's) control plane, on the store
// directly: replicas read the key set from the database on every signature
// and every JWKS answer, so a rotation takes effect on all of them at once,
// and the keys that signed earlier bundles stay published. The master key
// must exist: the set is sealed under it.
func EvidenceKeys(ctx context.Context, o Options, rotate bool) (EvidenceKeysResult, error) {
	ring, err := Keyring(o, true)
	if err != nil {
		return EvidenceKeysResult{}, fmt.Errorf("master key: %w", err)
	}
	st, err := OpenStore(ctx, o)
	if err != nil {
		return EvidenceKeysResult{}, err
	}
	defer st.Close()
	signer := &auth.EvidenceSigner{Store: sealedKeySet{st: st, ring: ring, name: auth.EvidenceKeysSecret}}
	var out EvidenceKeysResult
	if rotate {
		if out.Rotated, err = signer.Rotate(ctx); err != nil {
			return out, err
		}
	}
	jwks, err := signer.JWKS(ctx)
	if err != nil {
		return out, err
	}
	out.Keys = jwks.Keys
	return out, nil
}
