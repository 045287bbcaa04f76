package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"
)

// readers is a test access function: the record's "readers" attribute.
func readers(r Record) []string {
	var a struct {
		Readers []string `json:"readers"`
	}
	_ = json.Unmarshal(r.Attributes, &a)
	return a.Readers
}

func rec(ws, coll, key string, readers ...string) *Record {
	now := time.Now()
	b, _ := json.Marshal(map[string]any{"readers": readers})
	return &Record{WorkspaceID: ws, Collection: coll, NaturalKey: key, Attributes: b, CreatedBy: "t", CreatedAt: now, UpdatedAt: now}
}

func keysOf(recs []Record) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, r.NaturalKey)
	}
	return out
}

// The access index follows every write path (create, update, update-if,
// InTx, delete), pages in seq order across principals, is rebuilt for
// records written before the function was registered, and never lists
// another workspace's or collection's records.
func TestAccessIndex(t *testing.T) { eachEngine(t, testAccessIndex) }

func testAccessIndex(t *testing.T, e engine) {
	ctx := context.Background()
	s := e.open(t)
	// Written before registration: found by the rebuild.
	old := rec("w", "docs", "old", "user:1")
	if err := s.CreateRecord(ctx, old, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if err := s.IndexAccess(ctx, "docs", "v1", readers); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		var who []string
		switch i % 3 {
		case 0:
			who = []string{"*"}
		case 1:
			who = []string{"user:1", "group:g"}
		}
		if err := s.CreateRecord(ctx, rec("w", "docs", fmt.Sprintf("k%02d", i), who...), AuditEntry{}); err != nil {
			t.Fatal(err)
		}
	}
	// Same principals elsewhere must not leak in.
	if err := s.CreateRecord(ctx, rec("w2", "docs", "other-ws", "*", "user:1"), AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateRecord(ctx, rec("w", "notes", "other-coll", "*", "user:1"), AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	list := func(after int64, limit int, ps ...string) []Record {
		t.Helper()
		recs, err := s.RecordsFor(ctx, "w", "docs", ps, ListOptions{After: after, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.IsSortedFunc(recs, func(a, b Record) int { return int(a.Seq - b.Seq) }) {
			t.Fatalf("not in seq order: %v", keysOf(recs))
		}
		return recs
	}
	if got := keysOf(list(0, 100, "user:1")); !slices.Equal(got[:3], []string{"old", "k01", "k04"}) || len(got) != 11 {
		t.Fatalf("user:1 sees %v", got)
	}
	if got := list(0, 100, "user:2"); len(got) != 0 {
		t.Fatalf("user:2 sees %v", keysOf(got))
	}
	// Paging across principals: each page is the next seqs of the union.
	var all []string
	var after int64
	for {
		page := list(after, 4, "*", "user:1", "group:g")
		if len(page) == 0 {
			break
		}
		all = append(all, keysOf(page)...)
		after = page[len(page)-1].Seq
	}
	if len(all) != 21 || all[0] != "old" || all[1] != "k00" || all[2] != "k01" {
		t.Fatalf("paged %d: %v", len(all), all)
	}

	// Updates move the record between principals, on every write path.
	k00, _ := s.RecordByKey(ctx, "w", "docs", "k00")
	k00.Attributes = json.RawMessage(`{"readers":["user:2"]}`)
	if err := s.UpdateRecord(ctx, &k00, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	k01, _ := s.RecordByKey(ctx, "w", "docs", "k01")
	if _, err := s.UpdateRecordIf(ctx, "w", "docs", k01.ID, func(r *Record) error {
		r.Attributes = json.RawMessage(`{"readers":["user:2"]}`)
		return nil
	}, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	k02, _ := s.RecordByKey(ctx, "w", "docs", "k02")
	if err := s.InTx(ctx, func(tx RecordTx) error {
		r, err := tx.Record("w", "docs", k02.ID)
		if err != nil {
			return err
		}
		r.Attributes = json.RawMessage(`{"readers":["user:2","user:3"]}`)
		if err := tx.Update(&r); err != nil {
			return err
		}
		return tx.Create(rec("w", "docs", "k99", "user:2"))
	}); err != nil {
		t.Fatal(err)
	}
	if got := keysOf(list(0, 100, "user:2")); !slices.Equal(got, []string{"k00", "k01", "k02", "k99"}) {
		t.Fatalf("user:2 after updates sees %v", got)
	}
	if got := keysOf(list(0, 100, "user:1")); slices.Contains(got, "k01") {
		t.Fatalf("user:1 still sees k01: %v", got)
	}
	if err := s.DeleteRecord(ctx, "w", "docs", k02.ID, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if got := keysOf(list(0, 100, "user:3")); len(got) != 0 {
		t.Fatalf("deleted record still listed: %v", got)
	}
	var stale int
	if err := s.queryRow(ctx, `SELECT count(*) FROM record_access WHERE record_seq = ?`, k02.Seq).Scan(&stale); err != nil || stale != 0 {
		t.Fatalf("index rows of a deleted record: %d %v", stale, err)
	}

	// A new version of the function rebuilds the rows from the records.
	if err := s.IndexAccess(ctx, "docs", "v2", func(r Record) []string {
		if r.NaturalKey == "k05" {
			return []string{"user:9"}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := keysOf(list(0, 100, "user:9")); !slices.Equal(got, []string{"k05"}) {
		t.Fatalf("after rebuild user:9 sees %v", got)
	}
	if got := list(0, 100, "*", "user:1", "user:2"); len(got) != 0 {
		t.Fatalf("rows of v1 survived the rebuild: %v", keysOf(got))
	}
	// An unindexed collection is refused rather than silently empty.
	if _, err := s.RecordsFor(ctx, "w", "notes", []string{"*"}, ListOptions{}); err == nil {
		t.Fatal("RecordsFor on an unindexed collection succeeded")
	}
}

// KeyedCollections finds the collections under a prefix that hold a key.
func TestKeyedCollections(t *testing.T) { eachEngine(t, testKeyedCollections) }

func testKeyedCollections(t *testing.T, e engine) {
	ctx := context.Background()
	s := e.open(t)
	for _, c := range []struct{ ws, coll, key string }{
		{"w", "share-groups/A/members", "7"}, {"w", "share-groups/B/members", "8"}, {"w", "share-groups/C/members", "7"},
		{"w", "share-groupsX", "7"}, {"w2", "share-groups/D/members", "7"}, {"w", "share-groups/E/members", "77"},
	} {
		if err := s.CreateRecord(ctx, rec(c.ws, c.coll, c.key), AuditEntry{}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.KeyedCollections(ctx, "w", "share-groups/", "7")
	if err != nil || !slices.Equal(got, []string{"share-groups/A/members", "share-groups/C/members"}) {
		t.Fatalf("got %v %v", got, err)
	}
}

// InTx commits all or nothing: a failure after writes leaves none of
// them, a taken key is ErrConflict without spoiling the transaction, and
// AddMember refuses an existing member.
func TestInTx(t *testing.T) { eachEngine(t, testInTx) }

func testInTx(t *testing.T, e engine) {
	ctx := context.Background()
	s := e.open(t)
	u, _, err := s.EnsureUser(ctx, "a@example.com")
	if err != nil {
		t.Fatal(err)
	}
	v, _, _ := s.EnsureUser(ctx, "b@example.com")
	now := time.Now()
	if err := s.CreateWorkspace(ctx, Workspace{ID: "w", Name: "w", PolicyMode: "open_access", CreatedAt: now, UpdatedAt: now}, u.ID); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = s.InTx(ctx, func(tx RecordTx) error {
		if err := tx.Create(rec("w", "c", "a")); err != nil {
			return err
		}
		if err := tx.AddMember("w", v.ID, "member", now); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	if _, err := s.RecordByKey(ctx, "w", "c", "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("record of a failed transaction: %v", err)
	}
	if _, err := s.Role(ctx, "w", v.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("member of a failed transaction: %v", err)
	}
	err = s.InTx(ctx, func(tx RecordTx) error {
		if err := tx.Create(rec("w", "c", "a")); err != nil {
			return err
		}
		if err := tx.Create(rec("w", "c", "a")); !errors.Is(err, ErrConflict) {
			return fmt.Errorf("second create: %v", err)
		}
		if err := tx.AddMember("w", u.ID, "member", now); !errors.Is(err, ErrConflict) {
			return fmt.Errorf("add existing member: %v", err)
		}
		if err := tx.AddMember("w", v.ID, "admin", now); err != nil {
			return err
		}
		return tx.Audit(AuditEntry{WorkspaceID: "w", Actor: "t", Action: "x", Target: "y"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Role(ctx, "w", v.ID); err != nil || r != "admin" {
		t.Fatalf("role %q %v", r, err)
	}
	if r, _ := s.Role(ctx, "w", u.ID); r != "owner" {
		t.Fatalf("existing member's role changed to %q", r)
	}

	// Racing transactions each adding the same member: exactly one wins.
	w3, _, _ := s.EnsureUser(ctx, "c@example.com")
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, lost := 0, 0
	for i := 0; i < 30; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.InTx(ctx, func(tx RecordTx) error { return tx.AddMember("w", w3.ID, "member", now) })
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, ErrConflict):
				lost++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || lost != 29 {
		t.Fatalf("won %d lost %d", won, lost)
	}
}

func TestRecordIDsByKey(t *testing.T) { eachEngine(t, testRecordIDsByKey) }

// RecordIDsByKey finds the records of one collection and workspace by
// natural key, several at once and past one query's IN list; keys of
// other collections or workspaces, and unknown keys, are absent.
func testRecordIDsByKey(t *testing.T, e engine) {
	ctx := context.Background()
	s := e.open(t)
	want := map[string]string{}
	var keys []string
	for i := range maxKeysPerRead + 20 {
		k := fmt.Sprintf("daemon:s%04d", i)
		keys = append(keys, k)
		if i%3 == 0 {
			continue // never synced
		}
		r := rec("w", "sessions", k)
		if err := s.CreateRecord(ctx, r, AuditEntry{}); err != nil {
			t.Fatal(err)
		}
		want[k] = r.ID
	}
	for _, c := range []struct{ ws, coll string }{{"w2", "sessions"}, {"w", "sessionsX"}} {
		if err := s.CreateRecord(ctx, rec(c.ws, c.coll, "daemon:s0000"), AuditEntry{}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.RecordIDsByKey(ctx, "w", "sessions", append(keys, keys[1], "daemon:unknown", "x' OR '1'='1"))
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("got %d keys (%v), want %d", len(got), err, len(want))
	}
	if got, err := s.RecordIDsByKey(ctx, "w", "sessions", nil); err != nil || len(got) != 0 {
		t.Fatalf("no keys: %v %v", got, err)
	}
}
