package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseUSD(t *testing.T) {
	good := map[string]USD{"0": 0, "12": 12 * nanosPerDollar, "0.000000001": 1, "1.50": 1_500_000_000, ".5": 500_000_000, "10.000000000000": 10 * nanosPerDollar}
	for in, want := range good {
		if got, err := ParseUSD(in); err != nil || got != want {
			t.Errorf("ParseUSD(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1e3", "abc", "1.0000000001", "1.", "99999999999999999999", "+1", "1,5", " . "} {
		if got, err := ParseUSD(in); err == nil {
			t.Errorf("ParseUSD(%q) = %d, want an error", in, got)
		}
	}
	for _, c := range []struct {
		u    USD
		want string
	}{{0, "0.00"}, {1, "0.000000001"}, {1_500_000_000, "1.50"}, {123_456_789_012, "123.456789012"}} {
		if c.u.String() != c.want {
			t.Errorf("%d.String() = %s, want %s", c.u, c.u.String(), c.want)
		}
	}
	if u, err := USDFromJSON(json.Number("0.1")); err != nil || u != 100_000_000 {
		t.Errorf("json number 0.1: %d %v", u, err)
	}
	if _, err := USDFromJSON(-0.5); err == nil {
		t.Error("negative float accepted")
	}
}

func TestParseBudgetPolicy(t *testing.T) {
	p, err := ParseBudgetPolicy(json.RawMessage(`{"hard_cap_usd":25}`))
	if err != nil || p.HardCap == nil || *p.HardCap != 25*nanosPerDollar || p.Period != PeriodMonthly {
		t.Fatalf("number cap: %+v %v", p, err)
	}
	p, err = ParseBudgetPolicy(json.RawMessage(`{"hard_cap_usd":"2.50","period":"daily"}`))
	if err != nil || *p.HardCap != 2_500_000_000 || p.Period != PeriodDaily {
		t.Fatalf("string cap: %+v %v", p, err)
	}
	for _, bad := range []string{`{"hard_cap_usd":"-1"}`, `{"hard_cap_usd":"ten"}`, `{"hard_cap_usd":true}`, `{"period":"yearly"}`, `{"hardcap_usd":"5"}`, `[1]`, `{"billing_active":"no"}`} {
		var pe *PolicyError
		if _, err := ParseBudgetPolicy(json.RawMessage(bad)); !errors.As(err, &pe) {
			t.Errorf("%s: %v, want a PolicyError", bad, err)
		}
	}
}

func ledgerWorkspace(t *testing.T, s *DB, id, policy string) {
	t.Helper()
	ctx := context.Background()
	u, _, err := s.EnsureUser(ctx, id+"@example.com")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ws := Workspace{ID: id, Name: id, PolicyMode: "open_access", CreatedAt: now, UpdatedAt: now}
	if policy != "" {
		ws.BudgetPolicy = json.RawMessage(policy)
	}
	if err := s.CreateWorkspace(ctx, ws, u.ID); err != nil {
		t.Fatal(err)
	}
}

func usageEntry(ws, key string, cost USD) *LedgerEntry {
	return &LedgerEntry{WorkspaceID: ws, IdempotencyKey: key, BodyHash: "h-" + key, Cost: cost, Attributes: json.RawMessage(`{}`), CreatedBy: "install:i", CreatedAt: time.Now()}
}

// 200 concurrent records of $0.10 against a $10.00 cap: exactly 100 are
// admitted, the ledger's sum equals the period total and never passes the
// cap; the rest are denied with ErrHardCap and write nothing.
func TestLedgerCapHoldsUnderRace(t *testing.T) { eachEngine(t, testLedgerCapRace) }

func testLedgerCapRace(t *testing.T, e engine) {
	s := e.open(t)
	ctx := context.Background()
	ws := "01LEDGERCAPRACE000000000WS"
	ledgerWorkspace(t, s, ws, `{"hard_cap_usd":"10.00"}`)
	var ok, capped atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.RecordUsage(ctx, usageEntry(ws, fmt.Sprintf("k%d", i), 100_000_000), AuditEntry{})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ErrHardCap):
				capped.Add(1)
			default:
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("record: %v", err)
	}
	if ok.Load() != 100 || capped.Load() != 100 {
		t.Fatalf("admitted %d, capped %d; want 100 and 100", ok.Load(), capped.Load())
	}
	var sum USD
	var n int
	for after := int64(0); ; {
		es, err := s.LedgerEntries(ctx, ws, "", ListOptions{After: after, Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			sum += e.Cost
			n++
			after = e.Seq
		}
		if len(es) < 500 {
			break
		}
	}
	per, err := s.LedgerPeriod(ctx, ws, PeriodKey(PeriodMonthly, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if sum != 10*nanosPerDollar || n != 100 || per.Total != sum || per.Entries != 100 {
		t.Fatalf("ledger sum %s over %d entries, period total %s over %d; want 10.00 over 100", sum, n, per.Total, per.Entries)
	}
}

func TestLedgerIdempotencyAndBilling(t *testing.T) { eachEngine(t, testLedgerIdempotency) }

func testLedgerIdempotency(t *testing.T, e engine) {
	s := e.open(t)
	ctx := context.Background()
	ws := "01LEDGERIDEMPOTENCY0000WS0"
	ledgerWorkspace(t, s, ws, `{"hard_cap_usd":"1","period":"daily"}`)
	first := usageEntry(ws, "same", 600_000_000)
	if replayed, err := s.RecordUsage(ctx, first, AuditEntry{}); err != nil || replayed {
		t.Fatalf("first: %v %v", replayed, err)
	}
	// 20 concurrent replays of one key: all replay the stored entry, even
	// though the cap has no room for a second 0.60.
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			again := usageEntry(ws, "same", 600_000_000)
			replayed, err := s.RecordUsage(ctx, again, AuditEntry{})
			if err != nil || !replayed || again.ID != first.ID || again.Seq != first.Seq {
				t.Errorf("replay: %v %v %s/%s", replayed, err, again.ID, first.ID)
			}
		}()
	}
	wg.Wait()
	other := usageEntry(ws, "same", 600_000_000)
	other.BodyHash = "different"
	if _, err := s.RecordUsage(ctx, other, AuditEntry{}); !errors.Is(err, ErrIdempotencyConflict) {
		t.Fatalf("different body: %v", err)
	}
	if _, err := s.RecordUsage(ctx, usageEntry(ws, "over", 500_000_000), AuditEntry{}); !errors.Is(err, ErrHardCap) {
		t.Fatalf("over the daily cap: %v", err)
	}
	a, err := s.AdmitBudget(ctx, ws, 400_000_000, time.Now())
	if err != nil || !a.Admitted || a.Spent != 600_000_000 || a.Remaining != 400_000_000 {
		t.Fatalf("admit 0.40: %+v %v", a, err)
	}
	if a, _ := s.AdmitBudget(ctx, ws, 400_000_001, time.Now()); a.Admitted || a.Reason != "hard_cap_exceeded" {
		t.Fatalf("admit 0.400000001: %+v", a)
	}
	// A past-due account stops billable use, in the ledger and preflight.
	if _, err := s.UpdateBillingAccount(ctx, ws, func(a *BillingAccount) error {
		a.Provider, a.Status, a.UpdatedAt = "manual", BillingPastDue, time.Now()
		return nil
	}, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordUsage(ctx, usageEntry(ws, "inactive", 1), AuditEntry{}); !errors.Is(err, ErrBillingInactive) {
		t.Fatalf("past due: %v", err)
	}
	if a, _ := s.AdmitBudget(ctx, ws, 0, time.Now()); a.Admitted || a.Reason != "billing_inactive" {
		t.Fatalf("admit past due: %+v", a)
	}
	if _, err := s.AdmitBudget(ctx, "01NOSUCHWORKSPACE000000000", 0, time.Now()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown workspace: %v", err)
	}
	ps, err := s.LedgerPeriods(ctx, ws)
	if err != nil || len(ps) != 2 {
		t.Fatalf("periods: %+v %v", ps, err)
	}
}

// Several stores on one PostgreSQL database (replicas) share the cap.
func TestLedgerCapAcrossReplicas(t *testing.T) {
	e := postgresEngine(t)
	a, b := e.open(t), e.open(t)
	ctx := context.Background()
	ws := "01LEDGERREPLICAS000000000W"
	ledgerWorkspace(t, a, ws, `{"hard_cap_usd":5}`)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			_, err := s.RecordUsage(ctx, usageEntry(ws, fmt.Sprintf("r%d", i), 70_000_000), AuditEntry{})
			if err == nil {
				ok.Add(1)
			} else if !errors.Is(err, ErrHardCap) {
				t.Errorf("record: %v", err)
			}
		}()
	}
	wg.Wait()
	per, _ := b.LedgerPeriod(ctx, ws, PeriodKey(PeriodMonthly, time.Now()))
	// 5.00 / 0.07 = 71 entries fit (4.97).
	if ok.Load() != 71 || per.Total != 71*70_000_000 {
		t.Fatalf("admitted %d, total %s; want 71 and 4.97", ok.Load(), per.Total)
	}
}
