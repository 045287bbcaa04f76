package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// sealCounts is how many events event_seqs holds and how many are in the
// unsealed tail.
func sealCounts(t *testing.T, s *Store) (sealed, tail int) {
	t.Helper()
	err := s.reader.QueryRow(`SELECT (SELECT COUNT(*) FROM event_seqs),
		(SELECT COUNT(*) FROM events WHERE id > (SELECT upto FROM event_seqs_upto))`).Scan(&sealed, &tail)
	if err != nil {
		t.Fatal(err)
	}
	return sealed, tail
}

// waitSealed waits until the log's n events are all sealed: a seal runs
// on the appender after the batch's callers were answered, so the last
// Append may return before it ends.
func waitSealed(t *testing.T, s *Store, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sealed, tail := sealCounts(t, s)
		if sealed == n && tail == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d sealed, %d in the tail; want %d and 0", what, sealed, tail, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkLog reads a session's log every way the store offers, from every
// cursor, and compares it with want (its events' data, seq 1 first).
func checkLog(t *testing.T, s *Store, sid string, want []string) {
	t.Helper()
	ctx := context.Background()
	if last, err := s.LastSeq(ctx, sid); err != nil || last != int64(len(want)) {
		t.Fatalf("%s: last seq %d %v, want %d", sid, last, err, len(want))
	}
	for after := 0; after <= len(want); after++ {
		for _, limit := range []int{0, 1, 3} {
			evs, err := s.Events(ctx, sid, int64(after), limit)
			if err != nil {
				t.Fatal(err)
			}
			n := len(want) - after
			if limit > 0 {
				n = min(n, limit)
			}
			if len(evs) != n {
				t.Fatalf("%s after %d limit %d: %d events, want %d", sid, after, limit, len(evs), n)
			}
			for i, e := range evs {
				if e.Seq != int64(after+i+1) || string(e.Data) != want[after+i] {
					t.Fatalf("%s after %d: event %d is seq %d %s, want seq %d %s", sid, after, i, e.Seq, e.Data, after+i+1, want[after+i])
				}
			}
		}
	}
	out, err := s.EventsOfKind(ctx, sid, unindexedKind, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var terminal []string
	for i, d := range want {
		if strings.Contains(d, `"t"`) {
			terminal = append(terminal, fmt.Sprint(i+1, d))
		}
	}
	if len(out) != len(terminal) {
		t.Fatalf("%s: %d terminal events, want %d", sid, len(out), len(terminal))
	}
	for i, e := range out {
		if got := fmt.Sprint(e.Seq, string(e.Data)); got != terminal[i] {
			t.Fatalf("%s: terminal event %d is %s, want %s", sid, i, got, terminal[i])
		}
	}
}

// keepTail stops idle seals for the stores the test opens.
func keepTail(t testing.TB) {
	was := sealIdle
	sealIdle = time.Hour
	t.Cleanup(func() { sealIdle = was })
}

// A log that goes quiet is sealed, so that its reads have no tail to scan.
func TestQuietLogIsSealed(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	sid := newSession(t, s).ID
	var want []string
	for i := range 5 {
		d := fmt.Sprintf(`{"t":"%d"}`, i)
		if _, err := s.Append(ctx, sid, "terminal-output", json.RawMessage(d)); err != nil {
			t.Fatal(err)
		}
		want = append(want, d)
	}
	waitSealed(t, s, 5, "a quiet log")
	checkLog(t, s, sid, want)
}

// Reads must not depend on where the seal line falls: whether a session's
// events are in event_seqs, in the tail or split between them, every read
// by seq returns the same log, and every event is in exactly one of the two.
func TestReadsAcrossTheSealLine(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	s.app.sealEvery, s.app.nextSeal = 7, 7
	a := newSession(t, s)
	var ids []string
	for range 3 {
		sess, err := s.CreateSession(ctx, NewSession{DirectoryID: a.DirectoryID, Agent: "shell"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sess.ID)
	}
	want := map[string][]string{}
	total := 0
	for round := range 12 {
		// Batches of several sessions and sizes, so that seals fall inside
		// a session's run of events and between sessions.
		var in []EventInput
		for j, sid := range ids {
			for k := range (round+j)%4 + 1 {
				kind, data := "terminal-output", fmt.Sprintf(`{"t":"%d-%d"}`, round, k)
				if k == 1 {
					kind, data = "agent-message", fmt.Sprintf(`{"m":"%d-%d"}`, round, k)
				}
				in = append(in, EventInput{SessionID: sid, Kind: kind, Data: json.RawMessage(data)})
				want[sid] = append(want[sid], data)
			}
		}
		if _, err := s.AppendMany(ctx, in); err != nil {
			t.Fatal(err)
		}
		total += len(in)
		for _, sid := range ids {
			checkLog(t, s, sid, want[sid])
		}
		sealed, tail := sealCounts(t, s)
		if sealed+tail != total || tail >= 7+len(in) {
			t.Fatalf("round %d: %d sealed + %d in the tail, want %d in all and a tail below %d", round, sealed, tail, total, 7+len(in))
		}
	}
	if sealed, _ := sealCounts(t, s); sealed == 0 {
		t.Fatal("nothing was ever sealed")
	}
}

// A tail left behind at Close (or by a crash) is read after the next Open,
// and sealed by the next seal; a reopened store counts it towards that seal.
func TestTailSurvivesReopen(t *testing.T) {
	keepTail(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "reeve.db")
	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	sid := newSession(t, s).ID
	var want []string
	for i := range 10 {
		d := fmt.Sprintf(`{"t":"%d"}`, i)
		if _, err := s.Append(ctx, sid, "terminal-output", json.RawMessage(d)); err != nil {
			t.Fatal(err)
		}
		want = append(want, d)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path)
	if sealed, tail := sealCounts(t, s); sealed != 0 || tail != 10 || s.app.unsealed != 10 {
		t.Fatalf("after reopen: %d sealed, %d in the tail, %d counted", sealed, tail, s.app.unsealed)
	}
	checkLog(t, s, sid, want)
	s.app.nextSeal = 12
	for i := 10; i < 13; i++ {
		d := fmt.Sprintf(`{"t":"%d"}`, i)
		e, err := s.Append(ctx, sid, "terminal-output", json.RawMessage(d))
		if err != nil || e.Seq != int64(i+1) {
			t.Fatalf("append %d: %+v %v", i, e, err)
		}
		want = append(want, d)
	}
	if sealed, tail := sealCounts(t, s); sealed != 12 || tail != 1 {
		t.Fatalf("after the seal: %d sealed, %d in the tail; want 12 and 1", sealed, tail)
	}
	checkLog(t, s, sid, want)
}

// A seal that fails (here: event_seqs already holds one of the tail's
// seqs, as only a bug could make it) loses nothing: the tail stays
// readable, appends go on with gap-free seqs, and the seal is tried again
// later.
func TestFailedSealKeepsTheTail(t *testing.T) {
	keepTail(t) // the seals are the ones counted here
	ctx := context.Background()
	s := openTest(t)
	s.app.sealEvery, s.app.nextSeal = 4, 4
	sid := newSession(t, s).ID
	var want []string
	for i := range 6 {
		if i == 1 {
			// After the appender has read the session's last seq, which
			// the stray entry would otherwise raise.
			if _, err := s.writer.Exec(`INSERT INTO event_seqs (session_id, seq, event_id) VALUES (?, 3, -1)`, sid); err != nil {
				t.Fatal(err)
			}
		}
		d := fmt.Sprintf(`{"t":"%d"}`, i)
		e, err := s.Append(ctx, sid, "terminal-output", json.RawMessage(d))
		if err != nil || e.Seq != int64(i+1) {
			t.Fatalf("append %d: %+v %v", i, e, err)
		}
		want = append(want, d)
	}
	if _, tail := sealCounts(t, s); tail != 6 || s.app.nextSeal != 8 {
		t.Fatalf("%d in the tail, next seal at %d; want 6 and 8", tail, s.app.nextSeal)
	}
	if _, err := s.writer.Exec(`DELETE FROM event_seqs WHERE event_id = -1`); err != nil {
		t.Fatal(err)
	}
	checkLog(t, s, sid, want)
	for i := 6; i < 8; i++ {
		d := fmt.Sprintf(`{"t":"%d"}`, i)
		if _, err := s.Append(ctx, sid, "terminal-output", json.RawMessage(d)); err != nil {
			t.Fatal(err)
		}
		want = append(want, d)
	}
	waitSealed(t, s, 8, "the retried seal")
	checkLog(t, s, sid, want)
}

// Followers reading while producers append and the appender seals see
// every event once, in order: a seal moves events between the two arms of
// a read, and a read sees one snapshot of both.
func TestFollowWhileSealing(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	s.app.sealEvery, s.app.nextSeal = 5, 5
	a := newSession(t, s)
	const sessions, events = 4, 150
	ids := []string{a.ID}
	for len(ids) < sessions {
		sess, err := s.CreateSession(ctx, NewSession{DirectoryID: a.DirectoryID, Agent: "shell"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sess.ID)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*sessions)
	for _, sid := range ids {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range events {
				if _, err := s.Append(ctx, sid, "terminal-output", json.RawMessage(fmt.Sprintf(`{"t":"%d"}`, i))); err != nil {
					errs <- err
					return
				}
			}
			if _, err := s.UpdateSessionStatus(ctx, sid, StatusCompleted, ""); err != nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			next := int64(1)
			err := s.Follow(ctx, sid, 0, func(e Event) error {
				if e.Seq != next || string(e.Data) != fmt.Sprintf(`{"t":"%d"}`, next-1) {
					return fmt.Errorf("%s: got seq %d %s, want seq %d", sid, e.Seq, e.Data, next)
				}
				next++
				return nil
			})
			if err == nil && next != events+1 {
				err = fmt.Errorf("%s: follow ended after seq %d", sid, next-1)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The reads by seq must seek, never scan the log, and must not sort the
// sealed part: a scan would make every follower's read cost the length of
// every session's history, a sort the length of its own (replay of a long
// log a page at a time would then cost its length squared). Only the
// tail, which is short, is sorted.
func TestReadsBySeqSeek(t *testing.T) {
	s := openTest(t)
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"events":          {selectEventsSQL, []any{"s", 0, 10}},
		"last seq":        {lastSeqSQL, []any{"s"}},
		"terminal output": {scanForKindSQL, []any{"s", "terminal-output", 0, 10}},
	} {
		rows, err := s.reader.Query(`EXPLAIN QUERY PLAN `+q.sql, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		t.Logf("%s:\n%s", name, strings.Join(plan, "\n"))
		sorts := 0
		for _, step := range plan {
			if strings.Contains(step, "TEMP B-TREE") {
				sorts++
			}
			// The one-row table of the seal line and a constant row are all
			// a read may scan.
			if strings.HasPrefix(step, "SCAN ") && step != "SCAN event_seqs_upto" && step != "SCAN CONSTANT ROW" {
				t.Errorf("%s scans: %q in plan\n%s", name, step, strings.Join(plan, "\n"))
			}
		}
		if sorts > 1 {
			t.Errorf("%s sorts more than the tail:\n%s", name, strings.Join(plan, "\n"))
		}
	}
}

// BenchmarkReadsWithTail is what the unsealed tail costs a read: a
// follower's read of a session's newest events and LastSeq, among 50 busy
// sessions, with the tail as long as it gets (sealEvery-1 events) against
// the same log sealed, in the same run.
func BenchmarkReadsWithTail(b *testing.B) {
	keepTail(b)
	const sessions = 50
	ctx := context.Background()
	for _, sealed := range []bool{true, false} {
		name := "tail=full"
		if sealed {
			name = "tail=empty"
		}
		b.Run(name, func(b *testing.B) {
			s := openTest(b)
			ids := benchSessions(b, s, sessions)
			// Sealed history, then a tail one event short of a seal.
			for round := range 2 {
				n := 2 * sealEvery
				if round == 1 {
					n = sealEvery - 1
				}
				in := make([]EventInput, 0, n)
				for i := range n {
					in = append(in, EventInput{SessionID: ids[i%sessions], Kind: "terminal-output", Data: payload256})
				}
				if _, err := s.AppendMany(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
			if sealed {
				if err := s.normalSync(ctx, func(conn *sql.Conn) error { return s.sealTx(ctx, conn) }); err != nil {
					b.Fatal(err)
				}
			}
			sid := ids[7]
			last, err := s.LastSeq(ctx, sid)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				evs, err := s.Events(ctx, sid, last-3, 0)
				if err != nil || len(evs) != 3 {
					b.Fatalf("%d events, %v", len(evs), err)
				}
				if l, err := s.LastSeq(ctx, sid); err != nil || l != last {
					b.Fatalf("last seq %d %v", l, err)
				}
			}
		})
	}
}

// When database/sql replaces the writer connection, seals go on in
// synchronous=NORMAL on the new one, which is left fsyncing its commits.
func TestSealsGoOnAfterTheConnectionIsReplaced(t *testing.T) {
	keepTail(t)
	ctx := context.Background()
	s := openTest(t)
	s.app.sealEvery, s.app.nextSeal = 1, 1 // a seal after every batch
	sid := newSession(t, s).ID
	if _, err := s.Append(ctx, sid, "terminal-output", payload256); err != nil {
		t.Fatal(err)
	}
	conn, err := s.writer.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var first any
	conn.Raw(func(dc any) error { first = dc; return driver.ErrBadConn }) // database/sql closes it
	conn.Close()
	for range 3 {
		if _, err := s.Append(ctx, sid, "terminal-output", payload256); err != nil {
			t.Fatal(err)
		}
	}
	waitSealed(t, s, 4, "the seal on the new connection")
	var mode int
	if err := s.writer.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&mode); err != nil || mode != 2 {
		t.Fatalf("writer connection synchronous=%d (%v), want 2 (FULL)", mode, err)
	}
	conn, err = s.writer.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Raw(func(dc any) error {
		if dc == first {
			t.Errorf("the writer is still the connection database/sql was told is bad")
		}
		return nil
	})
}
