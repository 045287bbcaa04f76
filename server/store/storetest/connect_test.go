package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"testing"
	"time"
)

// A full server is waited for, not taken for an absent one: a role limited
// to one connection holds it, a second connection of that role is refused
// with SQLSTATE 53300 as a full server refuses, and connectWaiting gets in
// once the first one goes.
func TestConnectWaitsForAFullServer(t *testing.T) {
	Available(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm, err := admin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	var b [6]byte
	rand.Read(b[:])
	role := "reeve_test_limited_" + hex.EncodeToString(b[:])
	if _, err := adm.ExecContext(ctx, `CREATE ROLE `+role+` LOGIN CONNECTION LIMIT 1`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		adm.ExecContext(context.Background(), `DROP ROLE IF EXISTS `+role)
	})
	u, err := url.Parse(adminURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	limited := u.String()

	holder, err := sql.Open("pgx", limited)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := holder.Conn(ctx)
	if err != nil {
		t.Fatalf("the first connection of %s: %v", role, err)
	}

	// While it is held, a second one is refused as busy, and goes on
	// being refused until its context ends (long enough for the server to
	// answer even on a loaded machine)...
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	_, err = connectWaiting(short, limited)
	cancelShort()
	if err == nil || !busy(err) {
		t.Fatalf("second connection while the role is full: %v, want a busy refusal", err)
	}
	// ...and waited for until it goes.
	go func() {
		time.Sleep(200 * time.Millisecond)
		conn.Close()
		holder.Close()
	}()
	db, err := connectWaiting(ctx, limited)
	if err != nil {
		t.Fatalf("connect after the holder left: %v", err)
	}
	db.Close()

	// Other errors are not waited for.
	bad := *u
	bad.User = url.User("reeve_test_no_such_role_" + hex.EncodeToString(b[:]))
	if _, err := connectWaiting(ctx, bad.String()); err == nil || busy(err) {
		t.Fatalf("unknown role: %v, want a refusal that is not busy", err)
	}
}
