// Package keystore keeps small secrets of this machine (private keys,
// credentials) either in 0600 files or in the OS keychain (the Secret
// Service on Linux, the Keychain on macOS, the Credential Manager on
// Windows). It knows nothing about what the secrets are for, so any part
// of reeve that holds a key can use it.
package keystore

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
)

// Kinds of store, as `--key-store` names them.
const (
	KindFile     = "file"
	KindKeychain = "keychain"
)

// ErrNotFound is returned by Get and Delete for a name that holds nothing.
var ErrNotFound = errors.New("no such secret")

// Store holds named secrets.
type Store interface {
	// Get returns the secret stored under name, or ErrNotFound.
	Get(name string) ([]byte, error)
	// Set stores secret under name, replacing what was there.
	Set(name string, secret []byte) error
	// Delete removes the secret; ErrNotFound when there was none.
	Delete(name string) error
	// Kind is KindFile or KindKeychain.
	Kind() string
	// Where says where the secrets are, for people: a folder, or the
	// keychain service and namespace.
	Where() string
}

// Options choose and configure a store.
type Options struct {
	// Kind is KindFile (the default) or KindKeychain.
	Kind string
	// Dir is the folder of a file store (created 0700).
	Dir string
	// Service names the keychain service; default "reeve".
	Service string
	// Namespace separates the secrets of several homes on one machine in
	// the keychain (each home has its own); typically the home's path.
	Namespace string
}

// Open returns the store Options describe. It does not touch the keychain
// yet: a keychain that cannot be reached fails at the first Get or Set,
// with a message that says so.
func Open(o Options) (Store, error) {
	switch o.Kind {
	case "", KindFile:
		if o.Dir == "" {
			return nil, errors.New("keystore: a file store needs a folder")
		}
		return &File{Dir: o.Dir}, nil
	case KindKeychain:
		svc := o.Service
		if svc == "" {
			svc = "reeve"
		}
		return &Keychain{Service: svc, Namespace: o.Namespace}, nil
	}
	return nil, fmt.Errorf("keystore: unknown key store %q (use %s or %s)", o.Kind, KindFile, KindKeychain)
}

// Compiled on first use: a counted repetition compiles into hundreds of
// allocations, which every start of the binary would pay in package init.
var validName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`) })

// checkName keeps names safe as file names and keychain accounts.
func checkName(name string) error {
	if !validName().MatchString(name) {
		return fmt.Errorf("keystore: %q is not a valid secret name (lowercase letters, digits, '.', '_', '-')", name)
	}
	return nil
}
