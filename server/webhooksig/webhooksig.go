// Package webhooksig signs and verifies webhook deliveries with the schemes
// real providers use: the code host's `sha256=` body HMAC, the chat tool's
// versioned timestamped HMAC, the tracker's body HMAC, the payment
// provider's `t=…,v1=…` header, and Standard Webhooks for what reeve sends.
//
// It is the one place these schemes live: the inbound ingestion routes, the
// billing webhook and the outbound dispatcher all call it. It uses the
// standard library only, and every comparison of a signature is constant
// time.
package webhooksig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The errors a verifier returns, wrapped with detail; callers map them all
// to 401 and may log which one it was.
var (
	ErrMissing   = errors.New("signature missing")
	ErrMalformed = errors.New("signature header malformed")
	ErrMismatch  = errors.New("signature does not match")
	ErrStale     = errors.New("signature timestamp outside the tolerance")
)

// DefaultTolerance is how far a signed timestamp may be from the verifier's
// clock, in either direction, when a caller passes a zero tolerance. Five
// minutes is what the chat, payments and Standard Webhooks schemes document.
const DefaultTolerance = 5 * time.Minute

// maxHeader bounds what a verifier is willing to parse: a real signature
// header is well under 1 KiB even with a few rotated secrets.
const maxHeader = 8 << 10

// maxSignatures bounds how many candidate signatures one header may carry,
// so a forged header cannot make the verifier compute thousands of MACs'
// worth of comparisons.
const maxSignatures = 16

func mac(secret []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// equalHex compares a hex-encoded candidate with an expected MAC in
// constant time (with respect to the MAC). Every sender of these schemes
// writes lowercase hex, so only that one spelling is accepted: a signature
// header has exactly one valid value, and an uppercase or mixed-case
// rewrite of it is a mismatch, as is anything of the wrong length.
func equalHex(candidate string, want []byte) bool {
	return hmac.Equal([]byte(candidate), []byte(hex.EncodeToString(want)))
}

// parseUnix reads a decimal Unix time in seconds, refusing signs, spaces
// and anything that does not fit comfortably in an int64 of seconds.
func parseUnix(s string) (time.Time, error) {
	if s == "" || len(s) > 12 {
		return time.Time{}, fmt.Errorf("%w: timestamp %q", ErrMalformed, clip(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return time.Time{}, fmt.Errorf("%w: timestamp %q", ErrMalformed, clip(s))
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: timestamp %q", ErrMalformed, clip(s))
	}
	return time.Unix(n, 0), nil
}

// fresh checks ts against now within tolerance, both ways: a timestamp
// from the future is as suspect as a stale one.
func fresh(ts, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	d := now.Sub(ts)
	if d > tolerance {
		return fmt.Errorf("%w: signed %s ago, tolerance %s", ErrStale, d.Round(time.Second), tolerance)
	}
	if -d > tolerance {
		return fmt.Errorf("%w: signed %s in the future, tolerance %s", ErrStale, (-d).Round(time.Second), tolerance)
	}
	return nil
}

// clip keeps error messages short when a header is hostile.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
