-- Money and keys: the gateway usage ledger with its per-period totals,
-- provider keys sealed under the master key, and billing state kept from
-- the payments provider. Amounts are integers: ledger money in
-- nano-dollars (exact to 1e-9 USD), invoice amounts in the currency's
-- minor unit. PostgreSQL twin: ../postgres/0005_money.sql.

-- One finalized gateway usage record. body_hash is the SHA-256 of the
-- request's canonical JSON, so a replayed idempotency key is told apart
-- from a conflicting one.
CREATE TABLE ledger_entries (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    workspace_id    TEXT NOT NULL,
    period          TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    body_hash       TEXT NOT NULL,
    cost_nanos      INTEGER NOT NULL CHECK (cost_nanos >= 0),
    attributes      TEXT NOT NULL,
    created_by      TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    UNIQUE (workspace_id, idempotency_key)
);
CREATE INDEX ledger_entries_by_period ON ledger_entries(workspace_id, period, seq);

-- Running totals per workspace and period ("2026-11" a month, "2026-11-23"
-- a day). Admission is a conditional UPDATE of this row, so the cap check
-- and the increment are one statement under the row's lock.
CREATE TABLE ledger_periods (
    workspace_id TEXT NOT NULL,
    period       TEXT NOT NULL,
    total_nanos  INTEGER NOT NULL DEFAULT 0,
    entries      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (workspace_id, period)
);

-- Provider keys. sealed is the secret sealed by server/secrets under the
-- record name "provider-key/<id>"; fingerprint is a keyed MAC of it.
CREATE TABLE provider_keys (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    provider     TEXT NOT NULL,
    mode         TEXT NOT NULL,
    team_id      INTEGER,
    key_ref      TEXT,
    fingerprint  TEXT,
    version      INTEGER NOT NULL DEFAULT 1,
    sealed       BLOB,
    created_by   TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    rotated_at   TEXT
);
CREATE INDEX provider_keys_by_workspace ON provider_keys(workspace_id);

-- A workspace's billing account at the payments provider.
CREATE TABLE billing_accounts (
    workspace_id     TEXT PRIMARY KEY,
    provider         TEXT NOT NULL,
    customer_ref     TEXT NOT NULL DEFAULT '',
    subscription_ref TEXT NOT NULL DEFAULT '',
    status           TEXT NOT NULL DEFAULT 'none',
    card_brand       TEXT NOT NULL DEFAULT '',
    card_last4       TEXT NOT NULL DEFAULT '',
    reconciled_at    TEXT,
    updated_at       TEXT NOT NULL
);

-- Invoices as reported by the provider (webhooks, reconcile).
CREATE TABLE billing_invoices (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL,
    provider_ref  TEXT NOT NULL UNIQUE,
    number        TEXT NOT NULL DEFAULT '',
    status        TEXT NOT NULL,
    currency      TEXT NOT NULL DEFAULT '',
    amount_due    INTEGER NOT NULL DEFAULT 0,
    amount_paid   INTEGER NOT NULL DEFAULT 0,
    period_start  TEXT,
    period_end    TEXT,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
);
CREATE INDEX billing_invoices_by_workspace ON billing_invoices(workspace_id, created_at);

-- Payment webhook events seen, for dedupe; duplicates counts the
-- deliveries of an event id after the first.
CREATE TABLE payment_events (
    provider     TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    type         TEXT NOT NULL,
    workspace_id TEXT NOT NULL DEFAULT '',
    outcome      TEXT NOT NULL,
    duplicates   INTEGER NOT NULL DEFAULT 0,
    received_at  TEXT NOT NULL,
    PRIMARY KEY (provider, event_id)
);
