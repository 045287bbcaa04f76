-- The detection rules' reads (store.InsightSignals): each is a range of a
-- small partial index, not a scan of the workspace's whole history. The
-- queries repeat these predicates word for word, so both engines use them.
-- A migration of their own, not an edit of 0010: a database that applied
-- 0010 before these existed gets them too. IF NOT EXISTS because for a
-- while 0010 itself carried them. Its SQLite twin is
-- ../sqlite/0015_insight_signal_indexes.sql.
CREATE INDEX IF NOT EXISTS records_permission_decisions ON records(workspace_id, created_at) WHERE attributes LIKE '%"kind":"permission-decision"%';
CREATE INDEX IF NOT EXISTS records_sessions_by_update ON records(workspace_id, updated_at) WHERE collection = 'sessions';
CREATE INDEX IF NOT EXISTS audit_permission_decisions ON audit(workspace_id, created_at) WHERE action = 'session.permission-decision';
CREATE INDEX IF NOT EXISTS workflow_runs_failed ON workflow_runs(workspace_id, finished_at) WHERE status = 'failed';
