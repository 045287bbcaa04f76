package store

import (
	"context"
	"path/filepath"
	"testing"

	"reeve.dev/reeve/server/store/storetest"
)

// engine is one database engine under the conformance suite: every store
// test runs through eachEngine, on SQLite and on PostgreSQL.
type engine struct {
	name string
	url  string // a database of the test's own
}

// open opens (migrating) the engine's database for t, closed when t ends.
func (e engine) open(t testing.TB) *DB {
	t.Helper()
	s, err := Open(context.Background(), e.url)
	if err != nil {
		t.Fatalf("open %s: %v", e.name, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func sqliteEngine(t testing.TB) engine {
	return engine{name: EngineSQLite, url: "sqlite:" + filepath.Join(t.TempDir(), "s.db")}
}

func postgresEngine(t testing.TB) engine {
	return engine{name: EnginePostgres, url: storetest.PostgresURL(t)}
}

// eachEngine runs fn on SQLite and on PostgreSQL (skipped with a message
// when no PostgreSQL is reachable, failed when REEVE_REQUIRE_POSTGRES=1).
func eachEngine(t *testing.T, fn func(t *testing.T, e engine)) {
	t.Run(EngineSQLite, func(t *testing.T) { fn(t, sqliteEngine(t)) })
	t.Run(EnginePostgres, func(t *testing.T) { fn(t, postgresEngine(t)) })
}
