package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// TakeBucket runs the token bucket name/key, shared by every replica of
// the database (migration 0008): it refills the bucket at rate tokens a
// second up to burst, reports the tokens it then holds, and takes cost
// from them (at most down to zero; a negative cost gives tokens back, up
// to burst; 0 only looks). Buckets are created full. Concurrent takes of
// one bucket are serialized, so each counts.
func (s *DB) TakeBucket(ctx context.Context, name, key string, rate, burst, cost float64, now time.Time) (float64, error) {
	refill := func(tokens float64, last int64) float64 {
		d := time.Duration(now.UnixNano() - last).Seconds()
		return min(burst, tokens+max(0, d)*rate)
	}
	if cost == 0 {
		var tokens float64
		var last int64
		err := s.queryRow(ctx, `SELECT tokens, last FROM throttle_buckets WHERE name = ? AND key = ?`, name, key).Scan(&tokens, &last)
		if errors.Is(err, sql.ErrNoRows) {
			return burst, nil
		}
		if err != nil {
			return 0, fmt.Errorf("throttle %s: %w", name, unavailable(err))
		}
		return refill(tokens, last), nil
	}
	var held float64
	err := s.exec(ctx, func(tx *Tx) error {
		var tokens float64
		var last int64
		err := tx.QueryRow(`SELECT tokens, last FROM throttle_buckets WHERE name = ? AND key = ?`, name, key).Scan(&tokens, &last)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			held = burst
		case err != nil:
			return err
		default:
			held = refill(tokens, last)
		}
		_, err = tx.Exec(`INSERT INTO throttle_buckets (name, key, tokens, last) VALUES (?,?,?,?)
			ON CONFLICT (name, key) DO UPDATE SET tokens = excluded.tokens, last = excluded.last`, name, key, min(burst, max(0, held-cost)), now.UnixNano())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("throttle %s: %w", name, err)
	}
	return held, nil
}

// PruneBuckets deletes the buckets not touched since before: they have
// refilled (a caller passes a time at least burst/rate ago) and are the
// same as absent.
func (s *DB) PruneBuckets(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.execSimple(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`DELETE FROM throttle_buckets WHERE last < ?`, before.UnixNano())
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}
