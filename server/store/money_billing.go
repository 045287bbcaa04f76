package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Billing account statuses.
const (
	BillingNone     = "none"     // no subscription yet
	BillingActive   = "active"   // paid up (or trialing)
	BillingPastDue  = "past_due" // a payment failed: billable use stops
	BillingCanceled = "canceled" // the subscription ended: billable use stops
)

// BillingAccount is a workspace's account at the payments provider. The
// provider's references stay on the server; routes never return them.
type BillingAccount struct {
	WorkspaceID     string
	Provider        string
	CustomerRef     string
	SubscriptionRef string
	Status          string
	CardBrand       string
	CardLast4       string
	ReconciledAt    *time.Time
	UpdatedAt       time.Time
}

// Invoice is an invoice as the provider reported it; amounts are in the
// currency's minor unit (cents).
type Invoice struct {
	ID          string
	WorkspaceID string
	ProviderRef string
	Number      string
	Status      string
	Currency    string
	AmountDue   int64
	AmountPaid  int64
	PeriodStart *time.Time
	PeriodEnd   *time.Time
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// PaymentEvent is a webhook event received from the payments provider.
type PaymentEvent struct {
	Provider    string
	EventID     string
	Type        string
	WorkspaceID string
	Outcome     string // "applied", "ignored", ...
	ReceivedAt  time.Time
}

// PaymentEventStats counts the events received per provider.
type PaymentEventStats struct {
	Received   int64
	Duplicates int64 // deliveries of an event id already recorded
	Last       *time.Time
	ByOutcome  map[string]int64
}

const acctCols = `workspace_id, provider, customer_ref, subscription_ref, status, card_brand, card_last4, reconciled_at, updated_at`

func scanAccount(sc scanner) (BillingAccount, error) {
	var a BillingAccount
	var rec sql.NullString
	var u string
	if err := sc.Scan(&a.WorkspaceID, &a.Provider, &a.CustomerRef, &a.SubscriptionRef, &a.Status, &a.CardBrand, &a.CardLast4, &rec, &u); err != nil {
		return BillingAccount{}, err
	}
	a.ReconciledAt, a.UpdatedAt = nullTS(rec), parseTS(u)
	return a, nil
}

// BillingAccount returns the workspace's billing account; ErrNotFound, with
// Status BillingNone, when there is none.
func (s *DB) BillingAccount(ctx context.Context, workspaceID string) (BillingAccount, error) {
	a, err := scanAccount(s.queryRow(ctx, `SELECT `+acctCols+` FROM billing_accounts WHERE workspace_id = ?`, workspaceID))
	if err != nil {
		return BillingAccount{WorkspaceID: workspaceID, Status: BillingNone}, notFound(err)
	}
	return a, nil
}

// UpdateBillingAccount applies fn to the workspace's account (a fresh one
// with Status BillingNone when there is none) and stores it, in one write
// transaction.
func (s *DB) UpdateBillingAccount(ctx context.Context, workspaceID string, fn func(*BillingAccount) error, audit AuditEntry) (BillingAccount, error) {
	var out BillingAccount
	err := s.exec(ctx, func(tx *Tx) error {
		a, err := scanAccount(tx.QueryRow(`SELECT `+acctCols+` FROM billing_accounts WHERE workspace_id = ?`, workspaceID))
		if errors.Is(err, sql.ErrNoRows) {
			a, err = BillingAccount{WorkspaceID: workspaceID, Status: BillingNone}, nil
		}
		if err != nil {
			return err
		}
		if err := fn(&a); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO billing_accounts (`+acctCols+`) VALUES (?,?,?,?,?,?,?,?,?)
			ON CONFLICT (workspace_id) DO UPDATE SET provider = excluded.provider, customer_ref = excluded.customer_ref,
			subscription_ref = excluded.subscription_ref, status = excluded.status, card_brand = excluded.card_brand,
			card_last4 = excluded.card_last4, reconciled_at = excluded.reconciled_at, updated_at = excluded.updated_at`,
			a.WorkspaceID, a.Provider, a.CustomerRef, a.SubscriptionRef, a.Status, a.CardBrand, a.CardLast4, tsOrNil(a.ReconciledAt), ts(a.UpdatedAt)); err != nil {
			return fmt.Errorf("store billing account: %w", err)
		}
		out = a
		return insertAudit(tx, audit)
	})
	return out, err
}

// BillingAccountByCustomer finds the account holding a provider customer.
func (s *DB) BillingAccountByCustomer(ctx context.Context, provider, customerRef string) (BillingAccount, error) {
	a, err := scanAccount(s.queryRow(ctx, `SELECT `+acctCols+` FROM billing_accounts WHERE provider = ? AND customer_ref = ? AND customer_ref <> ''`, provider, customerRef))
	return a, notFound(err)
}

const invoiceCols = `id, workspace_id, provider_ref, number, status, currency, amount_due, amount_paid, period_start, period_end, created_at, updated_at`

func scanInvoice(sc scanner) (Invoice, error) {
	var i Invoice
	var ps, pe sql.NullString
	var c, u string
	if err := sc.Scan(&i.ID, &i.WorkspaceID, &i.ProviderRef, &i.Number, &i.Status, &i.Currency, &i.AmountDue, &i.AmountPaid, &ps, &pe, &c, &u); err != nil {
		return Invoice{}, err
	}
	i.PeriodStart, i.PeriodEnd, i.CreatedAt, i.UpdatedAt = nullTS(ps), nullTS(pe), parseTS(c), parseTS(u)
	return i, nil
}

// UpsertInvoice stores an invoice by its provider reference (a later
// report of the same invoice updates it; its id and creation stay).
func (s *DB) UpsertInvoice(ctx context.Context, in *Invoice) error {
	return s.execSimple(ctx, func(tx *Tx) error { return UpsertInvoiceTx(tx, in) })
}

// UpsertInvoiceTx is UpsertInvoice inside a payment event's transaction.
func UpsertInvoiceTx(tx *Tx, in *Invoice) error {
	if in.ID == "" {
		in.ID = newID()
	}
	_, err := tx.Exec(`INSERT INTO billing_invoices (`+invoiceCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)
		ON CONFLICT (provider_ref) DO UPDATE SET number = excluded.number, status = excluded.status, currency = excluded.currency,
		amount_due = excluded.amount_due, amount_paid = excluded.amount_paid, period_start = excluded.period_start,
		period_end = excluded.period_end, updated_at = excluded.updated_at`,
		in.ID, in.WorkspaceID, in.ProviderRef, in.Number, in.Status, in.Currency, in.AmountDue, in.AmountPaid, tsOrNil(in.PeriodStart), tsOrNil(in.PeriodEnd), ts(in.CreatedAt), ts(in.UpdatedAt))
	if err != nil {
		return fmt.Errorf("store invoice: %w", err)
	}
	return nil
}

// Invoices lists a workspace's invoices, newest first.
func (s *DB) Invoices(ctx context.Context, workspaceID string, limit int) ([]Invoice, error) {
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	rows, err := s.query(ctx, `SELECT `+invoiceCols+` FROM billing_invoices WHERE workspace_id = ? ORDER BY created_at DESC, id DESC LIMIT ?`, workspaceID, limit)
	if err != nil {
		return nil, fmt.Errorf("list invoices: %w", err)
	}
	return collect(rows, scanInvoice)
}

// Invoice returns one of a workspace's invoices by id.
func (s *DB) Invoice(ctx context.Context, workspaceID, id string) (Invoice, error) {
	i, err := scanInvoice(s.queryRow(ctx, `SELECT `+invoiceCols+` FROM billing_invoices WHERE workspace_id = ? AND id = ?`, workspaceID, id))
	return i, notFound(err)
}

// RecordPaymentEvent stores a webhook event once: it reports false when
// the provider's event id was seen before (a replay), and then stores
// nothing. apply runs in the same transaction, so an event is either
// recorded and applied, or neither.
func (s *DB) RecordPaymentEvent(ctx context.Context, ev PaymentEvent, apply func(*Tx) error) (bool, error) {
	fresh := false
	err := s.exec(ctx, func(tx *Tx) error {
		fresh = false
		res, err := tx.Exec(`INSERT INTO payment_events (provider, event_id, type, workspace_id, outcome, received_at) VALUES (?,?,?,?,?,?) ON CONFLICT (provider, event_id) DO NOTHING`,
			ev.Provider, ev.EventID, ev.Type, ev.WorkspaceID, ev.Outcome, ts(ev.ReceivedAt))
		if err != nil {
			return fmt.Errorf("record payment event: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			_, err := tx.Exec(`UPDATE payment_events SET duplicates = duplicates + 1 WHERE provider = ? AND event_id = ?`, ev.Provider, ev.EventID)
			return err
		}
		fresh = true
		if apply != nil {
			return apply(tx)
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	return fresh, nil
}

// PaymentEventStats counts a provider's recorded events by outcome.
func (s *DB) PaymentEventStats(ctx context.Context, provider string) (PaymentEventStats, error) {
	st := PaymentEventStats{ByOutcome: map[string]int64{}}
	rows, err := s.query(ctx, `SELECT outcome, COUNT(*), SUM(duplicates), MAX(received_at) FROM payment_events WHERE provider = ? GROUP BY outcome`, provider)
	if err != nil {
		return st, fmt.Errorf("payment event stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var o string
		var n, dups int64
		var last sql.NullString
		if err := rows.Scan(&o, &n, &dups, &last); err != nil {
			return st, err
		}
		st.Duplicates += dups
		st.ByOutcome[o] = n
		st.Received += n
		if t := nullTS(last); t != nil && (st.Last == nil || t.After(*st.Last)) {
			st.Last = t
		}
	}
	return st, rows.Err()
}

// SetBillingStatusTx sets an account's status inside a payment event's
// transaction (RecordPaymentEvent's apply), creating the account when the
// event names a workspace the server has not seen billing for.
func SetBillingStatusTx(tx *Tx, a BillingAccount) error {
	_, err := tx.Exec(`INSERT INTO billing_accounts (`+acctCols+`) VALUES (?,?,?,?,?,?,?,?,?)
		ON CONFLICT (workspace_id) DO UPDATE SET provider = excluded.provider,
		customer_ref = CASE WHEN excluded.customer_ref <> '' THEN excluded.customer_ref ELSE billing_accounts.customer_ref END,
		subscription_ref = CASE WHEN excluded.subscription_ref <> '' THEN excluded.subscription_ref ELSE billing_accounts.subscription_ref END,
		status = excluded.status, updated_at = excluded.updated_at`,
		a.WorkspaceID, a.Provider, a.CustomerRef, a.SubscriptionRef, a.Status, a.CardBrand, a.CardLast4, tsOrNil(a.ReconciledAt), ts(a.UpdatedAt))
	if err != nil {
		return fmt.Errorf("set billing status: %w", err)
	}
	return nil
}
