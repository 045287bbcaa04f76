-- The runner pools each managed executor's workers claim for, and when one
-- last did (docs/workers.md): preflight says when no worker that fits a
-- run has claimed for its pool lately. pool is '' for the default pool.
-- Written at most once a minute per executor and pool. Its SQLite twin is
-- ../sqlite/0014_executor_pools.sql.
CREATE TABLE executor_pools (
    executor_id  TEXT COLLATE "C" NOT NULL,
    workspace_id TEXT COLLATE "C" NOT NULL,
    pool         TEXT COLLATE "C" NOT NULL,
    last_seen_at TEXT NOT NULL,
    PRIMARY KEY (executor_id, pool)
);
CREATE INDEX executor_pools_by_pool ON executor_pools(workspace_id, pool);
