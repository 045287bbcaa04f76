package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// Every migration version exists for both engines, so no table is missing
// on one of them.
func TestMigrationsHaveTwins(t *testing.T) {
	lite, err := migrationsFor(EngineSQLite)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := migrationsFor(EnginePostgres)
	if err != nil {
		t.Fatal(err)
	}
	names := func(ms []migration) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	if strings.Join(names(lite), ",") != strings.Join(names(pg), ",") {
		t.Fatalf("migrations differ between engines:\n sqlite:   %v\n postgres: %v\nadd the missing twin (docs/server.md, \"Adding a migration\")", names(lite), names(pg))
	}
	if len(lite) == 0 || LatestSchemaVersion() != lite[len(lite)-1].Version {
		t.Fatalf("latest version %d", LatestSchemaVersion())
	}
}

func TestRebind(t *testing.T) {
	for in, want := range map[string]string{
		`SELECT 1`:                                  `SELECT 1`,
		`a = ? AND b = ?`:                           `a = $1 AND b = $2`,
		`x = '?' AND y = ? AND "q?" = ?`:            `x = '?' AND y = $1 AND "q?" = $2`,
		`VALUES (?,?,?) ON CONFLICT (a) DO NOTHING`: `VALUES ($1,$2,$3) ON CONFLICT (a) DO NOTHING`,
	} {
		if got := rebind(in); got != want {
			t.Errorf("rebind(%q) = %q, want %q", in, got, want)
		}
	}
}

// A database migrated by a newer reeve is refused with a message, and
// nothing is applied to it.
func TestNewerSchemaIsRefused(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s := e.open(t)
		if s.SchemaVersion() != LatestSchemaVersion() {
			t.Fatalf("version %d after open, want %d", s.SchemaVersion(), LatestSchemaVersion())
		}
		future := `INSERT INTO schema_migrations (name, applied_at) VALUES ('9999_from_the_future.sql', 'x')`
		if _, err := s.write.Exec(future); err != nil {
			t.Fatal(err)
		}
		s.Close()
		_, err := Open(context.Background(), e.url)
		if !errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), "9999_from_the_future.sql") {
			t.Fatalf("open of a newer schema: %v", err)
		}
	})
}

// SQLite databases made before migrations had an engine directory recorded
// "migrations/NNNN_name.sql": they open without re-running anything.
func TestOldMigrationNamesAreRecognised(t *testing.T) {
	e := sqliteEngine(t)
	s := e.open(t)
	if _, err := s.write.Exec(`UPDATE schema_migrations SET name = 'migrations/' || name`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2 := e.open(t)
	if s2.SchemaVersion() != LatestSchemaVersion() {
		t.Fatalf("version %d", s2.SchemaVersion())
	}
	var n int
	if err := s2.read.QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != migrationCount(t) {
		t.Fatalf("schema_migrations rows %d, %v", n, err)
	}
}

// Replicas starting together on an empty database: the advisory lock lets
// one migrate and the others find the schema current.
func TestConcurrentStartsMigrateOnce(t *testing.T) {
	url := postgresEngine(t).url
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	applied := make(chan int, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(context.Background(), url)
			if err == nil {
				applied <- len(s.Migration().Applied)
				s.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	close(applied)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent open: %v", err)
		}
	}
	migrators := 0
	for n := range applied {
		if n > 0 {
			migrators++
			if n != migrationCount(t) {
				t.Fatalf("one opener applied %d of %d migrations", n, migrationCount(t))
			}
		}
	}
	if migrators != 1 {
		t.Fatalf("%d openers applied migrations, want exactly 1", migrators)
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != migrationCount(t) {
		t.Fatalf("schema_migrations rows %d, %v", n, err)
	}
}

// An unreachable PostgreSQL is a clear error, quickly, marked unavailable.
func TestUnreachablePostgres(t *testing.T) {
	_, err := Open(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=5")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach the database at 127.0.0.1:1/none") {
		t.Fatalf("open: %v", err)
	}
}

// Emails match without regard to case on both engines.
func TestEmailsIgnoreCase(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s := e.open(t)
		ctx := context.Background()
		u, created, err := s.EnsureUser(ctx, "Ada@Example.com")
		if err != nil || !created {
			t.Fatalf("ensure: %v %v", created, err)
		}
		again, created, err := s.EnsureUser(ctx, "ada@example.COM")
		if err != nil || created || again.ID != u.ID {
			t.Fatalf("ensure again: %+v %v %v", again, created, err)
		}
		if got, err := s.UserByEmail(ctx, "ADA@EXAMPLE.COM"); err != nil || got.ID != u.ID || got.Email != "Ada@Example.com" {
			t.Fatalf("by email: %+v %v", got, err)
		}
		if n, err := s.CountUsers(ctx); err != nil || n != 1 {
			t.Fatalf("users %d %v", n, err)
		}
	})
}

// migrationCount is how many migrations there are: versions are assigned
// ahead of landing, so the numbers may have gaps.
func migrationCount(t testing.TB) int {
	ms, err := migrationsFor(EngineSQLite)
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}
