-- Reads of one kind of a session's events (the manifest's decisions among
-- a long session's output chunks) seek this index instead of scanning the
-- session's whole log. Building it is one pass over the log, done once.
CREATE INDEX IF NOT EXISTS events_session_kind ON events (session_id, kind, seq);
