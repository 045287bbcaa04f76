// Package storetest gives tests a database of their own on the PostgreSQL
// server of the machine, so store tests run on both engines.
//
// The server is REEVE_TEST_POSTGRES_URL, by default the local one with
// trust authentication. Without a reachable server the tests that need it
// skip with a message, unless REEVE_REQUIRE_POSTGRES=1 (CI), where they
// fail instead.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// DefaultPostgresURL is the administrative connection tests use unless
// REEVE_TEST_POSTGRES_URL names another.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var (
	probeOnce sync.Once
	probeErr  error
)

func adminURL() string {
	if u := os.Getenv("REEVE_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return DefaultPostgresURL
}

// Required reports whether PostgreSQL tests must run (REEVE_REQUIRE_POSTGRES=1).
func Required() bool { return os.Getenv("REEVE_REQUIRE_POSTGRES") == "1" }

// admin connects to the administrative database.
func admin(ctx context.Context) (*sql.DB, error) { return connectWaiting(ctx, adminURL()) }

// connectWaiting connects to dbURL. A server that is full (too many
// clients: test packages running side by side each hold pools of their
// own) or still starting is waited for until ctx ends, since that passes
// by itself; any other error is returned at once. When ctx ends during an
// attempt after the server had refused as busy, the error carries that
// refusal: it is why the connection never came.
func connectWaiting(ctx context.Context, dbURL string) (*sql.DB, error) {
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(2)
	var refused error // the last busy refusal
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		err = db.PingContext(ctx)
		if err == nil {
			return db, nil
		}
		if !busy(err) {
			if refused != nil && ctx.Err() != nil {
				err = fmt.Errorf("%w, after the server refused: %w", err, refused)
			}
			break
		}
		refused = err
		select {
		case <-ctx.Done():
		case <-time.After(wait):
			continue
		}
		break
	}
	db.Close()
	return nil, err
}

// busy reports the server's refusals that pass by themselves: too many
// connections (53300) and a server starting or shutting down (57P03).
func busy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "53300" || pgErr.Code == "57P03")
}

// Available skips t (or fails it, when PostgreSQL is required) unless the
// PostgreSQL server answers.
func Available(t testing.TB) {
	t.Helper()
	probeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		db, err := admin(ctx)
		if err == nil {
			db.Close()
		}
		probeErr = err
	})
	if probeErr == nil {
		return
	}
	msg := fmt.Sprintf("PostgreSQL is not reachable at %s (%v); set REEVE_TEST_POSTGRES_URL to run the PostgreSQL tests", redact(adminURL()), probeErr)
	if Required() {
		t.Fatal(msg + " (REEVE_REQUIRE_POSTGRES=1)")
	}
	t.Skip(msg)
}

// PostgresURL creates an empty database for t, dropped when t ends, and
// returns its URL.
func PostgresURL(t testing.TB) string {
	t.Helper()
	Available(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := admin(ctx)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	defer db.Close()
	var b [6]byte
	rand.Read(b[:])
	name := "reeve_test_" + hex.EncodeToString(b[:])
	if _, err := db.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		db, err := admin(ctx)
		if err != nil {
			t.Logf("drop database %s: %v", name, err)
			return
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(adminURL())
	if err != nil {
		t.Fatalf("REEVE_TEST_POSTGRES_URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable url)"
	}
	return u.Redacted()
}

// CutOff makes the database at dbURL (one PostgresURL made) unreachable:
// its connections are terminated and new ones refused, as when the
// database goes down. The returned function brings it back.
func CutOff(t testing.TB, dbURL string) (restore func()) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	name := u.Path[1:]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := admin(ctx)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `ALTER DATABASE `+name+` WITH ALLOW_CONNECTIONS false`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name); err != nil {
		t.Fatal(err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		db, err := admin(ctx)
		if err != nil {
			t.Fatalf("connect to PostgreSQL: %v", err)
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, `ALTER DATABASE `+name+` WITH ALLOW_CONNECTIONS true`); err != nil {
			t.Fatal(err)
		}
	}
}
