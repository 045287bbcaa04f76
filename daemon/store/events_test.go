package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestAppendSeqStartsAtOnePerSession(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	a := newSession(t, s)
	b, err := s.CreateSession(ctx, NewSession{DirectoryID: a.DirectoryID, Agent: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	if last, err := s.LastSeq(ctx, a.ID); err != nil || last != 0 {
		t.Fatalf("empty log last seq = %d %v", last, err)
	}
	for i := 1; i <= 3; i++ {
		e, err := s.Append(ctx, a.ID, "agent-message", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)))
		if err != nil || e.Seq != int64(i) || e.SessionID != a.ID || e.Kind != "agent-message" || e.TS.IsZero() {
			t.Fatalf("append a #%d: %+v %v", i, e, err)
		}
	}
	e, err := s.Append(ctx, b.ID, "status", nil)
	if err != nil || e.Seq != 1 || string(e.Data) != "null" {
		t.Fatalf("first append to b: %+v %v", e, err)
	}
	evs, err := s.Events(ctx, a.ID, 1, 0)
	if err != nil || len(evs) != 2 || evs[0].Seq != 2 || evs[1].Seq != 3 || string(evs[1].Data) != `{"i":3}` {
		t.Fatalf("events after 1: %+v %v", evs, err)
	}
	evs, _ = s.Events(ctx, a.ID, 0, 2)
	if len(evs) != 2 || evs[1].Seq != 2 {
		t.Fatalf("limit 2: %+v", evs)
	}
	if last, _ := s.LastSeq(ctx, a.ID); last != 3 {
		t.Fatalf("last seq = %d", last)
	}
	if _, err := s.LastSeq(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("last seq of unknown: %v", err)
	}
}

func TestAppendRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	sess := newSession(t, s)
	if _, err := s.Append(ctx, sess.ID, "x", json.RawMessage(`{broken`)); err == nil {
		t.Fatal("invalid JSON accepted")
	}
	if _, err := s.Append(ctx, sess.ID, "", nil); err == nil {
		t.Fatal("empty kind accepted")
	}
	if _, err := s.Append(ctx, "no-such-session", "x", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	// A failed request must not consume a seq.
	if e, err := s.Append(ctx, sess.ID, "x", nil); err != nil || e.Seq != 1 {
		t.Fatalf("after rejects: %+v %v", e, err)
	}
}

func TestAppendManyIsAtomicAndOrdered(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	a := newSession(t, s)
	b, _ := s.CreateSession(ctx, NewSession{DirectoryID: a.DirectoryID, Agent: "shell"})
	evs, err := s.AppendMany(ctx, []EventInput{
		{SessionID: a.ID, Kind: "k", Data: json.RawMessage(`1`)},
		{SessionID: b.ID, Kind: "k", Data: json.RawMessage(`2`)},
		{SessionID: a.ID, Kind: "k", Data: json.RawMessage(`3`)},
	})
	if err != nil || len(evs) != 3 || evs[0].Seq != 1 || evs[1].Seq != 1 || evs[2].Seq != 2 {
		t.Fatalf("append many: %+v %v", evs, err)
	}
	// One unknown session fails the whole request and writes nothing of it.
	_, err = s.AppendMany(ctx, []EventInput{
		{SessionID: a.ID, Kind: "k"},
		{SessionID: "missing", Kind: "k"},
	})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("partial unknown: %v", err)
	}
	if last, _ := s.LastSeq(ctx, a.ID); last != 2 {
		t.Fatalf("failed request left events behind: last seq %d", last)
	}
}

func TestConcurrentAppendsAreGapFreeAndGroupCommitted(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	first := newSession(t, s)
	sessions := []string{first.ID}
	for range 2 {
		x, err := s.CreateSession(ctx, NewSession{DirectoryID: first.DirectoryID, Agent: "shell"})
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, x.ID)
	}
	const producers, perProducer = 48, 60
	before := s.Stats()
	var mu sync.Mutex
	seen := map[string]map[int64]string{}
	for _, id := range sessions {
		seen[id] = map[int64]string{}
	}
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := sessions[p%len(sessions)]
			for i := range perProducer {
				data := fmt.Sprintf(`{"p":%d,"i":%d}`, p, i)
				e, err := s.Append(ctx, sid, "terminal-output", json.RawMessage(data))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if prev, dup := seen[sid][e.Seq]; dup {
					t.Errorf("seq %d of %s handed out twice (%s and %s)", e.Seq, sid, prev, data)
				}
				seen[sid][e.Seq] = data
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	total := producers * perProducer
	for _, id := range sessions {
		evs, err := s.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != len(seen[id]) {
			t.Fatalf("%s: %d stored, %d acknowledged", id, len(evs), len(seen[id]))
		}
		for i, e := range evs {
			if e.Seq != int64(i+1) {
				t.Fatalf("%s: position %d has seq %d", id, i, e.Seq)
			}
			if string(e.Data) != seen[id][e.Seq] {
				t.Fatalf("%s #%d: stored %s, acknowledged %s", id, e.Seq, e.Data, seen[id][e.Seq])
			}
		}
	}
	st := s.Stats()
	batches, events := st.Batches-before.Batches, st.Events-before.Events
	if events != int64(total) {
		t.Fatalf("stats count %d events, want %d", events, total)
	}
	// With 48 producers waiting on fsyncs, transactions must carry many
	// events each; one per event would mean group commit is broken.
	if batches*2 > events {
		t.Fatalf("%d transactions for %d events: appends are not group-committed", batches, events)
	}
	t.Logf("%d events in %d transactions (%.1f per fsync)", events, batches, float64(events)/float64(batches))
}

func TestSeqContinuesAfterReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "reeve.db")
	s := openAt(t, path)
	sess := newSession(t, s)
	for range 5 {
		if _, err := s.Append(ctx, sess.ID, "k", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, sess.ID, "k", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	s = openAt(t, path)
	e, err := s.Append(ctx, sess.ID, "k", nil)
	if err != nil || e.Seq != 6 {
		t.Fatalf("after reopen: %+v %v", e, err)
	}
}

func TestCloseAnswersQueuedAppends(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	sess := newSession(t, s)
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[int64]bool{}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				e, err := s.Append(ctx, sess.ID, "k", nil)
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("append during close: %v", err)
					}
					return
				}
				mu.Lock()
				acked[e.Seq] = true
				mu.Unlock()
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait() // every Append returned: none was left hanging by Close
	s2 := openAt(t, s.Path())
	last, err := s2.LastSeq(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(acked) == 0 || int64(len(acked)) > last {
		t.Fatalf("%d acknowledged, %d stored", len(acked), last)
	}
	for seq := range acked {
		if seq > last {
			t.Fatalf("acknowledged seq %d missing (last %d)", seq, last)
		}
	}
}

func TestFailedBatchLeavesNoGap(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	sess := newSession(t, s)
	// A trigger stands in for a write error (disk full, I/O error) inside
	// the batch transaction.
	if _, err := s.writer.ExecContext(ctx, `CREATE TRIGGER poison BEFORE INSERT ON events
		WHEN NEW.kind = 'poison' BEGIN SELECT RAISE(ABORT, 'injected failure'); END`); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.Append(ctx, sess.ID, "ok", nil); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if _, err := s.Append(ctx, sess.ID, "poison", nil); err == nil {
		t.Fatal("the injected failure was not reported")
	}
	// Concurrent appends around failing ones: only the failing ones fail,
	// they consume no seq, and everything acknowledged is stored.
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[int64]bool{}
	for p := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				kind := "ok"
				if (p+i)%13 == 0 {
					kind = "poison"
				}
				e, err := s.Append(ctx, sess.ID, kind, nil)
				if err != nil {
					if kind == "ok" {
						t.Errorf("an innocent append failed with its batch: %v", err)
					}
					continue
				}
				if kind == "poison" {
					t.Errorf("poison event acknowledged as %d", e.Seq)
				}
				mu.Lock()
				acked[e.Seq] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	evs, err := s.Events(ctx, sess.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("gap after failed batches: position %d holds seq %d", i, e.Seq)
		}
	}
	t.Logf("%d of 480 concurrent appends acknowledged", len(acked))
	if len(acked) == 0 {
		t.Fatal("no append succeeded next to the failing ones")
	}
	if len(evs) != 3+len(acked) {
		t.Fatalf("%d stored, want %d (3 + %d acknowledged)", len(evs), 3+len(acked), len(acked))
	}
	for seq := range acked {
		if seq > int64(len(evs)) {
			t.Fatalf("acknowledged seq %d missing", seq)
		}
	}
}

// An event may carry a Go value instead of JSON: the store encodes it as
// json.Marshal does and stores that, and refuses, with ErrBadData and
// without writing anything of the call, a value that does not encode, an
// event with both a value and data, and data that is not JSON.
func TestAppendValue(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	sid := newSession(t, s).ID
	type text struct {
		Text string `json:"text"`
	}
	v := text{Text: "a \"quoted\" <line>\n"}
	want, _ := json.Marshal(v)
	evs, err := s.AppendMany(ctx, []EventInput{
		{SessionID: sid, Kind: "terminal-output", Value: v},
		{SessionID: sid, Kind: "terminal-output", Value: (*text)(nil)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(evs[0].Data) != string(want) || string(evs[1].Data) != "null" {
		t.Fatalf("appended %s and %s, want %s and null", evs[0].Data, evs[1].Data, want)
	}
	stored, err := s.Events(ctx, sid, 0, 0)
	if err != nil || len(stored) != 2 || string(stored[0].Data) != string(want) || string(stored[1].Data) != "null" {
		t.Fatalf("stored %+v, %v", stored, err)
	}
	for name, bad := range map[string]EventInput{
		"a value that does not encode": {SessionID: sid, Kind: "x", Value: func() {}},
		"both data and a value":        {SessionID: sid, Kind: "x", Value: v, Data: json.RawMessage(`{}`)},
		"data that is not JSON":        {SessionID: sid, Kind: "x", Data: json.RawMessage(`{"text":`)},
	} {
		_, err := s.AppendMany(ctx, []EventInput{{SessionID: sid, Kind: "terminal-output", Value: v}, bad})
		if !errors.Is(err, ErrBadData) {
			t.Errorf("%s: err = %v, want ErrBadData", name, err)
		}
	}
	if last, err := s.LastSeq(ctx, sid); err != nil || last != 2 {
		t.Fatalf("last seq %d (%v) after the refusals, want 2", last, err)
	}
}
