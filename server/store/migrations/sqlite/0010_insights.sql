-- Insights and review packets (docs/insights.md). PostgreSQL twin:
-- ../postgres/0010_insights.sql.
--
-- An insight is what a detection rule found in a workspace's records:
-- rule and subject name it (repeated_denials + the tool, budget_near_cap
-- + the period, install_stale + the install, ...). At most one insight per
-- (workspace, rule, subject) is active (open or accepted), so detection
-- run twice, or twenty times at once, updates it instead of adding one.
-- evidence is a JSON array of links {kind, id, ...} to the records behind
-- it (sessions, runs, ledger periods, installs, audit entries).
CREATE TABLE insights (
    seq               INTEGER PRIMARY KEY AUTOINCREMENT,
    id                TEXT NOT NULL UNIQUE,
    workspace_id      TEXT NOT NULL,
    rule              TEXT NOT NULL,
    subject           TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('open', 'accepted', 'dismissed', 'converted')),
    title             TEXT NOT NULL,
    severity          TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    detail            TEXT NOT NULL DEFAULT '{}',
    evidence          TEXT NOT NULL DEFAULT '[]',
    occurrences       INTEGER NOT NULL DEFAULT 0,
    first_seen_at     TEXT NOT NULL,
    last_seen_at      TEXT NOT NULL,
    status_changed_by TEXT,
    status_changed_at TEXT,
    status_reason     TEXT,
    review_packet_id  TEXT,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
);
CREATE UNIQUE INDEX insights_active ON insights(workspace_id, rule, subject) WHERE status IN ('open', 'accepted');
CREATE INDEX insights_by_subject ON insights(workspace_id, rule, subject, seq);
CREATE INDEX insights_by_workspace ON insights(workspace_id, seq);

-- A review packet gathers evidence links for a decision by a workspace
-- owner or admin: approved or rejected once. insight_id is the insight it
-- was converted from (NULL when created directly).
CREATE TABLE review_packets (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL UNIQUE,
    workspace_id    TEXT NOT NULL,
    title           TEXT NOT NULL,
    summary         TEXT NOT NULL DEFAULT '',
    status          TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected')),
    insight_id      TEXT,
    evidence        TEXT NOT NULL DEFAULT '[]',
    detail          TEXT NOT NULL DEFAULT '{}',
    created_by      TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    decided_by      TEXT,
    decided_at      TEXT,
    decision_reason TEXT,
    updated_at      TEXT NOT NULL
);
CREATE INDEX review_packets_by_workspace ON review_packets(workspace_id, seq);
CREATE UNIQUE INDEX review_packets_by_insight ON review_packets(insight_id) WHERE insight_id IS NOT NULL;
