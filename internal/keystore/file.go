package keystore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"reeve.dev/reeve/internal/atomicfile"
)

// File keeps each secret in its own file, mode 0600, in a 0700 folder,
// written atomically.
type File struct {
	Dir string
}

var _ Store = (*File)(nil)

func (f *File) path(name string) string { return filepath.Join(f.Dir, name) }

// Kind is KindFile.
func (f *File) Kind() string { return KindFile }

// Where is the folder.
func (f *File) Where() string { return f.Dir }

// Get reads a secret. A file readable by others is refused rather than
// trusted: someone may have copied or loosened it.
func (f *File) Get(name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	p := f.path(name)
	info, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("keystore: %s is readable by others (mode %#o); run chmod 600 on it", p, info.Mode().Perm())
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("keystore: %w", err)
	}
	return b, nil
}

// Set writes a secret atomically with mode 0600.
func (f *File) Set(name string, secret []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := atomicfile.EnsurePrivateDir(f.Dir); err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	if err := atomicfile.WriteFile(f.path(name), secret, atomicfile.PrivateFile); err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	return nil
}

// Delete removes a secret's file.
func (f *File) Delete(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	err := os.Remove(f.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	return nil
}
