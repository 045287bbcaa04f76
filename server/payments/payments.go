// Package payments is the control plane's payments provider behind a
// brand-neutral interface: the hosted provider's REST API (Remote) or the
// built-in Manual provider of a self-hosted server without a payments
// account. Routes and schemas only ever say "payments"; the provider's
// customer, session and subscription references stay on the server.
package payments

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Kinds of provider, as routes name them.
const (
	KindPayments = "payments" // the hosted payments API
	KindManual   = "manual"   // no payments account: the operator bills
)

// Subscription statuses, normalized (store.Billing* have the same values).
const (
	StatusNone     = "none"
	StatusActive   = "active"
	StatusPastDue  = "past_due"
	StatusCanceled = "canceled"
)

// ErrNotConfigured: the provider cannot do this (manual, or no webhook
// secret).
var ErrNotConfigured = errors.New("not configured")

// ErrSignature wraps every webhook verification failure.
var ErrSignature = errors.New("payments webhook signature")

// CheckoutRequest starts a subscription checkout for a workspace.
type CheckoutRequest struct {
	WorkspaceID, CustomerRef, SuccessURL, CancelURL string
}

// Invoice is an invoice as the provider reports it (amounts in cents).
type Invoice struct {
	Ref, Number, Status, Currency string
	AmountDue, AmountPaid         int64
	PeriodStart, PeriodEnd        *time.Time
	Created                       time.Time
}

// Card is the payment method's safe part.
type Card struct{ Brand, Last4 string }

// Subscription is a customer's current subscription.
type Subscription struct{ Ref, Status string }

// Event is a verified webhook event, reduced to what billing state needs.
type Event struct {
	ID, Type        string
	Created         time.Time
	WorkspaceID     string // from metadata or client_reference_id; "" when absent
	CustomerRef     string
	SubscriptionRef string
	// Status is the billing status the event implies ("" for none).
	Status  string
	Invoice *Invoice
}

// Pricing is what the pricing route shows: no price ids, no secrets.
type Pricing struct {
	BillingMode  string   `json:"billing_mode"`
	BillableUnit string   `json:"billable_unit"`
	Currency     string   `json:"currency"`
	PassThrough  []string `json:"pass_through_providers"`
}

// Provider is a payments provider.
type Provider interface {
	Kind() string
	// Checkout returns the redirect URL of a new checkout session.
	Checkout(ctx context.Context, r CheckoutRequest) (string, error)
	// EnsureCustomer finds or creates the workspace's customer.
	EnsureCustomer(ctx context.Context, workspaceID, email string) (string, error)
	// FindCustomer looks the workspace's customer up ("" when none).
	FindCustomer(ctx context.Context, workspaceID string) (string, error)
	Portal(ctx context.Context, customerRef, returnURL string) (string, error)
	Invoices(ctx context.Context, customerRef string, limit int) ([]Invoice, error)
	Invoice(ctx context.Context, ref string) (Invoice, error)
	PaymentMethod(ctx context.Context, customerRef string) (Card, error)
	Subscription(ctx context.Context, customerRef string) (Subscription, error)
	Pricing() Pricing
	// WebhookConfigured reports whether events can be verified.
	WebhookConfigured() bool
	// VerifyEvent checks the signature header of a webhook delivery, with
	// its timestamp tolerance, and parses the event.
	VerifyEvent(body []byte, header string, now time.Time) (Event, error)
	WebhookTolerance() time.Duration
}

// FromEnv builds the provider a server's environment configures:
// REEVE_PAYMENTS_API_KEY selects the hosted API (REEVE_PAYMENTS_API_URL,
// REEVE_PAYMENTS_PRICE, REEVE_PAYMENTS_WEBHOOK_SECRET, comma separated
// while one rolls); without a key, the manual provider.
func FromEnv(getenv func(string) string) (Provider, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	key := strings.TrimSpace(getenv("REEVE_PAYMENTS_API_KEY"))
	if key == "" {
		return Manual{}, nil
	}
	r := &Remote{BaseURL: strings.TrimSpace(getenv("REEVE_PAYMENTS_API_URL")), Key: key, Price: strings.TrimSpace(getenv("REEVE_PAYMENTS_PRICE"))}
	for _, s := range strings.Split(getenv("REEVE_PAYMENTS_WEBHOOK_SECRET"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			r.WebhookSecrets = append(r.WebhookSecrets, []byte(s))
		}
	}
	if r.Price == "" {
		return nil, fmt.Errorf("REEVE_PAYMENTS_API_KEY is set but REEVE_PAYMENTS_PRICE (the subscription's price) is not")
	}
	return r, nil
}

// passThrough lists the model providers the gateway admits as pass-through
// usage (spec 4.11's provider enumeration).
var passThrough = []string{"provider_a", "provider_b", "provider_d"}

// Manual is the provider of a self-hosted server without a payments
// account: checkout activates billing at once (the operator bills by other
// means), there are no cards, and invoices are the ledger's monthly totals
// (the API builds them).
type Manual struct{}

func (Manual) Kind() string { return KindManual }
func (Manual) Checkout(_ context.Context, r CheckoutRequest) (string, error) {
	return r.SuccessURL, nil
}
func (Manual) EnsureCustomer(_ context.Context, workspaceID, _ string) (string, error) {
	return "manual-" + workspaceID, nil
}
func (Manual) FindCustomer(_ context.Context, workspaceID string) (string, error) {
	return "manual-" + workspaceID, nil
}
func (Manual) Portal(_ context.Context, _, returnURL string) (string, error) { return returnURL, nil }
func (Manual) Invoices(context.Context, string, int) ([]Invoice, error)      { return nil, nil }
func (Manual) Invoice(context.Context, string) (Invoice, error) {
	return Invoice{}, ErrNotConfigured
}
func (Manual) PaymentMethod(context.Context, string) (Card, error) { return Card{}, nil }
func (Manual) Subscription(context.Context, string) (Subscription, error) {
	return Subscription{Status: StatusActive}, nil
}
func (Manual) Pricing() Pricing {
	return Pricing{BillingMode: "manual", BillableUnit: "usd_of_model_usage", Currency: "usd", PassThrough: passThrough}
}
func (Manual) WebhookConfigured() bool { return false }
func (Manual) VerifyEvent([]byte, string, time.Time) (Event, error) {
	return Event{}, ErrNotConfigured
}
func (Manual) WebhookTolerance() time.Duration { return 0 }
