-- Stored workflow definitions (docs/workers.md): a named workflow of a
-- workspace and its numbered, immutable versions, each with its YAML and
-- the YAML's SHA-256 digest; and the runner pool a run may name. Its
-- SQLite twin is ../sqlite/0012_workflow_definitions.sql.

-- latest_version is the number of the newest version (versions are
-- numbered from 1 in the order they were added).
CREATE TABLE workflow_definitions (
    id             TEXT COLLATE "C" PRIMARY KEY,
    workspace_id   TEXT COLLATE "C" NOT NULL,
    name           TEXT NOT NULL,
    description    TEXT NOT NULL DEFAULT '',
    latest_version BIGINT NOT NULL DEFAULT 0,
    created_by     TEXT NOT NULL,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL
);
CREATE UNIQUE INDEX workflow_definitions_by_name ON workflow_definitions(workspace_id, name);

-- A version is never changed once written: a run that names it runs
-- exactly this YAML, and its digest says so.
CREATE TABLE workflow_definition_versions (
    id            TEXT COLLATE "C" PRIMARY KEY,
    definition_id TEXT COLLATE "C" NOT NULL,
    workspace_id  TEXT COLLATE "C" NOT NULL,
    version       BIGINT NOT NULL,
    yaml          TEXT NOT NULL,
    digest        TEXT NOT NULL,
    created_by    TEXT NOT NULL,
    created_at    TEXT NOT NULL
);
CREATE UNIQUE INDEX workflow_definition_versions_by_number ON workflow_definition_versions(definition_id, version);

-- A run naming a runner pool is claimed only by workers polling for that
-- pool, and a pooled worker claims only its pool's runs ('' is the
-- default pool).
ALTER TABLE workflow_runs ADD COLUMN runner_pool TEXT NOT NULL DEFAULT '';
