package keystore_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"reeve.dev/reeve/internal/keystore"
)

// exercise is what every store must do: round trip, replace, delete,
// refuse bad names, report missing secrets as ErrNotFound.
func exercise(t *testing.T, s keystore.Store) {
	t.Helper()
	if _, err := s.Get("device-key"); !errors.Is(err, keystore.ErrNotFound) {
		t.Fatalf("Get of a missing secret: %v, want ErrNotFound", err)
	}
	secret := []byte{0, 1, 2, 0xff, 'x', '\n'}
	if err := s.Set("device-key", secret); err != nil {
		t.Fatalf("Set: %v", err)
	}
	got, err := s.Get("device-key")
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Get = %q, %v; want %q", got, err, secret)
	}
	if err := s.Set("device-key", []byte("second")); err != nil {
		t.Fatalf("Set again: %v", err)
	}
	if got, _ := s.Get("device-key"); string(got) != "second" {
		t.Fatalf("after replace Get = %q, want second", got)
	}
	if err := s.Set("other", []byte("o")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("device-key"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get("device-key"); !errors.Is(err, keystore.ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if err := s.Delete("device-key"); !errors.Is(err, keystore.ErrNotFound) {
		t.Fatalf("second Delete: %v, want ErrNotFound", err)
	}
	if got, _ := s.Get("other"); string(got) != "o" {
		t.Fatalf("a delete touched another secret: %q", got)
	}
	for _, bad := range []string{"", "../escape", "A", "a/b", "x y"} {
		if err := s.Set(bad, []byte("v")); err == nil {
			t.Errorf("Set(%q) accepted a bad name", bad)
		}
	}
	_ = s.Delete("other")
}

func TestFileStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	s, err := keystore.Open(keystore.Options{Kind: keystore.KindFile, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, s)
	if err := s.Set("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "k"): 0o600} {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s has mode %#o, want %#o", path, info.Mode().Perm(), want)
		}
	}
	// A loosened file is refused, not trusted.
	if err := os.Chmod(filepath.Join(dir, "k"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("k"); err == nil {
		t.Fatal("a world-readable key file was read")
	}
}

func TestOpenRefusesUnknownKind(t *testing.T) {
	if _, err := keystore.Open(keystore.Options{Kind: "vault"}); err == nil {
		t.Fatal("an unknown kind was accepted")
	}
	if _, err := keystore.Open(keystore.Options{Kind: keystore.KindFile}); err == nil {
		t.Fatal("a file store without a folder was accepted")
	}
}
