-- executor_pools rows outlived their executors: deleting a managed
-- executor (a soft delete, deleted_at set) left its pools behind for good.
-- Deleting an executor now deletes its pools in the same transaction
-- (store.UpdateExecutor); this clears what earlier deletes left. Its
-- SQLite twin is ../sqlite/0016_executor_pools_prune.sql.
DELETE FROM executor_pools WHERE executor_id NOT IN (SELECT id FROM managed_executors WHERE deleted_at IS NULL);
