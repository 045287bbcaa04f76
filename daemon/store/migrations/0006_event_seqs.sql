-- The index of a session's events by seq is kept in bulk, not by every
-- commit. A commit writes each index leaf it changed to the WAL whole
-- (32 KiB), and a busy session's newest entries sit on a leaf of their own:
-- with 50 busy PTY sessions the (session_id, seq) index made 84% of what
-- every commit wrote, about 33 KB for a 450-byte event. event_seqs holds
-- the same entries, added by the appender for many commits at once
-- (seal.go); the events after event_seqs_upto.upto, a bounded tail, are
-- found by scanning it.
CREATE TABLE event_seqs (
    session_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    event_id   INTEGER NOT NULL, -- events.id
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
INSERT INTO event_seqs (session_id, seq, event_id)
    SELECT session_id, seq, id FROM events ORDER BY session_id, seq;
CREATE TABLE event_seqs_upto (
    one  INTEGER PRIMARY KEY CHECK (one = 1),
    upto INTEGER NOT NULL -- every event with id <= upto is in event_seqs
);
INSERT INTO event_seqs_upto (one, upto) SELECT 1, IFNULL(MAX(id), 0) FROM events;
DROP INDEX events_session_seq;
