-- The kind index leaves terminal output out. Every commit writes to the WAL
-- each index leaf it changed, whole (32 KiB), and a busy PTY session's
-- latest entries sit on a leaf of their own in each index: with 50 such
-- sessions in a batch the kind index alone added 50 pages, 1.6 MB, to every
-- commit, so that it could list events of a kind nobody looks up by kind.
-- Reads of terminal output by kind scan the session's log instead, whose
-- events are mostly terminal output anyway (kinds.go).
DROP INDEX IF EXISTS events_session_kind;
CREATE INDEX events_session_kind ON events (session_id, kind, seq) WHERE kind <> 'terminal-output';
