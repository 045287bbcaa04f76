package webhooksig

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The chat tool signs "<version>:<unix seconds>:<body>" with HMAC-SHA256 and
// sends "<version>=<hex>" in one header and the timestamp in another. The
// version is part of the signed text, so a signature cannot be moved to
// another version's base string.
const chatVersion = "v0"

// SignChat returns the chat tool's timestamp and signature header values.
func SignChat(secret []byte, at time.Time, body []byte) (timestamp, signature string) {
	ts := strconv.FormatInt(at.Unix(), 10)
	return ts, chatVersion + "=" + hex.EncodeToString(chatMAC(secret, ts, body))
}

func chatMAC(secret []byte, ts string, body []byte) []byte {
	return mac(secret, []byte(chatVersion+":"+ts+":"), body)
}

// VerifyChat checks the chat tool's signature and that its timestamp is
// within tolerance of now (DefaultTolerance when zero).
func VerifyChat(secret, body []byte, timestamp, signature string, now time.Time, tolerance time.Duration) error {
	if signature == "" || timestamp == "" {
		return ErrMissing
	}
	if len(signature) > maxHeader {
		return fmt.Errorf("%w: header too long", ErrMalformed)
	}
	ver, sig, ok := strings.Cut(signature, "=")
	if !ok || ver != chatVersion {
		return fmt.Errorf("%w: want %s=<hex>", ErrMalformed, chatVersion)
	}
	ts, err := parseUnix(timestamp)
	if err != nil {
		return err
	}
	// The MAC is checked before the clock so a forger learns nothing about
	// the tolerance; both must pass.
	if !equalHex(sig, chatMAC(secret, timestamp, body)) {
		return ErrMismatch
	}
	return fresh(ts, now, tolerance)
}

// CheckFresh applies the tolerance rule to a timestamp found elsewhere (the
// tracker carries one in its JSON body).
func CheckFresh(ts, now time.Time, tolerance time.Duration) error {
	return fresh(ts, now, tolerance)
}
