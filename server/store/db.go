package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"
)

// DB is the Store over database/sql, on one of two engines: the embedded
// SQLite file (one writer goroutine, group commit) or PostgreSQL (a pool,
// serializable transactions retried on conflict). The SQL is written once,
// with "?" placeholders, portable ON CONFLICT and RETURNING; the engine
// rewrites placeholders and decides how a write transaction runs, so every
// method behaves the same on both.
type DB struct {
	engine string // EngineSQLite or EnginePostgres
	read   *sql.DB
	write  *sql.DB  // SQLite: the single writer connection; PostgreSQL: read
	stmts  sync.Map // query text → *sql.Stmt on read (SQLite)
	wstmts sync.Map // query text → *sql.Stmt on write (SQLite)
	binds  sync.Map // query text → text with $n placeholders (PostgreSQL)
	access sync.Map // collection → accessIndex (access.go)

	// The SQLite writer.
	queue  chan *writeOp
	done   chan struct{}
	exited chan struct{} // closed when the writer has stopped
	closed sync.Once
	wg     sync.WaitGroup

	version   int // schema version after migration
	migration Migration

	// Notices (bus.go): PostgreSQL listens with a connection of its own
	// made from pgcfg; SQLite delivers them in process.
	pgcfg *pgx.ConnConfig
	local localNotices
}

// Engines.
const (
	EngineSQLite   = "sqlite"
	EnginePostgres = "postgres"
)

var _ Store = (*DB)(nil)

// Stats are the read pool's statistics (PostgreSQL: the one pool).
func (s *DB) Stats() sql.DBStats { return s.read.Stats() }

// WriteQueue is how many writes wait for SQLite's writer (0 on PostgreSQL).
func (s *DB) WriteQueue() int { return len(s.queue) }

// Engine names the database engine behind the store.
func (s *DB) Engine() string { return s.engine }

// SchemaVersion is the number of the last migration applied.
func (s *DB) SchemaVersion() int { return s.version }

// Ping checks that the database answers.
func (s *DB) Ping(ctx context.Context) error {
	if err := s.read.PingContext(ctx); err != nil {
		return unavailable(err)
	}
	return nil
}

// ErrUnavailable wraps failures to reach the database (connection refused
// or lost): the request may succeed later, so callers answer 503.
var ErrUnavailable = errors.New("database unavailable")

// bind rewrites q's placeholders for the engine.
func (s *DB) bind(q string) string {
	if s.engine != EnginePostgres {
		return q
	}
	if b, ok := s.binds.Load(q); ok {
		return b.(string)
	}
	b := rebind(q)
	s.binds.Store(q, b)
	return b
}

// rebind numbers "?" placeholders as $1, $2, … outside quoted text.
func rebind(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// queryRow runs a read. On SQLite each text is prepared once (parsing SQL
// costs more than executing these small queries); pgx caches prepared
// statements per connection by itself.
func (s *DB) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	if s.engine == EnginePostgres {
		return s.read.QueryRowContext(ctx, s.bind(q), args...)
	}
	st, err := s.prepared(ctx, q)
	if err != nil {
		return s.read.QueryRowContext(ctx, q, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

func (s *DB) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if s.engine == EnginePostgres {
		rows, err := s.read.QueryContext(ctx, s.bind(q), args...)
		return rows, unavailable(err)
	}
	st, err := s.prepared(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (s *DB) prepared(ctx context.Context, q string) (*sql.Stmt, error) {
	if st, ok := s.stmts.Load(q); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := s.read.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if prev, loaded := s.stmts.LoadOrStore(q, st); loaded {
		st.Close()
		return prev.(*sql.Stmt), nil
	}
	return st, nil
}

// Tx is a write transaction as the store's methods see it: the same calls
// as *sql.Tx, with the engine's placeholders and prepared hot statements.
type Tx struct {
	ctx context.Context
	tx  *sql.Tx
	db  *DB
}

// Exec runs a statement in the transaction.
func (t *Tx) Exec(q string, args ...any) (sql.Result, error) {
	if st := t.hot(q); st != nil {
		return st.ExecContext(t.ctx, args...)
	}
	return t.tx.ExecContext(t.ctx, t.db.bind(q), args...)
}

// QueryRow runs a query returning at most one row in the transaction.
func (t *Tx) QueryRow(q string, args ...any) *sql.Row {
	if st := t.hot(q); st != nil {
		return st.QueryRowContext(t.ctx, args...)
	}
	return t.tx.QueryRowContext(t.ctx, t.db.bind(q), args...)
}

// Query runs a query in the transaction.
func (t *Tx) Query(q string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(t.ctx, t.db.bind(q), args...)
}

// hot returns the statement q prepared on SQLite's writer, bound to the
// transaction, or nil.
func (t *Tx) hot(q string) *sql.Stmt {
	if st, ok := t.db.wstmts.Load(q); ok {
		return t.tx.StmtContext(t.ctx, st.(*sql.Stmt))
	}
	return nil
}

// exec runs fn in a write transaction: on SQLite one shared with other
// queued writes (group commit), on PostgreSQL its own serializable one.
func (s *DB) exec(ctx context.Context, fn func(*Tx) error) error {
	if s.engine == EnginePostgres {
		return s.execPostgres(ctx, fn)
	}
	return s.execSQLite(ctx, fn)
}

// execSimple runs a write that needs no serializable isolation: single
// statements (an insert guarded by a unique constraint, an UPDATE whose
// WHERE is the condition) and their audit entry. PostgreSQL re-checks such
// a statement's WHERE after waiting for a row lock, so it stays atomic at
// READ COMMITTED, and replicas updating one row (token last use) do not
// abort each other.
func (s *DB) execSimple(ctx context.Context, fn func(*Tx) error) error {
	if s.engine == EnginePostgres {
		return s.execPostgresAt(ctx, sql.LevelReadCommitted, fn)
	}
	return s.execSQLite(ctx, fn)
}

// Close stops the writer after it drains and closes the database.
func (s *DB) Close() error {
	if s.engine == EnginePostgres {
		return s.read.Close()
	}
	s.closed.Do(func() { close(s.done) })
	s.wg.Wait()
	s.stmts.Range(func(_, v any) bool { v.(*sql.Stmt).Close(); return true })
	s.wstmts.Range(func(_, v any) bool { v.(*sql.Stmt).Close(); return true })
	return errors.Join(s.read.Close(), s.write.Close())
}

var errClosed = errors.New("store closed")

const (
	sqlInsertRecord = `INSERT INTO records (id, workspace_id, collection, natural_key, attributes, created_by, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?) RETURNING seq`
	sqlInsertAudit  = `INSERT INTO audit (id, workspace_id, actor, action, target, detail, created_at) VALUES (?,?,?,?,?,?,?)`
)

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func parseTS(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func nullTS(s sql.NullString) *time.Time {
	if !s.Valid {
		return nil
	}
	t := parseTS(s.String)
	return &t
}

func tsOrNil(t *time.Time) any {
	if t == nil {
		return nil
	}
	return ts(*t)
}

func rawOrNil(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

func nullRaw(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

// notFound maps a missing row to ErrNotFound and a lost connection to
// ErrUnavailable.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return unavailable(err)
}

func newID() string { return ulid.Make().String() }

// insertAudit writes e inside tx, filling its id and time.
func insertAudit(tx *Tx, e AuditEntry) error {
	if e.WorkspaceID == "" && e.Action == "" {
		return nil // no audit requested
	}
	if e.ID == "" {
		e.ID = newID()
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = time.Now()
	}
	_, err := tx.Exec(sqlInsertAudit,
		e.ID, e.WorkspaceID, e.Actor, e.Action, e.Target, rawOrNil(e.Detail), ts(e.CreatedAt))
	if err != nil {
		return fmt.Errorf("append audit: %w", err)
	}
	return emitWebhooks(tx, e.WorkspaceID, e.Emit, e.CreatedAt)
}

// ---- users and login ----

func (s *DB) EnsureUser(ctx context.Context, email string) (User, bool, error) {
	email = strings.TrimSpace(email)
	if u, err := s.UserByEmail(ctx, email); err == nil {
		return u, false, nil
	} else if !errors.Is(err, ErrNotFound) {
		return User{}, false, err
	}
	now := time.Now().UTC()
	var u User
	created := false
	err := s.exec(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`INSERT INTO users (email, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING`, email, ts(now))
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		created = n == 1
		var c string
		if err := tx.QueryRow(`SELECT id, email, created_at FROM users WHERE lower(email) = lower(?)`, email).Scan(&u.ID, &u.Email, &c); err != nil {
			return err
		}
		u.CreatedAt = parseTS(c)
		return nil
	})
	if err != nil {
		return User{}, false, fmt.Errorf("ensure user: %w", err)
	}
	return u, created, nil
}

func (s *DB) scanUser(row *sql.Row) (User, error) {
	var u User
	var c string
	if err := row.Scan(&u.ID, &u.Email, &c); err != nil {
		return User{}, notFound(err)
	}
	u.CreatedAt = parseTS(c)
	return u, nil
}

func (s *DB) User(ctx context.Context, id int64) (User, error) {
	return s.scanUser(s.queryRow(ctx, `SELECT id, email, created_at FROM users WHERE id = ?`, id))
}

func (s *DB) UserByEmail(ctx context.Context, email string) (User, error) {
	return s.scanUser(s.queryRow(ctx, `SELECT id, email, created_at FROM users WHERE lower(email) = lower(?)`, strings.TrimSpace(email)))
}

func (s *DB) CountUsers(ctx context.Context) (int, error) {
	var n int
	err := s.queryRow(ctx, `SELECT count(*) FROM users`).Scan(&n)
	return n, err
}

func (s *DB) CreateLoginLink(ctx context.Context, l LoginLink) error {
	return s.execSimple(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO login_links (hash, user_id, created_at, expires_at) VALUES (?,?,?,?)`, l.Hash, l.UserID, ts(l.CreatedAt), ts(l.ExpiresAt))
		return err
	})
}

func (s *DB) ConsumeLoginLink(ctx context.Context, hash string, now time.Time) (int64, error) {
	var uid int64
	err := s.exec(ctx, func(tx *Tx) error {
		var exp string
		var used sql.NullString
		if err := tx.QueryRow(`SELECT user_id, expires_at, used_at FROM login_links WHERE hash = ?`, hash).Scan(&uid, &exp, &used); err != nil {
			return notFound(err)
		}
		if used.Valid || !now.Before(parseTS(exp)) {
			return ErrNotFound
		}
		_, err := tx.Exec(`UPDATE login_links SET used_at = ? WHERE hash = ?`, ts(now), hash)
		return err
	})
	return uid, err
}

// ---- workspaces and members ----

const wsCols = `id, name, description, labels, policy_mode, notification_policy, budget_policy, audit_retention_days, created_at, updated_at`

type scanner interface{ Scan(...any) error }

func scanWorkspace(sc scanner, extra ...any) (Workspace, error) {
	var w Workspace
	var desc, labels, notif, budget sql.NullString
	var days sql.NullInt64
	var c, u string
	dest := append([]any{&w.ID, &w.Name, &desc, &labels, &w.PolicyMode, &notif, &budget, &days, &c, &u}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return Workspace{}, err
	}
	if desc.Valid {
		w.Description = &desc.String
	}
	w.Labels, w.NotificationPolicy, w.BudgetPolicy = nullRaw(labels), nullRaw(notif), nullRaw(budget)
	if days.Valid {
		w.AuditRetentionDays = &days.Int64
	}
	w.CreatedAt, w.UpdatedAt = parseTS(c), parseTS(u)
	return w, nil
}

func (s *DB) CreateWorkspace(ctx context.Context, ws Workspace, owner int64) error {
	return s.exec(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO workspaces (`+wsCols+`) VALUES (?,?,?,?,?,?,?,?,?,?)`,
			ws.ID, ws.Name, ws.Description, rawOrNil(ws.Labels), ws.PolicyMode, rawOrNil(ws.NotificationPolicy), rawOrNil(ws.BudgetPolicy), ws.AuditRetentionDays, ts(ws.CreatedAt), ts(ws.UpdatedAt))
		if err != nil {
			return fmt.Errorf("create workspace: %w", err)
		}
		if _, err := tx.Exec(`INSERT INTO members (workspace_id, user_id, role, created_at) VALUES (?,?,?,?)`, ws.ID, owner, "owner", ts(ws.CreatedAt)); err != nil {
			return fmt.Errorf("create workspace owner: %w", err)
		}
		return insertAudit(tx, AuditEntry{WorkspaceID: ws.ID, Actor: "user:" + strconv.FormatInt(owner, 10), Action: "workspace.create", Target: "workspaces/" + ws.ID, CreatedAt: ws.CreatedAt})
	})
}

func (s *DB) Workspace(ctx context.Context, id string) (Workspace, error) {
	w, err := scanWorkspace(s.queryRow(ctx, `SELECT `+wsCols+` FROM workspaces WHERE id = ? AND deleted_at IS NULL`, id))
	return w, notFound(err)
}

func (s *DB) UpdateWorkspace(ctx context.Context, ws Workspace, audit AuditEntry) error {
	return s.exec(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`UPDATE workspaces SET name=?, description=?, labels=?, policy_mode=?, notification_policy=?, budget_policy=?, audit_retention_days=?, updated_at=? WHERE id=? AND deleted_at IS NULL`,
			ws.Name, ws.Description, rawOrNil(ws.Labels), ws.PolicyMode, rawOrNil(ws.NotificationPolicy), rawOrNil(ws.BudgetPolicy), ws.AuditRetentionDays, ts(ws.UpdatedAt), ws.ID)
		if err != nil {
			return fmt.Errorf("update workspace: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) DeleteWorkspace(ctx context.Context, id string, now time.Time) error {
	return s.exec(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`UPDATE workspaces SET deleted_at = ? WHERE id = ? AND deleted_at IS NULL`, ts(now), id)
		if err != nil {
			return fmt.Errorf("delete workspace: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		// Installs of a deleted workspace must not keep authenticating.
		_, err = tx.Exec(`UPDATE installs SET revoked_at = ? WHERE workspace_id = ? AND revoked_at IS NULL`, ts(now), id)
		return err
	})
}

func (s *DB) Memberships(ctx context.Context, userID int64) ([]Membership, error) {
	rows, err := s.query(ctx, `SELECT w.id, w.name, w.description, w.labels, w.policy_mode, w.notification_policy, w.budget_policy, w.audit_retention_days, w.created_at, w.updated_at, m.role
		FROM members m JOIN workspaces w ON w.id = m.workspace_id WHERE m.user_id = ? AND w.deleted_at IS NULL ORDER BY w.id`, userID)
	if err != nil {
		return nil, fmt.Errorf("list memberships: %w", err)
	}
	defer rows.Close()
	var out []Membership
	for rows.Next() {
		var m Membership
		w, err := scanWorkspace(rows, &m.Role)
		if err != nil {
			return nil, err
		}
		m.Workspace = w
		out = append(out, m)
	}
	return out, rows.Err()
}

func (s *DB) Role(ctx context.Context, workspaceID string, userID int64) (string, error) {
	var role string
	err := s.queryRow(ctx, `SELECT role FROM members WHERE workspace_id = ? AND user_id = ?`, workspaceID, userID).Scan(&role)
	return role, notFound(err)
}

func (s *DB) Members(ctx context.Context, workspaceID string) ([]Member, error) {
	rows, err := s.query(ctx, `SELECT u.id, u.email, m.role FROM members m JOIN users u ON u.id = m.user_id WHERE m.workspace_id = ? ORDER BY u.id`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	defer rows.Close()
	var out []Member
	for rows.Next() {
		var m Member
		if err := rows.Scan(&m.UserID, &m.Email, &m.Role); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// ownersLeft counts owners of a workspace other than userID.
func ownersLeft(tx *Tx, workspaceID string, userID int64) (int, error) {
	var n int
	err := tx.QueryRow(`SELECT count(*) FROM members WHERE workspace_id = ? AND role = 'owner' AND user_id != ?`, workspaceID, userID).Scan(&n)
	return n, err
}

func (s *DB) SetRole(ctx context.Context, workspaceID string, userID int64, role string, audit AuditEntry) error {
	return s.exec(ctx, func(tx *Tx) error {
		var cur string
		if err := tx.QueryRow(`SELECT role FROM members WHERE workspace_id = ? AND user_id = ?`, workspaceID, userID).Scan(&cur); err != nil {
			return notFound(err)
		}
		if cur == "owner" && role != "owner" {
			if n, err := ownersLeft(tx, workspaceID, userID); err != nil {
				return err
			} else if n == 0 {
				return fmt.Errorf("the last owner cannot be demoted: %w", ErrConflict)
			}
		}
		if _, err := tx.Exec(`UPDATE members SET role = ? WHERE workspace_id = ? AND user_id = ?`, role, workspaceID, userID); err != nil {
			return err
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) RemoveMember(ctx context.Context, workspaceID string, userID int64, audit AuditEntry) error {
	return s.exec(ctx, func(tx *Tx) error {
		var cur string
		if err := tx.QueryRow(`SELECT role FROM members WHERE workspace_id = ? AND user_id = ?`, workspaceID, userID).Scan(&cur); err != nil {
			return notFound(err)
		}
		if cur == "owner" {
			if n, err := ownersLeft(tx, workspaceID, userID); err != nil {
				return err
			} else if n == 0 {
				return fmt.Errorf("the last owner cannot be removed: %w", ErrConflict)
			}
		}
		if _, err := tx.Exec(`DELETE FROM members WHERE workspace_id = ? AND user_id = ?`, workspaceID, userID); err != nil {
			return err
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) AddMember(ctx context.Context, workspaceID string, userID int64, role string, now time.Time) error {
	return s.exec(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO members (workspace_id, user_id, role, created_at) VALUES (?,?,?,?) ON CONFLICT (workspace_id, user_id) DO UPDATE SET role = excluded.role`, workspaceID, userID, role, ts(now))
		return err
	})
}

// ---- tokens ----

const tokCols = `id, kind, user_id, name, hash, prefix, created_at, expires_at, last_used_at, revoked_at`

func scanToken(sc scanner) (Token, error) {
	var t Token
	var c string
	var exp, used, rev sql.NullString
	if err := sc.Scan(&t.ID, &t.Kind, &t.UserID, &t.Name, &t.Hash, &t.Prefix, &c, &exp, &used, &rev); err != nil {
		return Token{}, err
	}
	t.CreatedAt, t.ExpiresAt, t.LastUsedAt, t.RevokedAt = parseTS(c), nullTS(exp), nullTS(used), nullTS(rev)
	return t, nil
}

func (s *DB) CreateToken(ctx context.Context, t Token) error {
	return s.execSimple(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO tokens (`+tokCols+`) VALUES (?,?,?,?,?,?,?,?,?,?)`, t.ID, t.Kind, t.UserID, t.Name, t.Hash, t.Prefix, ts(t.CreatedAt), tsOrNil(t.ExpiresAt), nil, nil)
		return err
	})
}

func (s *DB) TokenByHash(ctx context.Context, hash string) (Token, error) {
	t, err := scanToken(s.queryRow(ctx, `SELECT `+tokCols+` FROM tokens WHERE hash = ?`, hash))
	return t, notFound(err)
}

func (s *DB) Tokens(ctx context.Context, userID int64, kind string) ([]Token, error) {
	rows, err := s.query(ctx, `SELECT `+tokCols+` FROM tokens WHERE user_id = ? AND kind = ? AND revoked_at IS NULL ORDER BY id`, userID, kind)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return collect(rows, scanToken)
}

func (s *DB) RevokeToken(ctx context.Context, userID int64, id string, now time.Time) error {
	return s.execSimple(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`UPDATE tokens SET revoked_at = ? WHERE id = ? AND user_id = ? AND revoked_at IS NULL`, ts(now), id, userID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return nil
	})
}

func (s *DB) TouchToken(ctx context.Context, id string, now time.Time) error {
	return s.execSimple(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`UPDATE tokens SET last_used_at = ? WHERE id = ?`, ts(now), id)
		return err
	})
}

// ---- installs ----

const instCols = `id, workspace_id, name, token_hash, created_by, created_at, last_seen_at, revoked_at`

func scanInstall(sc scanner) (Install, error) {
	var in Install
	var c string
	var seen, rev sql.NullString
	if err := sc.Scan(&in.ID, &in.WorkspaceID, &in.Name, &in.TokenHash, &in.CreatedBy, &c, &seen, &rev); err != nil {
		return Install{}, err
	}
	in.CreatedAt, in.LastSeenAt, in.RevokedAt = parseTS(c), nullTS(seen), nullTS(rev)
	return in, nil
}

func (s *DB) CreateInstall(ctx context.Context, in Install, audit AuditEntry) error {
	return s.execSimple(ctx, func(tx *Tx) error {
		if _, err := tx.Exec(`INSERT INTO installs (`+instCols+`) VALUES (?,?,?,?,?,?,?,?)`, in.ID, in.WorkspaceID, in.Name, in.TokenHash, in.CreatedBy, ts(in.CreatedAt), nil, nil); err != nil {
			return fmt.Errorf("create install: %w", err)
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) InstallByTokenHash(ctx context.Context, hash string) (Install, error) {
	in, err := scanInstall(s.queryRow(ctx, `SELECT `+instCols+` FROM installs WHERE token_hash = ? AND revoked_at IS NULL`, hash))
	return in, notFound(err)
}

func (s *DB) Install(ctx context.Context, workspaceID, id string) (Install, error) {
	in, err := scanInstall(s.queryRow(ctx, `SELECT `+instCols+` FROM installs WHERE workspace_id = ? AND id = ? AND revoked_at IS NULL`, workspaceID, id))
	return in, notFound(err)
}

func (s *DB) Installs(ctx context.Context, workspaceID string) ([]Install, error) {
	rows, err := s.query(ctx, `SELECT `+instCols+` FROM installs WHERE workspace_id = ? AND revoked_at IS NULL ORDER BY id`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("list installs: %w", err)
	}
	return collect(rows, scanInstall)
}

func (s *DB) RevokeInstall(ctx context.Context, workspaceID, id string, now time.Time, audit AuditEntry) error {
	return s.exec(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`UPDATE installs SET revoked_at = ? WHERE workspace_id = ? AND id = ? AND revoked_at IS NULL`, ts(now), workspaceID, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) TouchInstall(ctx context.Context, id string, now time.Time) error {
	return s.execSimple(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`UPDATE installs SET last_seen_at = ? WHERE id = ?`, ts(now), id)
		return err
	})
}

func (s *DB) SetInstallToken(ctx context.Context, workspaceID, id, hash string) error {
	return s.execSimple(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`UPDATE installs SET token_hash = ? WHERE workspace_id = ? AND id = ? AND revoked_at IS NULL`, hash, workspaceID, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return nil
	})
}

// ---- records ----

const recCols = `seq, id, workspace_id, collection, natural_key, attributes, created_by, created_at, updated_at`

func scanRecord(sc scanner) (Record, error) {
	var r Record
	var key sql.NullString
	var attrs, c, u string
	if err := sc.Scan(&r.Seq, &r.ID, &r.WorkspaceID, &r.Collection, &key, &attrs, &r.CreatedBy, &c, &u); err != nil {
		return Record{}, err
	}
	r.NaturalKey, r.Attributes, r.CreatedAt, r.UpdatedAt = key.String, json.RawMessage(attrs), parseTS(c), parseTS(u)
	return r, nil
}

func nullKey(k string) any {
	if k == "" {
		return nil
	}
	return k
}

func (s *DB) CreateRecord(ctx context.Context, r *Record, audit AuditEntry) error {
	return s.CreateRecordChecked(ctx, r, nil, audit)
}

// txRecords reads a workspace's records inside a write transaction.
type txRecords struct {
	tx *Tx
	ws string
}

func (v txRecords) Workspace() (Workspace, error) {
	w, err := scanWorkspace(v.tx.QueryRow(`SELECT `+wsCols+` FROM workspaces WHERE id = ? AND deleted_at IS NULL`, v.ws))
	return w, notFound(err)
}

func (v txRecords) Records(collection string, opts ListOptions) ([]Record, error) {
	limit := opts.Limit
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	rows, err := v.tx.Query(`SELECT `+recCols+` FROM records WHERE workspace_id = ? AND collection = ? AND seq > ? ORDER BY seq LIMIT ?`, v.ws, collection, opts.After, limit)
	if err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	defer rows.Close()
	out := []Record{}
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (s *DB) CreateRecordChecked(ctx context.Context, r *Record, check func(RecordReader) error, audit AuditEntry) error {
	if r.ID == "" {
		r.ID = newID()
	}
	run := s.exec
	if check == nil {
		run = s.execSimple
	}
	return run(ctx, func(tx *Tx) error {
		if check != nil {
			if err := check(txRecords{tx: tx, ws: r.WorkspaceID}); err != nil {
				return err
			}
		}
		err := tx.QueryRow(sqlInsertRecord,
			r.ID, r.WorkspaceID, r.Collection, nullKey(r.NaturalKey), string(r.Attributes), r.CreatedBy, ts(r.CreatedAt), ts(r.UpdatedAt)).Scan(&r.Seq)
		if isUniqueViolation(err) {
			return ErrConflict
		}
		if err != nil {
			return fmt.Errorf("create record: %w", err)
		}
		if err := s.reindex(tx, *r); err != nil {
			return err
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) Record(ctx context.Context, workspaceID, collection, id string) (Record, error) {
	r, err := scanRecord(s.queryRow(ctx, `SELECT `+recCols+` FROM records WHERE id = ? AND workspace_id = ? AND collection = ?`, id, workspaceID, collection))
	return r, notFound(err)
}

func (s *DB) RecordByKey(ctx context.Context, workspaceID, collection, key string) (Record, error) {
	r, err := scanRecord(s.queryRow(ctx, `SELECT `+recCols+` FROM records WHERE workspace_id = ? AND collection = ? AND natural_key = ?`, workspaceID, collection, key))
	return r, notFound(err)
}

// maxKeysPerRead bounds the IN list of one RecordIDsByKey query, well
// under either engine's limit on bound parameters.
const maxKeysPerRead = 500

func (s *DB) RecordIDsByKey(ctx context.Context, workspaceID, collection string, keys []string) (map[string]string, error) {
	out := make(map[string]string, len(keys))
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), maxKeysPerRead)]
		keys = keys[len(chunk):]
		args := make([]any, 0, len(chunk)+2)
		args = append(args, workspaceID, collection)
		for _, k := range chunk {
			args = append(args, k)
		}
		q := `SELECT natural_key, id FROM records WHERE workspace_id = ? AND collection = ? AND natural_key IN (?` + strings.Repeat(",?", len(chunk)-1) + `)`
		// The IN list varies in length: not worth a prepared statement each.
		rows, err := s.read.QueryContext(ctx, s.bind(q), args...)
		if err != nil {
			return nil, fmt.Errorf("records by key: %w", unavailable(err))
		}
		pairs, err := collect(rows, func(sc scanner) ([2]string, error) {
			var p [2]string
			err := sc.Scan(&p[0], &p[1])
			return p, err
		})
		if err != nil {
			return nil, fmt.Errorf("records by key: %w", err)
		}
		for _, p := range pairs {
			out[p[0]] = p[1]
		}
	}
	return out, nil
}

func (s *DB) Records(ctx context.Context, workspaceID, collection string, opts ListOptions) ([]Record, error) {
	limit := opts.Limit
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	rows, err := s.query(ctx, `SELECT `+recCols+` FROM records WHERE workspace_id = ? AND collection = ? AND seq > ? ORDER BY seq LIMIT ?`, workspaceID, collection, opts.After, limit)
	if err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	defer rows.Close()
	out := []Record{}
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (s *DB) UpdateRecord(ctx context.Context, r *Record, audit AuditEntry) error {
	if _, indexed := s.accessOf(r.Collection); indexed {
		return s.exec(ctx, func(tx *Tx) error {
			if err := (recordTx{tx: tx, db: s}).Update(r); err != nil {
				return err
			}
			return insertAudit(tx, audit)
		})
	}
	return s.execSimple(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`UPDATE records SET attributes = ?, updated_at = ? WHERE id = ? AND workspace_id = ? AND collection = ?`, string(r.Attributes), ts(r.UpdatedAt), r.ID, r.WorkspaceID, r.Collection)
		if err != nil {
			return fmt.Errorf("update record: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) UpdateRecordIf(ctx context.Context, workspaceID, collection, id string, fn func(*Record) error, audit AuditEntry) (Record, error) {
	var out Record
	err := s.exec(ctx, func(tx *Tx) error {
		r, err := scanRecord(tx.QueryRow(`SELECT `+recCols+` FROM records WHERE id = ? AND workspace_id = ? AND collection = ?`, id, workspaceID, collection))
		if err != nil {
			return notFound(err)
		}
		if err := fn(&r); err != nil {
			return err
		}
		if _, err := tx.Exec(`UPDATE records SET attributes = ?, updated_at = ? WHERE seq = ?`, string(r.Attributes), ts(r.UpdatedAt), r.Seq); err != nil {
			return fmt.Errorf("update record: %w", err)
		}
		if err := s.reindex(tx, r); err != nil {
			return err
		}
		out = r
		return insertAudit(tx, audit)
	})
	return out, err
}

func (s *DB) DeleteRecord(ctx context.Context, workspaceID, collection, id string, audit AuditEntry) error {
	return s.exec(ctx, func(tx *Tx) error {
		var seq int64
		err := tx.QueryRow(`DELETE FROM records WHERE id = ? AND workspace_id = ? AND collection = ? RETURNING seq`, id, workspaceID, collection).Scan(&seq)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("delete record: %w", err)
		}
		if err := s.unindex(tx, collection, seq); err != nil {
			return fmt.Errorf("delete record: %w", err)
		}
		// Sub-collections of the record go with it.
		if _, err := tx.Exec(`DELETE FROM records WHERE workspace_id = ? AND collection >= ? AND collection < ?`, workspaceID, collection+"/"+id+"/", collection+"/"+id+"0"); err != nil {
			return fmt.Errorf("delete sub-records: %w", err)
		}
		return insertAudit(tx, audit)
	})
}

// ---- audit ----

func (s *DB) AppendAudit(ctx context.Context, e AuditEntry) error {
	return s.execSimple(ctx, func(tx *Tx) error { return insertAudit(tx, e) })
}

func (s *DB) Audit(ctx context.Context, workspaceID string, opts ListOptions) ([]AuditEntry, error) {
	limit := opts.Limit
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	rows, err := s.query(ctx, `SELECT seq, id, workspace_id, actor, action, target, detail, created_at FROM audit WHERE workspace_id = ? AND seq > ? ORDER BY seq LIMIT ?`, workspaceID, opts.After, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	defer rows.Close()
	out := []AuditEntry{}
	for rows.Next() {
		var e AuditEntry
		var d sql.NullString
		var c string
		if err := rows.Scan(&e.Seq, &e.ID, &e.WorkspaceID, &e.Actor, &e.Action, &e.Target, &d, &c); err != nil {
			return nil, err
		}
		e.Detail, e.CreatedAt = nullRaw(d), parseTS(c)
		out = append(out, e)
	}
	return out, rows.Err()
}

// auditSecond is the fixed-width prefix of a stored timestamp: RFC 3339
// to the second, which sorts as text on both engines (the fraction that
// follows it has no fixed width).
const auditSecond = "2006-01-02T15:04:05"

func (s *DB) PruneAudit(ctx context.Context, now time.Time) (int64, error) {
	rows, err := s.query(ctx, `SELECT id, audit_retention_days FROM workspaces WHERE audit_retention_days IS NOT NULL AND audit_retention_days > 0 AND deleted_at IS NULL`)
	if err != nil {
		return 0, fmt.Errorf("workspaces with retention: %w", err)
	}
	type ret struct {
		id   string
		days int64
	}
	var ws []ret
	for rows.Next() {
		var r ret
		if err := rows.Scan(&r.id, &r.days); err != nil {
			rows.Close()
			return 0, err
		}
		ws = append(ws, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var total int64
	for _, w := range ws {
		cutoff := now.UTC().Add(-time.Duration(w.days) * 24 * time.Hour).Format(auditSecond)
		var n int64 // per attempt: a retried transaction counts once
		err := s.exec(ctx, func(tx *Tx) error {
			res, err := tx.Exec(`DELETE FROM audit WHERE workspace_id = ? AND substr(created_at, 1, 19) < ?`, w.id, cutoff)
			if err != nil {
				return err
			}
			n, _ = res.RowsAffected()
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("prune audit of %s: %w", w.id, err)
		}
		total += n
	}
	return total, nil
}

// ---- secrets ----

func (s *DB) Secret(ctx context.Context, name string, gen func() ([]byte, error)) ([]byte, error) {
	var v []byte
	err := s.queryRow(ctx, `SELECT value FROM secrets WHERE name = ?`, name).Scan(&v)
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("read secret: %w", err)
	}
	fresh, err := gen()
	if err != nil {
		return nil, fmt.Errorf("generate secret: %w", err)
	}
	err = s.exec(ctx, func(tx *Tx) error {
		if _, err := tx.Exec(`INSERT INTO secrets (name, value, created_at) VALUES (?,?,?) ON CONFLICT (name) DO NOTHING`, name, fresh, ts(time.Now())); err != nil {
			return err
		}
		// Another writer may have won the race; everyone uses the stored one.
		return tx.QueryRow(`SELECT value FROM secrets WHERE name = ?`, name).Scan(&v)
	})
	if err != nil {
		return nil, fmt.Errorf("store secret: %w", err)
	}
	return v, nil
}

func (s *DB) ReplaceSecret(ctx context.Context, name string, old, new []byte) (bool, error) {
	var n int64
	err := s.exec(ctx, func(tx *Tx) error {
		r, err := tx.Exec(`UPDATE secrets SET value = ? WHERE name = ? AND value = ?`, new, name, old)
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("replace secret: %w", err)
	}
	return n == 1, nil
}

func (s *DB) SecretNames(ctx context.Context) ([]string, error) {
	rows, err := s.query(ctx, `SELECT name FROM secrets ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}
