package webhooksig

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// The code host signs the raw body with HMAC-SHA256 under the hook's secret
// and sends it hex-encoded after a `sha256=` prefix. The scheme carries no
// timestamp; replays are caught by the delivery id, not here.
const codeHostPrefix = "sha256="

// SignCodeHost returns the code host's signature header value for body.
func SignCodeHost(secret, body []byte) string {
	return codeHostPrefix + hex.EncodeToString(mac(secret, body))
}

// VerifyCodeHost checks a `sha256=<hex>` header against body.
func VerifyCodeHost(secret, body []byte, header string) error {
	if header == "" {
		return ErrMissing
	}
	if len(header) > maxHeader || !strings.HasPrefix(header, codeHostPrefix) {
		return fmt.Errorf("%w: want %s<hex>", ErrMalformed, codeHostPrefix)
	}
	if !equalHex(header[len(codeHostPrefix):], mac(secret, body)) {
		return ErrMismatch
	}
	return nil
}

// SignTracker returns the tracker's signature header value: the hex
// HMAC-SHA256 of the body, with no prefix.
func SignTracker(secret, body []byte) string {
	return hex.EncodeToString(mac(secret, body))
}

// VerifyTracker checks a bare hex HMAC-SHA256 header against body. The
// tracker's timestamp travels inside the JSON body, so freshness is the
// caller's to check after decoding (see CheckFresh).
func VerifyTracker(secret, body []byte, header string) error {
	if header == "" {
		return ErrMissing
	}
	if len(header) > maxHeader {
		return fmt.Errorf("%w: header too long", ErrMalformed)
	}
	if !equalHex(strings.TrimSpace(header), mac(secret, body)) {
		return ErrMismatch
	}
	return nil
}
