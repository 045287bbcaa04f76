package home

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"reeve.dev/reeve/internal/atomicfile"
	"reeve.dev/reeve/internal/keystore"
)

// The home's secrets — the local API token and the relay issue token — live
// in 0600 files of the home (key store "file", the default) or in the OS
// keychain (key store "keychain"), as <home>/key-store records. With the
// keychain, the token file does not exist and relay.json keeps everything
// but the issue token.

const (
	secretToken      = "auth-token"
	secretIssueToken = "relay-issue-token"
)

// KeyStoreFile records which key store holds the home's secrets.
func (d Dir) KeyStoreFile() string { return d.path("key-store") }

// KeyStoreKind is the home's key store: keystore.KindFile unless the home
// chose the keychain.
func (d Dir) KeyStoreKind() (string, error) {
	b, err := os.ReadFile(d.KeyStoreFile())
	if errors.Is(err, fs.ErrNotExist) {
		return keystore.KindFile, nil
	}
	if err != nil {
		return "", err
	}
	switch k := strings.TrimSpace(string(b)); k {
	case keystore.KindFile, keystore.KindKeychain:
		return k, nil
	default:
		return "", fmt.Errorf("%s names an unknown key store %q", d.KeyStoreFile(), k)
	}
}

// keychain is the home's namespace in the OS keychain.
func (d Dir) keychain() keystore.Store {
	abs, err := filepath.Abs(string(d))
	if err != nil {
		abs = string(d)
	}
	s, _ := keystore.Open(keystore.Options{Kind: keystore.KindKeychain, Service: "reeve", Namespace: "home:" + abs})
	return s
}

// KeychainReachable reports whether the OS keychain answers here.
func (d Dir) KeychainReachable() error {
	_, err := d.keychain().Get("probe")
	if err == nil || errors.Is(err, keystore.ErrNotFound) {
		return nil
	}
	return err
}

// Fresh reports whether the home holds no secret yet, so that its key
// store can be chosen without moving anything.
func (d Dir) Fresh() bool {
	for _, p := range []string{d.KeyStoreFile(), d.TokenFile(), d.RelayFile()} {
		if _, err := os.Stat(p); err == nil {
			return false
		}
	}
	return true
}

// SetKeyStore moves the home's secrets into the store kind: each is
// written to the new store before the home records the switch, and only
// then removed from the old one, so an interruption loses nothing.
func (d Dir) SetKeyStore(kind string) error {
	if kind != keystore.KindFile && kind != keystore.KindKeychain {
		return fmt.Errorf("unknown key store %q (use %s or %s)", kind, keystore.KindFile, keystore.KindKeychain)
	}
	cur, err := d.KeyStoreKind()
	if err != nil {
		return err
	}
	if cur == kind {
		if _, err := os.Stat(d.KeyStoreFile()); err == nil || kind == keystore.KindFile {
			return nil
		}
	}
	if kind == keystore.KindKeychain {
		if err := d.KeychainReachable(); err != nil {
			return err
		}
	}
	tok, tokErr := d.ReadToken()
	if tokErr != nil && !errors.Is(tokErr, fs.ErrNotExist) {
		return tokErr
	}
	rc, rcErr := d.ReadRelayCredentials()
	if rcErr != nil && !errors.Is(rcErr, fs.ErrNotExist) {
		return rcErr
	}
	if kind == keystore.KindKeychain {
		if tokErr == nil {
			if err := d.keychain().Set(secretToken, []byte(tok)); err != nil {
				return err
			}
		}
		if rcErr == nil {
			if err := d.keychain().Set(secretIssueToken, []byte(rc.IssueToken)); err != nil {
				return err
			}
		}
	}
	if err := atomicfile.WriteFile(d.KeyStoreFile(), []byte(kind+"\n"), atomicfile.PrivateFile); err != nil {
		return err
	}
	if tokErr == nil {
		if kind == keystore.KindFile {
			if err := atomicfile.WriteFile(d.TokenFile(), []byte(tok+"\n"), atomicfile.PrivateFile); err != nil {
				return err
			}
			d.keychain().Delete(secretToken)
		} else {
			os.Remove(d.TokenFile())
		}
	}
	if rcErr == nil {
		// Rewritten by the new store's rules: with the token inline in the
		// file, or without it.
		if err := d.WriteRelayCredentials(rc); err != nil {
			return err
		}
		if kind == keystore.KindFile {
			d.keychain().Delete(secretIssueToken)
		}
	}
	return nil
}

// inKeychain reports whether the home keeps its secrets in the keychain.
func (d Dir) inKeychain() (bool, error) {
	k, err := d.KeyStoreKind()
	return k == keystore.KindKeychain, err
}

// secret reads a secret of the keychain as fs.ErrNotExist when absent.
func (d Dir) secret(name string) (string, error) {
	b, err := d.keychain().Get(name)
	if errors.Is(err, keystore.ErrNotFound) {
		return "", fmt.Errorf("%s in the OS keychain: %w", name, fs.ErrNotExist)
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
