package store

import (
	"context"
	"fmt"
	"time"
)

// SupportOperator is a user holding the server-level support role. The
// role lets them ask a workspace for access; it grants none by itself.
type SupportOperator struct {
	UserID    int64
	Email     string
	GrantedBy string
	GrantedAt time.Time
}

// SupportOperators is the store's support-role part (migration 0009).
type SupportOperators interface {
	// GrantSupportOperator gives the user the role; granting it again
	// changes nothing and reports false.
	GrantSupportOperator(ctx context.Context, userID int64, by string, now time.Time) (bool, error)
	// RevokeSupportOperator takes the role away: ErrNotFound when the user
	// did not hold it.
	RevokeSupportOperator(ctx context.Context, userID int64) error
	IsSupportOperator(ctx context.Context, userID int64) (bool, error)
	ListSupportOperators(ctx context.Context) ([]SupportOperator, error)
}

var _ SupportOperators = (*DB)(nil)

func (s *DB) GrantSupportOperator(ctx context.Context, userID int64, by string, now time.Time) (bool, error) {
	var added bool
	err := s.execSimple(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`INSERT INTO support_operators (user_id, granted_by, granted_at) VALUES (?,?,?) ON CONFLICT (user_id) DO NOTHING`, userID, by, ts(now))
		if err != nil {
			return fmt.Errorf("grant support operator: %w", err)
		}
		n, err := res.RowsAffected()
		added = n == 1
		return err
	})
	return added, err
}

func (s *DB) RevokeSupportOperator(ctx context.Context, userID int64) error {
	return s.execSimple(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`DELETE FROM support_operators WHERE user_id = ?`, userID)
		if err != nil {
			return fmt.Errorf("revoke support operator: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrNotFound
		}
		return nil
	})
}

func (s *DB) IsSupportOperator(ctx context.Context, userID int64) (bool, error) {
	var n int
	err := s.queryRow(ctx, `SELECT count(*) FROM support_operators WHERE user_id = ?`, userID).Scan(&n)
	return n > 0, err
}

func (s *DB) ListSupportOperators(ctx context.Context) ([]SupportOperator, error) {
	rows, err := s.query(ctx, `SELECT o.user_id, u.email, o.granted_by, o.granted_at FROM support_operators o JOIN users u ON u.id = o.user_id ORDER BY o.user_id`)
	if err != nil {
		return nil, fmt.Errorf("list support operators: %w", err)
	}
	defer rows.Close()
	out := []SupportOperator{}
	for rows.Next() {
		var o SupportOperator
		var at string
		if err := rows.Scan(&o.UserID, &o.Email, &o.GrantedBy, &at); err != nil {
			return nil, err
		}
		o.GrantedAt = parseTS(at)
		out = append(out, o)
	}
	return out, rows.Err()
}
