package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"reeve.dev/reeve/server/sdk"
)

// EvidenceKeysSecret names the secret that holds the evidence key set.
const EvidenceKeysSecret = "evidence-ed25519-keys"

// KeySetStore keeps the evidence key set document. The host backs it with
// the store's secrets, sealed at rest; replicas sharing a database share it.
type KeySetStore interface {
	// Load returns the document, creating it with gen on first use.
	Load(ctx context.Context, gen func() ([]byte, error)) ([]byte, error)
	// Swap replaces the document when it is still old; false when another
	// writer changed it first.
	Swap(ctx context.Context, old, new []byte) (bool, error)
}

// evidenceKey is one Ed25519 key of the set.
type evidenceKey struct {
	Kid       string     `json:"kid"`
	Seed      []byte     `json:"seed"`
	CreatedAt time.Time  `json:"created_at"`
	RetiredAt *time.Time `json:"retired_at,omitempty"`
}

// keySet is the stored document: the first key signs, the rest verify.
type keySet struct {
	Keys []evidenceKey `json:"keys"`
}

func newEvidenceKey(now time.Time) (evidenceKey, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return evidenceKey{}, err
	}
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	// The key id is derived from the public key, so it cannot name another key.
	return evidenceKey{Kid: "ev-" + base64.RawURLEncoding.EncodeToString(sum[:12]), Seed: seed, CreatedAt: now.UTC()}, nil
}

// EvidenceSigner signs evidence bundles with the current key and publishes
// every key.
type EvidenceSigner struct {
	Store KeySetStore
	Now   func() time.Time
}

func (e *EvidenceSigner) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *EvidenceSigner) load(ctx context.Context) (keySet, []byte, error) {
	raw, err := e.Store.Load(ctx, func() ([]byte, error) {
		k, err := newEvidenceKey(e.now())
		if err != nil {
			return nil, err
		}
		return json.Marshal(keySet{Keys: []evidenceKey{k}})
	})
	if err != nil {
		return keySet{}, nil, fmt.Errorf("evidence keys: %w", err)
	}
	var ks keySet
	if err := json.Unmarshal(raw, &ks); err != nil || len(ks.Keys) == 0 {
		return keySet{}, nil, errors.New("evidence keys: the stored key set is unreadable")
	}
	return ks, raw, nil
}

// Sign signs payload with the current key.
func (e *EvidenceSigner) Sign(ctx context.Context, payload []byte) (sdk.EvidenceSigned, error) {
	ks, _, err := e.load(ctx)
	if err != nil {
		return sdk.EvidenceSigned{}, err
	}
	k := ks.Keys[0]
	sig := ed25519.Sign(ed25519.NewKeyFromSeed(k.Seed), payload)
	return sdk.EvidenceSigned{Format: sdk.EvidenceFormat, Alg: "EdDSA", KeyID: k.Kid,
		Payload: base64.RawURLEncoding.EncodeToString(payload), Signature: base64.RawURLEncoding.EncodeToString(sig)}, nil
}

// JWKS returns the public keys, the current one first.
func (e *EvidenceSigner) JWKS(ctx context.Context) (sdk.JWKS, error) {
	ks, _, err := e.load(ctx)
	if err != nil {
		return sdk.JWKS{}, err
	}
	out := sdk.JWKS{Keys: []sdk.JWK{}}
	for i, k := range ks.Keys {
		pub := ed25519.NewKeyFromSeed(k.Seed).Public().(ed25519.PublicKey)
		status := "retired"
		if i == 0 {
			status = "current"
		}
		out.Keys = append(out.Keys, sdk.JWK{Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(pub), Kid: k.Kid, Use: "sig", Alg: "EdDSA", Status: status})
	}
	return out, nil
}

// Rotate makes a new current key; the old ones stay published, so bundles
// they signed still verify. It returns the new key id.
func (e *EvidenceSigner) Rotate(ctx context.Context) (string, error) {
	for range 5 {
		ks, raw, err := e.load(ctx)
		if err != nil {
			return "", err
		}
		k, err := newEvidenceKey(e.now())
		if err != nil {
			return "", err
		}
		now := e.now().UTC()
		ks.Keys[0].RetiredAt = &now
		ks.Keys = append([]evidenceKey{k}, ks.Keys...)
		next, err := json.Marshal(ks)
		if err != nil {
			return "", err
		}
		ok, err := e.Store.Swap(ctx, raw, next)
		if err != nil {
			return "", fmt.Errorf("rotate evidence key: %w", err)
		}
		if ok {
			return k.Kid, nil
		}
	}
	return "", errors.New("rotate evidence key: the key set keeps changing")
}
