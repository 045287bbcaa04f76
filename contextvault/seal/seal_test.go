package seal_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"reeve.dev/reeve/contextvault/seal"
)

func mustID(t *testing.T) *seal.Identity {
	t.Helper()
	id, err := seal.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestEntryRoundTripAndTampering(t *testing.T) {
	key := seal.NewKey()
	h := seal.Header{VaultID: "V1", EntryID: "E1", EventID: "EV1", Kind: "put", Epoch: 3, UseWhen: "editing go"}
	ct, err := seal.Seal(key, h, []byte("SENTINEL body"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ct, "SENTINEL") {
		t.Fatal("plaintext visible in the ciphertext")
	}
	got, err := seal.Open(key, h, ct)
	if err != nil || string(got) != "SENTINEL body" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	// Any bit flipped is refused.
	raw, _ := base64.StdEncoding.DecodeString(ct)
	for _, i := range []int{0, 30, len(raw) - 1} {
		bad := append([]byte(nil), raw...)
		bad[i] ^= 1
		if _, err := seal.Open(key, h, base64.StdEncoding.EncodeToString(bad)); !errors.Is(err, seal.ErrOpen) {
			t.Errorf("flipping byte %d: %v, want ErrOpen", i, err)
		}
	}
	// The ciphertext is bound to its header: another entry, event, epoch,
	// base or descriptor does not open it.
	for name, h2 := range map[string]seal.Header{
		"entry":      {VaultID: "V1", EntryID: "E2", EventID: "EV1", Kind: "put", Epoch: 3, UseWhen: "editing go"},
		"event":      {VaultID: "V1", EntryID: "E1", EventID: "EV2", Kind: "put", Epoch: 3, UseWhen: "editing go"},
		"epoch":      {VaultID: "V1", EntryID: "E1", EventID: "EV1", Kind: "put", Epoch: 4, UseWhen: "editing go"},
		"vault":      {VaultID: "V2", EntryID: "E1", EventID: "EV1", Kind: "put", Epoch: 3, UseWhen: "editing go"},
		"base":       {VaultID: "V1", EntryID: "E1", EventID: "EV1", Base: "EV0", Kind: "put", Epoch: 3, UseWhen: "editing go"},
		"descriptor": {VaultID: "V1", EntryID: "E1", EventID: "EV1", Kind: "put", Epoch: 3, UseWhen: "always"},
	} {
		if _, err := seal.Open(key, h2, ct); !errors.Is(err, seal.ErrOpen) {
			t.Errorf("another %s opened the ciphertext: %v", name, err)
		}
	}
	if _, err := seal.Open(seal.NewKey(), h, ct); !errors.Is(err, seal.ErrOpen) {
		t.Errorf("another key opened the ciphertext: %v", err)
	}
}

func TestWrapUnwrap(t *testing.T) {
	alice, bob, mallory := mustID(t), mustID(t), mustID(t)
	key := seal.NewKey()
	label := seal.KeyLabel{VaultID: "V1", Epoch: 2}
	w, err := alice.Wrap(label, key, bob.Public(), "dev-alice")
	if err != nil {
		t.Fatal(err)
	}
	signers := func(id string) *seal.Public {
		if id == "dev-alice" {
			p := alice.Public()
			return &p
		}
		return nil
	}
	u, err := bob.Unwrap(w, label, signers)
	if err != nil {
		t.Fatal(err)
	}
	if string(u.Key) != string(key) || u.WrappedBy != "dev-alice" {
		t.Fatal("unwrapped the wrong key")
	}
	// Only the recipient opens it.
	if _, err := mallory.Unwrap(w, label, signers); err == nil {
		t.Fatal("another device unwrapped the key")
	}
	// A wrap moved to another vault or epoch is refused.
	if _, err := bob.Unwrap(w, seal.KeyLabel{VaultID: "V1", Epoch: 3}, signers); err == nil {
		t.Fatal("a wrap of epoch 2 was taken for epoch 3")
	}
	// A key wrapped by someone who claims to be alice is refused: anyone
	// can encrypt to bob, only alice can sign as alice.
	forged, err := mallory.Wrap(label, seal.NewKey(), bob.Public(), "dev-alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Unwrap(forged, label, signers); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Fatalf("a forged wrap was accepted: %v", err)
	}
	// Unknown wrapping devices are refused.
	if _, err := bob.Unwrap(w, label, func(string) *seal.Public { return nil }); err == nil {
		t.Fatal("a wrap by an unknown device was accepted")
	}
}

func TestIdentityMarshalAndFingerprint(t *testing.T) {
	id := mustID(t)
	back, err := seal.ParseIdentity(id.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if back.Public() != id.Public() {
		t.Fatal("identity changed through Marshal/Parse")
	}
	fp := id.Public().Fingerprint()
	if !id.Public().FingerprintMatches(strings.ToLower(fp)) {
		t.Fatal("fingerprint does not match itself")
	}
	if mustID(t).Public().FingerprintMatches(fp) {
		t.Fatal("another identity matched the fingerprint")
	}
	if err := id.Public().Check(); err != nil {
		t.Fatal(err)
	}
	if err := (seal.Public{Recipient: "age1nope", SigningKey: "x"}).Check(); err == nil {
		t.Fatal("a malformed public key passed Check")
	}
}

func TestPassphraseAndSealTo(t *testing.T) {
	ct, err := seal.SealWithPassphrase([]byte("backup"), "correct horse", 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seal.OpenWithPassphrase(ct, "wrong horse"); !errors.Is(err, seal.ErrPassphrase) {
		t.Fatalf("wrong passphrase: %v, want ErrPassphrase", err)
	}
	if b, err := seal.OpenWithPassphrase(ct, "correct horse"); err != nil || string(b) != "backup" {
		t.Fatalf("OpenWithPassphrase = %q, %v", b, err)
	}
	a, b, c := mustID(t), mustID(t), mustID(t)
	sealed, err := seal.SealTo([]byte("proposal"), a.Public(), b.Public())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []*seal.Identity{a, b} {
		if got, err := id.OpenSealed(sealed); err != nil || string(got) != "proposal" {
			t.Fatalf("OpenSealed = %q, %v", got, err)
		}
	}
	if _, err := c.OpenSealed(sealed); err == nil {
		t.Fatal("a non-recipient opened a sealed message")
	}
}
