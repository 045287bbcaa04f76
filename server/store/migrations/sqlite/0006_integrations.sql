-- Integrations (docs/integrations.md): the outbound webhook outbox, each
-- delivery attempt, and the inbound throttle's counters. Endpoints, inbound
-- source configurations and integration events are records of the record
-- engine. Times are Unix milliseconds, so due-time comparisons are numeric.
-- Its PostgreSQL twin is ../postgres/0006_integrations.sql.

-- One message to one endpoint. id is the webhook-id header, the same on
-- every attempt so receivers can deduplicate. A row is written in the
-- transaction of the change that caused it (store.AuditEntry.Emit).
CREATE TABLE webhook_outbox (
    id              TEXT PRIMARY KEY,
    workspace_id    TEXT NOT NULL,
    endpoint_id     TEXT NOT NULL,
    kind            TEXT NOT NULL,
    payload         TEXT NOT NULL,
    state           TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    lease_owner     TEXT NOT NULL DEFAULT '',
    lease_until     BIGINT NOT NULL DEFAULT 0,
    last_error      TEXT NOT NULL DEFAULT '',
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX webhook_outbox_due ON webhook_outbox(state, next_attempt_at);
CREATE INDEX webhook_outbox_by_endpoint ON webhook_outbox(workspace_id, endpoint_id, created_at);

-- Every attempt to deliver a message: the receiver's status (0 when none
-- came), the latency, and what the dispatcher decided after it.
CREATE TABLE webhook_attempts (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id   TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    endpoint_id  TEXT NOT NULL,
    kind         TEXT NOT NULL,
    attempt      INTEGER NOT NULL,
    status_code  INTEGER NOT NULL,
    latency_ms   BIGINT NOT NULL,
    outcome      TEXT NOT NULL CHECK (outcome IN ('delivered', 'retry', 'dead')),
    error        TEXT NOT NULL DEFAULT '',
    attempted_at BIGINT NOT NULL
);
CREATE INDEX webhook_attempts_by_endpoint ON webhook_attempts(workspace_id, endpoint_id, seq);

-- Inbound requests per workspace, source and fixed window, shared by every
-- replica.
CREATE TABLE webhook_throttle (
    workspace_id TEXT NOT NULL,
    source       TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    hits         BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, source, window_start)
);
