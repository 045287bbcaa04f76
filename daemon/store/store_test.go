package store

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func openTest(t testing.TB) *Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "reeve.db"))
}

func openAt(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestDirectoriesCRUD(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)

	if _, _, err := s.AddDirectory(ctx, "relative/dir"); !errors.Is(err, ErrRelativePath) {
		t.Fatalf("relative path: err = %v, want ErrRelativePath", err)
	}
	a, created, err := s.AddDirectory(ctx, "/tmp/x/../proj-a/")
	if err != nil || !created {
		t.Fatalf("add a: %v created=%v", err, created)
	}
	if a.Path != "/tmp/proj-a" || len(a.ID) != 26 || a.AddedAt.IsZero() {
		t.Fatalf("add a: got %+v", a)
	}
	again, created, err := s.AddDirectory(ctx, "/tmp/proj-a")
	if err != nil || created {
		t.Fatalf("re-add a: %v created=%v", err, created)
	}
	if again != a {
		t.Fatalf("re-add a returned %+v, want %+v", again, a)
	}
	time.Sleep(time.Millisecond) // distinct added_at, so the order is by time not by id alone
	b, _, err := s.AddDirectory(ctx, "/tmp/proj-b")
	if err != nil {
		t.Fatal(err)
	}

	list, err := s.ListDirectories(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0] != a || list[1] != b {
		t.Fatalf("list = %+v", list)
	}
	if got, err := s.Directory(ctx, b.ID); err != nil || got != b {
		t.Fatalf("by id: %+v %v", got, err)
	}
	if got, err := s.DirectoryByPath(ctx, "/tmp/proj-b/."); err != nil || got != b {
		t.Fatalf("by path: %+v %v", got, err)
	}
	if _, err := s.Directory(ctx, "01NOPE"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing id: %v", err)
	}
	if _, err := s.DirectoryByPath(ctx, "/nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing path: %v", err)
	}
	if err := s.RemoveDirectory(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveDirectory(ctx, a.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	if _, err := s.Directory(ctx, a.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removed still readable: %v", err)
	}
	list, _ = s.ListDirectories(ctx)
	if len(list) != 1 || list[0] != b {
		t.Fatalf("list after remove = %+v", list)
	}
	// After removal the path may be registered again, with a new identity.
	a2, created, err := s.AddDirectory(ctx, "/tmp/proj-a")
	if err != nil || !created || a2.ID == a.ID {
		t.Fatalf("re-add after remove: %+v created=%v err=%v", a2, created, err)
	}
}

func TestAddDirectoryConcurrentIsIdempotent(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	const n = 16
	ids := make([]string, n)
	createdCount := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, created, err := s.AddDirectory(ctx, "/srv/same")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[i] = d.ID
			if created {
				createdCount++
			}
		}()
	}
	wg.Wait()
	if createdCount != 1 {
		t.Fatalf("created %d times, want 1", createdCount)
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("ids differ: %v", ids)
		}
	}
}

func TestDirectoriesSurviveReopenAndMigrationsAreIdempotent(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "reeve.db")
	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := s.AddDirectory(ctx, "/work/a")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s, err = Open(ctx, Options{Path: path})
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		var versions, max int
		if err := s.reader.QueryRowContext(ctx, `SELECT COUNT(*), MAX(version) FROM schema_version`).Scan(&versions, &max); err != nil {
			t.Fatal(err)
		}
		migs, _ := loadMigrations()
		if versions != len(migs) || max != len(migs) {
			t.Fatalf("schema_version has %d rows, max %d; want %d", versions, max, len(migs))
		}
		var journal string
		var syncMode int
		if err := s.writer.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&journal); err != nil || journal != "wal" {
			t.Fatalf("journal mode %q (%v), want wal", journal, err)
		}
		// FULL (2) is what makes every acknowledged commit durable.
		if err := s.writer.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&syncMode); err != nil || syncMode != 2 {
			t.Fatalf("synchronous = %d (%v), want 2 (FULL)", syncMode, err)
		}
		var ps int
		if err := s.reader.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&ps); err != nil || ps != pageSize {
			t.Fatalf("page size %d (%v), want %d", ps, err, pageSize)
		}
		got, err := s.Directory(ctx, d.ID)
		if err != nil || got != d {
			t.Fatalf("after reopen: %+v %v", got, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "reeve.db")
	s := openAt(t, path)
	if _, err := s.writer.ExecContext(ctx, `INSERT INTO schema_version (version, name, applied_at) VALUES (999, 'future', 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s2, err := Open(ctx, Options{Path: path}); err == nil {
		s2.Close()
		t.Fatal("open succeeded on a schema from the future")
	}
}

func TestCountActiveSessions(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	n, err := s.CountActiveSessions(ctx)
	if err != nil || n != 0 {
		t.Fatalf("empty: %d %v", n, err)
	}
	for i, st := range append(append([]Status{}, ActiveStatuses...), TerminalStatuses...) {
		if _, err := s.writer.ExecContext(ctx, `INSERT INTO sessions (id, directory_id, agent, status, created_at, updated_at) VALUES (?, 'd', 'shell', ?, 0, 0)`,
			string(rune('a'+i)), string(st)); err != nil {
			t.Fatal(err)
		}
	}
	n, err = s.CountActiveSessions(ctx)
	if err != nil || n != len(ActiveStatuses) {
		t.Fatalf("count = %d %v, want %d", n, err, len(ActiveStatuses))
	}
}
