package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Migrations are embedded so the binary carries its own schema; a file's
// numeric prefix is its schema version and files are applied in order.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		prefix, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %q: name must be NNNN_description.sql", name)
		}
		v, err := strconv.Atoi(prefix)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %q: bad version prefix", name)
		}
		body, err := fs.ReadFile(migrationFS, "migrations/"+name)
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", name, err)
		}
		out = append(out, migration{version: v, name: name, sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i := range out {
		if out[i].version != i+1 {
			return nil, fmt.Errorf("migration %q: versions must be 1..n without gaps", out[i].name)
		}
	}
	return out, nil
}

// migrate brings the schema up to the newest embedded version. Each migration
// runs in its own transaction together with its schema_version row, so a crash
// mid-migration leaves the previous version intact and the next open retries.
func migrate(ctx context.Context, db *sql.DB) error {
	migs, err := loadMigrations()
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    INTEGER NOT NULL PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("create schema_version: %w", err)
	}
	var current int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if current > len(migs) {
		// A newer reeve wrote this file; running old code against it could
		// silently misread the data.
		return fmt.Errorf("schema version %d is newer than this build supports (%d)", current, len(migs))
	}
	pending := migs[current:]
	if current == 0 || len(pending) == 0 {
		// A new file: nothing to copy, nothing to say.
		for _, m := range pending {
			if err := applyMigration(ctx, db, m); err != nil {
				return err
			}
		}
		return nil
	}
	// Upgrading a file that holds a log: a migration may copy it (6 builds
	// event_seqs from every event, 2.8 s for 1M events) while `reeve
	// start` only says it waits, so the worker's log says what it does,
	// how much, and how long each step took, as repage does.
	var events int64
	if current >= 2 { // the events table exists from version 2
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM events`).Scan(&events); err != nil {
			return fmt.Errorf("count events before migrating: %w", err)
		}
	}
	slog.Info("store: upgrading the database, once", "from", current, "to", len(migs), "events", events)
	for _, m := range pending {
		start := time.Now()
		if err := applyNoting(ctx, db, m, events); err != nil {
			return err
		}
		slog.Info("store: migrated", "migration", m.name, "events", events, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// migrateNote is how often the log says that a migration still runs: a
// log ten times longer than the 1M events of BenchmarkOpenAddsKindIndex
// keeps the worker busy for half a minute.
var migrateNote = 5 * time.Second

// applyNoting applies m, saying every migrateNote that it still runs.
func applyNoting(ctx context.Context, db *sql.DB, m migration, events int64) error {
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() { // ends with the migration
		defer close(stopped)
		start := time.Now()
		tick := time.NewTicker(migrateNote)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				slog.Info("store: still migrating", "migration", m.name, "events", events, "for", time.Since(start).Round(time.Second))
			}
		}
	}()
	err := applyMigration(ctx, db, m)
	close(stop)
	<-stopped // no note after the migration's end
	return err
}

func applyMigration(ctx context.Context, db *sql.DB, m migration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %s: begin: %w", m.name, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return fmt.Errorf("migration %s: %w", m.name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)`,
		m.version, m.name, time.Now().UnixNano()); err != nil {
		return fmt.Errorf("migration %s: record version: %w", m.name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %s: commit: %w", m.name, err)
	}
	return nil
}
