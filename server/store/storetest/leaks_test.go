package storetest

import (
	"context"
	"strings"
	"testing"
)

// Leaks finds a needle written as text and as bytea, in its table and in
// the WAL, and reports nothing for a needle never written: the search
// the secret-grep tests rely on can fail.
func TestLeaksFindsWhatWasWritten(t *testing.T) {
	url := PostgresURL(t)
	from := WALPosition(t, url)
	db := open(t, url)
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE plain (v TEXT); CREATE TABLE raw (v BYTEA)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO plain VALUES ('before NEEDLE-TEXT-7f3a after')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO raw VALUES ($1)`, []byte("xxNEEDLE-BYTES-91cexx")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(Leaks(t, url, from, []byte("NEEDLE-TEXT-7f3a")), ","); !strings.Contains(got, "table plain") || !strings.Contains(got, "WAL segment") {
		t.Fatalf("text needle found in %q", got)
	}
	if got := strings.Join(Leaks(t, url, from, []byte("NEEDLE-BYTES-91ce")), ","); !strings.Contains(got, "table raw") || !strings.Contains(got, "WAL segment") {
		t.Fatalf("bytea needle found in %q", got)
	}
	if got := Leaks(t, url, from, []byte("NEEDLE-NEVER-WRITTEN-0c1d")); len(got) != 0 {
		t.Fatalf("a needle never written found in %v", got)
	}
}
