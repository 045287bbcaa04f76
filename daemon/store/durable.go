package store

import "context"

// DurableSeq returns the highest seq of a session's log that is on disk,
// which is the highest seq there is: a batch of events commits with its
// fsync, and SQLite shows no reader a commit before that fsync is done
// (store.go). Whatever copies the log off the machine (session sync) asks
// for this mark rather than LastSeq, so that the copy and the log can never
// disagree at the same seq, whatever the store's commit does. ErrNotFound
// means the session does not exist.
func (s *Store) DurableSeq(ctx context.Context, sessionID string) (int64, error) {
	return s.LastSeq(ctx, sessionID)
}
