-- The access index of records, PostgreSQL twin of
-- ../sqlite/0003_record_access.sql: one row per principal that may see a
-- record of a collection with an access function (store.IndexAccess).
CREATE TABLE record_access (
    workspace_id TEXT COLLATE "C" NOT NULL,
    collection   TEXT COLLATE "C" NOT NULL,
    principal    TEXT COLLATE "C" NOT NULL,
    record_seq   BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, collection, principal, record_seq)
);
CREATE INDEX record_access_by_record ON record_access(record_seq);
