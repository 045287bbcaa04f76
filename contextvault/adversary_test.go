package contextvault_test

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"reeve.dev/reeve/contextvault"
	"reeve.dev/reeve/contextvault/vaulttest"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// serverDB opens the server's database beside the running server, to act
// as a server that lies: it rewrites what it stores.
func serverDB(t *testing.T, srv *servertest.Server) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(srv.DataDir, "reeve-server.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// A ciphertext changed on the server is refused by the device that pulls
// it; the device keeps everything it had and its cursor stays before the
// bad event, so the true event is taken once the server serves it again.
func TestTamperedCiphertextIsRefused(t *testing.T) {
	ctx := context.Background()
	srv := servertest.Start(t, servertest.Options{})
	alice := srv.NewUser("alice@example.com")
	a1 := vaulttest.NewDevice(t, srv, alice, "a1")
	v := must(a1.Init(ctx, "a1", "team"))(t).Vault
	bob := srv.AddMember(alice.Workspace, "bob@example.com", sdk.RoleAdmin)
	b1 := vaulttest.NewDevice(t, srv, bob, "b1")
	must(b1.Init(ctx, "b1", ""))(t)
	must(a1.TeamGrantCreate(ctx, "team", "bob@example.com", ""))(t)
	must(a1.Add(ctx, "team", contextvault.NewEntry{Title: "first", Body: "one"}))(t)
	must(a1.SyncPush(ctx, ""))(t)
	must(b1.SyncPull(ctx, ""))(t)
	must(a1.Add(ctx, "team", contextvault.NewEntry{Title: "second", Body: "two"}))(t)
	must(a1.SyncPush(ctx, ""))(t)

	db := serverDB(t, srv)
	var ct string
	if err := db.QueryRow(`SELECT ciphertext FROM cv_events WHERE source_id = ? AND seq = 2`, v.ID).Scan(&ct); err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(ct)
	raw[len(raw)-5] ^= 0x40
	if _, err := db.Exec(`UPDATE cv_events SET ciphertext = ? WHERE source_id = ? AND seq = 2`, base64.StdEncoding.EncodeToString(raw), v.ID); err != nil {
		t.Fatal(err)
	}
	_, err := b1.SyncPull(ctx, "")
	var ee *contextvault.ErrEvent
	if !errors.As(err, &ee) || ee.Seq != 2 || !errors.Is(err, contextvault.ErrRefused) {
		t.Fatalf("pulling a tampered event: %v", err)
	}
	if got := titles(t, b1); got["first"] != 1 || got["second"] != 0 {
		t.Fatalf("after the refusal: %v", got)
	}
	if st := must(b1.Status(ctx))(t); st.Sources[0].Cursor != 1 {
		t.Fatalf("the cursor moved past the refused event: %d", st.Sources[0].Cursor)
	}
	// The server repairs itself: the true event is taken.
	if _, err := db.Exec(`UPDATE cv_events SET ciphertext = ? WHERE source_id = ? AND seq = 2`, ct, v.ID); err != nil {
		t.Fatal(err)
	}
	must(b1.SyncPull(ctx, ""))(t)
	if titles(t, b1)["second"] != 1 {
		t.Fatal("the repaired event was not taken")
	}

	// A server that swaps a stored event's descriptor (to change when it is
	// used) breaks its associated data: refused too.
	must(a1.Add(ctx, "team", contextvault.NewEntry{Title: "third", Body: "three", UseWhen: "path:docs/**"}))(t)
	must(a1.SyncPush(ctx, ""))(t)
	if _, err := db.Exec(`UPDATE cv_events SET use_when = 'always' WHERE source_id = ? AND seq = 3`, v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b1.SyncPull(ctx, ""); !errors.As(err, &ee) || ee.Seq != 3 {
		t.Fatalf("a changed descriptor: %v", err)
	}
}

// A server that replays an event under a new number, or serves an event
// before the one it replaces, is refused; nothing is lost.
func TestReplayedAndReorderedEventsAreRefused(t *testing.T) {
	ctx := context.Background()
	srv := servertest.Start(t, servertest.Options{})
	alice := srv.NewUser("alice@example.com")
	a1 := vaulttest.NewDevice(t, srv, alice, "a1")
	v := must(a1.Init(ctx, "a1", "team"))(t).Vault
	a2 := vaulttest.NewDevice(t, srv, alice, "a2")
	d2 := must(a2.Init(ctx, "a2", ""))(t)
	must(a1.EnrollApprove(ctx, d2.Device.ID, d2.Fingerprint))(t)
	must(a2.EnrollAccept(ctx))(t)

	added := must(a1.Add(ctx, "team", contextvault.NewEntry{Title: "v1", Body: "x"}))(t)
	must(a1.SyncPush(ctx, ""))(t)
	must(a2.SyncPull(ctx, ""))(t)

	// The same event id pushed again with other content: the server says
	// no and writes nothing.
	evs := must(a1.Client.Pull(ctx, sdk.ContextPullRequest{VaultID: v.ID}))(t).Events
	replay := evs[0]
	replay.Seq, replay.Ciphertext = 0, replay.Ciphertext[:len(replay.Ciphertext)-4]+"AAA="
	if _, err := a1.Client.Push(ctx, sdk.ContextPushRequest{VaultID: v.ID, Events: []sdk.ContextEvent{replay}}); contextvault.Code(err) != sdk.CodeEventReplayed {
		t.Fatalf("a replayed event id with other content: %v", err)
	}
	// The same event pushed again unchanged is a duplicate, acknowledged.
	same := evs[0]
	same.Seq = 0
	ack := must(a1.Client.Push(ctx, sdk.ContextPushRequest{VaultID: v.ID, Events: []sdk.ContextEvent{same}}))(t)
	if !ack.Accepted[0].Duplicate || ack.Accepted[0].Seq != 1 || ack.HeadSeq != 1 {
		t.Fatalf("an idempotent re-push: %+v", ack)
	}
	// An event that replaces an event the server does not have.
	orphan := sdk.ContextEvent{EventID: "01ORPHAN00000000000000000A", EntryID: added.EntryID, Kind: sdk.EventPut, Epoch: 1, Base: "01NOSUCHEVENT0000000000000", Ciphertext: evs[0].Ciphertext}
	if _, err := a1.Client.Push(ctx, sdk.ContextPushRequest{VaultID: v.ID, Events: []sdk.ContextEvent{orphan}}); contextvault.Code(err) != sdk.CodeUnknownBase {
		t.Fatalf("an out-of-order push: %v", err)
	}

	// A lying server: it stores event 1 again as event 2 (a replay).
	db := serverDB(t, srv)
	if _, err := db.Exec(`INSERT INTO cv_events (source_id, seq, event_id, entry_id, kind, epoch, base, use_when, update_when, path, commit_sha, ciphertext, digest, device_id, created_at)
		SELECT source_id, 2, event_id || 'X', entry_id, kind, epoch, base, use_when, update_when, path, commit_sha, ciphertext, digest, device_id, created_at FROM cv_events WHERE source_id = ? AND seq = 1`, v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE cv_sources SET head_seq = 2 WHERE id = ?`, v.ID); err != nil {
		t.Fatal(err)
	}
	// Renamed, its associated data no longer matches: refused.
	var ee *contextvault.ErrEvent
	if _, err := a2.SyncPull(ctx, ""); !errors.As(err, &ee) || ee.Seq != 2 {
		t.Fatalf("a replay under another id: %v", err)
	}
	// Under its own id it is a replay of what the device has.
	if _, err := db.Exec(`UPDATE cv_events SET event_id = substr(event_id, 1, length(event_id) - 1) WHERE source_id = ? AND seq = 2`, v.ID); err == nil {
		t.Fatal("the store let one event id in twice")
	}
	if _, err := db.Exec(`DELETE FROM cv_events WHERE source_id = ? AND seq = 2`, v.ID); err != nil {
		t.Fatal(err)
	}
	// A reordered log: the edit of v1 comes before v1 itself on a device
	// that has neither.
	must(a1.Add(ctx, "team", contextvault.NewEntry{EntryID: added.EntryID, Title: "v2", Body: "y"}))(t)
	if _, err := db.Exec(`UPDATE cv_sources SET head_seq = 1 WHERE id = ?`, v.ID); err != nil {
		t.Fatal(err)
	}
	must(a1.SyncPush(ctx, ""))(t)
	a3 := vaulttest.NewDevice(t, srv, alice, "a3")
	d3 := must(a3.Init(ctx, "a3", ""))(t)
	must(a1.EnrollApprove(ctx, d3.Device.ID, d3.Fingerprint))(t)
	must(a3.EnrollAccept(ctx))(t)
	swap(t, db, v.ID)
	if _, err := a3.SyncPull(ctx, ""); !errors.As(err, &ee) || ee.Seq != 1 {
		t.Fatalf("a reordered log: %v", err)
	}
	if got := titles(t, a3); len(got) != 0 {
		t.Fatalf("a refused pull kept %v", got)
	}
	// Put back in order, everything arrives.
	swap(t, db, v.ID)
	must(a3.SyncPull(ctx, ""))(t)
	if got := titles(t, a3); got["v2"] != 1 || got["v1"] != 0 {
		t.Fatalf("after the log was repaired: %v", got)
	}
}

// swap exchanges the sequence numbers of a source's events 1 and 2.
func swap(t *testing.T, db *sql.DB, source string) {
	t.Helper()
	for _, q := range []string{
		`UPDATE cv_events SET seq = -seq WHERE source_id = ?`,
		`UPDATE cv_events SET seq = CASE seq WHEN -1 THEN 2 ELSE 1 END WHERE source_id = ?`,
	} {
		if _, err := db.Exec(q, source); err != nil {
			t.Fatal(err)
		}
	}
}
