-- /metrics counts the unfinished workflow runs by status and their leases
-- by expiry at every scrape (store.Backlog). Finished runs are most of the
-- table and only grow; this partial index holds just the unfinished ones,
-- so the count reads a few entries, not the history. Its SQLite twin is
-- ../sqlite/0013_backlog_index.sql.
CREATE INDEX workflow_runs_unfinished ON workflow_runs(status, lease_expires_ms)
    WHERE status IN ('draft', 'queued', 'blocked', 'leased', 'running', 'waiting-approval');
