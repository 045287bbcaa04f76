package store

import (
	"context"
	"fmt"
	"strings"
)

// Status is a session's lifecycle state.
type Status string

// Session statuses (design section 5).
const (
	StatusStarting          Status = "starting"
	StatusRunning           Status = "running"
	StatusWaitingPermission Status = "waiting-permission"
	StatusIdle              Status = "idle"
	StatusCompleted         Status = "completed"
	StatusFailed            Status = "failed"
	StatusKilled            Status = "killed"
	StatusInterrupted       Status = "interrupted"
)

// ActiveStatuses are the statuses of a session that still has (or should
// have) a live agent process behind it.
var ActiveStatuses = []Status{StatusStarting, StatusRunning, StatusWaitingPermission, StatusIdle}

// TerminalStatuses are the statuses of a session that has ended.
var TerminalStatuses = []Status{StatusCompleted, StatusFailed, StatusKilled, StatusInterrupted}

// Valid reports whether st is one of the known statuses.
func (st Status) Valid() bool { return st.Active() || st.Terminal() }

// Active reports whether st is one of ActiveStatuses.
func (st Status) Active() bool {
	switch st {
	case StatusStarting, StatusRunning, StatusWaitingPermission, StatusIdle:
		return true
	}
	return false
}

// Terminal reports whether st is one of TerminalStatuses.
func (st Status) Terminal() bool {
	switch st {
	case StatusCompleted, StatusFailed, StatusKilled, StatusInterrupted:
		return true
	}
	return false
}

// inList renders statuses as an SQL list of placeholders plus its args.
func inList(sts []Status) (string, []any) {
	args := make([]any, len(sts))
	for i, st := range sts {
		args[i] = string(st)
	}
	return "(" + strings.TrimSuffix(strings.Repeat("?,", len(sts)), ",") + ")", args
}

// CountActiveSessions counts sessions in an active status (starting, running,
// waiting-permission, idle).
func (s *Store) CountActiveSessions(ctx context.Context) (int, error) {
	if s.ends.n.Load() > 0 {
		// Some stored statuses are not the sessions' own (ends.go).
		list, err := s.ListSessions(ctx, SessionFilter{Statuses: ActiveStatuses})
		if err != nil {
			return 0, fmt.Errorf("count active sessions: %w", err)
		}
		return len(list), nil
	}
	list, args := inList(ActiveStatuses)
	var n int
	if err := s.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM sessions WHERE status IN `+list, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count active sessions: %w", err)
	}
	return n, nil
}
