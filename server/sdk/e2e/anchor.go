// Package e2e is the end-to-end encryption between a remote client and a
// paired daemon through the relay: a key exchange against the daemon's
// X25519 trust anchor, then AEAD-sealed payloads with counters. It uses only
// the standard library, so daemon, server and clients can all link it.
package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Fingerprint is how people compare a daemon's trust anchor (its static
// X25519 public key): the first 16 bytes of its SHA-256, as eight groups of
// four hex digits. `reeve pair anchor` prints it and the approval page shows
// it.
func Fingerprint(anchor []byte) string {
	sum := sha256.Sum256(anchor)
	h := hex.EncodeToString(sum[:16])
	groups := make([]string, 0, 8)
	for i := 0; i < len(h); i += 4 {
		groups = append(groups, h[i:i+4])
	}
	return strings.ToUpper(strings.Join(groups, "-"))
}
