-- Initial schema of the control plane. Timestamps are RFC 3339 UTC text.
-- Its PostgreSQL twin is ../postgres/0001_init.sql.
CREATE TABLE users (
    id         INTEGER PRIMARY KEY,
    email      TEXT NOT NULL UNIQUE COLLATE NOCASE,
    created_at TEXT NOT NULL
);

CREATE TABLE workspaces (
    id                   TEXT PRIMARY KEY,
    name                 TEXT NOT NULL,
    description          TEXT,
    labels               TEXT,
    policy_mode          TEXT NOT NULL DEFAULT 'open_access',
    notification_policy  TEXT,
    budget_policy        TEXT,
    audit_retention_days INTEGER,
    created_at           TEXT NOT NULL,
    updated_at           TEXT NOT NULL,
    deleted_at           TEXT
);

CREATE TABLE members (
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    user_id      INTEGER NOT NULL REFERENCES users(id),
    role         TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    created_at   TEXT NOT NULL,
    PRIMARY KEY (workspace_id, user_id)
);
CREATE INDEX members_by_user ON members(user_id);

-- Bearer credentials of users: login sessions and personal API tokens.
-- Only a SHA-256 hash of the plaintext is kept.
CREATE TABLE tokens (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN ('session', 'personal')),
    user_id      INTEGER NOT NULL REFERENCES users(id),
    name         TEXT NOT NULL,
    hash         TEXT NOT NULL UNIQUE,
    prefix       TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    expires_at   TEXT,
    last_used_at TEXT,
    revoked_at   TEXT
);
CREATE INDEX tokens_by_user ON tokens(user_id, kind);

CREATE TABLE login_links (
    hash       TEXT PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users(id),
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    used_at    TEXT
);

-- Machines paired to a workspace, with their hashed issue token.
CREATE TABLE installs (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    name         TEXT NOT NULL,
    token_hash   TEXT NOT NULL UNIQUE,
    created_by   TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    last_seen_at TEXT,
    revoked_at   TEXT
);
CREATE INDEX installs_by_workspace ON installs(workspace_id);

-- The generic record engine. collection is a path below the workspace
-- (for example "workflow-runs" or "sessions/<id>/access"); natural_key makes
-- a record unique within its collection when the route needs that.
CREATE TABLE records (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    workspace_id TEXT NOT NULL,
    collection   TEXT NOT NULL,
    natural_key  TEXT,
    attributes   TEXT NOT NULL,
    created_by   TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE INDEX records_by_collection ON records(workspace_id, collection, seq);
CREATE UNIQUE INDEX records_by_key ON records(workspace_id, collection, natural_key) WHERE natural_key IS NOT NULL;

CREATE TABLE audit (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    workspace_id TEXT NOT NULL,
    actor        TEXT NOT NULL,
    action       TEXT NOT NULL,
    target       TEXT NOT NULL,
    detail       TEXT,
    created_at   TEXT NOT NULL
);
CREATE INDEX audit_by_workspace ON audit(workspace_id, seq);

-- Server-side secrets, e.g. the relay JWT signing key.
CREATE TABLE secrets (
    name       TEXT PRIMARY KEY,
    value      BLOB NOT NULL,
    created_at TEXT NOT NULL
);
