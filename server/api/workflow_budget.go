package api

import (
	"encoding/json"
	"errors"
	"math/big"
	"net/http"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// A run's money goes through the workspace's gateway ledger (the
// "gateway/usage" records that POST /api/runtime/internal/gateway/
// workspaces/{w}/usage finalizes): before a run starts, the ledger must
// be under the workspace's hard cap with billing active; when it ends,
// its usage is appended there, keyed by run and fence so a repeated
// report is recorded once.

const gatewayLedger = "gateway/usage"

func budgetMessage(reason string) string {
	switch reason {
	case "billing_inactive":
		return "workspace billing is inactive: no run starts until it is active"
	case "hard_cap_exceeded":
		return "the workspace has reached its hard cap: no run starts until the cap is raised"
	}
	return reason
}

// budgetBlocks answers why the workspace's budget admits no new run ("" when
// it does): billing inactive, or the ledger already at or over the cap.
func (s *Server) budgetBlocks(c *call) (string, error) {
	var p struct {
		BillingActive *bool  `json:"billing_active"`
		HardCapUSD    string `json:"hard_cap_usd"`
	}
	ws, err := s.st.Workspace(c.ctx(), c.ws.ID) // not the cached copy: a cap just lowered counts
	if err != nil {
		return "", err
	}
	if len(ws.BudgetPolicy) > 0 {
		_ = json.Unmarshal(ws.BudgetPolicy, &p)
	}
	if p.BillingActive != nil && !*p.BillingActive {
		return "billing_inactive", nil
	}
	capUSD, ok := new(big.Rat).SetString(p.HardCapUSD)
	if !ok || p.HardCapUSD == "" {
		return "", nil
	}
	total, err := s.ledgerTotal(c)
	if err != nil {
		return "", err
	}
	if total.Cmp(capUSD) >= 0 {
		return "hard_cap_exceeded", nil
	}
	return "", nil
}

// ledgerTotal sums the workspace's ledger in exact decimals.
func (s *Server) ledgerTotal(c *call) (*big.Rat, error) {
	total := new(big.Rat)
	var after int64
	for {
		recs, err := s.st.Records(c.ctx(), c.ws.ID, gatewayLedger, store.ListOptions{After: after, Limit: 500})
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			var a struct {
				Cost string `json:"cost_usd"`
			}
			if json.Unmarshal(r.Attributes, &a) == nil {
				if v, ok := new(big.Rat).SetString(a.Cost); ok {
					total.Add(total, v)
				}
			}
		}
		if len(recs) < 500 {
			return total, nil
		}
		after = recs[len(recs)-1].Seq
	}
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
	if _, ok := new(big.Rat).SetString(cost); !ok {
		return invalid(sdk.ErrorDetail{Field: "/usage/cost_usd", Message: "cost_usd must be a decimal number"})
	}
	key := "run:" + r.ID + ":" + toString(r.Fence)
	a := map[string]any{
		"gateway_virtual_key_id": "worker:" + r.ExecutorID, "idempotency_key": key, "run_id": r.ID, "lease_id": r.LeaseID,
		"provider": u.Provider, "model": u.Model, "input_tokens": u.InputTokens, "output_tokens": u.OutputTokens, "total_tokens": u.TotalTokens,
		"cost_usd": cost, "status": "finalized", "finalized_at": c.now(), "source": "workflow_run",
	}
	_, err := c.createRecord(gatewayLedger, key, a)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict {
		return nil // recorded by an earlier report of the same lease
	}
	return err
}
