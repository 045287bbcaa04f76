// Package store persists the control plane: users, workspaces and members,
// tokens, installs, the generic record engine and the audit log. Handlers
// see only the Store interface; one implementation (DB) runs the same SQL
// on the embedded SQLite file or on PostgreSQL shared by several replicas.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors every implementation returns, so callers can map them to statuses.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
)

// User is a human principal.
type User struct {
	ID        int64
	Email     string
	CreatedAt time.Time
}

// Workspace is a tenant. Policy fields hold raw JSON (nil when unset).
type Workspace struct {
	ID                 string
	Name               string
	Description        *string
	Labels             json.RawMessage
	PolicyMode         string
	NotificationPolicy json.RawMessage
	BudgetPolicy       json.RawMessage
	AuditRetentionDays *int64
	CreatedAt          time.Time
	UpdatedAt          time.Time
}

// Membership is a workspace seen from one user.
type Membership struct {
	Workspace Workspace
	Role      string
}

// Member is one user of a workspace.
type Member struct {
	UserID int64
	Email  string
	Role   string
}

// Token kinds.
const (
	TokenSession  = "session"
	TokenPersonal = "personal"
)

// Token is a user bearer credential; Hash is the SHA-256 of the plaintext.
type Token struct {
	ID         string
	Kind       string
	UserID     int64
	Name       string
	Hash       string
	Prefix     string
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

// LoginLink is a one-time login code, stored hashed.
type LoginLink struct {
	Hash      string
	UserID    int64
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Install is a paired machine with its hashed issue token.
type Install struct {
	ID          string
	WorkspaceID string
	Name        string
	TokenHash   string
	CreatedBy   string
	CreatedAt   time.Time
	LastSeenAt  *time.Time
	RevokedAt   *time.Time
}

// Record is an item of the generic record engine.
type Record struct {
	Seq         int64
	ID          string
	WorkspaceID string
	Collection  string
	NaturalKey  string // empty: none
	Attributes  json.RawMessage
	CreatedBy   string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// AuditEntry is one line of a workspace's audit log.
type AuditEntry struct {
	Seq         int64
	ID          string
	WorkspaceID string
	Actor       string
	Action      string
	Target      string
	Detail      json.RawMessage
	CreatedAt   time.Time
	// Emit names the outbound webhook events the audited change causes;
	// they enter the outbox in the same transaction (integration.go).
	Emit []OutboundEvent
}

// ListOptions pages through a collection in sequence order.
type ListOptions struct {
	After int64 // only records with a greater sequence
	Limit int   // 0: the implementation's default
}

// RecordReader reads one workspace, and its records, inside a write
// transaction (see CreateRecordChecked): what it returns is current, not
// a replica's cached copy.
type RecordReader interface {
	Workspace() (Workspace, error)
	Records(collection string, opts ListOptions) ([]Record, error)
}

// Store is everything the API needs from persistence. Every mutation of a
// workspace's records appends its audit entry in the same transaction.
type Store interface {
	// Users and login.
	EnsureUser(ctx context.Context, email string) (User, bool, error)
	User(ctx context.Context, id int64) (User, error)
	UserByEmail(ctx context.Context, email string) (User, error)
	CountUsers(ctx context.Context) (int, error)
	CreateLoginLink(ctx context.Context, l LoginLink) error
	// ConsumeLoginLink marks a link used and returns its user; ErrNotFound
	// when unknown, used or expired.
	ConsumeLoginLink(ctx context.Context, hash string, now time.Time) (int64, error)

	// Workspaces and members.
	CreateWorkspace(ctx context.Context, ws Workspace, owner int64) error
	Workspace(ctx context.Context, id string) (Workspace, error)
	UpdateWorkspace(ctx context.Context, ws Workspace, audit AuditEntry) error
	DeleteWorkspace(ctx context.Context, id string, now time.Time) error
	Memberships(ctx context.Context, userID int64) ([]Membership, error)
	Role(ctx context.Context, workspaceID string, userID int64) (string, error)
	Members(ctx context.Context, workspaceID string) ([]Member, error)
	SetRole(ctx context.Context, workspaceID string, userID int64, role string, audit AuditEntry) error
	RemoveMember(ctx context.Context, workspaceID string, userID int64, audit AuditEntry) error
	AddMember(ctx context.Context, workspaceID string, userID int64, role string, now time.Time) error

	// User tokens.
	CreateToken(ctx context.Context, t Token) error
	TokenByHash(ctx context.Context, hash string) (Token, error)
	Tokens(ctx context.Context, userID int64, kind string) ([]Token, error)
	RevokeToken(ctx context.Context, userID int64, id string, now time.Time) error
	TouchToken(ctx context.Context, id string, now time.Time) error

	// Installs.
	CreateInstall(ctx context.Context, in Install, audit AuditEntry) error
	InstallByTokenHash(ctx context.Context, hash string) (Install, error)
	Install(ctx context.Context, workspaceID, id string) (Install, error)
	Installs(ctx context.Context, workspaceID string) ([]Install, error)
	RevokeInstall(ctx context.Context, workspaceID, id string, now time.Time, audit AuditEntry) error
	TouchInstall(ctx context.Context, id string, now time.Time) error
	// SetInstallToken replaces an install's issue-token hash (rotation).
	SetInstallToken(ctx context.Context, workspaceID, id, hash string) error

	// Record engine. CreateRecord returns ErrConflict when the natural key
	// is taken.
	CreateRecord(ctx context.Context, r *Record, audit AuditEntry) error
	// CreateRecordChecked creates r only if check, run in the same write
	// transaction with a view of the workspace's records, returns nil (its
	// error is returned as is). Admission against a ledger (a cap over the
	// sum of records) is decided there: concurrent creators, on any replica,
	// are serialized, so check sees every record committed before its own.
	CreateRecordChecked(ctx context.Context, r *Record, check func(RecordReader) error, audit AuditEntry) error
	Record(ctx context.Context, workspaceID, collection, id string) (Record, error)
	RecordByKey(ctx context.Context, workspaceID, collection, key string) (Record, error)
	// RecordIDsByKey maps each of keys that names a record of the
	// collection to that record's id, in one indexed read (a page of
	// results linking to records by key); keys naming none are absent.
	RecordIDsByKey(ctx context.Context, workspaceID, collection string, keys []string) (map[string]string, error)
	Records(ctx context.Context, workspaceID, collection string, opts ListOptions) ([]Record, error)
	UpdateRecord(ctx context.Context, r *Record, audit AuditEntry) error
	DeleteRecord(ctx context.Context, workspaceID, collection, id string, audit AuditEntry) error
	// UpdateRecordIf applies fn to the current record inside one write
	// transaction, so check-then-set transitions (decided once) are atomic.
	UpdateRecordIf(ctx context.Context, workspaceID, collection, id string, fn func(*Record) error, audit AuditEntry) (Record, error)

	// IndexAccess registers the access function of a collection (access.go):
	// its records' principals are indexed as they are written, and
	// RecordsFor lists what given principals may see without a scan.
	IndexAccess(ctx context.Context, collection, version string, fn AccessFunc) error
	RecordsFor(ctx context.Context, workspaceID, collection string, principals []string, opts ListOptions) ([]Record, error)
	// KeyedCollections lists the collections under prefix holding a record
	// with natural key key.
	KeyedCollections(ctx context.Context, workspaceID, prefix, key string) ([]string, error)
	// InTx runs fn in one write transaction (unit.go).
	InTx(ctx context.Context, fn func(RecordTx) error) error

	// TakeBucket and PruneBuckets run token buckets shared by every
	// replica (throttle.go).
	TakeBucket(ctx context.Context, name, key string, rate, burst, cost float64, now time.Time) (float64, error)
	PruneBuckets(ctx context.Context, before time.Time) (int64, error)

	// Audit log.
	AppendAudit(ctx context.Context, e AuditEntry) error
	Audit(ctx context.Context, workspaceID string, opts ListOptions) ([]AuditEntry, error)
	// PruneAudit deletes, in every workspace with audit_retention_days
	// set, the entries older than that many days before now (to the
	// second; an entry in the cutoff's second is kept). It returns how
	// many it deleted.
	PruneAudit(ctx context.Context, now time.Time) (int64, error)

	// Secret returns the named secret, creating it with gen on first use.
	// Values are opaque: server/secrets seals them before they get here.
	Secret(ctx context.Context, name string, gen func() ([]byte, error)) ([]byte, error)
	// ReplaceSecret swaps a secret's value from old to new (false when it
	// is no longer old); SecretNames lists them. Both serve re-wrapping.
	ReplaceSecret(ctx context.Context, name string, old, new []byte) (bool, error)
	SecretNames(ctx context.Context) ([]string, error)

	// Money and keys (ledger.go, money_keys.go, money_billing.go).
	RecordUsage(ctx context.Context, e *LedgerEntry, audit AuditEntry) (replayed bool, err error)
	LedgerEntries(ctx context.Context, workspaceID, period string, opts ListOptions) ([]LedgerEntry, error)
	LedgerPeriods(ctx context.Context, workspaceID string) ([]LedgerPeriod, error)
	LedgerPeriod(ctx context.Context, workspaceID, period string) (LedgerPeriod, error)
	AdmitBudget(ctx context.Context, workspaceID string, estimate USD, now time.Time) (BudgetAdmission, error)
	CreateProviderKey(ctx context.Context, k *ProviderKey, audit AuditEntry) error
	ProviderKey(ctx context.Context, workspaceID, id string) (ProviderKey, error)
	ProviderKeys(ctx context.Context, workspaceID string) ([]ProviderKey, error)
	UpdateProviderKey(ctx context.Context, workspaceID, id string, fn func(*ProviderKey) error, audit AuditEntry) (ProviderKey, error)
	DeleteProviderKey(ctx context.Context, workspaceID, id string, audit AuditEntry) error
	RewrapSecrets(ctx context.Context, fn func(name string, rec []byte) ([]byte, error)) (int, error)
	BillingAccount(ctx context.Context, workspaceID string) (BillingAccount, error)
	BillingAccountByCustomer(ctx context.Context, provider, customerRef string) (BillingAccount, error)
	UpdateBillingAccount(ctx context.Context, workspaceID string, fn func(*BillingAccount) error, audit AuditEntry) (BillingAccount, error)
	UpsertInvoice(ctx context.Context, in *Invoice) error
	Invoices(ctx context.Context, workspaceID string, limit int) ([]Invoice, error)
	Invoice(ctx context.Context, workspaceID, id string) (Invoice, error)
	RecordPaymentEvent(ctx context.Context, ev PaymentEvent, apply func(*Tx) error) (bool, error)
	PaymentEventStats(ctx context.Context, provider string) (PaymentEventStats, error)

	Close() error
}

// Open opens the store named by url, applying migrations: "postgres://…"
// or "postgresql://…" for PostgreSQL; "sqlite:PATH", "sqlite://PATH",
// "file:PATH" or a bare path for SQLite.
func Open(ctx context.Context, url string) (*DB, error) {
	switch {
	case IsPostgresURL(url):
		return OpenPostgres(ctx, url, PostgresOptions{})
	case strings.HasPrefix(url, "sqlite://"):
		return OpenSQLite(ctx, strings.TrimPrefix(url, "sqlite://"))
	case strings.HasPrefix(url, "sqlite:"):
		return OpenSQLite(ctx, strings.TrimPrefix(url, "sqlite:"))
	case strings.HasPrefix(url, "file:"):
		return OpenSQLite(ctx, strings.TrimPrefix(url, "file:"))
	case strings.Contains(url, "://"):
		return nil, fmt.Errorf("open store: unsupported database url scheme in %q", url)
	default:
		return OpenSQLite(ctx, url)
	}
}

// IsPostgresURL reports whether url names a PostgreSQL database.
func IsPostgresURL(url string) bool {
	return strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://")
}
