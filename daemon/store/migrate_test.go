package store

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/internal/syncbuf"
)

// captureLog sends the default logger, where the worker's store logs go, to
// a buffer for the rest of the test.
func captureLog(t *testing.T) *syncbuf.Buffer {
	var b syncbuf.Buffer
	was := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&b, nil)))
	t.Cleanup(func() { slog.SetDefault(was) })
	return &b
}

// Opening a file of schema version 5 builds event_seqs from every event
// (2.8 s for 1M events): the log says so before it starts, with how many
// events, that it still runs while it does, and how long it took once
// done; a new file and an up-to-date one say nothing.
func TestMigrationSaysWhatItCopies(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "reeve.db")
	logged := captureLog(t)
	s := openAt(t, path)
	sid := newSession(t, s).ID
	// Enough for the migration to take several milliseconds on any machine.
	in := make([]EventInput, 4000)
	for i := range in {
		in[i] = EventInput{SessionID: sid, Kind: "terminal-output", Data: payload256}
	}
	for range 5 {
		if _, err := s.AppendMany(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if out := logged.String(); strings.Contains(out, "upgrading") || strings.Contains(out, "migrated") {
		t.Fatalf("a new file logged a migration:\n%s", out)
	}
	// Back to version 5, as the previous build left the file.
	old := openAt(t, path)
	for _, q := range []string{`DROP TABLE event_seqs`, `DROP TABLE event_seqs_upto`,
		`CREATE UNIQUE INDEX events_session_seq ON events (session_id, seq)`, `DELETE FROM schema_version WHERE version > 5`} {
		if _, err := old.writer.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	// Long enough for notes that it still runs, here every millisecond.
	was := migrateNote
	migrateNote = time.Millisecond
	defer func() { migrateNote = was }()
	s = openAt(t, path)
	if evs, err := s.Events(ctx, sid, 0, 0); err != nil || len(evs) != 20000 {
		t.Fatalf("after the upgrade: %d events, %v", len(evs), err)
	}
	out := logged.String()
	before := strings.Index(out, `msg="store: upgrading the database, once" from=5 to=6 events=20000`)
	after := strings.Index(out, `msg="store: migrated" migration=0006_event_seqs.sql events=20000 took=`)
	if before < 0 || after < before {
		t.Fatalf("the upgrade logged\n%s\nwant a line before (from=5 to=6 events=20000) and one after 0006_event_seqs.sql", out)
	}
	still := strings.Index(out, `msg="store: still migrating" migration=0006_event_seqs.sql events=20000 for=`)
	if still < before || still > after || strings.LastIndex(out, "still migrating") > after {
		t.Fatalf("the upgrade logged\n%s\nwant notes that 0006_event_seqs.sql still runs, between its first and last line", out)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	reopened := len(logged.String())
	openAt(t, path)
	if out := logged.String()[reopened:]; strings.Contains(out, "upgrading") {
		t.Fatalf("an up-to-date file logged a migration:\n%s", out)
	}
}
