// Package seal is the cryptography of the context vault, built from
// filippo.io/age, golang.org/x/crypto and the standard library:
//
//   - a device identity is an age X25519 key pair (to receive wrapped keys)
//     and an Ed25519 key pair (to sign what it wraps);
//   - an epoch key (32 random bytes) is wrapped to each granted device with
//     age, inside a payload that names its vault and epoch and is signed by
//     the wrapping device;
//   - an entry is sealed with XChaCha20-Poly1305 under its epoch key, with
//     the vault, entry, event, base revision, kind, epoch and the
//     server-visible descriptors as associated data, so none of them can be
//     changed or swapped without the open failing.
package seal

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"filippo.io/age"
	"golang.org/x/crypto/chacha20poly1305"

	"reeve.dev/reeve/server/sdk/e2e"
)

// KeySize is the size of an epoch key.
const KeySize = chacha20poly1305.KeySize

// ErrOpen is returned when a ciphertext does not authenticate: wrong key,
// tampered bytes, or associated data that differs from what was sealed.
var ErrOpen = errors.New("the ciphertext does not authenticate (tampered, or sealed for another entry, event or epoch)")

// Identity is a device's private keys.
type Identity struct {
	x    *age.X25519Identity
	sign ed25519.PrivateKey
}

// Public is a device's public keys, as the server lists them.
type Public struct {
	// Recipient is the age X25519 recipient ("age1...").
	Recipient string `json:"recipient"`
	// SigningKey is the Ed25519 public key, standard base64.
	SigningKey string `json:"signing_key"`
}

// NewIdentity generates a device identity.
func NewIdentity() (*Identity, error) {
	x, err := age.GenerateX25519Identity()
	if err != nil {
		return nil, fmt.Errorf("generate device key: %w", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate device signing key: %w", err)
	}
	return &Identity{x: x, sign: priv}, nil
}

type identityJSON struct {
	X25519  string `json:"x25519"`
	Ed25519 string `json:"ed25519_seed"`
}

// Marshal encodes the private keys, for a key store or a recovery backup.
func (id *Identity) Marshal() []byte {
	b, _ := json.Marshal(identityJSON{X25519: id.x.String(), Ed25519: base64.StdEncoding.EncodeToString(id.sign.Seed())})
	return b
}

// ParseIdentity decodes what Marshal wrote.
func ParseIdentity(b []byte) (*Identity, error) {
	var j identityJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("parse device identity: %w", err)
	}
	x, err := age.ParseX25519Identity(j.X25519)
	if err != nil {
		return nil, fmt.Errorf("parse device identity: %w", err)
	}
	seed, err := base64.StdEncoding.DecodeString(j.Ed25519)
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, errors.New("parse device identity: bad signing key")
	}
	return &Identity{x: x, sign: ed25519.NewKeyFromSeed(seed)}, nil
}

// Public returns the identity's public keys.
func (id *Identity) Public() Public {
	return Public{Recipient: id.x.Recipient().String(), SigningKey: base64.StdEncoding.EncodeToString(id.sign.Public().(ed25519.PublicKey))}
}

// Fingerprint identifies a device's public keys for people to compare:
// eight groups of four hex digits, as `reeve pair anchor` prints.
func (p Public) Fingerprint() string {
	return e2e.Fingerprint([]byte(p.Recipient + "\n" + p.SigningKey))
}

// FingerprintMatches compares a fingerprint as a person typed it (any
// case, any separators) in constant time.
func (p Public) FingerprintMatches(fp string) bool {
	return e2e.FingerprintMatches([]byte(p.Recipient+"\n"+p.SigningKey), fp)
}

// Check parses both keys, so a malformed device is refused at enrollment.
func (p Public) Check() error {
	if _, err := age.ParseX25519Recipient(p.Recipient); err != nil {
		return fmt.Errorf("recipient: %w", err)
	}
	if k, err := base64.StdEncoding.DecodeString(p.SigningKey); err != nil || len(k) != ed25519.PublicKeySize {
		return errors.New("signing_key: not a base64 Ed25519 public key")
	}
	return nil
}

// NewKey returns a fresh random epoch key.
func NewKey() []byte {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		panic(fmt.Sprintf("seal: no randomness: %v", err))
	}
	return k
}

// ---- wrapping epoch keys ----

// KeyLabel says which key a wrap carries.
type KeyLabel struct {
	VaultID string `json:"vault_id"`
	Epoch   int64  `json:"epoch"`
}

// wrapPayload is what age encrypts to a device: the key with its label,
// who wrapped it and a signature that binds all of it to the recipient.
type wrapPayload struct {
	KeyLabel
	Key       []byte `json:"key"`
	Recipient string `json:"recipient"`
	WrappedBy string `json:"wrapped_by"` // device id
	Signature []byte `json:"signature"`
}

func (w wrapPayload) signed() []byte {
	sum := sha256.Sum256(w.Key)
	return fmt.Appendf(nil, "reeve-context-wrap-v1\x00%s\x00%d\x00%s\x00%s\x00%x", w.VaultID, w.Epoch, w.Recipient, w.WrappedBy, sum)
}

// Wrap encrypts an epoch key to one device, signed by the wrapping
// identity (whose device id is wrappedBy). The answer is base64 text.
func (id *Identity) Wrap(label KeyLabel, key []byte, to Public, wrappedBy string) (string, error) {
	if len(key) != KeySize {
		return "", fmt.Errorf("wrap: an epoch key is %d bytes, got %d", KeySize, len(key))
	}
	r, err := age.ParseX25519Recipient(to.Recipient)
	if err != nil {
		return "", fmt.Errorf("wrap: %w", err)
	}
	p := wrapPayload{KeyLabel: label, Key: key, Recipient: to.Recipient, WrappedBy: wrappedBy}
	p.Signature = ed25519.Sign(id.sign, p.signed())
	plain, _ := json.Marshal(p)
	var buf bytes.Buffer
	w, err := age.Encrypt(&buf, r)
	if err != nil {
		return "", fmt.Errorf("wrap: %w", err)
	}
	if _, err := w.Write(plain); err != nil {
		return "", fmt.Errorf("wrap: %w", err)
	}
	if err := w.Close(); err != nil {
		return "", fmt.Errorf("wrap: %w", err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// Unwrapped is an epoch key taken out of its wrap.
type Unwrapped struct {
	KeyLabel
	Key       []byte
	WrappedBy string
}

// Unwrap decrypts a wrap addressed to this identity and checks that it
// carries the key of want, wrapped for this device. signer returns the
// public keys of the device that wrapped it (nil: unknown device, refused),
// whose signature must verify.
func (id *Identity) Unwrap(wrapped string, want KeyLabel, signer func(deviceID string) *Public) (Unwrapped, error) {
	raw, err := base64.StdEncoding.DecodeString(wrapped)
	if err != nil {
		return Unwrapped{}, fmt.Errorf("unwrap: not base64: %w", err)
	}
	r, err := age.Decrypt(bytes.NewReader(raw), id.x)
	if err != nil {
		return Unwrapped{}, fmt.Errorf("unwrap: %w", err)
	}
	plain, err := io.ReadAll(io.LimitReader(r, 64<<10))
	if err != nil {
		return Unwrapped{}, fmt.Errorf("unwrap: %w", err)
	}
	var p wrapPayload
	if err := json.Unmarshal(plain, &p); err != nil {
		return Unwrapped{}, fmt.Errorf("unwrap: %w", err)
	}
	if p.KeyLabel != want {
		return Unwrapped{}, fmt.Errorf("unwrap: the wrap carries the key of vault %s epoch %d, not of vault %s epoch %d", p.VaultID, p.Epoch, want.VaultID, want.Epoch)
	}
	if p.Recipient != id.x.Recipient().String() {
		return Unwrapped{}, errors.New("unwrap: the wrap was made for another device")
	}
	if len(p.Key) != KeySize {
		return Unwrapped{}, errors.New("unwrap: the wrapped key has the wrong size")
	}
	pub := signer(p.WrappedBy)
	if pub == nil {
		return Unwrapped{}, fmt.Errorf("unwrap: the key was wrapped by device %q, which is not a known device of this vault", p.WrappedBy)
	}
	sk, err := base64.StdEncoding.DecodeString(pub.SigningKey)
	if err != nil || len(sk) != ed25519.PublicKeySize || !ed25519.Verify(sk, p.signed(), p.Signature) {
		return Unwrapped{}, fmt.Errorf("unwrap: the signature of device %q does not verify", p.WrappedBy)
	}
	return Unwrapped{KeyLabel: p.KeyLabel, Key: p.Key, WrappedBy: p.WrappedBy}, nil
}

// ---- sealing entries ----

// Header is everything about an event that is not secret but must not be
// changed: it is the associated data of the entry's AEAD.
type Header struct {
	VaultID    string `json:"vault_id"`
	EntryID    string `json:"entry_id"`
	EventID    string `json:"event_id"`
	Base       string `json:"base,omitempty"` // the event this one replaces
	Kind       string `json:"kind"`
	Epoch      int64  `json:"epoch"`
	UseWhen    string `json:"use_when,omitempty"`
	UpdateWhen string `json:"update_when,omitempty"`
}

func (h Header) ad() []byte {
	b, _ := json.Marshal(h) // fixed field order: deterministic
	return append([]byte("reeve-context-entry-v1\x00"), b...)
}

// Seal encrypts plaintext under an epoch key for the event h describes;
// the answer is base64(nonce || ciphertext).
func Seal(key []byte, h Header, plaintext []byte) (string, error) {
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	out := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	out = aead.Seal(out, out, plaintext, h.ad())
	return base64.StdEncoding.EncodeToString(out), nil
}

// Open decrypts what Seal wrote; ErrOpen when anything was changed.
func Open(key []byte, h Header, sealed string) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil {
		return nil, ErrOpen
	}
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	if len(raw) < aead.NonceSize()+aead.Overhead() {
		return nil, ErrOpen
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], h.ad())
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}

// ---- sealing to devices (proposals, backups) ----

// SealTo encrypts a message to several devices with age, for data that
// is not under an epoch key (a proposal the server receives in the clear
// and must not keep).
func SealTo(plaintext []byte, to ...Public) (string, error) {
	if len(to) == 0 {
		return "", errors.New("seal: no recipients")
	}
	rs := make([]age.Recipient, 0, len(to))
	for _, p := range to {
		r, err := age.ParseX25519Recipient(p.Recipient)
		if err != nil {
			return "", fmt.Errorf("seal: %w", err)
		}
		rs = append(rs, r)
	}
	return ageEncrypt(plaintext, rs...)
}

// OpenSealed decrypts what SealTo wrote for this identity.
func (id *Identity) OpenSealed(sealed string) ([]byte, error) {
	return ageDecrypt(sealed, id.x)
}

// SealWithPassphrase encrypts with a passphrase (age's scrypt recipient),
// for recovery backups. workFactor is scrypt's log2 N; 0 keeps age's
// default (18).
func SealWithPassphrase(plaintext []byte, passphrase string, workFactor int) (string, error) {
	r, err := age.NewScryptRecipient(passphrase)
	if err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	if workFactor > 0 {
		r.SetWorkFactor(workFactor)
	}
	return ageEncrypt(plaintext, r)
}

// ErrPassphrase is a wrong recovery key.
var ErrPassphrase = errors.New("the recovery key does not open this backup")

// OpenWithPassphrase decrypts what SealWithPassphrase wrote.
func OpenWithPassphrase(sealed, passphrase string) ([]byte, error) {
	id, err := age.NewScryptIdentity(passphrase)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	b, err := ageDecrypt(sealed, id)
	var nm *age.NoIdentityMatchError
	if errors.As(err, &nm) || (err != nil && strings.Contains(err.Error(), "incorrect passphrase")) {
		return nil, ErrPassphrase
	}
	return b, err
}

func ageEncrypt(plaintext []byte, rs ...age.Recipient) (string, error) {
	var buf bytes.Buffer
	w, err := age.Encrypt(&buf, rs...)
	if err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	if _, err := w.Write(plaintext); err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	if err := w.Close(); err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

func ageDecrypt(sealed string, ids ...age.Identity) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil {
		return nil, fmt.Errorf("open: not base64: %w", err)
	}
	r, err := age.Decrypt(bytes.NewReader(raw), ids...)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	return b, nil
}

// Digest is the hex SHA-256 of b, for commitments the server can compare
// without seeing b.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%x", sum)
}
