-- The event log becomes a rowid table. As a WITHOUT ROWID table it was an
-- index b-tree, whose rows may use at most about a quarter of a page before
-- spilling to overflow pages, and whose leaves split in half when sessions
-- interleave: a 4 KB terminal chunk took 18.7 KB of a 16 KiB-page file. Rows
-- of a rowid table are appended at the end of the b-tree (pages fill up
-- completely), and a small index keeps replay from a seq one range scan.
-- The rows are copied in (session_id, seq) order, so each session's history
-- stays contiguous. The store rewrites the file with its page size after
-- this migration (VACUUM), which also returns the old table's pages.
CREATE TABLE events_v3 (
    id         INTEGER PRIMARY KEY, -- rowid: the order of appends
    session_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    ts         INTEGER NOT NULL, -- unix nanoseconds, UTC
    kind       TEXT    NOT NULL,
    data       BLOB    NOT NULL
);
INSERT INTO events_v3 (session_id, seq, ts, kind, data)
    SELECT session_id, seq, ts, kind, data FROM events ORDER BY session_id, seq;
DROP TABLE events;
ALTER TABLE events_v3 RENAME TO events;
CREATE UNIQUE INDEX events_session_seq ON events (session_id, seq);
