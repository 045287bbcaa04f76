-- The append-only event log. Clustering on (session_id, seq) keeps a session's
-- events contiguous, so a replay from a seq is one range scan of one b-tree.
-- data is the event's JSON, stored as bytes exactly as appended.
CREATE TABLE events (
    session_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    ts         INTEGER NOT NULL, -- unix nanoseconds, UTC
    kind       TEXT    NOT NULL,
    data       BLOB    NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
