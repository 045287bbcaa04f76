package sdk

import "time"

// Error codes of the ledger, provider keys and billing.
const (
	CodeIdempotencyConflict = "idempotency_conflict" // 409: an idempotency key reused with another body
	CodePaymentsSignature   = "signature_invalid"    // 400: a payments webhook whose signature does not verify
	CodePaymentsReplay      = "event_replayed"       // 409: a payments webhook event id seen before
	CodeNotConfigured       = "not_configured"       // 404: the payments webhook has no secret on this server
)

// LedgerEntry is a finalized gateway usage record. Money is a decimal
// string (exact, never a float).
type LedgerEntry struct {
	ID                  string    `json:"id"`
	Seq                 int64     `json:"seq"`
	WorkspaceID         string    `json:"workspace_id"`
	Period              string    `json:"period"` // the month, YYYY-MM
	IdempotencyKey      string    `json:"idempotency_key"`
	CostUSD             string    `json:"cost_usd"`
	GatewayVirtualKeyID string    `json:"gateway_virtual_key_id"`
	RunID               string    `json:"run_id"`
	LeaseID             string    `json:"lease_id"`
	TeamRef             *string   `json:"team_ref"`
	Provider            string    `json:"provider"`
	Model               string    `json:"model"`
	InputTokens         int64     `json:"input_tokens"`
	OutputTokens        int64     `json:"output_tokens"`
	TotalTokens         int64     `json:"total_tokens"`
	LatencyMS           *int64    `json:"latency_ms"`
	Status              *string   `json:"status"`
	ErrorCode           *string   `json:"error_code"`
	OccurredAt          *string   `json:"occurred_at"`
	FinalizedAt         time.Time `json:"finalized_at"`
	RecordedBy          string    `json:"recorded_by"`
	// Replayed is true on the 200 answer to a repeated idempotency key.
	Replayed bool `json:"replayed"`
}

// GatewayUsageRecordResponse answers the gateway usage route.
type GatewayUsageRecordResponse struct {
	Data LedgerEntry `json:"data"`
}

// LedgerPeriod is a workspace's total in one period.
type LedgerPeriod struct {
	Period   string `json:"period"` // YYYY-MM or YYYY-MM-DD
	Kind     string `json:"kind"`   // monthly or daily
	TotalUSD string `json:"total_usd"`
	Entries  int64  `json:"entries"`
}

// BudgetStatus is the budget in force now.
type BudgetStatus struct {
	Period       string  `json:"period"`
	HardCapUSD   *string `json:"hard_cap_usd"`
	SpentUSD     string  `json:"spent_usd"`
	RemainingUSD *string `json:"remaining_usd"`
	Admitted     bool    `json:"admitted"`
	Reason       string  `json:"reason,omitempty"`
}

// GatewayLedger is the admin view of the ledger.
type GatewayLedger struct {
	Entries []LedgerEntry  `json:"entries"`
	Periods []LedgerPeriod `json:"periods"`
	Budget  BudgetStatus   `json:"budget"`
}

// GatewayLedgerResponse answers GET .../gateway/ledger.
type GatewayLedgerResponse struct {
	Data GatewayLedger `json:"data"`
	Meta ListMeta      `json:"meta"`
}

// ProviderKey is a provider key as routes show it: never its secret.
type ProviderKey struct {
	ID          string     `json:"id"`
	WorkspaceID string     `json:"workspace_id"`
	Provider    string     `json:"provider"`
	Mode        string     `json:"mode"`
	TeamID      *int64     `json:"team_id"`
	KeyRef      *string    `json:"key_ref"`
	HasSecret   bool       `json:"has_secret"`
	Fingerprint string     `json:"fingerprint,omitempty"` // a keyed MAC, "hmac-sha256:..."
	Version     int64      `json:"version"`
	CreatedBy   string     `json:"created_by"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	RotatedAt   *time.Time `json:"rotated_at"`
}

// ProviderKeyResponse answers create, get, rotate and delete.
type ProviderKeyResponse struct {
	Data ProviderKey `json:"data"`
}

// ProviderKeyCollectionResponse answers the list.
type ProviderKeyCollectionResponse struct {
	Data []ProviderKey `json:"data"`
	Meta ListMeta      `json:"meta"`
}

// ProviderKeyMaterialRequest asks for a key's secret for a live run.
type ProviderKeyMaterialRequest struct {
	ProviderKeyID string `json:"provider_key_id"`
	RunID         string `json:"run_id"`
	LeaseID       string `json:"lease_id,omitempty"`
}

// ProviderKeyMaterial is the one answer that carries a secret.
type ProviderKeyMaterial struct {
	ProviderKeyID string `json:"provider_key_id"`
	Provider      string `json:"provider"`
	Mode          string `json:"mode"`
	Version       int64  `json:"version"`
	Fingerprint   string `json:"fingerprint"`
	Secret        string `json:"secret"`
}

// ProviderKeyMaterialResponse answers provider-key-material.
type ProviderKeyMaterialResponse struct {
	Data ProviderKeyMaterial `json:"data"`
}
