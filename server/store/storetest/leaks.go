package storetest

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A secret that must never be stored in the clear is searched for in
// PostgreSQL as in SQLite's files: in every table (each row cast to text,
// where bytea reads as hex, so the needle's hex is searched too) and in
// the write-ahead log written while the test ran.

// WALPosition is the server's current WAL insert position: give it to
// Leaks to search the WAL written after it.
func WALPosition(t testing.TB, dbURL string) string {
	t.Helper()
	db := open(t, dbURL)
	defer db.Close()
	var lsn string
	if err := db.QueryRow(`SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatalf("read the WAL position: %v", err)
	}
	return lsn
}

func open(t testing.TB, dbURL string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}

// Leaks lists where needle occurs in the database at dbURL: "table T" for
// a table holding it (as text or as hex), "WAL segment S" for a WAL file
// written since the position from (WALPosition) holding it. The WAL files
// are read with pg_read_binary_file, which needs a superuser or the
// pg_read_server_files role, as the default test URL has; without it
// the test fails rather than search less.
func Leaks(t testing.TB, dbURL, from string, needle []byte) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := open(t, dbURL)
	defer db.Close()
	hexNeedle := []byte(hex.EncodeToString(needle))
	var found []string

	rows, err := db.QueryContext(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	rows.Close()
	if len(tables) == 0 {
		t.Fatal("the database has no tables: nothing was searched")
	}
	for _, table := range tables {
		q := `SELECT t::text FROM "` + strings.ReplaceAll(table, `"`, `""`) + `" t`
		rs, err := db.QueryContext(ctx, q)
		if err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		for rs.Next() {
			var row []byte
			if err := rs.Scan(&row); err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(row, needle) || bytes.Contains(bytes.ToLower(row), hexNeedle) {
				found = append(found, "table "+table)
				break
			}
		}
		rs.Close()
	}

	var first, last string
	if err := db.QueryRowContext(ctx, `SELECT pg_walfile_name($1::pg_lsn), pg_walfile_name(pg_current_wal_insert_lsn())`, from).Scan(&first, &last); err != nil {
		t.Fatalf("name the WAL files: %v", err)
	}
	segs, err := db.QueryContext(ctx, `SELECT name FROM pg_ls_waldir() WHERE name >= $1 AND name <= $2 AND length(name) = 24 ORDER BY name`, first, last)
	if err != nil {
		t.Fatalf("list the WAL files (needs superuser or pg_monitor): %v", err)
	}
	var names []string
	for segs.Next() {
		var n string
		if err := segs.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	segs.Close()
	if len(names) == 0 {
		t.Fatalf("no WAL file between %s and %s: the WAL was not searched", first, last)
	}
	for _, n := range names {
		var b []byte
		if err := db.QueryRowContext(ctx, `SELECT pg_read_binary_file('pg_wal/' || $1)`, n).Scan(&b); err != nil {
			t.Fatalf("read WAL file %s (needs superuser or pg_read_server_files): %v", n, err)
		}
		if bytes.Contains(b, needle) {
			found = append(found, fmt.Sprintf("WAL segment %s", n))
		}
	}
	return found
}
