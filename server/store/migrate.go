package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Migrations live in migrations/<engine>/NNNN_name.sql, one file per
// version and engine: every version exists for both engines (a test checks
// it). Applied versions are recorded in schema_migrations by file name.
//
//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrationFS embed.FS

// migrationLockKey is the PostgreSQL advisory lock under which migrations
// run, so replicas starting together migrate once ("reeve" in ASCII).
const migrationLockKey = 0x7265657665

// ErrSchemaTooNew is returned when the database holds migrations this
// build does not know: a newer reeve migrated it.
var ErrSchemaTooNew = errors.New("database schema is newer than this reeve")

type migration struct {
	Version int
	Name    string // file name, e.g. 0001_init.sql
	Body    string
}

// migrationsFor returns the engine's migrations in version order.
func migrationsFor(engine string) ([]migration, error) {
	dir := "migrations/" + engine
	names, err := fs.Glob(migrationFS, dir+"/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	seen := map[int]string{}
	for _, name := range names {
		base := path.Base(name)
		v, err := migrationVersion(base)
		if err != nil {
			return nil, err
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d", prev, base, v)
		}
		seen[v] = base
		body, err := migrationFS.ReadFile(name)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{Version: v, Name: base, Body: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// migrationVersion is the number a migration's file name starts with.
// Older SQLite databases recorded names with a "migrations/" prefix.
func migrationVersion(name string) (int, error) {
	base := path.Base(name)
	digits, _, ok := strings.Cut(base, "_")
	v, err := strconv.Atoi(digits)
	if !ok || err != nil || v <= 0 {
		return 0, fmt.Errorf("migration %q: the name must start with a version number and an underscore", name)
	}
	return v, nil
}

// LatestSchemaVersion is the version this build migrates databases to.
func LatestSchemaVersion() int {
	ms, err := migrationsFor(EngineSQLite)
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// migrator is what migrate needs of a connection: *sql.DB or *sql.Conn.
type migrator interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Migration is what opening a store did to its schema.
type Migration struct {
	Engine  string   `json:"engine"`
	From    int      `json:"from"` // version before
	To      int      `json:"to"`   // version after
	Applied []string `json:"applied"`
}

// Migration reports the migrations applied when the store was opened.
func (s *DB) Migration() Migration { return s.migration }

// migrate applies every embedded migration of the engine not yet recorded,
// in version order, each in its own transaction, and returns the schema
// version. A database recording a version this build does not know is
// refused before anything is applied.
func migrate(ctx context.Context, db migrator, engine string) (Migration, error) {
	res := Migration{Engine: engine, Applied: []string{}}
	v, err := migrateInto(ctx, db, engine, &res)
	res.To = v
	return res, err
}

func migrateInto(ctx context.Context, db migrator, engine string, res *Migration) (int, error) {
	ms, err := migrationsFor(engine)
	if err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)`); err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	applied, err := appliedVersions(ctx, db)
	if err != nil {
		return 0, err
	}
	known := map[int]bool{}
	latest := 0
	for _, m := range ms {
		known[m.Version] = true
		latest = m.Version
	}
	current := 0
	for v := range applied {
		if !known[v] || v > latest {
			return 0, fmt.Errorf("%w: it has migration %s, this build knows versions up to %d; run a newer reeve against it", ErrSchemaTooNew, applied[v], latest)
		}
		current = max(current, v)
	}
	res.From = current
	insert := `INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)`
	if engine == EnginePostgres {
		insert = rebind(insert)
	}
	for _, m := range ms {
		if _, ok := applied[m.Version]; ok {
			continue
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return current, fmt.Errorf("migrate %s: %w", m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, m.Body); err != nil {
			tx.Rollback()
			return current, fmt.Errorf("migrate %s: %w", m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, insert, m.Name, ts(time.Now())); err != nil {
			tx.Rollback()
			return current, fmt.Errorf("migrate %s: %w", m.Name, err)
		}
		if err := tx.Commit(); err != nil {
			return current, fmt.Errorf("migrate %s: %w", m.Name, err)
		}
		current = m.Version
		res.Applied = append(res.Applied, m.Name)
	}
	return current, nil
}

// appliedVersions reads schema_migrations: version → recorded name.
func appliedVersions(ctx context.Context, db migrator) (map[int]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT name FROM schema_migrations`)
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied migrations: %w", err)
	}
	defer rows.Close()
	out := map[int]string{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		v, err := migrationVersion(name)
		if err != nil {
			return nil, fmt.Errorf("migrate: schema_migrations: %w", err)
		}
		out[v] = name
	}
	return out, rows.Err()
}
