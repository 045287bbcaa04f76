package webhooksig

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks (standardwebhooks.com): the signed text is
// "<webhook-id>.<webhook-timestamp>.<body>", the MAC HMAC-SHA256 under the
// decoded secret, and the `webhook-signature` header a space-separated list
// of "v1,<base64>" so that a sender rotating its secret can sign with both.
// Secrets are written "whsec_<base64>".
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"

	secretPrefix = "whsec_"
)

// NewStandardSecret returns a fresh secret in the "whsec_<base64>" form,
// 32 random bytes.
func NewStandardSecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		// crypto/rand does not fail on supported platforms (it panics
		// itself since go1.24); keep the contract explicit.
		panic(fmt.Sprintf("webhooksig: crypto/rand: %v", err))
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(b)
}

// ParseStandardSecret decodes a "whsec_<base64>" secret (the prefix is
// optional, as in the reference libraries).
func ParseStandardSecret(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, secretPrefix))
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("webhook secret: want %s<base64>", secretPrefix)
	}
	return b, nil
}

func standardMAC(secret []byte, id, ts string, body []byte) []byte {
	return mac(secret, []byte(id+"."+ts+"."), body)
}

// SignStandard returns the webhook-timestamp and webhook-signature header
// values for a message, with one v1 signature per secret (decoded bytes).
func SignStandard(id string, at time.Time, body []byte, secrets ...[]byte) (timestamp, signature string) {
	ts := strconv.FormatInt(at.Unix(), 10)
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(standardMAC(s, id, ts, body)))
	}
	return ts, strings.Join(sigs, " ")
}

// VerifyStandard checks a Standard Webhooks message: any v1 signature in
// the header matching under any of secrets passes, and the timestamp must
// be within tolerance of now (DefaultTolerance when zero). Signatures of
// other versions (such as v1a, asymmetric) are skipped.
func VerifyStandard(secrets [][]byte, id, timestamp, signature string, body []byte, now time.Time, tolerance time.Duration) error {
	if id == "" || timestamp == "" || signature == "" {
		return ErrMissing
	}
	if len(signature) > maxHeader || len(id) > 256 {
		return fmt.Errorf("%w: header too long", ErrMalformed)
	}
	ts, err := parseUnix(timestamp)
	if err != nil {
		return err
	}
	fields := strings.Fields(signature)
	if len(fields) > maxSignatures {
		return fmt.Errorf("%w: more than %d signatures", ErrMalformed, maxSignatures)
	}
	var cands [][]byte
	for _, f := range fields {
		ver, sig, ok := strings.Cut(f, ",")
		if !ok {
			return fmt.Errorf("%w: %q is not version,signature", ErrMalformed, clip(f))
		}
		if ver != "v1" {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			return fmt.Errorf("%w: v1 signature is not base64", ErrMalformed)
		}
		cands = append(cands, b)
	}
	if len(cands) == 0 {
		return fmt.Errorf("%w: no v1 signature", ErrMissing)
	}
	matched := false
	for _, s := range secrets {
		want := standardMAC(s, id, timestamp, body)
		for _, c := range cands {
			if hmac.Equal(c, want) {
				matched = true
			}
		}
	}
	if !matched {
		return ErrMismatch
	}
	return fresh(ts, now, tolerance)
}
