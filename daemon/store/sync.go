package store

import (
	"fmt"
	"os"
)

// Durability apart from visibility.
//
// A batch of events commits with synchronous=NORMAL: in WAL mode that
// writes its frames to the -wal file without an fsync, and the batch is
// visible to readers, so followers are woken at once. The syncer then
// fsyncs the -wal file, which makes every frame written so far durable,
// and only then answers the batch's callers: Append still returns only
// once its event is on disk. One fsync covers every batch committed while
// the previous one ran, so under load the appender never waits for the
// disk and no caller pays an fsync of its own.
//
// An event a follower has seen is thus in the operating system's cache
// but perhaps not yet on disk: a crash of the daemon (kill -9) keeps it; a
// crash of the machine in that window loses it, along with what every
// follower on the machine saw.

// runSyncer makes committed batches durable and answers their callers.
func (s *Store) runSyncer() {
	defer close(s.app.syncDone)
	var reqs []*appendReq
	for first := range s.app.syncCh {
		reqs = append(reqs[:0], first...)
	more:
		for {
			select {
			case b, ok := <-s.app.syncCh:
				if !ok {
					break more
				}
				reqs = append(reqs, b...)
			default:
				break more
			}
		}
		err := s.syncWAL()
		s.app.syncs.Add(1)
		for _, r := range reqs {
			if err != nil && r.err == nil {
				r.err, r.out = fmt.Errorf("append: sync: %w", err), nil
			}
			close(r.done)
		}
		clear(reqs)
	}
}

// syncWAL fsyncs the -wal file. Only the syncer calls it; the file is
// opened at the first call, after a commit has made sure it exists, and
// SQLite keeps it (the same file, reset in place after checkpoints) while
// the store's connections are open.
func (s *Store) syncWAL() error {
	if s.app.wal == nil {
		f, err := os.OpenFile(s.path+"-wal", os.O_RDWR, 0)
		if err != nil {
			return err
		}
		s.app.wal = f
	}
	return syncData(s.app.wal)
}
