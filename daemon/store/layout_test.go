package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// terminalChunk is a PTY read of n bytes as the runtime records it: the JSON
// of a terminal-output event, with colour escapes and line ends that JSON
// escapes, as agents print them.
func terminalChunk(rng *rand.Rand, n int) json.RawMessage {
	var b strings.Builder
	for b.Len() < n {
		switch rng.Intn(20) {
		case 0:
			b.WriteString("\x1b[32m")
		case 1:
			b.WriteString("\x1b[0m")
		case 2:
			b.WriteString("\r\n")
		default:
			b.WriteByte(byte(' ' + rng.Intn(95)))
		}
	}
	data, _ := json.Marshal(map[string]string{"text": b.String()[:n]})
	return data
}

// TestWriteAmplification appends 4 KB terminal chunks of 50 sessions at
// once, interleaved as concurrent sessions write them, and bounds the file
// the log leaves at 1.3x the bytes of the events' data. The 16 KiB-page
// WITHOUT ROWID table of schema version 2 took 3.85x (18.7 KB a chunk).
func TestWriteAmplification(t *testing.T) {
	for _, size := range []int{1500, 3000, 4096, 6000} {
		t.Run(fmt.Sprintf("chunk=%d", size), func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "reeve.db")
			s, err := Open(ctx, Options{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			d := newDir(t, s, "/amp")
			const sessions, rounds = 50, 40
			ids := make([]string, sessions)
			for i := range ids {
				sess, err := s.CreateSession(ctx, NewSession{DirectoryID: d.ID, Agent: "shell"})
				if err != nil {
					t.Fatal(err)
				}
				ids[i] = sess.ID
			}
			rng := rand.New(rand.NewSource(int64(size)))
			payload := 0
			for r := 0; r < rounds; r++ {
				in := make([]EventInput, sessions)
				for i := range in {
					in[i] = EventInput{SessionID: ids[(i+r)%sessions], Kind: "terminal-output", Data: terminalChunk(rng, size)}
					payload += len(in[i].Data)
				}
				if _, err := s.AppendMany(ctx, in); err != nil {
					t.Fatal(err)
				}
			}
			before := fileSize(t, path)
			if err := s.Close(); err != nil { // the last connection checkpoints the WAL into the file
				t.Fatal(err)
			}
			after := fileSize(t, path)
			ratio := float64(after) / float64(payload)
			t.Logf("%d events, %d bytes of data: file %d bytes (%.2fx, %.0f bytes an event); before the final checkpoint %d", sessions*rounds, payload, after, ratio, float64(after)/float64(sessions*rounds), before)
			if ratio > 1.3 {
				t.Errorf("the log takes %.2fx its data, the bound is 1.3x", ratio)
			}
		})
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestMigrationFromVersion2 builds a file as the previous build left it
// (schema version 2: 16 KiB pages and a WITHOUT ROWID event log), opens it
// and checks that every event survives byte for byte, that seqs go on from
// the last one, and that the file was rewritten with the new page size and
// without the old table's pages.
func TestMigrationFromVersion2(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "reeve.db")
	migs, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	old.SetMaxOpenConns(1)
	for _, q := range []string{`PRAGMA page_size = 16384`, `PRAGMA journal_mode = WAL`,
		`CREATE TABLE schema_version (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`,
		migs[0].sql, migs[1].sql,
		`INSERT INTO schema_version VALUES (1, '` + migs[0].name + `', 0), (2, '` + migs[1].name + `', 0)`,
		`INSERT INTO directories VALUES ('d1', '/old', 0)`,
	} {
		if _, err := old.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rng := rand.New(rand.NewSource(2))
	type row struct {
		sid  string
		seq  int64
		data []byte
	}
	var rows []row
	for _, sid := range []string{"s1", "s2", "s3"} {
		if _, err := old.ExecContext(ctx, `INSERT INTO sessions (id, directory_id, agent, status, created_at, updated_at) VALUES (?, 'd1', 'shell', 'completed', 0, 0)`, sid); err != nil {
			t.Fatal(err)
		}
	}
	for seq := int64(1); seq <= 300; seq++ {
		for _, sid := range []string{"s1", "s2", "s3"} {
			data := terminalChunk(rng, 200+rng.Intn(6000))
			if _, err := old.ExecContext(ctx, `INSERT INTO events (session_id, seq, ts, kind, data) VALUES (?, ?, ?, 'terminal-output', ?)`, sid, seq, seq*1000, []byte(data)); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, row{sid, seq, data})
		}
	}
	if _, err := old.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	old.Close()
	oldSize := fileSize(t, path)

	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatalf("open a version-2 file: %v", err)
	}
	defer s.Close()
	for _, sid := range []string{"s1", "s2", "s3"} {
		evs, err := s.Events(ctx, sid, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var want []row
		for _, r := range rows {
			if r.sid == sid {
				want = append(want, r)
			}
		}
		if len(evs) != len(want) {
			t.Fatalf("%s: %d events after the migration, want %d", sid, len(evs), len(want))
		}
		for i, e := range evs {
			if e.Seq != want[i].seq || !bytes.Equal(e.Data, want[i].data) || e.Kind != "terminal-output" || e.TS != time.Unix(0, want[i].seq*1000).UTC() {
				t.Fatalf("%s event %d differs after the migration: seq %d", sid, i, e.Seq)
			}
		}
	}
	e, err := s.Append(ctx, "s2", "status", json.RawMessage(`{"status":"running"}`))
	if err != nil || e.Seq != 301 {
		t.Fatalf("append after the migration: seq %d, %v; want 301", e.Seq, err)
	}
	var ps, free int
	var mode string
	s.reader.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&ps)
	s.reader.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&free)
	s.writer.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode)
	if ps != pageSize || mode != "wal" || free > 8 {
		t.Errorf("after the migration: page size %d, journal %q, %d free pages", ps, mode, free)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	newSize := fileSize(t, path)
	t.Logf("file of %d events: %d bytes before, %d after", len(rows), oldSize, newSize)
	if newSize >= oldSize {
		t.Errorf("the file grew from %d to %d bytes", oldSize, newSize)
	}
	// Opening again changes nothing.
	s2, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if last, err := s2.LastSeq(ctx, "s2"); err != nil || last != 301 {
		t.Errorf("after reopening: last seq %d, %v", last, err)
	}
}
