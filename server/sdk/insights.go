package sdk

import (
	"encoding/json"
	"time"
)

// Insights (spec 4.9) and review packets (spec 4.12; docs/insights.md).

// Insight rules.
const (
	RuleRepeatedDenials  = "repeated_denials"  // one tool denied again and again
	RuleBudgetNearCap    = "budget_near_cap"   // the period's ledger total at the warn fraction of the hard cap
	RuleInstallStale     = "install_stale"     // a paired machine not seen for 7 days
	RuleRunsFailing      = "runs_failing"      // one workflow's runs failing repeatedly
	RuleUnguardedSession = "unguarded_session" // sessions run without a policy or human deciding tool use
)

// InsightRules lists every rule, in the order detection runs them.
var InsightRules = []string{RuleRepeatedDenials, RuleBudgetNearCap, RuleInstallStale, RuleRunsFailing, RuleUnguardedSession}

// Insight statuses.
const (
	InsightOpen      = "open"
	InsightAccepted  = "accepted"
	InsightDismissed = "dismissed"
	InsightConverted = "converted"
)

// Review packet statuses.
const (
	PacketPending  = "pending"
	PacketApproved = "approved"
	PacketRejected = "rejected"
)

// CodeInvalidTransition is the 409 of a status change the insight's
// current status does not allow, or of converting an insight that is not
// accepted.
const CodeInvalidTransition = "invalid_transition"

// EvidenceLink points at a record: kind is session, run, ledger_period,
// install or audit; id the record's id (the period key for a ledger
// period).
type EvidenceLink struct {
	Kind string     `json:"kind"`
	ID   string     `json:"id"`
	Note string     `json:"note,omitempty"`
	At   *time.Time `json:"at,omitempty"`
}

// Insight is one finding of a detection rule.
type Insight struct {
	ID              string          `json:"id"`
	WorkspaceID     string          `json:"workspace_id"`
	Rule            string          `json:"rule"`
	Subject         string          `json:"subject"`
	Status          string          `json:"status"`
	Title           string          `json:"title"`
	Severity        string          `json:"severity"`
	Detail          json.RawMessage `json:"detail"`
	Evidence        []EvidenceLink  `json:"evidence"`
	Count           int64           `json:"count"`
	FirstSeenAt     time.Time       `json:"first_seen_at"`
	LastSeenAt      time.Time       `json:"last_seen_at"`
	StatusChangedBy string          `json:"status_changed_by,omitempty"`
	StatusChangedAt *time.Time      `json:"status_changed_at,omitempty"`
	StatusReason    string          `json:"status_reason,omitempty"`
	ReviewPacketID  string          `json:"review_packet_id,omitempty"`
	Seq             int64           `json:"seq"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
}

// InsightResponse is one insight.
type InsightResponse struct {
	Data Insight `json:"data"`
}

// InsightCollectionResponse lists insights; detect adds what it did.
type InsightCollectionResponse struct {
	Data []Insight   `json:"data"`
	Meta InsightMeta `json:"meta"`
}

// InsightMeta is the list's paging, and on detect its counts.
type InsightMeta struct {
	Count     int   `json:"count"`
	NextAfter int64 `json:"next_after,omitempty"`
	Created   *int  `json:"created,omitempty"`
	Updated   *int  `json:"updated,omitempty"`
	Unchanged *int  `json:"unchanged,omitempty"`
	// Resolved: detect's open insights whose condition cleared (now
	// dismissed by system:insights, reason resolved).
	Resolved *int `json:"resolved,omitempty"`
}

// InsightUpdateRequest changes an insight's status.
type InsightUpdateRequest struct {
	Status string  `json:"status"`
	Reason *string `json:"reason,omitempty"`
}

// InsightSummary aggregates a workspace's insights, review packets and,
// for owners and admins, its ledger.
type InsightSummary struct {
	Total         int64                       `json:"total"`
	ByStatus      map[string]int64            `json:"by_status"`
	ByRule        map[string]map[string]int64 `json:"by_rule"`
	ReviewPackets map[string]int64            `json:"review_packets"`
	Ledger        *LedgerSummary              `json:"ledger"`
}

// LedgerSummary is the current period's total against the hard cap, and
// the last periods' totals.
type LedgerSummary struct {
	Period         string              `json:"period"`
	SpentUSD       string              `json:"spent_usd"`
	HardCapUSD     *string             `json:"hard_cap_usd"`
	RemainingUSD   *string             `json:"remaining_usd"`
	FractionUsed   *float64            `json:"fraction_used"`
	WarnAtFraction float64             `json:"warn_at_fraction"`
	Entries        int64               `json:"entries"`
	Periods        []LedgerPeriodTotal `json:"periods"`
}

// LedgerPeriodTotal is one period's total.
type LedgerPeriodTotal struct {
	Period   string `json:"period"`
	TotalUSD string `json:"total_usd"`
	Entries  int64  `json:"entries"`
}

// InsightSummaryResponse is the summary route's answer.
type InsightSummaryResponse struct {
	Data InsightSummary `json:"data"`
}

// ReviewPacket gathers evidence for one decision by an owner or admin.
type ReviewPacket struct {
	ID             string          `json:"id"`
	WorkspaceID    string          `json:"workspace_id"`
	Title          string          `json:"title"`
	Summary        string          `json:"summary"`
	Status         string          `json:"status"`
	InsightID      string          `json:"insight_id,omitempty"`
	Evidence       []EvidenceLink  `json:"evidence"`
	Detail         json.RawMessage `json:"detail"`
	CreatedBy      string          `json:"created_by"`
	CreatedAt      time.Time       `json:"created_at"`
	DecidedBy      string          `json:"decided_by,omitempty"`
	DecidedAt      *time.Time      `json:"decided_at,omitempty"`
	DecisionReason string          `json:"decision_reason,omitempty"`
	Seq            int64           `json:"seq"`
	UpdatedAt      time.Time       `json:"updated_at"`
}

// ReviewPacketResponse is one packet.
type ReviewPacketResponse struct {
	Data ReviewPacket `json:"data"`
}

// ReviewPacketCollectionResponse lists packets.
type ReviewPacketCollectionResponse struct {
	Data []ReviewPacket `json:"data"`
	Meta ListMeta       `json:"meta"`
}

// ReviewPacketCreateRequest creates a packet from evidence links.
type ReviewPacketCreateRequest struct {
	Title    string         `json:"title"`
	Summary  string         `json:"summary,omitempty"`
	Evidence []EvidenceLink `json:"evidence"`
}

// ReviewPacketDecisionRequest approves or rejects a pending packet.
type ReviewPacketDecisionRequest struct {
	Decision string  `json:"decision"` // approve or reject
	Reason   *string `json:"reason,omitempty"`
}
