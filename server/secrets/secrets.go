// Package secrets keeps the control plane's secrets (signing keys, provider
// keys) encrypted at rest under a master key that never enters the store.
//
// Each record is sealed with envelope encryption: a fresh 256-bit data key
// encrypts the value (AES-256-GCM), and the master key wraps the data key.
// The record's name is authenticated with both, so a sealed value copied
// under another name does not open. Rotating the master key only re-wraps
// data keys (Rewrap); the values themselves are not re-encrypted.
//
// The master key comes from REEVE_MASTER_KEY or from a 0600 key file. A key
// file may hold several keys, one a line: the first seals, the others only
// open, which is how a rotation proceeds (Rotate, then Rewrap every record,
// then drop the old line).
package secrets

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"reeve.dev/reeve/internal/atomicfile"
)

// EnvMasterKey names the environment variable that holds the master key(s),
// comma separated, the sealing key first. It takes precedence over the file.
const EnvMasterKey = "REEVE_MASTER_KEY"

// KeySize is the length of a master key and of a data key, in bytes.
const KeySize = 32

// MaxKeyFileBytes bounds the key file read: a key file is a few lines.
const MaxKeyFileBytes = 64 << 10

// magic starts every sealed record, with the format version.
var magic = []byte("rvs1")

// ErrNotSealed is returned by Open for a value that is not a sealed record
// (a secret stored before encryption at rest).
var ErrNotSealed = errors.New("not a sealed record")

// ErrUnknownKey is returned by Open when the record's master key is not in
// the keyring (a wrong REEVE_MASTER_KEY, or an old key dropped too soon).
var ErrUnknownKey = errors.New("sealed under a master key this keyring does not hold")

// ErrTampered is returned by Open when a record fails authentication: it was
// changed, truncated, or stored under another name.
var ErrTampered = errors.New("sealed record failed authentication")

type masterKey struct {
	id   [8]byte
	aead cipher.AEAD
}

// Keyring holds the master keys: the first seals, all open.
type Keyring struct {
	keys []masterKey
}

// Options locate the master key.
type Options struct {
	// File is the key file. When the environment does not supply a key and
	// the file does not exist, Load creates it with a fresh key (mode 0600,
	// in a 0700 directory).
	File string
	// Getenv reads the environment; default os.Getenv.
	Getenv func(string) string
	// NoCreate makes a missing key file an error instead of generating one
	// (commands that only read must not mint a key nobody else has).
	NoCreate bool
	// Rand is the entropy source; default crypto/rand.
	Rand io.Reader
}

// Load builds the keyring from REEVE_MASTER_KEY, else from the key file.
func Load(o Options) (*Keyring, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := strings.TrimSpace(getenv(EnvMasterKey)); v != "" {
		k, err := Parse(strings.ReplaceAll(v, ",", "\n"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvMasterKey, err)
		}
		return k, nil
	}
	if o.File == "" {
		return nil, fmt.Errorf("no master key: set %s or give a key file", EnvMasterKey)
	}
	text, err := readKeyFile(o.File)
	if errors.Is(err, os.ErrNotExist) && !o.NoCreate {
		return create(o.File, o.Rand)
	}
	if err != nil {
		return nil, err
	}
	k, err := Parse(text)
	if err != nil {
		return nil, fmt.Errorf("master key file %s: %w", o.File, err)
	}
	return k, nil
}

// readKeyFile reads a key file, refusing anything but a small regular file
// that only its owner can read: a key others can read protects nothing.
func readKeyFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("master key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("master key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("master key file %s: not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("master key file %s: mode %04o lets other users read it; chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxKeyFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("master key file: %w", err)
	}
	if len(b) > MaxKeyFileBytes {
		return "", fmt.Errorf("master key file %s: larger than %d bytes", path, MaxKeyFileBytes)
	}
	return string(b), nil
}

func create(path string, r io.Reader) (*Keyring, error) {
	line, err := NewKey(r)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.EnsurePrivateDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("master key directory: %w", err)
	}
	// Write aside, then link into place: a link never replaces a file, so
	// of servers starting together exactly one key wins and all use it.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".master-key-*")
	if err != nil {
		return nil, fmt.Errorf("write master key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(line + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), atomicfile.PrivateFile)
	}
	if err != nil {
		return nil, fmt.Errorf("write master key file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("write master key file: %w", err)
	}
	text, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(text)
}

func writeKeyFile(path, text string) error {
	if err := atomicfile.WriteFile(path, []byte(text), atomicfile.PrivateFile); err != nil {
		return fmt.Errorf("write master key file: %w", err)
	}
	return nil
}

// NewKey returns a fresh master key in its text form (base64, 32 bytes).
func NewKey(r io.Reader) (string, error) {
	if r == nil {
		r = rand.Reader
	}
	b := make([]byte, KeySize)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("generate master key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// Rotate puts a fresh key at the head of the key file, keeping the others
// so that records sealed before still open until they are re-wrapped.
func Rotate(path string, r io.Reader) (*Keyring, error) {
	text, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	if _, err := Parse(text); err != nil {
		return nil, fmt.Errorf("master key file %s: %w", path, err)
	}
	line, err := NewKey(r)
	if err != nil {
		return nil, err
	}
	text = line + "\n" + strings.TrimLeft(text, "\n")
	if err := writeKeyFile(path, text); err != nil {
		return nil, err
	}
	return Parse(text)
}

// Parse reads master keys, one a line (base64 or hex of 32 bytes); blank
// lines and lines starting with # are ignored. The first key seals.
func Parse(text string) (*Keyring, error) {
	k := &Keyring{}
	seen := map[[8]byte]bool{}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		raw, err := decodeKey(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		mk, err := newMasterKey(raw)
		if err != nil {
			return nil, err
		}
		if seen[mk.id] {
			continue
		}
		seen[mk.id] = true
		k.keys = append(k.keys, mk)
	}
	if len(k.keys) == 0 {
		return nil, errors.New("no master key")
	}
	return k, nil
}

func decodeKey(s string) ([]byte, error) {
	for _, dec := range []func(string) ([]byte, error){
		base64.StdEncoding.DecodeString, base64.RawStdEncoding.DecodeString,
		base64.URLEncoding.DecodeString, base64.RawURLEncoding.DecodeString, hex.DecodeString,
	} {
		if b, err := dec(s); err == nil && len(b) == KeySize {
			return b, nil
		}
	}
	return nil, fmt.Errorf("a master key is %d bytes in base64 or hex", KeySize)
}

func newMasterKey(raw []byte) (masterKey, error) {
	aead, err := newAEAD(raw)
	if err != nil {
		return masterKey{}, err
	}
	// The id names the key in each record without revealing it.
	sum := sha256.Sum256(append([]byte("reeve master key id\x00"), raw...))
	var mk masterKey
	copy(mk.id[:], sum[:8])
	mk.aead = aead
	return mk, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("master key: %w", err)
	}
	return cipher.NewGCM(b)
}

// KeyID is the sealing key's id, in hex (shown by operators' commands).
func (k *Keyring) KeyID() string { return hex.EncodeToString(k.keys[0].id[:]) }

// Len is the number of master keys held.
func (k *Keyring) Len() int { return len(k.keys) }

// Record layout, after magic:
//
//	key id (8) | wrap nonce (12) | wrapped data key (32+16) | nonce (12) | ciphertext+tag
const (
	idLen      = 8
	nonceLen   = 12
	wrappedLen = KeySize + 16
	headerLen  = 4 + idLen + nonceLen + wrappedLen
	minLen     = headerLen + nonceLen + 16
)

// Sealed reports whether b looks like a sealed record.
func Sealed(b []byte) bool { return len(b) >= minLen && bytes.HasPrefix(b, magic) }

// Seal encrypts value for the record called name.
func (k *Keyring) Seal(name string, value []byte) ([]byte, error) {
	dk := make([]byte, KeySize)
	if _, err := rand.Read(dk); err != nil {
		return nil, fmt.Errorf("seal %s: %w", name, err)
	}
	data, err := newAEAD(dk)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, headerLen+nonceLen+len(value)+16)
	out = append(out, magic...)
	out, err = k.wrap(out, k.keys[0], name, dk)
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", name, err)
	}
	nonce := make([]byte, nonceLen)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal %s: %w", name, err)
	}
	out = append(out, nonce...)
	return data.Seal(out, nonce, value, aad("value", name, nil)), nil
}

func (k *Keyring) wrap(out []byte, mk masterKey, name string, dk []byte) ([]byte, error) {
	out = append(out, mk.id[:]...)
	nonce := make([]byte, nonceLen)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out = append(out, nonce...)
	return mk.aead.Seal(out, nonce, dk, aad("key", name, mk.id[:])), nil
}

// aad binds a ciphertext to its purpose, its record name and its context.
func aad(purpose, name string, ctx []byte) []byte {
	b := make([]byte, 0, 16+len(name)+len(ctx))
	b = append(b, "reeve secrets "...)
	b = append(b, purpose...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
	b = append(b, name...)
	return append(b, ctx...)
}

func (k *Keyring) find(id []byte) (masterKey, bool) {
	for _, mk := range k.keys {
		if bytes.Equal(mk.id[:], id) {
			return mk, true
		}
	}
	return masterKey{}, false
}

// unwrap returns the record's data key.
func (k *Keyring) unwrap(name string, rec []byte) ([]byte, error) {
	if !Sealed(rec) {
		return nil, ErrNotSealed
	}
	id := rec[4 : 4+idLen]
	mk, ok := k.find(id)
	if !ok {
		return nil, fmt.Errorf("%w (key id %x)", ErrUnknownKey, id)
	}
	nonce := rec[4+idLen : 4+idLen+nonceLen]
	dk, err := mk.aead.Open(nil, nonce, rec[4+idLen+nonceLen:headerLen], aad("key", name, id))
	if err != nil {
		return nil, ErrTampered
	}
	return dk, nil
}

// Open decrypts the record called name.
func (k *Keyring) Open(name string, rec []byte) ([]byte, error) {
	dk, err := k.unwrap(name, rec)
	if err != nil {
		return nil, fmt.Errorf("open secret %s: %w", name, err)
	}
	data, err := newAEAD(dk)
	if err != nil {
		return nil, err
	}
	nonce := rec[headerLen : headerLen+nonceLen]
	v, err := data.Open(nil, nonce, rec[headerLen+nonceLen:], aad("value", name, nil))
	if err != nil {
		return nil, fmt.Errorf("open secret %s: %w", name, ErrTampered)
	}
	return v, nil
}

// Current reports whether rec is sealed under the sealing key.
func (k *Keyring) Current(rec []byte) bool {
	return Sealed(rec) && bytes.Equal(rec[4:4+idLen], k.keys[0].id[:])
}

// Rewrap re-wraps the record's data key under the sealing key; the
// encrypted value is kept as it is. A record already under the sealing key
// is returned unchanged (after checking it opens).
func (k *Keyring) Rewrap(name string, rec []byte) ([]byte, error) {
	if _, err := k.Open(name, rec); err != nil {
		return nil, err
	}
	if k.Current(rec) {
		return rec, nil
	}
	dk, err := k.unwrap(name, rec)
	if err != nil {
		return nil, err
	}
	out := append([]byte{}, magic...)
	if out, err = k.wrap(out, k.keys[0], name, dk); err != nil {
		return nil, fmt.Errorf("rewrap %s: %w", name, err)
	}
	return append(out, rec[headerLen:]...), nil
}

// EnvMasterKeyFile names the environment variable that locates the master
// key file when no --master-key-file flag is given.
const EnvMasterKeyFile = "REEVE_MASTER_KEY_FILE"

// KeepFirst rewrites the key file with its sealing key alone, dropping the
// keys a rotation kept for opening older records. Call it only once every
// record was re-wrapped (RewrapAll, or the store's one-transaction
// re-wrap) and every server runs with the new key. It returns how many
// keys it dropped.
func KeepFirst(path string) (int, error) {
	text, err := readKeyFile(path)
	if err != nil {
		return 0, err
	}
	k, err := Parse(text)
	if err != nil {
		return 0, fmt.Errorf("master key file %s: %w", path, err)
	}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := writeKeyFile(path, line+"\n"); err != nil {
			return 0, err
		}
		return k.Len() - 1, nil
	}
	return 0, errors.New("no master key")
}

// RewrapRecord seals rec under the sealing key: a record in the clear is
// sealed, one under an older key re-wrapped, a current one checked and
// returned as is. It is the function the store's transactional re-wrap
// applies to every record.
func (k *Keyring) RewrapRecord(name string, rec []byte) ([]byte, error) {
	if !Sealed(rec) {
		return k.Seal(name, rec)
	}
	return k.Rewrap(name, rec)
}
