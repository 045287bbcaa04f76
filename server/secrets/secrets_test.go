package secrets_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"reeve.dev/reeve/server/secrets"
	"reeve.dev/reeve/server/store"
)

func ring(t *testing.T, text string) *secrets.Keyring {
	t.Helper()
	k, err := secrets.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newKey(t *testing.T) string {
	t.Helper()
	k, err := secrets.NewKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k := ring(t, newKey(t))
	value := []byte("the relay signing key")
	rec, err := k.Seal("relay-jwt", value)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(rec, value) || !secrets.Sealed(rec) || !k.Current(rec) {
		t.Fatalf("record %x", rec)
	}
	got, err := k.Open("relay-jwt", rec)
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("open: %q %v", got, err)
	}
	// Two seals of one value differ (fresh data key and nonces).
	again, _ := k.Seal("relay-jwt", value)
	if bytes.Equal(again, rec) {
		t.Fatal("sealing is deterministic")
	}
	// Under another name the record does not open.
	if _, err := k.Open("evidence", rec); !errors.Is(err, secrets.ErrTampered) {
		t.Fatalf("other name: %v", err)
	}
	// Every single changed byte is caught.
	for i := range rec {
		bad := bytes.Clone(rec)
		bad[i] ^= 0x01
		if _, err := k.Open("relay-jwt", bad); err == nil {
			t.Fatalf("byte %d changed and the record still opens", i)
		}
	}
	// So is any truncation.
	for n := range len(rec) {
		if _, err := k.Open("relay-jwt", rec[:n]); err == nil {
			t.Fatalf("truncated to %d and the record still opens", n)
		}
	}
	// Another master key cannot open it.
	if _, err := ring(t, newKey(t)).Open("relay-jwt", rec); !errors.Is(err, secrets.ErrUnknownKey) {
		t.Fatalf("other key: %v", err)
	}
	if _, err := k.Open("relay-jwt", value); !errors.Is(err, secrets.ErrNotSealed) {
		t.Fatalf("plaintext: %v", err)
	}
}

func TestParse(t *testing.T) {
	raw := bytes.Repeat([]byte{7}, 32)
	hexKey := fmt.Sprintf("%x", raw)
	for _, good := range []string{hexKey, "# comment\n\n" + hexKey + "\n"} {
		if _, err := secrets.Parse(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	for _, bad := range []string{"", "# only a comment", "short", hexKey[:60], hexKey + "00", "not base64 !!!"} {
		if _, err := secrets.Parse(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	// The same key in two encodings is one key.
	k := ring(t, hexKey+"\n"+"BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=")
	if k.Len() != 1 {
		t.Fatalf("%d keys", k.Len())
	}
}

func TestLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	file := filepath.Join(dir, "master.key")
	noEnv := func(string) string { return "" }

	if _, err := secrets.Load(secrets.Options{File: file, Getenv: noEnv, NoCreate: true}); err == nil {
		t.Fatal("a missing key file was accepted with NoCreate")
	}
	k1, err := secrets.Load(secrets.Options{File: file, Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v %v", fi, err)
	}
	if di, _ := os.Stat(dir); di.Mode().Perm() != 0o700 {
		t.Fatalf("key dir mode %v", di.Mode().Perm())
	}
	k2, err := secrets.Load(secrets.Options{File: file, Getenv: noEnv})
	if err != nil || k2.KeyID() != k1.KeyID() {
		t.Fatalf("reload: %v", err)
	}

	// The environment wins over the file.
	envKey := newKey(t)
	k3, err := secrets.Load(secrets.Options{File: file, Getenv: func(string) string { return envKey }})
	if err != nil || k3.KeyID() == k1.KeyID() || k3.KeyID() != ring(t, envKey).KeyID() {
		t.Fatalf("env: %v", err)
	}
	if _, err := secrets.Load(secrets.Options{File: file, Getenv: func(string) string { return "garbage" }}); err == nil ||
		!strings.Contains(err.Error(), secrets.EnvMasterKey) {
		t.Fatalf("bad env key: %v", err)
	}

	// A key file others can read, a directory, a huge file and a device are refused.
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Load(secrets.Options{File: file, Getenv: noEnv}); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("0644 key file: %v", err)
	}
	big := filepath.Join(dir, "big.key")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#"), secrets.MaxKeyFileBytes+10), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, big, "/dev/zero"} {
		if _, err := secrets.Load(secrets.Options{File: p, Getenv: noEnv}); err == nil {
			t.Errorf("%s accepted as a key file", p)
		}
	}
}

func TestConcurrentCreateAgrees(t *testing.T) {
	file := filepath.Join(t.TempDir(), "master.key")
	ids := make([]string, 20)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := secrets.Load(secrets.Options{File: file, Getenv: func(string) string { return "" }})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = k.KeyID()
		}()
	}
	wg.Wait()
	final, err := secrets.Load(secrets.Options{File: file, Getenv: func(string) string { return "" }, NoCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	// Whoever lost the race to write the file now reads the winner's key;
	// a loser that wrote last would otherwise seal with a key nobody keeps.
	for i, id := range ids {
		if id != final.KeyID() {
			t.Fatalf("loader %d sealed with %s, the file holds %s", i, id, final.KeyID())
		}
	}
}

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestGetSealsAndRotates(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "master.key")
	noEnv := func(string) string { return "" }
	k, err := secrets.Load(secrets.Options{File: file, Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	value := []byte("0123456789abcdef0123456789abcdef")
	got, err := k.Get(ctx, st, "relay-jwt", func() ([]byte, error) { return value, nil })
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("get: %v", err)
	}
	raw, _ := st.Secret(ctx, "relay-jwt", nil)
	if bytes.Contains(raw, value) || !k.Current(raw) {
		t.Fatal("the store holds the value in the clear")
	}

	// A secret stored in the clear by an older version is sealed on read.
	legacy := []byte("legacy-plaintext-signing-key-000")
	if _, err := st.Secret(ctx, "legacy", func() ([]byte, error) { return legacy, nil }); err != nil {
		t.Fatal(err)
	}
	got, err = k.Get(ctx, st, "legacy", nil)
	if err != nil || !bytes.Equal(got, legacy) {
		t.Fatalf("legacy: %q %v", got, err)
	}
	if raw, _ := st.Secret(ctx, "legacy", nil); !k.Current(raw) {
		t.Fatal("legacy secret not sealed in place")
	}

	// Rotation: a new key seals, the old still opens until RewrapAll.
	k2, err := secrets.Rotate(file, nil)
	if err != nil || k2.Len() != 2 || k2.KeyID() == k.KeyID() {
		t.Fatalf("rotate: %v", err)
	}
	if _, err := st.Secret(ctx, "clear", func() ([]byte, error) { return []byte("clear"), nil }); err != nil {
		t.Fatal(err)
	}
	n, err := k2.RewrapAll(ctx, st)
	if err != nil || n != 3 {
		t.Fatalf("rewrap all: %d %v", n, err)
	}
	if n, err := k2.RewrapAll(ctx, st); err != nil || n != 0 {
		t.Fatalf("second rewrap: %d %v", n, err)
	}
	// Now the new key alone opens everything, and the old alone nothing.
	newOnly := ring(t, strings.SplitN(mustRead(t, file), "\n", 2)[0])
	for name, want := range map[string][]byte{"relay-jwt": value, "legacy": legacy, "clear": []byte("clear")} {
		if got, err := newOnly.Get(ctx, st, name, nil); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s under the new key: %q %v", name, got, err)
		}
		if _, err := k.Get(ctx, st, name, nil); !errors.Is(err, secrets.ErrUnknownKey) {
			t.Fatalf("%s under the old key: %v", name, err)
		}
	}
}

// Many server processes starting at once on one store all end up with the
// one stored value.
func TestGetRaces(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	k := ring(t, newKey(t))
	if _, err := st.Secret(ctx, "legacy", func() ([]byte, error) { return []byte("in the clear"), nil }); err != nil {
		t.Fatal(err)
	}
	const n = 50
	got := make([][]byte, n)
	fresh := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := k.Get(ctx, st, "fresh", func() ([]byte, error) { return []byte(fmt.Sprint("value ", i)), nil })
			if err != nil {
				t.Error(err)
			}
			fresh[i] = v
			if got[i], err = k.Get(ctx, st, "legacy", nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i := range n {
		if !bytes.Equal(fresh[i], fresh[0]) || string(got[i]) != "in the clear" {
			t.Fatalf("caller %d saw %q / %q", i, fresh[i], got[i])
		}
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
