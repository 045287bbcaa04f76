package sdk

import "time"

// Integrations (docs/integrations.md): webhook endpoints of a workspace —
// inbound sources a provider posts to, and outbound receivers reeve posts
// its events to — and the integration events received.

// Inbound providers (the {provider} of /api/webhooks/{provider}/events).
const (
	ProviderCodeHost     = "code-host"
	ProviderChat         = "chat"
	ProviderTracker      = "tracker"
	ProviderPaymentsThin = "payments-thin"
)

// Outbound event kinds.
const (
	EventSessionStarted      = "session.started"
	EventSessionEnded        = "session.ended"
	EventPermissionRequested = "permission.requested"
	EventPermissionDecided   = "permission.decided"
	EventWorkflowRunState    = "workflow_run.state_changed"
	EventInstallPaired       = "install.paired"
	EventInstallDetached     = "install.detached"
	EventBudgetThreshold     = "budget.threshold_crossed"
	EventIntegrationRouted   = "integration_event.routed"
	EventPing                = "webhook.ping"
)

// OutboundEventKinds lists what an outbound endpoint may subscribe to
// ("*" subscribes to all).
var OutboundEventKinds = []string{
	EventSessionStarted, EventSessionEnded, EventPermissionRequested, EventPermissionDecided,
	EventWorkflowRunState, EventInstallPaired, EventInstallDetached, EventBudgetThreshold,
	EventIntegrationRouted, EventPing,
}

// IntegrationWebhookCreateRequest creates an endpoint. Outbound (the
// default direction): URL and Events. Inbound: Provider, and optionally
// the Secret the provider was given (one is generated otherwise).
type IntegrationWebhookCreateRequest struct {
	Direction   string   `json:"direction,omitempty"` // outbound (default) | inbound
	URL         string   `json:"url,omitempty"`
	Events      []string `json:"events,omitempty"`
	Provider    string   `json:"provider,omitempty"`
	Secret      string   `json:"secret,omitempty"`
	Description string   `json:"description,omitempty"`
}

// IntegrationWebhook is an endpoint as the API shows it. Secret is set
// only in the answers of create and rotate-secret: it is shown once.
type IntegrationWebhook struct {
	ID                     string         `json:"id"`
	WorkspaceID            string         `json:"workspace_id"`
	Direction              string         `json:"direction"`
	Provider               string         `json:"provider,omitempty"`
	URL                    string         `json:"url,omitempty"`
	Events                 []string       `json:"events,omitempty"`
	Description            string         `json:"description,omitempty"`
	Disabled               bool           `json:"disabled"`
	PayloadVersion         string         `json:"payload_version,omitempty"`
	IngestURL              string         `json:"ingest_url,omitempty"` // inbound: where the provider posts
	Secret                 string         `json:"secret,omitempty"`
	SecretRotatedAt        *time.Time     `json:"secret_rotated_at,omitempty"`
	PreviousSecretExpires  *time.Time     `json:"previous_secret_expires_at,omitempty"`
	RouteVersionRepairedAt *time.Time     `json:"route_version_repaired_at,omitempty"`
	Registration           map[string]any `json:"registration,omitempty"`
	CreatedBy              string         `json:"created_by"`
	CreatedAt              time.Time      `json:"created_at"`
	UpdatedAt              time.Time      `json:"updated_at"`
}

// IntegrationWebhookResponse holds one endpoint.
type IntegrationWebhookResponse = Data[IntegrationWebhook]

// IntegrationWebhookCollectionResponse lists endpoints.
type IntegrationWebhookCollectionResponse struct {
	Data []IntegrationWebhook `json:"data"`
	Meta ListMeta             `json:"meta"`
}

// RotateSecretRequest rotates an endpoint's secret; the previous one keeps
// signing (outbound) or verifying (inbound) for GraceSeconds (default
// 86400). Secret sets the new inbound secret (generated when empty).
type RotateSecretRequest struct {
	GraceSeconds int64  `json:"grace_seconds,omitempty"`
	Secret       string `json:"secret,omitempty"`
}

// WebhookDelivery is one attempt to deliver a message to an endpoint.
type WebhookDelivery struct {
	Seq         int64     `json:"seq"`
	MessageID   string    `json:"message_id"`
	Kind        string    `json:"kind"`
	Attempt     int       `json:"attempt"`
	StatusCode  int       `json:"status_code"` // 0: no HTTP answer
	LatencyMS   int64     `json:"latency_ms"`
	Outcome     string    `json:"outcome"` // delivered | retry | dead
	Error       string    `json:"error,omitempty"`
	AttemptedAt time.Time `json:"attempted_at"`
}

// WebhookMessageState is a message of the outbox as deliveries shows it.
type WebhookMessageState struct {
	ID            string    `json:"id"`
	Kind          string    `json:"kind"`
	State         string    `json:"state"` // pending | delivered | dead
	Attempts      int       `json:"attempts"`
	NextAttemptAt time.Time `json:"next_attempt_at"`
	LastError     string    `json:"last_error,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
}

// WebhookDeliveryCollectionResponse lists an endpoint's attempts, oldest
// first, and its latest messages.
type WebhookDeliveryCollectionResponse struct {
	Data     []WebhookDelivery     `json:"data"`
	Messages []WebhookMessageState `json:"messages"`
	Meta     ListMeta              `json:"meta"`
}

// WebhookProvider says what an inbound source needs.
type WebhookProvider struct {
	Provider        string   `json:"provider"`
	IngestPath      string   `json:"ingest_path"`
	Scheme          string   `json:"scheme"`
	SignatureHeader string   `json:"signature_header"`
	TimestampHeader string   `json:"timestamp_header,omitempty"`
	DeliveryID      string   `json:"delivery_id"`
	EventKinds      []string `json:"event_kinds"`
	Notes           string   `json:"notes,omitempty"`
}

// WebhookProviderCollectionResponse lists the inbound providers.
type WebhookProviderCollectionResponse struct {
	Data []WebhookProvider `json:"data"`
}

// IntegrationEvent is a verified inbound delivery.
type IntegrationEvent struct {
	ID           string         `json:"id"`
	WorkspaceID  string         `json:"workspace_id"`
	Provider     string         `json:"provider"`
	Kind         string         `json:"kind"`
	Action       string         `json:"action,omitempty"`
	DeliveryID   string         `json:"delivery_id"`
	Subject      EventSubject   `json:"subject"`
	Verification Verification   `json:"verification"`
	Routing      Routing        `json:"routing"`
	Payload      map[string]any `json:"payload,omitempty"`
	ReceivedAt   time.Time      `json:"received_at"`
}

// EventSubject is what routing reads of an event: the item it is about.
type EventSubject struct {
	Title  string   `json:"title,omitempty"`
	Body   string   `json:"body,omitempty"`
	URL    string   `json:"url,omitempty"`
	Labels []string `json:"labels,omitempty"`
	Repo   string   `json:"repo,omitempty"`
	// AddedLabel is the label a "labeled" action added.
	AddedLabel string `json:"added_label,omitempty"`
}

// Verification is how an inbound delivery was authenticated.
type Verification struct {
	Scheme     string    `json:"scheme"`
	Result     string    `json:"result"` // verified
	Secret     string    `json:"secret"` // current | previous
	VerifiedAt time.Time `json:"verified_at"`
}

// Routing is what the workspace's routes made of an event.
type Routing struct {
	EvaluatedAt time.Time      `json:"evaluated_at"`
	Attempt     int            `json:"attempt"`
	Trigger     string         `json:"trigger,omitempty"` // the routes.v1 trigger the event maps to
	Matched     []RouteMatch   `json:"matched"`
	Errors      []string       `json:"errors,omitempty"`
	History     []RoutingBrief `json:"history,omitempty"`
}

// RouteMatch is one route that matched and what it created.
type RouteMatch struct {
	Route         string `json:"route"`
	Resource      string `json:"resource"` // the team resource bundle the route came from
	Version       string `json:"version"`
	File          string `json:"file"`
	Agent         string `json:"agent"`
	Model         string `json:"model,omitempty"`
	Prompt        string `json:"prompt"`
	Created       string `json:"created"` // workflow_run | run_request
	WorkflowRunID string `json:"workflow_run_id,omitempty"`
	Status        string `json:"status"`
	Error         string `json:"error,omitempty"`
}

// RoutingBrief is an earlier routing of an event (kept by retry-routing).
type RoutingBrief struct {
	EvaluatedAt time.Time `json:"evaluated_at"`
	Attempt     int       `json:"attempt"`
	Matched     []string  `json:"matched"`
}

// IntegrationEventResponse holds one event.
type IntegrationEventResponse = Data[IntegrationEvent]

// IntegrationEventCollectionResponse lists events, oldest first.
type IntegrationEventCollectionResponse struct {
	Data []IntegrationEvent `json:"data"`
	Meta ListMeta           `json:"meta"`
}

// WebhookIngestResponse answers a provider's delivery.
type WebhookIngestResponse struct {
	EventID   string `json:"event_id"`
	Kind      string `json:"kind"`
	Duplicate bool   `json:"duplicate"`
	Matched   int    `json:"matched"`
	Challenge string `json:"challenge,omitempty"` // chat URL verification
}
