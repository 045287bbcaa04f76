// Package atomicfile writes state and credential files so that a reader never
// sees a torn write and a crash never leaves a half-written file behind.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// PrivateFile is the mode of every file that holds state or a credential.
const PrivateFile os.FileMode = 0o600

// PrivateDir is the mode of every directory that holds such files.
const PrivateDir os.FileMode = 0o700

// WriteFile replaces path with data: it writes a temporary file in the same
// directory, syncs it, renames it over path and syncs the directory, so the
// file is either the old content or the new one, never a mix.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// CreateTemp uses 0600; Chmod makes perm exact regardless of umask.
	if err = tmp.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dir)
}

// EnsurePrivateDir creates dir (and parents) if needed and makes sure dir
// itself is mode 0700, tightening it when it already exists with looser bits.
func EnsurePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, PrivateDir); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	if !info.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if info.Mode().Perm() != PrivateDir {
		if err := os.Chmod(dir, PrivateDir); err != nil {
			return fmt.Errorf("restrict %s to 0700: %w", dir, err)
		}
	}
	return nil
}

// CheckWritable proves dir accepts new files by creating and removing one, so
// a read-only home is reported before anything is started.
func CheckWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
