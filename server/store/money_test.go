package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Provider keys, billing accounts, invoices and payment events on both
// engines: the methods the money routes use, with their edge cases.
func TestMoneyStore(t *testing.T) { eachEngine(t, testMoneyStore) }

func testMoneyStore(t *testing.T, e engine) {
	s := e.open(t)
	ctx := context.Background()
	ws := "01MONEYSTORE00000000000WS0"
	ledgerWorkspace(t, s, ws, "")
	now := time.Now().UTC().Truncate(time.Millisecond)
	team := int64(7)
	k := ProviderKey{WorkspaceID: ws, Provider: "provider_a", Mode: "managed_byok", TeamID: &team, Fingerprint: "fp1", Version: 1, Sealed: []byte("sealed-1"), CreatedBy: "u", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateProviderKey(ctx, &k, AuditEntry{WorkspaceID: ws, Action: "provider_key.create"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ProviderKey(ctx, ws, k.ID); err != nil || *got.TeamID != 7 || string(got.Sealed) != "sealed-1" || got.KeyRef != nil {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := s.ProviderKey(ctx, "01OTHERWORKSPACE0000000000", k.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another workspace reads the key: %v", err)
	}
	up, err := s.UpdateProviderKey(ctx, ws, k.ID, func(p *ProviderKey) error {
		p.Version, p.Fingerprint, p.Sealed, p.RotatedAt = 2, "fp2", []byte("sealed-2"), &now
		return nil
	}, AuditEntry{})
	if err != nil || up.Version != 2 {
		t.Fatalf("update: %v", err)
	}
	n, err := s.RewrapSecrets(ctx, func(name string, rec []byte) ([]byte, error) {
		if name == ProviderKeySecretName(k.ID) {
			return append([]byte("re-"), rec...), nil
		}
		return rec, nil
	})
	if got, _ := s.ProviderKey(ctx, ws, k.ID); err != nil || n != 1 || string(got.Sealed) != "re-sealed-2" {
		t.Fatalf("rewrap: %d %v %q", n, err, got.Sealed)
	}
	if _, err := s.RewrapSecrets(ctx, func(string, []byte) ([]byte, error) { return nil, errors.New("boom") }); err == nil {
		t.Fatal("a failing re-wrap succeeded")
	}
	if ks, err := s.ProviderKeys(ctx, ws); err != nil || len(ks) != 1 {
		t.Fatalf("list: %v %v", ks, err)
	}
	if err := s.DeleteProviderKey(ctx, ws, k.ID, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteProviderKey(ctx, ws, k.ID, AuditEntry{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}

	if a, err := s.BillingAccount(ctx, ws); !errors.Is(err, ErrNotFound) || a.Status != BillingNone {
		t.Fatalf("no account: %+v %v", a, err)
	}
	if _, err := s.UpdateBillingAccount(ctx, ws, func(a *BillingAccount) error {
		a.Provider, a.CustomerRef, a.UpdatedAt = "payments", "cus_1", now
		return nil
	}, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if a, err := s.BillingAccountByCustomer(ctx, "payments", "cus_1"); err != nil || a.WorkspaceID != ws {
		t.Fatalf("by customer: %+v %v", a, err)
	}
	// Ten concurrent deliveries of one event: one applies, nine count.
	var wg sync.WaitGroup
	var mu sync.Mutex
	fresh := 0
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := s.RecordPaymentEvent(ctx, PaymentEvent{Provider: "payments", EventID: "evt_1", Type: "invoice.payment_failed", WorkspaceID: ws, Outcome: "applied", ReceivedAt: now},
				func(tx *Tx) error {
					if err := UpsertInvoiceTx(tx, &Invoice{WorkspaceID: ws, ProviderRef: "in_1", Status: "open", Currency: "usd", AmountDue: 500, CreatedAt: now, UpdatedAt: now}); err != nil {
						return err
					}
					return SetBillingStatusTx(tx, BillingAccount{WorkspaceID: ws, Provider: "payments", Status: BillingPastDue, UpdatedAt: now})
				})
			if err != nil {
				t.Errorf("record event: %v", err)
			}
			mu.Lock()
			if ok {
				fresh++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	st, err := s.PaymentEventStats(ctx, "payments")
	if err != nil || fresh != 1 || st.Received != 1 || st.Duplicates != 9 || st.ByOutcome["applied"] != 1 {
		t.Fatalf("dedupe: fresh %d, stats %+v %v", fresh, st, err)
	}
	a, _ := s.BillingAccount(ctx, ws)
	if a.Status != BillingPastDue || a.CustomerRef != "cus_1" {
		t.Fatalf("status after the event: %+v", a)
	}
	// A failing apply records nothing: the provider's retry applies it.
	if ok, err := s.RecordPaymentEvent(ctx, PaymentEvent{Provider: "payments", EventID: "evt_2", Type: "x", Outcome: "applied", ReceivedAt: now}, func(*Tx) error { return errors.New("boom") }); err == nil || ok {
		t.Fatalf("failing apply: %v %v", ok, err)
	}
	if st, _ := s.PaymentEventStats(ctx, "payments"); st.Received != 1 {
		t.Fatalf("a failed event was recorded: %+v", st)
	}
	in := &Invoice{WorkspaceID: ws, ProviderRef: "in_1", Status: "paid", Currency: "usd", AmountDue: 500, AmountPaid: 500, CreatedAt: now, UpdatedAt: now}
	if err := s.UpsertInvoice(ctx, in); err != nil {
		t.Fatal(err)
	}
	invs, err := s.Invoices(ctx, ws, 10)
	if err != nil || len(invs) != 1 || invs[0].Status != "paid" || invs[0].AmountPaid != 500 {
		t.Fatalf("invoices: %+v %v", invs, err)
	}
	if got, err := s.Invoice(ctx, ws, invs[0].ID); err != nil || got.ProviderRef != "in_1" {
		t.Fatalf("invoice: %+v %v", got, err)
	}
	if _, err := s.Invoice(ctx, "01OTHERWORKSPACE0000000000", invs[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another workspace's invoice: %v", err)
	}
}
