package api

import (
	"encoding/json"
	"errors"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// A run's money goes through the workspace's gateway ledger (the store's
// ledger that POST /api/runtime/internal/gateway/workspaces/{w}/usage
// finalizes): before a run starts, the ledger must be under the
// workspace's hard cap with billing active; when it ends, its usage is
// appended there, keyed by run and fence so a repeated report is
// recorded once.

func budgetMessage(reason string) string {
	switch reason {
	case "billing_inactive":
		return "workspace billing is inactive: no run starts until it is active"
	case "hard_cap_exceeded":
		return "the workspace has reached its hard cap: no run starts until the cap is raised"
	case "budget_policy_invalid":
		return "the workspace budget_policy is not valid: no run starts until an admin fixes it"
	}
	return reason
}

// budgetBlocks answers why the workspace's budget admits no new run ("" when
// it does): billing inactive, or the period's ledger already at or over
// the cap (store.AdmitBudget, read from the database, not a cached copy).
func (s *Server) budgetBlocks(c *call) (string, error) {
	a, err := s.st.AdmitBudget(c.ctx(), c.ws.ID, 0, c.now())
	if err != nil {
		return "", err
	}
	if !a.Admitted {
		return a.Reason, nil
	}
	if a.Cap != nil && a.Spent >= *a.Cap {
		return "hard_cap_exceeded", nil
	}
	return "", nil
}

// recordRunUsage appends a finished run's usage to the ledger. The usage
// was already spent, so it is recorded even past the cap (the cap then
// blocks the next runs); the key makes a repeated completion a no-op.
func (s *Server) recordRunUsage(c *call, held store.WorkflowRun, u *sdk.RunUsage) error {
	r := held
	if u == nil {
		return nil
	}
	cost := u.CostUSD
	if cost == "" {
		cost = "0"
	}
	usd, err := store.ParseUSD(cost)
	if err != nil {
		return invalid(sdk.ErrorDetail{Field: "/usage/cost_usd", Message: "cost_usd must be a non-negative decimal number with at most 9 places"})
	}
	key := "run:" + r.ID + ":" + toString(r.Fence)
	a := map[string]any{
		"gateway_virtual_key_id": "worker:" + r.ExecutorID, "idempotency_key": key, "run_id": r.ID, "lease_id": r.LeaseID,
		"provider": u.Provider, "model": u.Model, "input_tokens": u.InputTokens, "output_tokens": u.OutputTokens, "total_tokens": u.TotalTokens,
		"cost_usd": cost, "status": "finalized", "source": "workflow_run",
	}
	attrs, err := json.Marshal(a)
	if err != nil {
		return err
	}
	e := &store.LedgerEntry{WorkspaceID: r.WorkspaceID, IdempotencyKey: key, BodyHash: bodyHash(a), Cost: usd, Attributes: attrs,
		CreatedBy: c.p.Actor(), CreatedAt: c.now(), Uncapped: true}
	_, err = s.st.RecordUsage(c.ctx(), e, c.audit("gateway.usage", "gateway/usage/"+key, map[string]any{"cost_usd": usd.String(), "source": "workflow_run"}))
	if errors.Is(err, store.ErrIdempotencyConflict) {
		return nil // recorded by an earlier report of the same lease
	}
	return err
}
