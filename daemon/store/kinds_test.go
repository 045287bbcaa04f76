package store

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// fillLog appends n events to a session, every decisionEvery-th of kind
// "permission.decision" (the rest "terminal-output"), in batches.
func fillLog(t testing.TB, s *Store, sessionID string, n, decisionEvery int) {
	t.Helper()
	ctx := context.Background()
	batch := make([]EventInput, 0, 1000)
	for i := 1; i <= n; i++ {
		kind := "terminal-output"
		if decisionEvery > 0 && i%decisionEvery == 0 {
			kind = "permission.decision"
		}
		batch = append(batch, EventInput{SessionID: sessionID, Kind: kind, Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		if len(batch) == cap(batch) || i == n {
			if _, err := s.AppendMany(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

func TestEventsOfKindFiltersPagesAndKeepsSessionsApart(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	d := newDir(t, s, "/kinds")
	var ids []string
	for range 2 {
		sess, err := s.CreateSession(ctx, NewSession{DirectoryID: d.ID, Agent: "shell"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sess.ID)
	}
	fillLog(t, s, ids[0], 1000, 50) // decisions at seq 50, 100, ..., 1000
	fillLog(t, s, ids[1], 30, 3)

	all, err := s.EventsOfKind(ctx, ids[0], "permission.decision", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 20 {
		t.Fatalf("got %d decisions, want 20", len(all))
	}
	for i, e := range all {
		want := int64(50 * (i + 1))
		if e.Seq != want || e.Kind != "permission.decision" || e.SessionID != ids[0] || string(e.Data) != fmt.Sprintf(`{"i":%d}`, want) || e.TS.IsZero() {
			t.Fatalf("decision %d = %+v, want seq %d", i, e, want)
		}
	}
	// The same events as a full scan filtered by kind, byte for byte.
	scan, err := s.Events(ctx, ids[0], 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var filtered []Event
	for _, e := range scan {
		if e.Kind == "permission.decision" {
			filtered = append(filtered, e)
		}
	}
	for i := range filtered {
		if filtered[i].Seq != all[i].Seq || !filtered[i].TS.Equal(all[i].TS) || string(filtered[i].Data) != string(all[i].Data) {
			t.Fatalf("event %d: scan %+v, index %+v", i, filtered[i], all[i])
		}
	}

	page, err := s.EventsOfKind(ctx, ids[0], "permission.decision", 120, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 3 || page[0].Seq != 150 || page[2].Seq != 250 {
		t.Fatalf("page after 120 limit 3 = %+v", page)
	}
	other, err := s.EventsOfKind(ctx, ids[1], "permission.decision", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(other) != 10 || other[0].SessionID != ids[1] || other[0].Seq != 3 {
		t.Fatalf("other session's decisions = %+v", other)
	}
	for _, q := range []struct{ sid, kind string }{{ids[0], "no-such-kind"}, {"no-such-session", "permission.decision"}} {
		none, err := s.EventsOfKind(ctx, q.sid, q.kind, 0, 0)
		if err != nil || len(none) != 0 {
			t.Fatalf("EventsOfKind(%s, %s) = %v, %v; want none", q.sid, q.kind, none, err)
		}
	}
}

// TestEventsOfKindSeeksTheIndex checks the query plan: a search of the
// kind index, not a scan of the session's events.
func TestEventsOfKindSeeksTheIndex(t *testing.T) {
	s := openTest(t)
	rows, err := s.reader.Query(`EXPLAIN QUERY PLAN `+selectKindSQL, "s", "k", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	got := strings.Join(plan, "; ")
	if !strings.Contains(got, "SEARCH events USING INDEX events_session_kind (session_id=? AND kind=? AND seq>?)") || strings.Contains(got, "TEMP B-TREE") {
		t.Fatalf("plan = %s", got)
	}
}

// BenchmarkDecisionsOfLongSession lists the 20 decisions of a session of
// 100k events, by a scan of the log filtered by kind (how the manifest
// read did it) and by the kind index.
func BenchmarkDecisionsOfLongSession(b *testing.B) {
	ctx := context.Background()
	s := openTest(b)
	ids := benchSessions(b, s, 1)
	fillLog(b, s, ids[0], 100_000, 5_000)
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			var n int
			after := int64(0)
			for {
				evs, err := s.Events(ctx, ids[0], after, 1000)
				if err != nil {
					b.Fatal(err)
				}
				for _, e := range evs {
					after = e.Seq
					if e.Kind == "permission.decision" {
						n++
					}
				}
				if len(evs) < 1000 {
					break
				}
			}
			if n != 20 {
				b.Fatalf("%d decisions", n)
			}
		}
	})
	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			evs, err := s.EventsOfKind(ctx, ids[0], "permission.decision", 0, 1000)
			if err != nil {
				b.Fatal(err)
			}
			if len(evs) != 20 {
				b.Fatalf("%d decisions", len(evs))
			}
		}
	})
}

// BenchmarkOpenAddsKindIndex measures the one-time cost of upgrading a
// schema-version-3 file holding a 1M-event log: migration 4 builds the
// kind index. The baseline is opening the same file once upgraded.
func BenchmarkOpenAddsKindIndex(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	v3 := dir + "/v3.db"
	s, err := Open(ctx, Options{Path: v3})
	if err != nil {
		b.Fatal(err)
	}
	// Take the file back to version 3, as the previous build left it.
	for _, q := range []string{`DROP INDEX events_session_kind`, `DROP TABLE event_seqs`, `DROP TABLE event_seqs_upto`,
		`CREATE UNIQUE INDEX events_session_seq ON events (session_id, seq)`, `DELETE FROM schema_version WHERE version > 3`,
		`INSERT INTO sessions (id, directory_id, agent, status, created_at, updated_at) VALUES ('s1', 'd', 'shell', 'running', 0, 0)`} {
		if _, err := s.writer.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := 1; i <= 1_000_000; i++ {
		kind := "terminal-output"
		if i%50_000 == 0 {
			kind = "permission.decision"
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO events (session_id, seq, ts, kind, data) VALUES ('s1', ?, ?, ?, ?)`, i, i, kind, []byte(payload256)); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	open := func(b *testing.B, path string) {
		s, err := Open(ctx, Options{Path: path})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if evs, err := s.EventsOfKind(ctx, "s1", "permission.decision", 0, 0); err != nil || len(evs) != 20 {
			b.Fatalf("after open: %d decisions, %v", len(evs), err)
		}
		s.Close()
		b.StartTimer()
	}
	b.Run("upgrade", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			path := fmt.Sprintf("%s/up%d.db", dir, i)
			copyFile(b, v3, path)
			b.StartTimer()
			open(b, path)
		}
	})
	b.Run("upgraded", func(b *testing.B) {
		b.StopTimer()
		upgraded := dir + "/upgraded.db"
		copyFile(b, v3, upgraded)
		open(b, upgraded)
		b.StartTimer()
		for i := 0; i < b.N; i++ {
			open(b, upgraded)
		}
	})
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkAppendWithKindIndex measures what the kind index adds to
// appends: batches of 100 256-byte events, with the index and, as the
// baseline, on a file whose index was dropped.
func BenchmarkAppendWithKindIndex(b *testing.B) {
	ctx := context.Background()
	for _, withIndex := range []bool{false, true} {
		b.Run(fmt.Sprintf("index=%v", withIndex), func(b *testing.B) {
			s := openTest(b)
			if !withIndex {
				if _, err := s.writer.ExecContext(ctx, `DROP INDEX events_session_kind`); err != nil {
					b.Fatal(err)
				}
			}
			ids := benchSessions(b, s, 1)
			batch := make([]EventInput, 100)
			for i := range batch {
				batch[i] = EventInput{SessionID: ids[0], Kind: "terminal-output", Data: payload256}
			}
			for b.Loop() {
				if _, err := s.AppendMany(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// TestKindIndexLeavesTerminalOutputOut: the kind index is partial, without
// terminal output (a busy terminal's entries would cost every commit a
// page), and EventsOfKind still lists terminal output, from the log.
func TestKindIndexLeavesTerminalOutputOut(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	sess := newSession(t, s)
	fillLog(t, s, sess.ID, 100, 10) // decisions at 10, 20, ..., 100

	var def string
	if err := s.reader.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'events_session_kind'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(def, "WHERE "+kindIndexTerm) {
		t.Fatalf("kind index = %s, want it to leave terminal output out", def)
	}
	out, err := s.EventsOfKind(ctx, sess.ID, unindexedKind, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 90 {
		t.Fatalf("got %d terminal-output events, want 90", len(out))
	}
	for i, e := range out {
		if want := int64(i + 1 + i/9); e.Seq != want || e.Kind != unindexedKind {
			t.Fatalf("event %d = seq %d kind %s, want seq %d", i, e.Seq, e.Kind, want)
		}
	}
	page, err := s.EventsOfKind(ctx, sess.ID, unindexedKind, 19, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 3 || page[0].Seq != 21 || page[2].Seq != 23 {
		t.Fatalf("page after 19 = %v", page)
	}
}
