// Package hookprog keeps the program that agents' hooks run at a path that
// stays valid: a copy of the reeve executable inside the daemon home, named
// by its digest and checked against it before a governed session starts.
//
// Hooks used to name the daemon's own executable. A versioned install or
// `go run` moves or deletes that file while the daemon keeps running, and
// then every hook command failed to start, which agents treat as "no
// verdict": tools ran ungoverned while the manifest said guarded. A copy
// in the home is owned by reeve, and a digest check turns a replaced or
// damaged copy into a refusal to start rather than a silent bypass.
package hookprog

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Dir is the folder of the home that holds hook programs.
const Dir = "bin"

// prefix names the copies: reeve-hook-<first 16 hex digits of the SHA-256>.
// A name per content lets daemons of two versions (or `reeve install` from
// a newer binary while an older daemon runs) keep their own copy without
// replacing the file the other one checks.
const prefix = "reeve-hook-"

// Program is an installed hook program.
type Program struct {
	// Path is the absolute path that hook commands run.
	Path string `json:"path"`
	// Digest is the hex SHA-256 of the file's content.
	Digest string `json:"digest"`
}

// Install copies the running reeve executable into <home>/bin and returns
// the copy. It is idempotent: a copy already there with the right digest
// is kept as is.
func Install(home string) (Program, error) {
	src, err := Self()
	if err != nil {
		return Program{}, err
	}
	return InstallFrom(home, src)
}

// Self is the path of the running executable to copy from. On Linux it is
// /proc/self/exe, which still reads the running binary after the file was
// moved or deleted.
func Self() (string, error) {
	if runtime.GOOS == "linux" {
		if f, err := os.Open("/proc/self/exe"); err == nil {
			f.Close()
			return "/proc/self/exe", nil
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate the reeve executable: %w", err)
	}
	return exe, nil
}

// InstallFrom copies the executable src into <home>/bin, named by its
// digest, written to a temporary file and renamed so that a reader never
// sees a partial program.
func InstallFrom(home, src string) (Program, error) {
	if home == "" {
		return Program{}, errors.New("install hook program: no home")
	}
	in, err := os.Open(src)
	if err != nil {
		return Program{}, fmt.Errorf("install hook program: %w", err)
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil {
		return Program{}, fmt.Errorf("install hook program: %w", err)
	} else if !st.Mode().IsRegular() {
		return Program{}, fmt.Errorf("install hook program: %s is not a regular file", src)
	}
	dir, err := filepath.Abs(filepath.Join(home, Dir))
	if err != nil {
		return Program{}, fmt.Errorf("install hook program: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Program{}, fmt.Errorf("install hook program: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".reeve-hook-*.tmp")
	if err != nil {
		return Program{}, fmt.Errorf("install hook program: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), in); err != nil {
		tmp.Close()
		return Program{}, fmt.Errorf("install hook program: copy %s: %w", src, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return Program{}, fmt.Errorf("install hook program: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return Program{}, fmt.Errorf("install hook program: %w", err)
	}
	digest := hex.EncodeToString(h.Sum(nil))
	p := Program{Path: filepath.Join(dir, prefix+digest[:16]), Digest: digest}
	if p.Verify() == nil {
		return p, nil
	}
	// Owner-only: the hook decides for the daemon, nobody else may swap it.
	if err := os.Chmod(tmp.Name(), 0o700); err != nil {
		return Program{}, fmt.Errorf("install hook program: %w", err)
	}
	if err := os.Rename(tmp.Name(), p.Path); err != nil {
		return Program{}, fmt.Errorf("install hook program: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return p, p.Verify()
}

// Verify checks that the program is still there, a regular executable
// file whose content has the recorded digest. The content is hashed
// unless the file is provably the one this process last hashed there
// (verified.go).
func (p Program) Verify() error {
	if p.Path == "" || p.Digest == "" {
		return errors.New("no hook program is installed")
	}
	f, err := os.Open(p.Path)
	if err != nil {
		return fmt.Errorf("the hook program is missing: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("the hook program: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("the hook program %s is not a regular file", p.Path)
	}
	if st.Mode().Perm()&0o100 == 0 {
		return fmt.Errorf("the hook program %s is not executable", p.Path)
	}
	if alreadyVerified(p.Path, p.Digest, st) {
		return nil
	}
	now := time.Now()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("read the hook program: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != p.Digest {
		return fmt.Errorf("the hook program %s was changed (sha256 %s, installed as %s)", p.Path, short(got), short(p.Digest))
	}
	rememberVerified(p.Path, p.Digest, st, now)
	return nil
}

// Installed lists the hook programs in a home, for `reeve doctor` and the
// like; their digests are read from their names, not checked.
func Installed(home string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(home, Dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) && e.Type().IsRegular() {
			out = append(out, filepath.Join(home, Dir, e.Name()))
		}
	}
	return out, nil
}

func short(d string) string {
	if len(d) > 16 {
		return d[:16]
	}
	return d
}
