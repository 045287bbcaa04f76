package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// moneyHandlers are the ledger, provider key and billing operations.
func (s *Server) moneyHandlers() map[string]handlerFunc {
	m := map[string]handlerFunc{
		"postApiRuntimeInternalGatewayWorkspacesWorkspaceUsage": s.gatewayUsage,
		"listGatewayLedger": s.gatewayLedger,
	}
	for k, v := range s.billingHandlers() {
		m[k] = v
	}
	for k, v := range s.providerKeyHandlers() {
		m[k] = v
	}
	return m
}

// admissionDenied is the 402 of the ledger: nothing was written.
func admissionDenied(reason, msg string) error {
	e := errorf(http.StatusPaymentRequired, sdk.CodeAdmissionDenied, "%s", msg)
	e.Extra = map[string]any{"data": map[string]any{"reason": reason}}
	return e
}

// bodyHash is the SHA-256 of the request body's canonical JSON (members
// sorted, numbers as sent), so a replay with the same content matches
// however its members were ordered.
func bodyHash(body map[string]any) string {
	b, _ := json.Marshal(body)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// gatewayUsage finalizes a usage ledger entry (spec 4.11): a repeated
// idempotency_key with the same body replays the stored entry (200), with
// another body is 409 idempotency_conflict; admission is denied (402)
// when billing is inactive or the period's hard cap would be passed, and
// then nothing is written. Admission and the append are one store step.
func (s *Server) gatewayUsage(c *call) (int, any, error) {
	cost, err := store.ParseUSD(c.body["cost_usd"].(string))
	if err != nil {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/cost_usd", Message: "want a non-negative decimal amount with at most 9 decimal places: " + err.Error()})
	}
	attrs, err := json.Marshal(c.body)
	if err != nil {
		return 0, nil, err
	}
	e := &store.LedgerEntry{
		WorkspaceID: c.ws.ID, IdempotencyKey: c.body["idempotency_key"].(string), BodyHash: bodyHash(c.body),
		Cost: cost, Attributes: attrs, CreatedBy: c.p.Actor(), CreatedAt: c.now(),
	}
	replayed, err := s.st.RecordUsage(c.ctx(), e, c.audit("gateway.usage", "ledger/"+e.IdempotencyKey, map[string]any{"cost_usd": cost.String()}))
	switch {
	case errors.Is(err, store.ErrHardCap):
		return 0, nil, admissionDenied("hard_cap_exceeded", "the workspace hard cap would be exceeded")
	case errors.Is(err, store.ErrBillingInactive):
		return 0, nil, admissionDenied("billing_inactive", "workspace billing is inactive")
	case errors.Is(err, store.ErrBadPolicy):
		return 0, nil, admissionDenied("budget_policy_invalid", "the workspace budget_policy is not valid; an admin must fix it")
	case errors.Is(err, store.ErrIdempotencyConflict):
		return 0, nil, errorf(http.StatusConflict, sdk.CodeIdempotencyConflict, "idempotency_key %q was recorded with a different body", e.IdempotencyKey)
	case errors.Is(err, store.ErrNotFound):
		return 0, nil, errorf(http.StatusNotFound, sdk.CodeWorkspaceNotFound, "the workspace does not exist")
	case err != nil:
		return 0, nil, err
	}
	status := http.StatusCreated
	if replayed {
		status = http.StatusOK
	}
	return status, sdk.GatewayUsageRecordResponse{Data: ledgerEntryJSON(*e, replayed)}, nil
}

func ledgerEntryJSON(e store.LedgerEntry, replayed bool) sdk.LedgerEntry {
	// The stored attributes are the usage record as the gateway sent it, a
	// sdk.GatewayUsageRecordRequest whose fields sdk.LedgerEntry names the
	// same way; the ledger's own columns are set over them.
	var out sdk.LedgerEntry
	_ = json.Unmarshal(e.Attributes, &out)
	out.ID, out.Seq, out.WorkspaceID, out.Period, out.IdempotencyKey = e.ID, e.Seq, e.WorkspaceID, e.Period, e.IdempotencyKey
	out.CostUSD, out.FinalizedAt, out.RecordedBy, out.Replayed = e.Cost.String(), e.CreatedAt, e.CreatedBy, replayed
	return out
}

// gatewayLedger lists ledger entries (one monthly period with ?period=)
// and the workspace's period totals, with the policy in force; admins only.
func (s *Server) gatewayLedger(c *call) (int, any, error) {
	period := c.r.URL.Query().Get("period")
	if period != "" {
		if _, err := time.Parse("2006-01", period); err != nil {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "period", Message: "want a month as YYYY-MM"})
		}
	}
	limit := int(queryInt(c, "limit", 100))
	if limit < 1 || limit > 500 {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "limit", Message: "want 1 to 500"})
	}
	es, err := s.st.LedgerEntries(c.ctx(), c.ws.ID, period, store.ListOptions{After: queryInt(c, "after", 0), Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	ps, err := s.st.LedgerPeriods(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	out := sdk.GatewayLedger{Entries: make([]sdk.LedgerEntry, 0, len(es)), Periods: make([]sdk.LedgerPeriod, 0, len(ps))}
	for _, e := range es {
		out.Entries = append(out.Entries, ledgerEntryJSON(e, false))
	}
	for _, p := range ps {
		kind := store.PeriodMonthly
		if len(p.Period) == len("2006-01-02") {
			kind = store.PeriodDaily
		}
		out.Periods = append(out.Periods, sdk.LedgerPeriod{Period: p.Period, Kind: kind, TotalUSD: p.Total.String(), Entries: p.Entries})
	}
	adm, err := s.st.AdmitBudget(c.ctx(), c.ws.ID, 0, c.now())
	if err != nil {
		return 0, nil, err
	}
	out.Budget = budgetJSON(adm)
	meta := sdk.ListMeta{Count: len(out.Entries)}
	if len(es) == limit {
		meta.NextAfter = es[len(es)-1].Seq
	}
	return 200, sdk.GatewayLedgerResponse{Data: out, Meta: meta}, nil
}

func budgetJSON(a store.BudgetAdmission) sdk.BudgetStatus {
	b := sdk.BudgetStatus{Period: a.Period, SpentUSD: a.Spent.String(), Admitted: a.Admitted, Reason: a.Reason}
	if a.Cap != nil {
		c, r := a.Cap.String(), a.Remaining.String()
		b.HardCapUSD, b.RemainingUSD = &c, &r
	}
	return b
}

// AdmitBudget is the budget and billing check of the workflow preflight:
// may the workspace start billable work expected to cost estimateUSD (a
// decimal string; "" for zero)? It writes nothing; the ledger enforces the
// cap itself when usage is recorded. code is "" when admitted, else the
// preflight issue's code (budget_billing_inactive,
// budget_hard_cap_exceeded, budget_policy_invalid or
// budget_estimate_invalid) with its message and field.
func (s *Server) AdmitBudget(ctx context.Context, workspaceID, estimateUSD string) (code, message, field string, err error) {
	var est store.USD
	if estimateUSD != "" {
		if est, err = store.ParseUSD(estimateUSD); err != nil {
			return "budget_estimate_invalid", err.Error(), "/estimated_cost_usd", nil
		}
	}
	a, err := s.st.AdmitBudget(ctx, workspaceID, est, s.opts.Now())
	if err != nil || a.Admitted {
		return "", "", "", err
	}
	switch a.Reason {
	case "billing_inactive":
		return "budget_billing_inactive", "workspace billing is inactive (a payment is past due, the subscription was canceled, or budget_policy.billing_active is false)", "", nil
	case "hard_cap_exceeded":
		return "budget_hard_cap_exceeded", "the period's spend " + a.Spent.String() + " USD plus the estimate " + est.String() + " USD passes the hard cap of " + a.Cap.String() + " USD", "/budget_policy/hard_cap_usd", nil
	}
	return "budget_policy_invalid", "the workspace budget_policy is not valid; an admin must fix it", "/budget_policy", nil
}
