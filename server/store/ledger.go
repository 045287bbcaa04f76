package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Ledger admission outcomes.
var (
	// ErrHardCap: the entry would take the period's total past the cap.
	ErrHardCap = errors.New("the workspace hard cap would be exceeded")
	// ErrBillingInactive: billing is inactive (past due, canceled, or
	// switched off by budget_policy.billing_active).
	ErrBillingInactive = errors.New("workspace billing is inactive")
	// ErrIdempotencyConflict: the idempotency key was used with another body.
	ErrIdempotencyConflict = errors.New("the idempotency key was used with a different body")
	// ErrBadPolicy: the stored budget_policy does not parse; nothing is
	// admitted until it is fixed (a broken cap is not no cap).
	ErrBadPolicy = errors.New("the workspace budget_policy is not valid")
)

// LedgerEntry is one finalized gateway usage record.
type LedgerEntry struct {
	Seq            int64
	ID             string
	WorkspaceID    string
	Period         string // the monthly period key
	IdempotencyKey string
	BodyHash       string
	Cost           USD
	Attributes     json.RawMessage
	CreatedBy      string
	CreatedAt      time.Time
	// Uncapped records usage already spent (a finished run's report): it
	// counts in the totals but is not refused for the cap or billing, so
	// the cap then blocks what comes next. Not stored.
	Uncapped bool
}

// LedgerPeriod is the running total of a workspace in one period.
type LedgerPeriod struct {
	WorkspaceID string
	Period      string
	Total       USD
	Entries     int64
}

// BudgetAdmission is the answer of AdmitBudget.
type BudgetAdmission struct {
	Admitted bool
	// Reason is "" when admitted, else "billing_inactive",
	// "hard_cap_exceeded" or "budget_policy_invalid".
	Reason string
	Period string // the policy's period key now
	Spent  USD    // in that period
	Cap    *USD   // nil: no cap
	// Remaining is Cap-Spent (0 when over); meaningless without a cap.
	Remaining USD
}

// Billing account statuses that stop billable use.
func billingInactive(status string) bool {
	switch status {
	case BillingPastDue, BillingCanceled:
		return true
	}
	return false
}

// readBudget reads, inside tx, what admission depends on: the policy and
// the billing state.
func readBudget(tx *Tx, workspaceID string) (BudgetPolicy, bool, error) {
	var raw sql.NullString
	if err := tx.QueryRow(`SELECT budget_policy FROM workspaces WHERE id = ? AND deleted_at IS NULL`, workspaceID).Scan(&raw); err != nil {
		return BudgetPolicy{}, false, notFound(err)
	}
	p, err := ParseBudgetPolicy(nullRaw(raw))
	if err != nil {
		return p, false, fmt.Errorf("%w: %v", ErrBadPolicy, err)
	}
	var status string
	err = tx.QueryRow(`SELECT status FROM billing_accounts WHERE workspace_id = ?`, workspaceID).Scan(&status)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return p, false, err
	}
	active := !billingInactive(status) && (p.BillingActive == nil || *p.BillingActive)
	return p, active, nil
}

const ledgerCols = `seq, id, workspace_id, period, idempotency_key, body_hash, cost_nanos, attributes, created_by, created_at`

func scanLedgerEntry(sc scanner) (LedgerEntry, error) {
	var e LedgerEntry
	var attrs, c string
	if err := sc.Scan(&e.Seq, &e.ID, &e.WorkspaceID, &e.Period, &e.IdempotencyKey, &e.BodyHash, &e.Cost, &attrs, &e.CreatedBy, &c); err != nil {
		return LedgerEntry{}, err
	}
	e.Attributes, e.CreatedAt = json.RawMessage(attrs), parseTS(c)
	return e, nil
}

// RecordUsage admits and appends a ledger entry in one write transaction:
// the idempotency key is looked up, billing and the budget policy are read,
// and the period totals grow by a conditional UPDATE that fails when the
// cap would be passed, before the entry is inserted. On PostgreSQL the
// UPDATE holds the period row's lock until commit and re-reads it after
// waiting, so concurrent writers on any replica serialize on that row; on
// SQLite there is one writer. e.Period, e.Seq and e.ID are filled in.
//
// It returns replayed=true, with the stored entry in e, when the key was
// already recorded with the same body hash; ErrIdempotencyConflict when
// with another; ErrHardCap, ErrBillingInactive or ErrBadPolicy when
// admission is denied (nothing written).
func (s *DB) RecordUsage(ctx context.Context, e *LedgerEntry, audit AuditEntry) (replayed bool, err error) {
	if e.Cost < 0 {
		return false, ErrBadAmount
	}
	if e.ID == "" {
		e.ID = newID()
	}
	for attempt := 0; attempt < 3; attempt++ {
		var stored LedgerEntry
		found := false
		err = s.execSimple(ctx, func(tx *Tx) error {
			found = false
			cur, err := scanLedgerEntry(tx.QueryRow(`SELECT `+ledgerCols+` FROM ledger_entries WHERE workspace_id = ? AND idempotency_key = ?`, e.WorkspaceID, e.IdempotencyKey))
			if err == nil {
				stored, found = cur, true
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			p, active, err := readBudget(tx, e.WorkspaceID)
			if err != nil && !(e.Uncapped && errors.Is(err, ErrBadPolicy)) {
				return err
			}
			if !active && !e.Uncapped {
				return ErrBillingInactive
			}
			// Both period rows grow, in a fixed order (no deadlock); the
			// policy's own period carries the cap condition.
			for _, kind := range []string{PeriodMonthly, PeriodDaily} {
				key := PeriodKey(kind, e.CreatedAt)
				if _, err := tx.Exec(`INSERT INTO ledger_periods (workspace_id, period, total_nanos, entries) VALUES (?,?,0,0) ON CONFLICT (workspace_id, period) DO NOTHING`, e.WorkspaceID, key); err != nil {
					return fmt.Errorf("ledger period: %w", err)
				}
				q := `UPDATE ledger_periods SET total_nanos = total_nanos + ?, entries = entries + 1 WHERE workspace_id = ? AND period = ?`
				args := []any{int64(e.Cost), e.WorkspaceID, key}
				if kind == p.Period && p.HardCap != nil && !e.Uncapped {
					q += ` AND total_nanos + ? <= ?`
					args = append(args, int64(e.Cost), int64(*p.HardCap))
				}
				res, err := tx.Exec(q, args...)
				if err != nil {
					return fmt.Errorf("ledger period: %w", err)
				}
				if n, _ := res.RowsAffected(); n == 0 {
					return ErrHardCap
				}
			}
			e.Period = PeriodKey(PeriodMonthly, e.CreatedAt)
			err = tx.QueryRow(`INSERT INTO ledger_entries (id, workspace_id, period, idempotency_key, body_hash, cost_nanos, attributes, created_by, created_at) VALUES (?,?,?,?,?,?,?,?,?) RETURNING seq`,
				e.ID, e.WorkspaceID, e.Period, e.IdempotencyKey, e.BodyHash, int64(e.Cost), string(e.Attributes), e.CreatedBy, ts(e.CreatedAt)).Scan(&e.Seq)
			if isUniqueViolation(err) {
				return ErrConflict // a concurrent writer recorded the key first
			}
			if err != nil {
				return fmt.Errorf("ledger entry: %w", err)
			}
			if err := emitBudgetCrossings(tx, e, p); err != nil {
				return err
			}
			return insertAudit(tx, audit)
		})
		if errors.Is(err, ErrConflict) {
			continue // read the winner's entry on the next attempt
		}
		if errors.Is(err, ErrHardCap) || errors.Is(err, ErrBillingInactive) {
			// A concurrent request with this key may have taken the last
			// headroom: it is a replay, not a denial.
			if cur, rerr := scanLedgerEntry(s.queryRow(ctx, `SELECT `+ledgerCols+` FROM ledger_entries WHERE workspace_id = ? AND idempotency_key = ?`, e.WorkspaceID, e.IdempotencyKey)); rerr == nil {
				stored, found, err = cur, true, nil
			}
		}
		if err != nil {
			return false, err
		}
		if found {
			if stored.BodyHash != e.BodyHash {
				return false, ErrIdempotencyConflict
			}
			*e = stored
			return true, nil
		}
		return false, nil
	}
	return false, fmt.Errorf("record usage: the idempotency key keeps conflicting: %w", err)
}

// LedgerEntries lists a workspace's entries in sequence order, those of
// one monthly period when period is not "".
func (s *DB) LedgerEntries(ctx context.Context, workspaceID, period string, opts ListOptions) ([]LedgerEntry, error) {
	return seqPage(ctx, s, "ledger", `SELECT `+ledgerCols+` FROM ledger_entries`, workspaceID, opts, 500, scanLedgerEntry, equals{"period", period})
}

// LedgerPeriods lists a workspace's period totals, newest first (months
// and days both; a month's key is 7 characters, a day's 10).
func (s *DB) LedgerPeriods(ctx context.Context, workspaceID string) ([]LedgerPeriod, error) {
	rows, err := s.query(ctx, `SELECT workspace_id, period, total_nanos, entries FROM ledger_periods WHERE workspace_id = ? ORDER BY period DESC LIMIT 1000`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("list ledger periods: %w", err)
	}
	return collect(rows, func(sc scanner) (LedgerPeriod, error) {
		var p LedgerPeriod
		err := sc.Scan(&p.WorkspaceID, &p.Period, &p.Total, &p.Entries)
		return p, err
	})
}

// LedgerPeriod returns one period's total (zero when nothing was recorded).
func (s *DB) LedgerPeriod(ctx context.Context, workspaceID, period string) (LedgerPeriod, error) {
	p := LedgerPeriod{WorkspaceID: workspaceID, Period: period}
	err := s.queryRow(ctx, `SELECT total_nanos, entries FROM ledger_periods WHERE workspace_id = ? AND period = ?`, workspaceID, period).Scan(&p.Total, &p.Entries)
	if errors.Is(err, sql.ErrNoRows) {
		return p, nil
	}
	return p, unavailable(err)
}

// AdmitBudget says whether the workspace may start billable work expected
// to cost estimate now: billing is active and the current period's total
// plus the estimate stays within the hard cap. It writes nothing (the
// workflow preflight asks it; the ledger enforces the cap itself at
// RecordUsage). ErrNotFound when the workspace does not exist.
func (s *DB) AdmitBudget(ctx context.Context, workspaceID string, estimate USD, now time.Time) (BudgetAdmission, error) {
	var a BudgetAdmission
	var raw sql.NullString
	if err := s.queryRow(ctx, `SELECT budget_policy FROM workspaces WHERE id = ? AND deleted_at IS NULL`, workspaceID).Scan(&raw); err != nil {
		return a, notFound(err)
	}
	p, err := ParseBudgetPolicy(nullRaw(raw))
	if err != nil {
		a.Reason = "budget_policy_invalid"
		return a, nil
	}
	a.Period, a.Cap = PeriodKey(p.Period, now), p.HardCap
	per, err := s.LedgerPeriod(ctx, workspaceID, a.Period)
	if err != nil {
		return a, err
	}
	a.Spent = per.Total
	if p.HardCap != nil && *p.HardCap > a.Spent {
		a.Remaining = *p.HardCap - a.Spent
	}
	acct, err := s.BillingAccount(ctx, workspaceID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return a, err
	}
	switch {
	case billingInactive(acct.Status) || (p.BillingActive != nil && !*p.BillingActive):
		a.Reason = "billing_inactive"
	case estimate < 0:
		return a, ErrBadAmount
	case p.HardCap != nil && a.Spent+estimate > *p.HardCap:
		a.Reason = "hard_cap_exceeded"
	default:
		a.Admitted = true
	}
	return a, nil
}
