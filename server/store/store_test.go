package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Concurrent creates (sharing transactions on SQLite, racing on
// PostgreSQL) each either commit or fail on their own, and all of them are
// durable after reopening.
func TestConcurrentCreatesKeepEveryWrite(t *testing.T) { eachEngine(t, testConcurrentCreates) }

func testConcurrentCreates(t *testing.T, e engine) {
	s, err := Open(context.Background(), e.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for i := 0; i < 400; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			now := time.Now()
			key := ""
			if i%100 == 0 {
				key = "dup" // four writers race for one natural key
			}
			r := Record{WorkspaceID: "w", Collection: "c", NaturalKey: key, Attributes: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), CreatedBy: "t", CreatedAt: now, UpdatedAt: now}
			errs <- s.CreateRecord(ctx, &r, AuditEntry{WorkspaceID: "w", Actor: "t", Action: "record.create", Target: "c"})
		}(i)
	}
	wg.Wait()
	close(errs)
	ok, conflicts := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrConflict):
			conflicts++
		default:
			t.Fatalf("create: %v", err)
		}
	}
	if ok != 397 || conflicts != 3 {
		t.Fatalf("ok %d conflicts %d", ok, conflicts)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = e.open(t) // migrations are idempotent on reopen
	recs, err := s.Records(ctx, "w", "c", ListOptions{Limit: 500})
	if err != nil || len(recs) != 397 {
		t.Fatalf("after reopen: %d records, %v", len(recs), err)
	}
	audit, err := s.Audit(ctx, "w", ListOptions{Limit: 1000})
	if err != nil || len(audit) != 397 {
		t.Fatalf("audit rows %d (failed creates must roll back their audit too), %v", len(audit), err)
	}
}

func TestLastOwnerIsKept(t *testing.T) { eachEngine(t, testLastOwnerIsKept) }

func testLastOwnerIsKept(t *testing.T, e engine) {
	s := e.open(t)
	ctx := context.Background()
	u, _, _ := s.EnsureUser(ctx, "o@example.com")
	now := time.Now()
	if err := s.CreateWorkspace(ctx, Workspace{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Name: "w", PolicyMode: "open_access", CreatedAt: now, UpdatedAt: now}, u.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRole(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV", u.ID, "member", AuditEntry{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("demoting the last owner: %v", err)
	}
}

// BenchmarkStoreCreates measures durable record creates from 64
// goroutines, without HTTP, on SQLite (synchronous=FULL, group commit) and
// PostgreSQL side by side.
func BenchmarkStoreCreates(b *testing.B) {
	b.Run(EngineSQLite, func(b *testing.B) { benchCreates(b, sqliteEngine(b)) })
	b.Run(EnginePostgres, func(b *testing.B) { benchCreates(b, postgresEngine(b)) })
}

func benchCreates(b *testing.B, e engine) {
	s := e.open(b)
	ctx := context.Background()
	b.SetParallelism(32)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			now := time.Now()
			r := Record{WorkspaceID: "w", Collection: "workflow-runs", Attributes: json.RawMessage(`{"status":"queued"}`), CreatedBy: "user:1", CreatedAt: now, UpdatedAt: now}
			if err := s.CreateRecord(ctx, &r, AuditEntry{WorkspaceID: "w", Actor: "user:1", Action: "record.create", Target: "workflow-runs"}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "creates/s")
}

// Secrets: created once under a race, replaced only from the value the
// caller last saw, listed by name.
func TestSecrets(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s := e.open(t)
		ctx := context.Background()
		var wg sync.WaitGroup
		got := make([][]byte, 16)
		for i := range got {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				v, err := s.Secret(ctx, "k", func() ([]byte, error) { return []byte{byte(i), 0xff}, nil })
				if err != nil {
					t.Error(err)
				}
				got[i] = v
			}(i)
		}
		wg.Wait()
		for _, v := range got {
			if string(v) != string(got[0]) {
				t.Fatalf("replicas of one secret differ: %x vs %x", v, got[0])
			}
		}
		if ok, err := s.ReplaceSecret(ctx, "k", []byte("stale"), []byte("x")); err != nil || ok {
			t.Fatalf("replace from a stale value: %v %v", ok, err)
		}
		if ok, err := s.ReplaceSecret(ctx, "k", got[0], []byte("new")); err != nil || !ok {
			t.Fatalf("replace: %v %v", ok, err)
		}
		if v, _ := s.Secret(ctx, "k", nil); string(v) != "new" {
			t.Fatalf("after replace: %q", v)
		}
		if names, err := s.SecretNames(ctx); err != nil || len(names) != 1 || names[0] != "k" {
			t.Fatalf("names %v %v", names, err)
		}
	})
}
