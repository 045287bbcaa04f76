//go:build unix

package host_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/host"
	"reeve.dev/reeve/server/secrets"
	"reeve.dev/reeve/server/store"
)

// The data directory and every file in it are private, whatever the umask
// and whatever an older build left, and the signing keys are nowhere in
// the clear: not in the database, not in its WAL.
func TestDataDirPrivateAndKeysSealed(t *testing.T) {
	t.Setenv(secrets.EnvMasterKey, "")
	ctx := context.Background()
	old := syscall.Umask(0)
	defer syscall.Umask(old)

	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// An older build stored the relay JWT key in the clear, world-readable.
	legacyKey := []byte("legacy-relay-jwt-key-in-the-clear")
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "reeve-server.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Secret(ctx, host.RelayJWTSecret, func() ([]byte, error) { return legacyKey, nil }); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"reeve-server.db", "notes.txt"} {
		if err := os.Chmod(filepath.Join(dir, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if !filesHold(t, dir, legacyKey) {
		t.Fatal("the legacy key is not in the clear before the start: the scan below proves nothing")
	}

	h, err := host.New(ctx, host.Options{Listen: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cred := h.RelayServiceCredential()
	// Write through the store so the WAL has content.
	if _, err := h.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}

	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("data dir mode %v %v", fi.Mode().Perm(), err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", e.Name(), fi.Mode().Perm())
		}
	}
	for _, want := range []string{"reeve-server.db", "reeve-server.db-wal", "reeve-server.db-shm", "master.key"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("no %s in %v", want, names)
		}
	}

	ring, err := host.Keyring(host.Options{DataDir: dir}, true)
	if err != nil {
		t.Fatal(err)
	}
	jwtKey, err := ring.Get(ctx, h.Store(), host.RelayJWTSecret, nil)
	if err != nil || !bytes.Equal(jwtKey, legacyKey) {
		t.Fatalf("the legacy key was not kept: %q %v", jwtKey, err)
	}
	svcKey, err := ring.Get(ctx, h.Store(), auth.RelayServiceSecret, nil)
	if err != nil || auth.RelayServiceCredential(svcKey) != cred {
		t.Fatalf("service secret: %v", err)
	}
	for _, name := range []string{host.RelayJWTSecret, auth.RelayServiceSecret} {
		raw, err := h.Store().Secret(ctx, name, nil)
		if err != nil || !ring.Current(raw) {
			t.Fatalf("%s is not sealed in the store: %v", name, err)
		}
	}
	h.Close()
	for _, e := range entries {
		if e.Name() == "master.key" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, k := range [][]byte{legacyKey, jwtKey, svcKey} {
			if bytes.Contains(b, k) {
				t.Errorf("%s holds a signing key in the clear", e.Name())
			}
		}
	}

	// Without its master key the server refuses to start rather than
	// minting new keys over the sealed ones.
	t.Setenv(secrets.EnvMasterKey, strings.Repeat("A", 43)+"=")
	if _, err := host.New(ctx, host.Options{Listen: "127.0.0.1:0", DataDir: dir}); err == nil ||
		!strings.Contains(err.Error(), "master key") {
		t.Fatalf("wrong master key: %v", err)
	}
}

func filesHold(t *testing.T, dir string, secret []byte) bool {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && bytes.Contains(b, secret) {
			return true
		}
	}
	return false
}
