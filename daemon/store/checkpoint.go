package store

import (
	"database/sql"
	"fmt"
	"log/slog"
)

// Checkpointing copies committed WAL pages back into the database file. SQLite
// would do it inside whichever commit crosses the threshold, which puts a
// checkpoint's writes and fsync on the appender's critical path. Instead the
// appender signals this goroutine, which runs PASSIVE checkpoints on its own
// connection concurrently with appends (WAL allows that). The writer keeps a
// large automatic threshold as a safety net should this goroutine fall behind.
const (
	// checkpointEvery is how many bytes of events between checkpoints.
	checkpointEvery = 4 << 20
	// writerAutoCheckpoint (pages) bounds the WAL if checkpoints lag:
	// 256 MiB of 32 KiB pages.
	writerAutoCheckpoint = 8192
)

func (s *Store) runCheckpointer(db *sql.DB) {
	defer close(s.ckptDone)
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.ckptSignal:
		}
		var busy, logPages, done int
		if err := db.QueryRowContext(s.ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &logPages, &done); err != nil {
			if s.ctx.Err() != nil {
				return
			}
			// Not fatal: the writer's own threshold still bounds the WAL.
			slog.Warn("store: wal checkpoint failed", "err", fmt.Errorf("checkpoint %s: %w", s.path, err))
		}
	}
}

// requestCheckpoint is called by the appender after each commit. A commit
// writes whole pages to the WAL, at least the log's last leaf (and another
// when it fills one), so a commit of a few small events counts as two pages.
func (s *Store) requestCheckpoint(committedBytes int) {
	s.app.sinceCheckpoint += max(committedBytes, 2*pageSize)
	if s.app.sinceCheckpoint < checkpointEvery {
		return
	}
	s.app.sinceCheckpoint = 0
	select {
	case s.ckptSignal <- struct{}{}:
	default: // one is already pending
	}
}
