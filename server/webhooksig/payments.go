package webhooksig

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The payment provider's header is a comma-separated list of key=value
// pairs: one `t=<unix seconds>` and one or more `v1=<hex>`, where each v1 is
// HMAC-SHA256 of "<t>.<body>". Several v1 values appear while the provider
// rolls a secret; any one matching is enough. Other keys (older scheme
// versions) are ignored, as the provider documents.

// SignPayments returns the payment provider's signature header for body,
// with one v1 value per secret.
func SignPayments(at time.Time, body []byte, secrets ...[]byte) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=" + ts)
	for _, s := range secrets {
		b.WriteString(",v1=" + hex.EncodeToString(paymentsMAC(s, ts, body)))
	}
	return b.String()
}

func paymentsMAC(secret []byte, ts string, body []byte) []byte {
	return mac(secret, []byte(ts+"."), body)
}

// VerifyPayments checks the header against body under secret and returns
// the signed timestamp. The timestamp must be within tolerance of now
// (DefaultTolerance when zero).
func VerifyPayments(secret, body []byte, header string, now time.Time, tolerance time.Duration) (time.Time, error) {
	if header == "" {
		return time.Time{}, ErrMissing
	}
	if len(header) > maxHeader {
		return time.Time{}, fmt.Errorf("%w: header too long", ErrMalformed)
	}
	var tsText string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return time.Time{}, fmt.Errorf("%w: %q is not key=value", ErrMalformed, clip(part))
		}
		switch k {
		case "t":
			if tsText != "" {
				return time.Time{}, fmt.Errorf("%w: more than one t", ErrMalformed)
			}
			tsText = v
		case "v1":
			if len(sigs) == maxSignatures {
				return time.Time{}, fmt.Errorf("%w: more than %d v1 values", ErrMalformed, maxSignatures)
			}
			sigs = append(sigs, v)
		}
	}
	if tsText == "" {
		return time.Time{}, fmt.Errorf("%w: no t", ErrMalformed)
	}
	if len(sigs) == 0 {
		return time.Time{}, fmt.Errorf("%w: no v1 signature", ErrMissing)
	}
	ts, err := parseUnix(tsText)
	if err != nil {
		return time.Time{}, err
	}
	want := paymentsMAC(secret, tsText, body)
	matched := false
	for _, s := range sigs {
		// No early exit: every candidate is compared, so timing does not
		// say which one matched.
		if equalHex(s, want) {
			matched = true
		}
	}
	if !matched {
		return time.Time{}, ErrMismatch
	}
	if err := fresh(ts, now, tolerance); err != nil {
		return time.Time{}, err
	}
	return ts, nil
}
