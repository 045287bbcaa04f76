package contextvault_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"reeve.dev/reeve/contextvault"
	"reeve.dev/reeve/contextvault/vaulttest"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// must(f())(t) fails the test when f failed.
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func titles(t *testing.T, d *vaulttest.Device) map[string]int {
	t.Helper()
	es, bad, err := d.Entries("")
	if err != nil {
		t.Fatal(err)
	}
	if bad.Tampered > 0 {
		t.Fatalf("%d tampered entries", bad.Tampered)
	}
	out := map[string]int{}
	for _, e := range es {
		out[e.Title]++
	}
	return out
}

// Two devices of one user and two users of one workspace share a vault;
// concurrent edits are both kept; a removed member and a revoked device
// keep what they had and get nothing written after; the server never
// holds an entry's plaintext.
func TestShareRotateRevoke(t *testing.T) {
	ctx := context.Background()
	srv := servertest.Start(t, servertest.Options{})
	alice := srv.NewUser("alice@example.com")
	bob := srv.AddMember(alice.Workspace, "bob@example.com", sdk.RoleAdmin)

	a1 := vaulttest.NewDevice(t, srv, alice, "alice-laptop")
	init1 := must(a1.Init(ctx, "alice-laptop", "team"))(t)
	if init1.Device.State != sdk.DeviceActive || init1.Vault == nil || init1.Vault.Epoch != 1 {
		t.Fatalf("first device init = %+v", init1)
	}
	must(a1.Add(ctx, "team", contextvault.NewEntry{Title: "Use pnpm", Body: "SENTINEL-ALPHA: always pnpm, never npm", UseWhen: "always", Tags: []string{"tooling"}}))(t)
	must(a1.SyncPush(ctx, ""))(t)

	// Alice's second machine asks; a wrong fingerprint is refused and
	// changes nothing; the right one lets it in.
	a2 := vaulttest.NewDevice(t, srv, alice, "alice-desktop")
	init2 := must(a2.Init(ctx, "alice-desktop", ""))(t)
	if init2.Device.State != sdk.DevicePending {
		t.Fatalf("second device of a user = %s, want pending", init2.Device.State)
	}
	if _, err := a2.EnrollAccept(ctx); !errors.Is(err, contextvault.ErrRefused) {
		t.Fatalf("accept before approval: %v", err)
	}
	if _, err := a1.EnrollApprove(ctx, init2.Device.ID, "0000-0000-0000-0000-0000-0000-0000-0000"); !errors.Is(err, contextvault.ErrDenied) {
		t.Fatalf("approval with a wrong fingerprint: %v", err)
	}
	// The server refuses it too, whatever a client claims.
	_, err := a1.Client.Approve(ctx, init2.Device.ID, sdk.ContextApproveRequest{Fingerprint: "0000-0000-0000-0000-0000-0000-0000-0000"})
	if contextvault.Code(err) != sdk.CodeFingerprintMismatch {
		t.Fatalf("server approval with a wrong fingerprint: %v", err)
	}
	if d := must(a1.Client.Device(ctx, init2.Device.ID))(t); d.State != sdk.DevicePending {
		t.Fatalf("after refused approvals the device is %s", d.State)
	}
	appr := must(a1.EnrollApprove(ctx, init2.Device.ID, strings.ToLower(init2.Fingerprint)))(t)
	if appr.Device.State != sdk.DeviceApproved || appr.Keys != 1 {
		t.Fatalf("approval = %+v", appr)
	}
	accepted, err := a2.EnrollAccept(ctx)
	if me := accepted.Device; err != nil || me.State != sdk.DeviceActive {
		t.Fatalf("accept = %+v, %v", accepted, err)
	}
	must(a2.SyncPull(ctx, ""))(t)
	if titles(t, a2)["Use pnpm"] != 1 {
		t.Fatalf("alice's second device does not read the vault: %v", titles(t, a2))
	}

	// Bob, another user, gets the vault through a team grant.
	b1 := vaulttest.NewDevice(t, srv, bob, "bob-laptop")
	must(b1.Init(ctx, "bob-laptop", ""))(t)
	grant := must(a1.TeamGrantCreate(ctx, "team", "bob@example.com", ""))(t)
	if len(grant.Devices) != 1 || grant.Keys != 1 {
		t.Fatalf("team grant = %+v", grant)
	}
	acc := must(b1.TeamGrantsAccept(ctx))(t)
	if acc.NewKeys != 1 || len(acc.NewNames) != 1 {
		t.Fatalf("bob's accept = %+v", acc)
	}
	must(b1.SyncPull(ctx, ""))(t)
	if titles(t, b1)["Use pnpm"] != 1 {
		t.Fatal("bob does not read the shared vault")
	}
	must(b1.Add(ctx, "team", contextvault.NewEntry{Title: "Billing is in cents", Body: "SENTINEL-BRAVO amounts are integers of cents", UseWhen: "billing; invoices"}))(t)
	must(b1.SyncPush(ctx, ""))(t)
	must(a2.SyncPull(ctx, ""))(t)
	if titles(t, a2)["Billing is in cents"] != 1 {
		t.Fatal("bob's entry did not reach alice")
	}

	// Concurrent edits of one entry on two devices: both kept.
	must(a1.SyncPull(ctx, ""))(t)
	var pnpm string
	for _, e := range must(firstEntries(a1))(t) {
		if e.Title == "Use pnpm" {
			pnpm = e.EntryID
		}
	}
	must(a1.Add(ctx, "team", contextvault.NewEntry{EntryID: pnpm, Title: "Use pnpm 9", Body: "edit from alice", UseWhen: "always"}))(t)
	must(b1.Add(ctx, "team", contextvault.NewEntry{EntryID: pnpm, Title: "Use pnpm workspaces", Body: "edit from bob", UseWhen: "always"}))(t)
	must(a1.SyncPush(ctx, ""))(t)
	must(b1.SyncPush(ctx, ""))(t)
	for _, d := range []*vaulttest.Device{a1, b1} {
		must(d.SyncPull(ctx, ""))(t)
		got := titles(t, d)
		if got["Use pnpm 9"] != 1 || got["Use pnpm workspaces"] != 1 || got["Use pnpm"] != 0 {
			t.Fatalf("after concurrent edits: %v", got)
		}
	}
	// Writing the entry again ends the conflict, on every device.
	must(a1.Add(ctx, "team", contextvault.NewEntry{EntryID: pnpm, Title: "Use pnpm 9 with workspaces", Body: "merged", UseWhen: "always"}))(t)
	must(a1.SyncPush(ctx, ""))(t)
	must(b1.SyncPull(ctx, ""))(t)
	if got := titles(t, b1); got["Use pnpm 9 with workspaces"] != 1 || got["Use pnpm 9"] != 0 || got["Use pnpm workspaces"] != 0 {
		t.Fatalf("after resolving: %v", got)
	}

	// Bob is removed: the vault rotates; he keeps what he had and reads
	// nothing written after.
	rv := must(a1.RevokesProcess(ctx, contextvault.RevokeTarget{Vault: "team", Member: "bob@example.com"}))(t)
	if len(rv.Rotated) != 1 || rv.Rotated[0].Epoch != 2 {
		t.Fatalf("revocation = %+v", rv)
	}
	must(a1.Add(ctx, "team", contextvault.NewEntry{Title: "After bob left", Body: "SENTINEL-CHARLIE", UseWhen: "always"}))(t)
	must(a1.SyncPush(ctx, ""))(t)
	// Bob's device learns it left the vault, and gets nothing new.
	if pulled := must(b1.SyncPull(ctx, ""))(t); len(pulled) != 0 {
		t.Fatalf("a removed member pulled %+v", pulled)
	}
	if src := must(b1.Status(ctx))(t).Sources; len(src) != 1 || !src[0].Gone {
		t.Fatalf("the removed member's device still lists the vault as its own: %+v", src)
	}
	if got := titles(t, b1); got["Billing is in cents"] != 1 || got["After bob left"] != 0 {
		t.Fatalf("the removed member's device: %v", got)
	}
	// Even with the new ciphertext in hand, bob's device has no key for it.
	evs := must(a1.Client.Pull(ctx, sdk.ContextPullRequest{VaultID: init1.Vault.ID}))(t)
	last := evs.Events[len(evs.Events)-1]
	if last.Epoch != 2 {
		t.Fatalf("the new entry was sealed under epoch %d", last.Epoch)
	}
	if _, err := b1.Client.Pull(ctx, sdk.ContextPullRequest{VaultID: init1.Vault.ID}); err == nil {
		t.Fatal("the server served a removed member")
	}
	// Alice's other device follows the rotation.
	must(a2.SyncPull(ctx, ""))(t)
	if titles(t, a2)["After bob left"] != 1 {
		t.Fatal("alice's second device missed the new epoch")
	}

	// Revoking a device rotates again; a grant for it is refused.
	rv = must(a1.RevokesProcess(ctx, contextvault.RevokeTarget{DeviceID: init2.Device.ID}))(t)
	if len(rv.Rotated) != 1 || rv.Rotated[0].Epoch != 3 {
		t.Fatalf("device revocation = %+v", rv)
	}
	wraps, err := a1.Client.PendingGrants(ctx)
	if err != nil || len(wraps) != 0 {
		t.Fatalf("grants owed after revocation: %+v %v", wraps, err)
	}
	_, err = a1.Client.Emit(ctx, sdk.ContextEmitRequest{VaultID: init1.Vault.ID, Keys: []sdk.ContextWrappedKey{{VaultID: init1.Vault.ID, Epoch: 3, DeviceID: init2.Device.ID, Wrapped: "eA=="}}})
	if contextvault.Code(err) != sdk.CodeDeviceNotEligible {
		t.Fatalf("a grant for a revoked device: %v", err)
	}
	must(a1.Add(ctx, "team", contextvault.NewEntry{Title: "After the desktop was revoked", Body: "x", UseWhen: "always"}))(t)
	must(a1.SyncPush(ctx, ""))(t)
	if _, err := a2.SyncPull(ctx, ""); !errors.Is(err, contextvault.ErrRefused) && contextvault.Code(err) != sdk.CodeNoDevice {
		t.Fatalf("a revoked device pulled: %v", err)
	}
	if titles(t, a2)["After bob left"] != 1 {
		t.Fatal("the revoked device lost what it had")
	}

	// Nothing the server stored is plaintext.
	files := vaulttest.ServerFiles(t, srv)
	for _, s := range []string{"SENTINEL-ALPHA", "SENTINEL-BRAVO", "SENTINEL-CHARLIE", "Use pnpm", "Billing is in cents"} {
		if bytes.Contains(files, []byte(s)) {
			t.Errorf("the server's database holds %q", s)
		}
	}
	// A status read works on every device.
	st := must(a1.Status(ctx))(t)
	if len(st.Sources) != 1 || st.Sources[0].Epoch != 3 || st.Sources[0].Unpushed != 0 || st.Sources[0].Conflicts != 0 {
		t.Fatalf("status = %+v", st.Sources)
	}
}

func firstEntries(d *vaulttest.Device) ([]contextvault.Entry, error) {
	es, _, err := d.Entries("")
	return es, err
}

func TestRecoveryRoundTrip(t *testing.T) {
	ctx := context.Background()
	srv := servertest.Start(t, servertest.Options{})
	alice := srv.NewUser("alice@example.com")
	a1 := vaulttest.NewDevice(t, srv, alice, "old-laptop")
	must(a1.Init(ctx, "old-laptop", "notes"))(t)
	must(a1.Add(ctx, "notes", contextvault.NewEntry{Title: "Deploys on Tuesday", Body: "only", UseWhen: "always"}))(t)
	must(a1.SyncPush(ctx, ""))(t)
	if _, err := a1.RecoveryBackup(ctx, "short"); !errors.Is(err, contextvault.ErrRefused) {
		t.Fatalf("a short recovery key: %v", err)
	}
	key := contextvault.NewRecoveryKey()
	b := must(a1.RecoveryBackup(ctx, key))(t)
	if b.Generation != 1 {
		t.Fatalf("backup = %+v", b)
	}
	if bytes.Contains(vaulttest.ServerFiles(t, srv), []byte("AGE-SECRET-KEY")) {
		t.Fatal("the server holds a device key in the clear")
	}

	// The laptop is lost. A new machine of alice's restores.
	n := vaulttest.NewDevice(t, srv, alice, "new-laptop")
	if _, err := n.RecoveryRestore(ctx, "RVK-WRONG-WRONG-WRONG", ""); !errors.Is(err, contextvault.ErrDenied) {
		t.Fatalf("a wrong recovery key: %v", err)
	}
	if st := must(n.Status(ctx))(t); st.HasKey || st.DeviceID != "" {
		t.Fatalf("a refused restore changed the home: %+v", st)
	}
	r := must(n.RecoveryRestore(ctx, key, ""))(t)
	if r.NewBackup.Generation != 2 || r.Device.InstallID != n.Install.ID {
		t.Fatalf("restore = %+v", r)
	}
	if titles(t, n)["Deploys on Tuesday"] != 1 {
		t.Fatal("the restored device does not read the vault")
	}
	// The restored device works fully: it writes, and the fresh backup
	// opens with the same key.
	must(n.Add(ctx, "notes", contextvault.NewEntry{Title: "Restored", Body: "ok"}))(t)
	must(n.SyncPush(ctx, ""))(t)
	n2 := vaulttest.NewDevice(t, srv, alice, "third")
	if _, err := n2.RecoveryRestore(ctx, key, ""); err != nil {
		t.Fatalf("the fresh backup: %v", err)
	}
}

func TestDevResetNeedsConfirmation(t *testing.T) {
	ctx := context.Background()
	srv := servertest.Start(t, servertest.Options{})
	alice := srv.NewUser("alice@example.com")
	a1 := vaulttest.NewDevice(t, srv, alice, "laptop")
	must(a1.Init(ctx, "laptop", "notes"))(t)
	must(a1.Add(ctx, "notes", contextvault.NewEntry{Title: "Keep me", Body: "x"}))(t)
	if _, err := a1.DevReset(ctx, false); !errors.Is(err, contextvault.ErrUnconfirmed) {
		t.Fatalf("reset without confirmation: %v", err)
	}
	if titles(t, a1)["Keep me"] != 1 {
		t.Fatal("a refused reset lost an entry")
	}
	done := must(a1.DevReset(ctx, true))(t)
	if len(done) < 3 {
		t.Fatalf("reset did %v", done)
	}
	if st := must(a1.Status(ctx))(t); st.HasKey || len(st.Sources) != 0 {
		t.Fatalf("after reset: %+v", st)
	}
}
