package host_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/server/host"
	"reeve.dev/reeve/server/secrets"
	"reeve.dev/reeve/server/store"
)

// Rotation re-wraps signing keys and provider keys in one transaction: a
// record that fails to open leaves every record and the database as they
// were; after a good rotation everything opens under the new key alone.
func TestRotateMasterKeyRewrapsEverythingOrNothing(t *testing.T) {
	t.Setenv(secrets.EnvMasterKey, "")
	t.Setenv(secrets.EnvMasterKeyFile, "")
	dir := t.TempDir()
	keyFile := filepath.Join(t.TempDir(), "keys", "master.key")
	o := host.Options{DataDir: dir, MasterKeyFile: keyFile}
	ring, err := host.Keyring(o, false)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	ctx := context.Background()
	st, err := host.OpenStore(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ring.Get(ctx, st, "relay-signing-key", func() ([]byte, error) { return []byte("signing-key-bytes"), nil }); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	keys := map[string]string{}
	for i, secret := range []string{"sk-one-0123456789", "sk-two-0123456789"} {
		k := store.ProviderKey{ID: "01PK00000000000000000000" + string(rune('A'+i)) + "0", WorkspaceID: "w", Provider: "provider_a", Mode: "managed_byok", Version: 1, CreatedBy: "t", CreatedAt: now, UpdatedAt: now}
		if k.Sealed, err = ring.Seal(store.ProviderKeySecretName(k.ID), []byte(secret)); err != nil {
			t.Fatal(err)
		}
		if err := st.CreateProviderKey(ctx, &k, store.AuditEntry{}); err != nil {
			t.Fatal(err)
		}
		keys[k.ID] = secret
	}
	// A provider key sealed under another name does not open: the
	// rotation must fail whole.
	bad := store.ProviderKey{ID: "01PK0000000000000000000BAD", WorkspaceID: "w", Provider: "provider_a", Mode: "managed_byok", Version: 1, CreatedBy: "t", CreatedAt: now, UpdatedAt: now}
	bad.Sealed, _ = ring.Seal("provider-key/someone-else", []byte("sk-misfiled-000000"))
	if err := st.CreateProviderKey(ctx, &bad, store.AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := host.RotateMasterKey(ctx, o, true); err == nil || !strings.Contains(err.Error(), bad.ID) {
		t.Fatalf("rotation over a damaged record: %v", err)
	}
	st, err = host.OpenStore(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	for id := range keys {
		k, _ := st.ProviderKey(ctx, "w", id)
		if !ring.Current(k.Sealed) {
			t.Fatalf("%s changed although the rotation failed", id)
		}
	}
	if err := st.DeleteProviderKey(ctx, "w", bad.ID, store.AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	r, err := host.RotateMasterKey(ctx, o, true)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rewrapped != 3 || r.Dropped < 1 || r.NewKeyID == r.OldKeyID {
		t.Fatalf("rotation: %+v", r)
	}
	next, err := host.Keyring(o, true)
	if err != nil || next.Len() != 1 || next.KeyID() != r.NewKeyID {
		t.Fatalf("key file after --drop-old: %v", err)
	}
	st, err = host.OpenStore(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for id, secret := range keys {
		k, _ := st.ProviderKey(ctx, "w", id)
		got, err := next.Open(store.ProviderKeySecretName(id), k.Sealed)
		if err != nil || string(got) != secret {
			t.Fatalf("%s after rotation: %q %v", id, got, err)
		}
		if _, err := ring.Open(store.ProviderKeySecretName(id), k.Sealed); err == nil {
			t.Fatalf("%s still opens with the dropped key", id)
		}
	}
	if v, err := next.Get(ctx, st, "relay-signing-key", nil); err != nil || string(v) != "signing-key-bytes" {
		t.Fatalf("signing key after rotation: %q %v", v, err)
	}
}
