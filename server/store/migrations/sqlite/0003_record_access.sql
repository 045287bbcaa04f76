-- The access index of records whose collection has an access function
-- (store.IndexAccess): one row per principal that may see the record, so
-- a caller's authorized list reads the records it may see instead of
-- scanning and decoding every record. Rows are derived from the record's
-- attributes in the transaction that writes it; a record written before
-- the index existed is indexed when the server starts.
-- Its PostgreSQL twin is ../postgres/0003_record_access.sql.
CREATE TABLE record_access (
    workspace_id TEXT NOT NULL,
    collection   TEXT NOT NULL,
    principal    TEXT NOT NULL,
    record_seq   INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, collection, principal, record_seq)
);
CREATE INDEX record_access_by_record ON record_access(record_seq);
