// Package contextvault is a device's side of the context vault: a team's
// conventions, decisions and hard-won knowledge kept as small markdown
// entries, sealed on the device and synced through the control plane,
// which stores and routes them but can never read them
// (docs/context-vault.md).
//
// A Vault is one device: its identity (in a key store), its local copy of
// the sources it belongs to, and a client of the runtime routes. Every
// operation the `reeve context` commands offer is a method here.
package contextvault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"reeve.dev/reeve/contextvault/seal"
	"reeve.dev/reeve/internal/keystore"
	"reeve.dev/reeve/server/sdk"
)

// Errors callers map to exit codes.
var (
	ErrNotFound    = errors.New("not found")
	ErrNoKey       = errors.New("no key")
	ErrNoDevice    = errors.New("no device")
	ErrNotPaired   = errors.New("not paired")
	ErrRefused     = errors.New("refused")
	ErrDenied      = errors.New("denied")
	ErrUnconfirmed = errors.New("not confirmed")
)

// identityName is the device identity's name in the key store.
const identityName = "context-device"

// Options configure a Vault.
type Options struct {
	// Home is the daemon home; the vault keeps its state in Home/context.
	Home string
	// KeyStore is keystore.KindFile or keystore.KindKeychain; "" uses the
	// kind this home chose at init, else file.
	KeyStore string
	// Server is the runtime client of the paired workspace; nil for what
	// works offline (resolve, add, status --offline).
	Server *sdk.ContextClient
	// Now defaults to time.Now.
	Now func() time.Time
	// ScryptWorkFactor of recovery backups; 0 is age's default (2^18).
	ScryptWorkFactor int
	// Log receives progress lines; default discard.
	Log io.Writer
	// Git runs git; default the git on PATH.
	Git func(ctx context.Context, dir string, args ...string) (string, error)
	// GH runs the gh command when it is installed; nil looks it up.
	GH func(ctx context.Context, dir string, args ...string) (string, error)
}

// Vault is this device's context vault.
type Vault struct {
	o   Options
	dir string
	l   *local
	ks  keystore.Store

	mu     sync.Mutex
	id     *seal.Identity
	keys   map[string][]byte // "source/epoch" → unwrapped epoch key, this process only
	signer map[string]*seal.Public
}

// Open opens this home's vault state (creating it empty).
func Open(o Options) (*Vault, error) {
	if o.Home == "" {
		return nil, errors.New("context vault: no home")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Git == nil {
		o.Git = runGit
	}
	dir := filepath.Join(o.Home, "context")
	l, err := openLocal(dir)
	if err != nil {
		return nil, fmt.Errorf("context vault: %w", err)
	}
	kind := o.KeyStore
	if prev := l.meta("key_store"); kind == "" {
		kind = prev
	} else if prev != "" && prev != kind && l.meta("device_id") != "" {
		l.close()
		return nil, fmt.Errorf("context vault: this home keeps its device key in the %s store; --key-store %s would not find it (dev-reset-crypto starts over)", prev, kind)
	}
	ks, err := keystore.Open(keystore.Options{Kind: kind, Dir: filepath.Join(dir, "keys"), Service: "reeve", Namespace: "context:" + o.Home})
	if err != nil {
		l.close()
		return nil, err
	}
	return &Vault{o: o, dir: dir, l: l, ks: ks, keys: map[string][]byte{}, signer: map[string]*seal.Public{}}, nil
}

// Close releases the local state.
func (v *Vault) Close() error { return v.l.close() }

// Dir is where the vault keeps its state.
func (v *Vault) Dir() string { return v.dir }

// DeviceID is this device's id, "" before init.
func (v *Vault) DeviceID() string { return v.l.meta("device_id") }

// KeyStore describes where the device key is.
func (v *Vault) KeyStore() keystore.Store { return v.ks }

func (v *Vault) logf(format string, args ...any) { fmt.Fprintf(v.o.Log, format+"\n", args...) }

func (v *Vault) server() (*sdk.ContextClient, error) {
	if v.o.Server == nil {
		return nil, fmt.Errorf("%w: this machine is not paired with a control plane (reeve pair)", ErrNotPaired)
	}
	return v.o.Server, nil
}

// identity loads the device identity from the key store.
func (v *Vault) identity() (*seal.Identity, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.id != nil {
		return v.id, nil
	}
	b, err := v.ks.Get(identityName)
	if errors.Is(err, keystore.ErrNotFound) {
		return nil, fmt.Errorf("%w: this home has no context device key in %s; run `reeve context init`", ErrNoDevice, v.ks.Where())
	}
	if err != nil {
		return nil, err
	}
	id, err := seal.ParseIdentity(b)
	if err != nil {
		return nil, err
	}
	v.id = id
	return id, nil
}

// Public is this device's public identity.
func (v *Vault) Public() (seal.Public, error) {
	id, err := v.identity()
	if err != nil {
		return seal.Public{}, err
	}
	return id.Public(), nil
}

// learnDevices pins every device the server lists (first seen wins) and
// refuses a device whose keys differ from its pin: the server cannot swap
// a device's keys under this device's nose.
func (v *Vault) learnDevices(ds []sdk.ContextDevice) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, d := range ds {
		pub := seal.Public{Recipient: d.Recipient, SigningKey: d.SigningKey}
		if p, ok := v.l.pin(d.ID); ok {
			if p.Recipient != d.Recipient || p.SigningKey != d.SigningKey {
				return fmt.Errorf("%w: the server lists other keys for device %s than when this device first saw it (fingerprint %s, now %s); refusing to use it", ErrRefused, d.ID, p.Fingerprint, pub.Fingerprint())
			}
		} else if err := v.l.putPin(Pin{DeviceID: d.ID, Fingerprint: pub.Fingerprint(), Recipient: d.Recipient, SigningKey: d.SigningKey, UserID: d.UserID}); err != nil {
			return err
		}
		v.signer[d.ID] = &pub
	}
	return nil
}

// signerOf is the pinned public keys of a device, for signature checks.
func (v *Vault) signerOf(id string) *seal.Public {
	v.mu.Lock()
	defer v.mu.Unlock()
	if p, ok := v.signer[id]; ok {
		return p
	}
	if p, ok := v.l.pin(id); ok {
		pub := &seal.Public{Recipient: p.Recipient, SigningKey: p.SigningKey}
		v.signer[id] = pub
		return pub
	}
	return nil
}

// refreshDevices fetches the workspace's devices and pins them.
func (v *Vault) refreshDevices(ctx context.Context) ([]sdk.ContextDevice, error) {
	srv, err := v.server()
	if err != nil {
		return nil, err
	}
	ds, err := srv.Devices(ctx)
	if err != nil {
		return nil, apiErr("list devices", err)
	}
	return ds, v.learnDevices(ds)
}

// epochKey returns the unwrapped key of a source's epoch.
func (v *Vault) epochKey(sourceID string, epoch int64) ([]byte, error) {
	name := fmt.Sprintf("%s/%d", sourceID, epoch)
	v.mu.Lock()
	k, ok := v.keys[name]
	v.mu.Unlock()
	if ok {
		return k, nil
	}
	lk, err := v.l.key(sourceID, epoch)
	if err != nil {
		return nil, err
	}
	id, err := v.identity()
	if err != nil {
		return nil, err
	}
	u, err := id.Unwrap(lk.Wrapped, seal.KeyLabel{VaultID: sourceID, Epoch: epoch}, v.signerOf)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.keys[name] = u.Key
	v.mu.Unlock()
	return u.Key, nil
}

// apiErr words a refusal of the control plane for people, keeping the
// error code reachable with errors.As.
func apiErr(what string, err error) error {
	var ae *sdk.APIError
	if errors.As(err, &ae) {
		return &APIError{What: what, Err: ae}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// APIError is a refusal by the control plane.
type APIError struct {
	What string
	Err  *sdk.APIError
}

func (e *APIError) Error() string {
	msg := e.Err.Body.Message
	for _, d := range e.Err.Body.Details {
		if d.Message != "" && !strings.Contains(msg, d.Message) {
			msg += "; " + strings.TrimPrefix(d.Field+": ", ": ") + d.Message
		}
	}
	return fmt.Sprintf("%s: %s (%d %s)", e.What, msg, e.Err.Status, e.Err.Body.Code)
}

func (e *APIError) Unwrap() error { return e.Err }

// Code is the control plane's error code of err, "" when it is none.
func Code(err error) string {
	var ae *sdk.APIError
	if errors.As(err, &ae) {
		return ae.Body.Code
	}
	return ""
}
