package sdk

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Signed evidence bundles (receipt-export, trace-export). The signed bytes
// are the payload exactly as the server produced it, carried base64url in
// the envelope, so verifying needs no canonical re-encoding: a changed byte
// in the payload fails the signature, and the envelope itself must be in
// the compact form the server writes.

// EvidenceFormat names the bundle format.
const EvidenceFormat = "reeve-evidence/1"

// EvidenceEnvelope is the answer of the export routes, and the file
// `reeve evidence verify` reads.
type EvidenceEnvelope struct {
	Data EvidenceSigned `json:"data"`
}

// EvidenceSigned is a signed payload.
type EvidenceSigned struct {
	Format    string `json:"format"`
	Alg       string `json:"alg"` // EdDSA
	KeyID     string `json:"kid"`
	Payload   string `json:"payload"`   // base64url of the EvidenceBundle JSON
	Signature string `json:"signature"` // base64url Ed25519 signature of the payload bytes
}

// EvidenceBundle is what is signed.
type EvidenceBundle struct {
	Format      string            `json:"format"`
	Kind        string            `json:"kind"` // receipt or trace
	WorkspaceID string            `json:"workspace_id"`
	SessionID   string            `json:"session_id"`
	IssuedAt    time.Time         `json:"issued_at"`
	Session     json.RawMessage   `json:"session"`
	Events      []EvidenceEvent   `json:"events"`
	Decisions   []json.RawMessage `json:"decisions"`
	// ChainHead is the chain value of the last event ("" with none).
	ChainHead string `json:"chain_head"`
	// ReviewPacketID and Packet are set on a review packet's export
	// (kind review-packet): its events are the packet's evidence links.
	ReviewPacketID string          `json:"review_packet_id,omitempty"`
	Packet         json.RawMessage `json:"packet,omitempty"`
}

// EvidenceEvent is one link of the hash chain. Digest is the SHA-256 of
// the event's canonical JSON (Payload, when the bundle carries it);
// Chain = SHA-256(previous chain || seq || digest).
type EvidenceEvent struct {
	Seq     int64           `json:"seq"`
	Kind    string          `json:"kind,omitempty"`
	At      time.Time       `json:"at"`
	Digest  string          `json:"digest"`
	Chain   string          `json:"chain"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// ChainLink computes the chain value after prev for an event.
func ChainLink(prev string, seq int64, digest string) string {
	h := sha256.New()
	h.Write([]byte(prev))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(seq, 10)))
	h.Write([]byte{0})
	h.Write([]byte(digest))
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// DigestOf is the digest of an event payload.
func DigestOf(payload []byte) string {
	s := sha256.Sum256(payload)
	return "sha256:" + hex.EncodeToString(s[:])
}

// JWK is one public key of /api/.well-known/jwks.json.
type JWK struct {
	Kty string `json:"kty"` // OKP
	Crv string `json:"crv"` // Ed25519
	X   string `json:"x"`   // base64url public key
	Kid string `json:"kid"`
	Use string `json:"use"` // sig
	Alg string `json:"alg"` // EdDSA
	// Status is "current" for the key that signs now, "retired" for keys
	// kept so that older bundles still verify.
	Status string `json:"status,omitempty"`
}

// JWKS is a key set.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// PublicKey returns the Ed25519 key of a JWK.
func (k JWK) PublicKey() (ed25519.PublicKey, error) {
	if k.Kty != "OKP" || k.Crv != "Ed25519" {
		return nil, fmt.Errorf("key %s is %s/%s, not an Ed25519 key", k.Kid, k.Kty, k.Crv)
	}
	b, err := base64.RawURLEncoding.DecodeString(k.X)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("key %s: bad public key", k.Kid)
	}
	return ed25519.PublicKey(b), nil
}

// ErrEvidence marks a bundle that does not verify.
var ErrEvidence = errors.New("evidence does not verify")

func evidenceErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrEvidence, fmt.Sprintf(format, args...))
}

// VerifyEvidence checks a saved export: the envelope is in the server's
// compact form, the key named by kid is in keys, the signature covers the
// payload, and the event chain is complete, in order and unchanged. It
// returns the bundle.
func VerifyEvidence(file []byte, keys JWKS) (EvidenceBundle, error) {
	var env EvidenceEnvelope
	dec := json.NewDecoder(bytes.NewReader(file))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return EvidenceBundle{}, evidenceErr("not an evidence export: %v", err)
	}
	canon, err := json.Marshal(env)
	if err != nil {
		return EvidenceBundle{}, err
	}
	if !bytes.Equal(bytes.TrimSuffix(file, []byte("\n")), canon) {
		return EvidenceBundle{}, evidenceErr("the file is not byte for byte the export the server wrote")
	}
	s := env.Data
	if s.Format != EvidenceFormat || s.Alg != "EdDSA" {
		return EvidenceBundle{}, evidenceErr("format %q alg %q: want %s EdDSA", s.Format, s.Alg, EvidenceFormat)
	}
	var pub ed25519.PublicKey
	for _, k := range keys.Keys {
		// "*" is a bare public key given without its id.
		if k.Kid == s.KeyID || (k.Kid == "*" && pub == nil) {
			if pub, err = k.PublicKey(); err != nil {
				return EvidenceBundle{}, evidenceErr("%v", err)
			}
		}
	}
	if pub == nil {
		return EvidenceBundle{}, evidenceErr("signed with key %q, which is not among the given keys", s.KeyID)
	}
	payload, err := base64.RawURLEncoding.DecodeString(s.Payload)
	if err != nil {
		return EvidenceBundle{}, evidenceErr("payload is not base64url")
	}
	sig, err := base64.RawURLEncoding.DecodeString(s.Signature)
	if err != nil || !ed25519.Verify(pub, payload, sig) {
		return EvidenceBundle{}, evidenceErr("the signature does not match the payload and key %s", s.KeyID)
	}
	var b EvidenceBundle
	if err := json.Unmarshal(payload, &b); err != nil {
		return EvidenceBundle{}, evidenceErr("payload: %v", err)
	}
	prev, last := "", int64(0)
	for i, e := range b.Events {
		if e.Seq <= last {
			return b, evidenceErr("event %d (seq %d) is out of order after seq %d", i, e.Seq, last)
		}
		if e.Payload != nil && DigestOf(e.Payload) != e.Digest {
			return b, evidenceErr("event seq %d: payload does not match its digest", e.Seq)
		}
		if want := ChainLink(prev, e.Seq, e.Digest); e.Chain != want {
			return b, evidenceErr("event seq %d breaks the hash chain", e.Seq)
		}
		prev, last = e.Chain, e.Seq
	}
	if b.ChainHead != prev {
		return b, evidenceErr("the chain head does not match the last event")
	}
	return b, nil
}
