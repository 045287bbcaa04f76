package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
)

// PrefixRelayService marks the relay service credential: what a relay
// instance presents on the presence and bus routes.
const PrefixRelayService = "rvr_"

// RelayServiceSecret names the store secret the credential derives from.
const RelayServiceSecret = "relay-service-hmac"

// RelayServiceCredential derives the relay service credential from the
// server's stored secret, so every replica sharing the database agrees and
// the plaintext itself is never stored.
func RelayServiceCredential(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("reeve relay service credential v1"))
	return PrefixRelayService + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// VerifyRelayService reports whether presented is the credential of key.
func VerifyRelayService(key []byte, presented string) bool {
	want := RelayServiceCredential(key)
	return len(presented) == len(want) && subtle.ConstantTimeCompare([]byte(presented), []byte(want)) == 1
}
