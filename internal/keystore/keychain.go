package keystore

import (
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/zalando/go-keyring"
)

// Keychain keeps secrets in the OS keychain through go-keyring: on Linux
// the freedesktop Secret Service over D-Bus (GNOME Keyring, KWallet), on
// macOS the login Keychain, on Windows the Credential Manager. Secrets are
// stored base64-encoded, since keychains hold text.
type Keychain struct {
	Service   string
	Namespace string
}

var _ Store = (*Keychain)(nil)

// Kind is KindKeychain.
func (k *Keychain) Kind() string { return KindKeychain }

// Where names the service and namespace.
func (k *Keychain) Where() string {
	return fmt.Sprintf("OS keychain, service %q, namespace %q", k.Service, k.Namespace)
}

func (k *Keychain) account(name string) string {
	if k.Namespace == "" {
		return name
	}
	return k.Namespace + "/" + name
}

// Get reads a secret from the keychain.
func (k *Keychain) Get(name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	s, err := keyring.Get(k.Service, k.account(name))
	if errors.Is(err, keyring.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, keychainErr(err)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("keystore: the keychain item %q is not reeve's (not base64): %w", k.account(name), err)
	}
	return b, nil
}

// Set stores a secret, replacing an earlier one of the same name.
func (k *Keychain) Set(name string, secret []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	// go-keyring asks the keychain to replace an item with the same
	// service and account, so the old secret stays until the new one is in.
	if err := keyring.Set(k.Service, k.account(name), base64.StdEncoding.EncodeToString(secret)); err != nil {
		return keychainErr(err)
	}
	return nil
}

// Delete removes a secret from the keychain.
func (k *Keychain) Delete(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	err := keyring.Delete(k.Service, k.account(name))
	if errors.Is(err, keyring.ErrNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return keychainErr(err)
	}
	return nil
}

func keychainErr(err error) error {
	return fmt.Errorf("keystore: the OS keychain is not available (%w); on Linux a Secret Service (gnome-keyring, KWallet) must run in your session, or use --key-store file", err)
}
