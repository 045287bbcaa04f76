package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// On PostgreSQL several server replicas share one database. Every write
// transaction runs SERIALIZABLE, so the check-then-set logic written for
// SQLite's single writer (caps, single-use codes, last-owner checks) stays
// correct across replicas: PostgreSQL aborts one side of a conflicting pair
// and the store runs it again.

// PostgresOptions tune OpenPostgres.
type PostgresOptions struct {
	// MaxConns bounds the pool; default 32.
	MaxConns int
	// NoMigrate opens without applying migrations (the schema must be
	// current): `reeve server migrate` is then the explicit step.
	NoMigrate bool
}

// maxAttempts bounds how often a write transaction is run again after a
// serialization failure, a deadlock or a connection lost before commit.
const maxAttempts = 60

// OpenPostgres connects to the database at url (postgres://…), applies the
// embedded migrations under an advisory lock and returns the store. An
// unreachable database is an error wrapping ErrUnavailable.
func OpenPostgres(ctx context.Context, url string, o PostgresOptions) (*DB, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	db := stdlib.OpenDB(*cfg)
	n := o.MaxConns
	if n <= 0 {
		n = 32
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(5 * time.Minute)
	where := fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres: cannot reach the database at %s: %w", where, errors.Join(ErrUnavailable, err))
	}
	s := &DB{engine: EnginePostgres, read: db, write: db, pgcfg: cfg}
	if o.NoMigrate {
		v, err := s.checkSchema(ctx)
		if err != nil {
			db.Close()
			return nil, err
		}
		s.version = v
		s.migration = Migration{Engine: EnginePostgres, From: v, To: v, Applied: []string{}}
		return s, nil
	}
	mig, err := migratePostgres(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.version, s.migration = mig.To, mig
	return s, nil
}

// migratePostgres runs the migrations on one connection holding the
// advisory lock: a replica that waits finds them applied.
func migratePostgres(ctx context.Context, db *sql.DB) (Migration, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return Migration{}, fmt.Errorf("migrate: %w", unavailable(err))
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, int64(migrationLockKey)); err != nil {
		return Migration{}, fmt.Errorf("migrate: take the migration lock: %w", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrationLockKey))
	return migrate(ctx, conn, EnginePostgres)
}

// checkSchema returns the applied version, refusing a database that is
// behind or ahead of this build.
func (s *DB) checkSchema(ctx context.Context) (int, error) {
	applied, err := appliedVersions(ctx, s.read)
	if err != nil {
		return 0, err
	}
	latest := LatestSchemaVersion()
	v := 0
	for n, name := range applied {
		if n > latest {
			return 0, fmt.Errorf("%w: it has migration %s, this build knows versions up to %d; run a newer reeve against it", ErrSchemaTooNew, name, latest)
		}
		v = max(v, n)
	}
	if v < latest {
		return v, fmt.Errorf("database schema version %d is behind this build's %d: run `reeve server migrate`", v, latest)
	}
	return v, nil
}

// execPostgres runs fn in a serializable transaction, again while
// PostgreSQL reports a serialization failure or deadlock, or the
// connection is lost before the commit was sent. fn must not have effects
// outside the transaction other than assigning its results.
func (s *DB) execPostgres(ctx context.Context, fn func(*Tx) error) error {
	return s.execPostgresAt(ctx, sql.LevelSerializable, fn)
}

func (s *DB) execPostgresAt(ctx context.Context, iso sql.IsolationLevel, fn func(*Tx) error) error {
	var err error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if attempt > 0 {
			// Jittered backoff so the two sides of a conflict do not meet again.
			d := time.Duration(rand.Int64N(int64(time.Millisecond)<<min(attempt, 7))) + time.Millisecond
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var committing bool
		committing, err = s.tryPostgres(ctx, iso, fn)
		if err == nil {
			return nil
		}
		switch {
		case isSerialization(err):
			continue
		case isConnErr(err) && !committing:
			continue
		case isConnErr(err):
			// The commit may or may not have happened: not safe to retry.
			return unavailable(err)
		default:
			return err
		}
	}
	if isConnErr(err) {
		return unavailable(err)
	}
	return fmt.Errorf("gave up after %d attempts: %w", maxAttempts, err)
}

func (s *DB) tryPostgres(ctx context.Context, iso sql.IsolationLevel, fn func(*Tx) error) (committing bool, err error) {
	stx, err := s.write.BeginTx(ctx, &sql.TxOptions{Isolation: iso})
	if err != nil {
		return false, err
	}
	if err := fn(&Tx{ctx: ctx, tx: stx, db: s}); err != nil {
		stx.Rollback()
		return false, err
	}
	return true, stx.Commit()
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// isSerialization: serialization_failure or deadlock_detected.
func isSerialization(err error) bool {
	c := pgCode(err)
	return c == "40001" || c == "40P01"
}

// isConnErr reports a failure to reach the database, as opposed to an
// error the database returned about the statement.
func isConnErr(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	c := pgCode(err)
	if strings.HasPrefix(c, "08") || c == "57P01" || c == "57P02" || c == "57P03" {
		return true
	}
	return pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}

// unavailable marks a connection failure with ErrUnavailable, so the API
// answers 503; other errors pass unchanged.
func unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !isConnErr(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// isUniqueViolation recognises a unique constraint failure on either engine.
func isUniqueViolation(err error) bool {
	if err == nil {
		return false
	}
	return pgCode(err) == "23505" || strings.Contains(err.Error(), "UNIQUE constraint failed")
}
