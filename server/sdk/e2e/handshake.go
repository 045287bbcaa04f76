package e2e

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
)

// The handshake is a one-round-trip key exchange in the shape of Noise's NK
// pattern, written for this package (it does not claim to interoperate with
// any Noise library):
//
//	pre-message:  client knows s, the daemon's static anchor key
//	message 1:    client → daemon   e_c, es          [sealed client payload]
//	message 2:    daemon → client   e_d, ee          [sealed daemon payload]
//
// Both sides keep a transcript hash h (SHA-256 over the protocol name, the
// prologue, s, e_c, the sealed payload 1, e_d, the sealed payload 2) and a
// chaining key ck. Each Diffie-Hellman output is mixed into ck with HKDF,
// which also yields the key that seals the next payload with h as the
// associated data, so every sealed payload authenticates the whole
// transcript so far.
//
// What this gives:
//   - Only the holder of the anchor's private key can compute es, so only
//     it can open message 1 and produce a message 2 that opens. A client
//     holding the wrong anchor, or a relay in the middle, fails there: the
//     client refuses the channel before any request leaves it.
//   - ee mixes in fresh ephemeral keys from both sides, so the session keys
//     are new for every channel (forward secrecy once the ephemerals are
//     dropped, and no replay of an old channel into a new one).
//   - The client is anonymous to the daemon here: the relay admitted it
//     with a workspace JWT, and the daemon's own lock decides whether it may
//     drive anything.
//
// After message 2 both split ck into one key per direction (client→daemon,
// daemon→client); see Session for the framing of the payloads that follow.

// protocolName is hashed into the transcript first; changing anything about
// the construction changes the name.
const protocolName = "reeve-e2e/1 NK X25519 AES-256-GCM SHA-256 HKDF"

// Message kinds: the first byte of every message on an end-to-end channel.
const (
	KindHello1        = 1 // client's handshake message
	KindHello2        = 2 // daemon's handshake message
	KindData          = 3 // a sealed transport frame
	KindAnchorRequest = 4 // client asks for the anchor public key (it knows only a fingerprint)
	KindAnchorAnswer  = 5 // daemon's answer: its anchor public key
)

const (
	keyLen = 32 // X25519 public keys, AES-256 keys, SHA-256 sums
	tagLen = 16 // AES-GCM tag
	// MaxHandshakePayload bounds the payload inside each handshake
	// message.
	MaxHandshakePayload = 4 << 10
	// MaxHandshakeMessage bounds a whole handshake message.
	MaxHandshakeMessage = 1 + keyLen + MaxHandshakePayload + tagLen
)

// Errors of the handshake. Each failure wraps one of them.
var (
	// ErrHandshake is a malformed or unexpected handshake message.
	ErrHandshake = errors.New("e2e handshake failed")
	// ErrAnchor is a handshake message that does not open: the peer does
	// not hold the anchor key the client expects (a wrong anchor, or
	// someone in the middle), or the message was altered.
	ErrAnchor = errors.New("e2e handshake: the daemon did not prove it holds the expected anchor key")
)

// symmetric is the handshake's running state: chaining key and transcript
// hash.
type symmetric struct {
	ck [keyLen]byte
	h  [keyLen]byte
}

func newSymmetric(prologue []byte, anchor []byte) *symmetric {
	s := &symmetric{}
	s.h = sha256.Sum256([]byte(protocolName))
	s.ck = s.h
	s.mixHash(prologue)
	s.mixHash(anchor)
	return s
}

func (s *symmetric) mixHash(data []byte) {
	d := sha256.New()
	d.Write(s.h[:])
	d.Write(data)
	d.Sum(s.h[:0])
}

// mixKey folds a DH output into the chaining key and returns the key for
// the next sealed payload.
func (s *symmetric) mixKey(ikm []byte) ([keyLen]byte, error) {
	var k [keyLen]byte
	out, err := hkdf.Key(sha256.New, ikm, s.ck[:], "reeve-e2e/1 mix", 2*keyLen)
	if err != nil {
		return k, err
	}
	copy(s.ck[:], out[:keyLen])
	copy(k[:], out[keyLen:])
	return k, nil
}

// seal encrypts a handshake payload under k (used once, so nonce zero) with
// the transcript as associated data, and hashes the ciphertext in.
func (s *symmetric) seal(k [keyLen]byte, payload []byte) ([]byte, error) {
	a, err := newAEAD(k[:])
	if err != nil {
		return nil, err
	}
	ct := a.Seal(nil, make([]byte, a.NonceSize()), payload, s.h[:])
	s.mixHash(ct)
	return ct, nil
}

func (s *symmetric) open(k [keyLen]byte, ct []byte) ([]byte, error) {
	a, err := newAEAD(k[:])
	if err != nil {
		return nil, err
	}
	pt, err := a.Open(nil, make([]byte, a.NonceSize()), ct, s.h[:])
	if err != nil {
		return nil, err
	}
	s.mixHash(ct)
	return pt, nil
}

// split derives the two transport keys.
func (s *symmetric) split() (c2d, d2c [keyLen]byte, err error) {
	out, err := hkdf.Key(sha256.New, nil, s.ck[:], "reeve-e2e/1 split", 2*keyLen)
	if err != nil {
		return c2d, d2c, err
	}
	copy(c2d[:], out[:keyLen])
	copy(d2c[:], out[keyLen:])
	return c2d, d2c, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// ClientHandshake is the client's side of the key exchange.
type ClientHandshake struct {
	sym    *symmetric
	eph    *ecdh.PrivateKey
	anchor *ecdh.PublicKey
	sent   bool
}

// NewClient starts a handshake against the daemon whose anchor public key
// (32 bytes of X25519) the client already trusts. prologue is context both
// sides must agree on (the workspace and runtime target); a mismatch fails
// the handshake like a wrong anchor.
func NewClient(anchor, prologue []byte) (*ClientHandshake, error) {
	pub, err := ecdh.X25519().NewPublicKey(anchor)
	if err != nil {
		return nil, fmt.Errorf("%w: anchor is not an X25519 public key: %v", ErrHandshake, err)
	}
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ephemeral key: %w", err)
	}
	return &ClientHandshake{sym: newSymmetric(prologue, anchor), eph: eph, anchor: pub}, nil
}

// Hello returns message 1, sealing payload (at most MaxHandshakePayload
// bytes) so that only the anchor's holder can read it.
func (c *ClientHandshake) Hello(payload []byte) ([]byte, error) {
	if c.sent {
		return nil, fmt.Errorf("%w: hello already sent", ErrHandshake)
	}
	if len(payload) > MaxHandshakePayload {
		return nil, fmt.Errorf("%w: payload of %d bytes is over %d", ErrHandshake, len(payload), MaxHandshakePayload)
	}
	c.sent = true
	e := c.eph.PublicKey().Bytes()
	c.sym.mixHash(e)
	es, err := c.eph.ECDH(c.anchor)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	k, err := c.sym.mixKey(es)
	if err != nil {
		return nil, err
	}
	ct, err := c.sym.seal(k, payload)
	if err != nil {
		return nil, err
	}
	msg := make([]byte, 0, 1+keyLen+len(ct))
	msg = append(msg, KindHello1)
	msg = append(msg, e...)
	return append(msg, ct...), nil
}

// Finish reads message 2. It fails with ErrAnchor when the daemon does not
// hold the anchor key; on success it returns the transport session and the
// daemon's payload.
func (c *ClientHandshake) Finish(msg2 []byte) (*Session, []byte, error) {
	if !c.sent {
		return nil, nil, fmt.Errorf("%w: hello not sent yet", ErrHandshake)
	}
	re, ct, err := splitHello(msg2, KindHello2)
	if err != nil {
		return nil, nil, err
	}
	c.sym.mixHash(re.Bytes())
	ee, err := c.eph.ECDH(re)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	k, err := c.sym.mixKey(ee)
	if err != nil {
		return nil, nil, err
	}
	payload, err := c.sym.open(k, ct)
	if err != nil {
		return nil, nil, ErrAnchor
	}
	c2d, d2c, err := c.sym.split()
	if err != nil {
		return nil, nil, err
	}
	s, err := newSession(c2d, d2c, c.sym.h)
	return s, payload, err
}

// DaemonHandshake is the daemon's side, after it has read message 1.
type DaemonHandshake struct {
	sym     *symmetric
	clientE *ecdh.PublicKey
	replied bool
}

// Accept reads message 1 with the daemon's static anchor key and returns
// the client's payload. A message sealed for another anchor, or with
// another prologue, fails with ErrAnchor.
func Accept(static *ecdh.PrivateKey, prologue, msg1 []byte) (*DaemonHandshake, []byte, error) {
	if static == nil || static.Curve() != ecdh.X25519() {
		return nil, nil, fmt.Errorf("%w: the anchor is not an X25519 key", ErrHandshake)
	}
	ce, ct, err := splitHello(msg1, KindHello1)
	if err != nil {
		return nil, nil, err
	}
	sym := newSymmetric(prologue, static.PublicKey().Bytes())
	sym.mixHash(ce.Bytes())
	es, err := static.ECDH(ce)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	k, err := sym.mixKey(es)
	if err != nil {
		return nil, nil, err
	}
	payload, err := sym.open(k, ct)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: message 1 does not open with this daemon's anchor", ErrAnchor)
	}
	return &DaemonHandshake{sym: sym, clientE: ce}, payload, nil
}

// Reply returns message 2 carrying payload, and the transport session.
func (d *DaemonHandshake) Reply(payload []byte) ([]byte, *Session, error) {
	if d.replied {
		return nil, nil, fmt.Errorf("%w: already replied", ErrHandshake)
	}
	if len(payload) > MaxHandshakePayload {
		return nil, nil, fmt.Errorf("%w: payload of %d bytes is over %d", ErrHandshake, len(payload), MaxHandshakePayload)
	}
	d.replied = true
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate ephemeral key: %w", err)
	}
	e := eph.PublicKey().Bytes()
	d.sym.mixHash(e)
	ee, err := eph.ECDH(d.clientE)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	k, err := d.sym.mixKey(ee)
	if err != nil {
		return nil, nil, err
	}
	ct, err := d.sym.seal(k, payload)
	if err != nil {
		return nil, nil, err
	}
	c2d, d2c, err := d.sym.split()
	if err != nil {
		return nil, nil, err
	}
	// The daemon sends with the daemon→client key and receives with the
	// other one.
	s, err := newSession(d2c, c2d, d.sym.h)
	if err != nil {
		return nil, nil, err
	}
	msg := make([]byte, 0, 1+keyLen+len(ct))
	msg = append(msg, KindHello2)
	msg = append(msg, e...)
	return append(msg, ct...), s, nil
}

// splitHello parses a handshake message of the given kind into the peer's
// ephemeral key and the sealed payload.
func splitHello(msg []byte, kind byte) (*ecdh.PublicKey, []byte, error) {
	if len(msg) > MaxHandshakeMessage {
		return nil, nil, fmt.Errorf("%w: message of %d bytes is over %d", ErrHandshake, len(msg), MaxHandshakeMessage)
	}
	if len(msg) < 1+keyLen+tagLen {
		return nil, nil, fmt.Errorf("%w: message of %d bytes is too short", ErrHandshake, len(msg))
	}
	if msg[0] != kind {
		return nil, nil, fmt.Errorf("%w: message kind %d, want %d", ErrHandshake, msg[0], kind)
	}
	pub, err := ecdh.X25519().NewPublicKey(msg[1 : 1+keyLen])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: bad ephemeral key: %v", ErrHandshake, err)
	}
	return pub, msg[1+keyLen:], nil
}
