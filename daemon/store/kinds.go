package store

import (
	"context"
	"fmt"
)

// The (session_id, kind, seq) index leaves out one kind (migration 0005),
// unindexedKind: wire.KindTerminalOutput, the bulk of a PTY session's log,
// whose index entries cost every commit a page per busy session. A query
// that uses the index must state the index's condition word for word, or
// SQLite cannot use a partial index.
const (
	unindexedKind = "terminal-output"
	kindIndexTerm = `kind <> 'terminal-output'`
	selectKindSQL = `SELECT seq, ts, data FROM events INDEXED BY events_session_kind
		WHERE session_id = ? AND kind = ? AND ` + kindIndexTerm + ` AND seq > ? ORDER BY seq LIMIT ?`
	// Terminal output is read through the seq index (seal.go), sealed part
	// and tail, keeping the kind's events.
	scanForKindSQL = `SELECT i.seq, e.ts, e.data
		FROM event_seqs i CROSS JOIN events e ON e.id = i.event_id
		WHERE i.session_id = ?1 AND e.kind = ?2 AND i.seq > ?3
	UNION ALL
	SELECT seq, ts, data FROM events
		WHERE id > ` + tailSQL + ` AND session_id = ?1 AND kind = ?2 AND seq > ?3
	ORDER BY 1 LIMIT ?4`
)

// EventsOfKind returns up to limit events of one kind of a session with
// seq > afterSeq, in seq order; limit <= 0 means no limit. It seeks the
// (session_id, kind, seq) index, so its cost follows the events of that
// kind, not the length of the session's log: a long session's rare
// events (permission decisions among output chunks) stay cheap to list.
// Terminal output is not in that index; listing it scans the session's
// log, which is mostly terminal output where there is much of it.
func (s *Store) EventsOfKind(ctx context.Context, sessionID, kind string, afterSeq int64, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	q := selectKindSQL
	if kind == unindexedKind {
		q = scanForKindSQL
	}
	rows, err := s.reader.QueryContext(ctx, q, sessionID, kind, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("read %s events of %s: %w", kind, sessionID, err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		e := Event{SessionID: sessionID, Kind: kind}
		var ts int64
		if err := rows.Scan(&e.Seq, &ts, &e.Data); err != nil {
			return nil, fmt.Errorf("read %s events of %s: %w", kind, sessionID, err)
		}
		e.TS = fromNanos(ts)
		if e.Data == nil {
			e.Data = []byte{}
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s events of %s: %w", kind, sessionID, err)
	}
	return out, nil
}
