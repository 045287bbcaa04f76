package home

import (
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"reeve.dev/reeve/internal/atomicfile"
)

// AnchorFile holds the daemon's static X25519 private key: its trust anchor.
// Remote clients verify the relay channel against its public half.
func (d Dir) AnchorFile() string { return d.path("anchor.key") }

// EnsureAnchor returns the daemon's anchor key, creating it on first use.
func (d Dir) EnsureAnchor() (*ecdh.PrivateKey, error) {
	k, err := d.ReadAnchor()
	if err == nil {
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	k, err = ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate anchor key: %w", err)
	}
	if err := atomicfile.WriteFile(d.AnchorFile(), k.Bytes(), atomicfile.PrivateFile); err != nil {
		return nil, err
	}
	return k, nil
}

// ReadAnchor reads the anchor key without creating it; fs.ErrNotExist when
// there is none yet.
func (d Dir) ReadAnchor() (*ecdh.PrivateKey, error) {
	b, err := os.ReadFile(d.AnchorFile())
	if err != nil {
		return nil, err
	}
	k, err := ecdh.X25519().NewPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s is not an X25519 key: %w", filepath.Base(d.AnchorFile()), err)
	}
	return k, nil
}
