package e2e

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A relayed channel runs, in order:
//
//  1. optionally, when the client knows only the anchor's fingerprint:
//     AnchorRequest → AnchorAnswer, which the client checks against the
//     fingerprint before it trusts the key;
//  2. the handshake (Hello1 → Hello2), the daemon's payload being an
//     Admission;
//  3. transport frames (KindData) carrying the control protocol.

// Kind returns the kind byte of a channel message.
func Kind(msg []byte) (byte, error) {
	if len(msg) == 0 {
		return 0, fmt.Errorf("%w: %w: empty message", ErrFrame, ErrMalformed)
	}
	return msg[0], nil
}

// AnchorRequest is the message that asks the daemon for its anchor public
// key.
func AnchorRequest() []byte { return []byte{KindAnchorRequest} }

// AnchorAnswer is the daemon's answer to AnchorRequest.
func AnchorAnswer(anchor []byte) []byte {
	return append([]byte{KindAnchorAnswer}, anchor...)
}

// ErrFingerprint is an anchor whose fingerprint is not the expected one.
var ErrFingerprint = errors.New("e2e: the daemon's anchor does not match the expected fingerprint")

// VerifyAnchorAnswer reads an AnchorAnswer and returns the key only when
// its Fingerprint equals fingerprint (compared without regard to case or
// separators).
func VerifyAnchorAnswer(msg []byte, fingerprint string) ([]byte, error) {
	if len(msg) != 1+keyLen || msg[0] != KindAnchorAnswer {
		return nil, fmt.Errorf("%w: not an anchor answer", ErrHandshake)
	}
	key := msg[1:]
	if !FingerprintMatches(key, fingerprint) {
		return nil, fmt.Errorf("%w: it is %s", ErrFingerprint, Fingerprint(key))
	}
	return append([]byte(nil), key...), nil
}

// FingerprintMatches reports whether anchor has the fingerprint fp, as
// printed by Fingerprint or with other separators or case.
func FingerprintMatches(anchor []byte, fp string) bool {
	norm := func(s string) string {
		return strings.Map(func(r rune) rune {
			switch {
			case r >= '0' && r <= '9', r >= 'A' && r <= 'F':
				return r
			case r >= 'a' && r <= 'f':
				return r - 'a' + 'A'
			}
			return -1
		}, s)
	}
	want := norm(fp)
	return len(want) == 32 && subtle.ConstantTimeCompare([]byte(norm(Fingerprint(anchor))), []byte(want)) == 1
}

// Admission is the daemon's handshake payload: whether this channel may
// speak the control protocol. It travels sealed, so the client knows the
// answer is the daemon's own and not the relay's.
type Admission struct {
	Admitted bool   `json:"admitted"`
	Reason   string `json:"reason,omitempty"` // why not, when refused
	// Until is when the daemon will close the channel because its unlock
	// ends; zero when it has no end.
	Until    time.Time `json:"until,omitzero"`
	DaemonID string    `json:"daemon_id,omitempty"`
}

// ErrRefused is an Admission that did not admit the channel.
var ErrRefused = errors.New("the daemon refused remote control")

// Encode marshals the admission.
func (a Admission) Encode() []byte {
	b, _ := json.Marshal(a)
	return b
}

// DecodeAdmission reads a daemon's payload; a refusal is an error wrapping
// ErrRefused with the daemon's reason.
func DecodeAdmission(payload []byte) (Admission, error) {
	var a Admission
	if err := json.Unmarshal(payload, &a); err != nil {
		return a, fmt.Errorf("%w: the daemon's admission is not JSON: %v", ErrHandshake, err)
	}
	if !a.Admitted {
		reason := a.Reason
		if reason == "" {
			reason = "no reason given"
		}
		return a, fmt.Errorf("%w: %s", ErrRefused, reason)
	}
	return a, nil
}

// Prologue is the context both ends bind into the handshake: a channel
// sealed for one workspace and runtime target fails for any other.
func Prologue(workspaceID, runtimeTargetID string) []byte {
	return []byte("reeve relay channel\x00" + workspaceID + "\x00" + runtimeTargetID)
}
