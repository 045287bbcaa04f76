package store

import (
	"context"
	"fmt"
)

// equals narrows a page to rows whose column holds the value; an empty
// value does not narrow.
type equals struct{ column, value string }

// seqPage reads one page of a workspace's rows in sequence order: those
// after opts.After that match every non-empty filter, at most opts.Limit of
// them (100 when unset or above max; max 0 sets no ceiling). selectFrom is
// "SELECT <columns> FROM <table>"; the typed lists (runs, ledger entries,
// insights, review packets) all page this way.
func seqPage[T any](ctx context.Context, s *DB, what, selectFrom, workspaceID string, opts ListOptions, max int, scan func(scanner) (T, error), filters ...equals) ([]T, error) {
	limit := opts.Limit
	if limit <= 0 || (max > 0 && limit > max) {
		limit = 100
	}
	q := selectFrom + ` WHERE workspace_id = ? AND seq > ?`
	args := []any{workspaceID, opts.After}
	for _, f := range filters {
		if f.value != "" {
			q += ` AND ` + f.column + ` = ?`
			args = append(args, f.value)
		}
	}
	rows, err := s.query(ctx, q+` ORDER BY seq LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	return collect(rows, scan)
}
