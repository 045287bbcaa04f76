-- Team workers (docs/workers.md): managed executors with their hashed
-- runner credentials, workflow runs with the lease of their live holder,
-- each run's history, and its approval nodes. Its PostgreSQL twin is
-- ../postgres/0004_workflows.sql.

-- A worker identity of a workspace. tags and agents are JSON arrays of
-- strings; token_hash is the SHA-256 of the runner credential. A deleted
-- executor keeps its row (runs name it) with deleted_at set and its token
-- hash cleared.
CREATE TABLE managed_executors (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    name         TEXT NOT NULL,
    tags         TEXT NOT NULL DEFAULT '[]',
    agents       TEXT NOT NULL DEFAULT '[]',
    token_hash   TEXT,
    token_prefix TEXT NOT NULL DEFAULT '',
    created_by   TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    rotated_at   TEXT,
    last_seen_at TEXT,
    deleted_at   TEXT
);
CREATE UNIQUE INDEX managed_executors_by_token ON managed_executors(token_hash) WHERE token_hash IS NOT NULL;
CREATE UNIQUE INDEX managed_executors_by_name ON managed_executors(workspace_id, name) WHERE deleted_at IS NULL;

-- A workflow run. seq is the queue order. The lease lives on the run, so
-- a run has at most one holder by construction: lease_id, lease_hash (the
-- SHA-256 of the lease token), executor_id and lease_expires_ms (unix
-- milliseconds: compared as numbers, not as text) are set while it is
-- leased, running or waiting for an approval. fence grows by one with
-- every grant. spec holds what to run (prompt, model, definition, repo);
-- outcome what the worker reported (both JSON objects).
CREATE TABLE workflow_runs (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT NOT NULL UNIQUE,
    workspace_id     TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('draft', 'queued', 'blocked', 'leased', 'running', 'waiting-approval', 'succeeded', 'failed', 'cancelled')),
    agent            TEXT NOT NULL DEFAULT '',
    tags             TEXT NOT NULL DEFAULT '[]',
    executor_pin     TEXT NOT NULL DEFAULT '',
    workdir          TEXT NOT NULL DEFAULT '',
    spec             TEXT NOT NULL DEFAULT '{}',
    attempt          BIGINT NOT NULL DEFAULT 0,
    max_attempts     BIGINT NOT NULL DEFAULT 3,
    fence            BIGINT NOT NULL DEFAULT 0,
    lease_id         TEXT,
    lease_hash       TEXT,
    executor_id      TEXT NOT NULL DEFAULT '',
    lease_expires_ms BIGINT,
    cancel_requested BIGINT NOT NULL DEFAULT 0,
    session_id       TEXT NOT NULL DEFAULT '',
    outcome          TEXT NOT NULL DEFAULT '{}',
    blocked_reason   TEXT NOT NULL DEFAULT '',
    rerun_of         TEXT NOT NULL DEFAULT '',
    created_by       TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    started_at       TEXT,
    finished_at      TEXT
);
CREATE INDEX workflow_runs_queue ON workflow_runs(workspace_id, status, seq);
CREATE INDEX workflow_runs_expiry ON workflow_runs(lease_expires_ms) WHERE lease_expires_ms IS NOT NULL;
CREATE UNIQUE INDEX workflow_runs_by_lease ON workflow_runs(lease_id) WHERE lease_id IS NOT NULL;
CREATE UNIQUE INDEX workflow_runs_by_lease_hash ON workflow_runs(lease_hash) WHERE lease_hash IS NOT NULL;

-- A run's history, in commit order per run.
CREATE TABLE workflow_run_events (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    kind         TEXT NOT NULL,
    actor        TEXT NOT NULL,
    data         TEXT,
    created_at   TEXT NOT NULL
);
CREATE INDEX workflow_run_events_by_run ON workflow_run_events(run_id, seq);

-- Approval nodes: a tool use the policy asked a human about. expires_ms
-- is when an undecided node counts as expired.
CREATE TABLE workflow_approvals (
    run_id       TEXT NOT NULL,
    node_key     TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'expired')),
    tool         TEXT NOT NULL DEFAULT '',
    summary      TEXT NOT NULL DEFAULT '',
    input        TEXT,
    fence        BIGINT NOT NULL,
    requested_at TEXT NOT NULL,
    expires_ms   BIGINT NOT NULL,
    decided_by   TEXT NOT NULL DEFAULT '',
    decided_at   TEXT,
    reason       TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, node_key)
);
