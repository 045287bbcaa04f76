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

func open(t testing.TB, path string) *SQLite {
	t.Helper()
	s, err := OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Concurrent creates share transactions; each either commits or fails on
// its own, and all of them are durable after reopening.
func TestGroupCommitKeepsEveryWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s := open(t, path)
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
	s = open(t, path) // migrations are idempotent on reopen
	defer s.Close()
	recs, err := s.Records(ctx, "w", "c", ListOptions{Limit: 500})
	if err != nil || len(recs) != 397 {
		t.Fatalf("after reopen: %d records, %v", len(recs), err)
	}
	audit, err := s.Audit(ctx, "w", ListOptions{Limit: 1000})
	if err != nil || len(audit) != 397 {
		t.Fatalf("audit rows %d (failed creates must roll back their audit too), %v", len(audit), err)
	}
}

func TestLastOwnerIsKept(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "s.db"))
	defer s.Close()
	ctx := context.Background()
	u, _, _ := s.EnsureUser(ctx, "o@example.com")
	now := time.Now()
	if err := s.CreateWorkspace(ctx, Workspace{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Name: "w", PolicyMode: "open_access", CreatedAt: now, UpdatedAt: now}, u.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRole(ctx, "01ARZ3NDEKTSV4RRFFQ69G5FAV", u.ID, "member", AuditEntry{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("demoting the last owner: %v", err)
	}
	if _, err := Open(ctx, "postgres://db/x"); err == nil {
		t.Fatalf("postgres should be refused until implemented")
	}
}

// BenchmarkStoreCreates measures durable record creates (synchronous=FULL,
// group commit) from 64 goroutines, without HTTP.
func BenchmarkStoreCreates(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "s.db"))
	defer s.Close()
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
