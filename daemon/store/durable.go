package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// The durable mark of a session's log.
//
// A committed batch of events is visible to readers before the syncer has
// fsynced it (sync.go), so a follower may read events that a crash of the
// machine would take back, seqs and all: the restarted daemon would then
// hand those seqs to other events. Whatever copies the log off the machine
// (session sync) must copy only what is on disk, or the copy and the log
// would disagree at the same seq for good.

// DurableSeq returns the highest seq of a session's log that is on disk:
// it reads the committed maximum, then fsyncs the log's -wal file itself,
// which makes every frame written so far durable, the ones read included
// (frames already checkpointed into the database were fsynced there by the
// checkpoint). It does not wait for the appender's own syncer, and an
// fsync of a log that nothing has written to since costs next to nothing.
// A failed fsync is an error: nothing read is known to be durable then.
// ErrNotFound means the session does not exist.
func (s *Store) DurableSeq(ctx context.Context, sessionID string) (int64, error) {
	last, err := s.LastSeq(ctx, sessionID)
	if err != nil || last == 0 {
		return last, err
	}
	if err := s.syncLog(ctx); err != nil {
		return 0, fmt.Errorf("durable seq of %s: %w", sessionID, err)
	}
	return last, nil
}

// syncLog fsyncs the -wal file through a descriptor of its own (fsync
// flushes the file, whichever descriptor asks), so that it never shares
// the syncer's. ctx bounds the wait, not the fsync, which runs on.
func (s *Store) syncLog(ctx context.Context) error {
	f, err := os.OpenFile(s.path+"-wal", os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no -wal file: everything is in the database, synced
	}
	if err != nil {
		return err
	}
	sync := s.syncFault
	if sync == nil {
		sync = syncData
	}
	done := make(chan error, 1)
	go func() { // lives as long as the fsync
		defer f.Close()
		done <- sync(f)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
