package store

import (
	"context"
	"encoding/json"
	"time"
)

// Integrations: outbound webhooks leave through a durable outbox. A change
// that other systems may want to hear about names its events in the
// AuditEntry it already writes (Emit); the store turns each into one
// outbox message per subscribed endpoint in the same transaction, so a
// message exists exactly when its change committed. A dispatcher claims
// due messages, records each attempt, and reschedules or dead-letters.

// WebhookEndpointCollection is the record collection of outbound webhook
// endpoints (the routes of /api/integration-webhooks). The store reads two
// attributes of them when it fans out an event: "events" (the kinds the
// endpoint wants, "*" for all) and "disabled".
const WebhookEndpointCollection = "integration-webhooks"

// OutboundEvent is a change an endpoint may subscribe to: Kind is its
// dotted name (session.started, install.paired, ...), Data its payload.
type OutboundEvent struct {
	Kind string
	Data any
}

// Message states.
const (
	WebhookPending   = "pending"
	WebhookDelivered = "delivered"
	WebhookDead      = "dead"
)

// WebhookMessage is one outbox row: an event rendered for one endpoint.
type WebhookMessage struct {
	ID            string // the webhook-id header, stable across attempts
	WorkspaceID   string
	EndpointID    string
	Kind          string
	Payload       json.RawMessage
	State         string
	Attempts      int
	NextAttemptAt time.Time
	LeaseOwner    string
	LastError     string
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// WebhookAttempt is one try at delivering a message.
type WebhookAttempt struct {
	Seq         int64
	MessageID   string
	WorkspaceID string
	EndpointID  string
	Kind        string
	Attempt     int
	StatusCode  int // 0: no HTTP answer
	Latency     time.Duration
	Outcome     string // delivered, retry or dead
	Error       string
	AttemptedAt time.Time
}

// Integrations is the store side of integration webhooks; *DB implements it.
type Integrations interface {
	// EnqueueWebhook writes one message for one endpoint outside any other
	// change (a test delivery, a re-sent message).
	EnqueueWebhook(ctx context.Context, workspaceID, endpointID string, ev OutboundEvent, now time.Time) (WebhookMessage, error)
	// ClaimWebhooks leases up to limit pending messages due at now to
	// owner until now+lease; a message whose lease ran out (its dispatcher
	// died) is claimable again.
	ClaimWebhooks(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]WebhookMessage, error)
	// FinishWebhookAttempt records an attempt of a message leased to
	// a.owner and moves the message: delivered, dead, or pending again at
	// next. It returns ErrConflict when the lease was lost.
	FinishWebhookAttempt(ctx context.Context, owner string, a WebhookAttempt, next time.Time) error
	// WebhookMessages lists an endpoint's messages, newest first.
	WebhookMessages(ctx context.Context, workspaceID, endpointID string, limit int) ([]WebhookMessage, error)
	// WebhookAttempts lists an endpoint's attempts in order.
	WebhookAttempts(ctx context.Context, workspaceID, endpointID string, opts ListOptions) ([]WebhookAttempt, error)
	// RetryDeadWebhooks makes an endpoint's dead messages pending again.
	RetryDeadWebhooks(ctx context.Context, workspaceID, endpointID string, now time.Time) (int64, error)
	// ThrottleHit counts one inbound request of (workspace, source) in the
	// window starting at window and returns the count so far.
	ThrottleHit(ctx context.Context, workspaceID, source string, window time.Time) (int64, error)
}

var _ Integrations = (*DB)(nil)
