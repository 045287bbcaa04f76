package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"reeve.dev/reeve/server/webhooksig"
)

// DefaultBaseURL is the hosted payments API.
const DefaultBaseURL = "https://api.stripe.com"

// Remote is the hosted payments provider's REST API (form-encoded
// requests, JSON answers), spoken over plain HTTP: the few calls billing
// makes do not need the provider's SDK.
type Remote struct {
	BaseURL string // default DefaultBaseURL
	Key     string // secret API key
	Price   string // the subscription's price
	// WebhookSecrets verify event signatures (several while one rolls).
	WebhookSecrets [][]byte
	Tolerance      time.Duration // default webhooksig.DefaultTolerance
	HTTP           *http.Client
}

func (r *Remote) Kind() string { return KindPayments }

func (r *Remote) base() string {
	if r.BaseURL == "" {
		return DefaultBaseURL
	}
	return strings.TrimRight(r.BaseURL, "/")
}

func (r *Remote) client() *http.Client {
	if r.HTTP != nil {
		return r.HTTP
	}
	return &http.Client{Timeout: 30 * time.Second}
}

// apiError is the provider's error body; its message never holds the key.
type apiError struct {
	Error struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// call sends one request and decodes the JSON answer into out.
func (r *Remote) call(ctx context.Context, method, path string, form url.Values, out any) error {
	u := r.base() + path
	var body io.Reader
	if method == http.MethodGet && len(form) > 0 {
		u += "?" + form.Encode()
	} else if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	req.SetBasicAuth(r.Key, "")
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := r.client().Do(req)
	if err != nil {
		return fmt.Errorf("payments provider: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("payments provider: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var e apiError
		_ = json.Unmarshal(data, &e)
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("payments provider: %w: %s", ErrNotFound, e.Error.Message)
		}
		return fmt.Errorf("payments provider: %s %s %s", resp.Status, e.Error.Type, e.Error.Message)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("payments provider: decode %s: %w", path, err)
	}
	return nil
}

// ErrNotFound: the provider has no such object.
var ErrNotFound = errors.New("no such object")

func (r *Remote) Checkout(ctx context.Context, c CheckoutRequest) (string, error) {
	f := url.Values{}
	f.Set("mode", "subscription")
	f.Set("line_items[0][price]", r.Price)
	f.Set("success_url", c.SuccessURL)
	if c.CancelURL != "" {
		f.Set("cancel_url", c.CancelURL)
	}
	f.Set("client_reference_id", c.WorkspaceID)
	f.Set("metadata[workspace_id]", c.WorkspaceID)
	f.Set("subscription_data[metadata][workspace_id]", c.WorkspaceID)
	if c.CustomerRef != "" {
		f.Set("customer", c.CustomerRef)
	}
	var s struct {
		URL string `json:"url"`
	}
	if err := r.call(ctx, http.MethodPost, "/v1/checkout/sessions", f, &s); err != nil {
		return "", err
	}
	if s.URL == "" {
		return "", errors.New("payments provider: the checkout session has no redirect URL")
	}
	return s.URL, nil
}

func (r *Remote) FindCustomer(ctx context.Context, workspaceID string) (string, error) {
	var l struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	q := url.Values{"query": {fmt.Sprintf("metadata['workspace_id']:'%s'", strings.ReplaceAll(workspaceID, "'", ""))}, "limit": {"1"}}
	if err := r.call(ctx, http.MethodGet, "/v1/customers/search", q, &l); err != nil {
		return "", err
	}
	if len(l.Data) == 0 {
		return "", nil
	}
	return l.Data[0].ID, nil
}

func (r *Remote) EnsureCustomer(ctx context.Context, workspaceID, email string) (string, error) {
	if id, err := r.FindCustomer(ctx, workspaceID); err != nil || id != "" {
		return id, err
	}
	f := url.Values{"metadata[workspace_id]": {workspaceID}}
	if email != "" {
		f.Set("email", email)
	}
	var c struct {
		ID string `json:"id"`
	}
	if err := r.call(ctx, http.MethodPost, "/v1/customers", f, &c); err != nil {
		return "", err
	}
	return c.ID, nil
}

func (r *Remote) Portal(ctx context.Context, customerRef, returnURL string) (string, error) {
	f := url.Values{"customer": {customerRef}}
	if returnURL != "" {
		f.Set("return_url", returnURL)
	}
	var s struct {
		URL string `json:"url"`
	}
	if err := r.call(ctx, http.MethodPost, "/v1/billing_portal/sessions", f, &s); err != nil {
		return "", err
	}
	if s.URL == "" {
		return "", errors.New("payments provider: the portal session has no redirect URL")
	}
	return s.URL, nil
}

// wireInvoice is the provider's invoice, as far as billing reads it.
type wireInvoice struct {
	ID          string  `json:"id"`
	Number      *string `json:"number"`
	Status      *string `json:"status"`
	Currency    string  `json:"currency"`
	AmountDue   int64   `json:"amount_due"`
	AmountPaid  int64   `json:"amount_paid"`
	PeriodStart int64   `json:"period_start"`
	PeriodEnd   int64   `json:"period_end"`
	Created     int64   `json:"created"`
	Customer    string  `json:"customer"`
}

func unixPtr(s int64) *time.Time {
	if s <= 0 {
		return nil
	}
	t := time.Unix(s, 0).UTC()
	return &t
}

func (w wireInvoice) invoice() Invoice {
	in := Invoice{Ref: w.ID, Currency: w.Currency, AmountDue: w.AmountDue, AmountPaid: w.AmountPaid,
		PeriodStart: unixPtr(w.PeriodStart), PeriodEnd: unixPtr(w.PeriodEnd), Created: time.Unix(w.Created, 0).UTC()}
	if w.Number != nil {
		in.Number = *w.Number
	}
	if w.Status != nil {
		in.Status = *w.Status
	}
	return in
}

func (r *Remote) Invoices(ctx context.Context, customerRef string, limit int) ([]Invoice, error) {
	var l struct {
		Data []wireInvoice `json:"data"`
	}
	if err := r.call(ctx, http.MethodGet, "/v1/invoices", url.Values{"customer": {customerRef}, "limit": {strconv.Itoa(limit)}}, &l); err != nil {
		return nil, err
	}
	out := make([]Invoice, 0, len(l.Data))
	for _, w := range l.Data {
		out = append(out, w.invoice())
	}
	return out, nil
}

func (r *Remote) Invoice(ctx context.Context, ref string) (Invoice, error) {
	var w wireInvoice
	if err := r.call(ctx, http.MethodGet, "/v1/invoices/"+url.PathEscape(ref), nil, &w); err != nil {
		return Invoice{}, err
	}
	return w.invoice(), nil
}

func (r *Remote) PaymentMethod(ctx context.Context, customerRef string) (Card, error) {
	var l struct {
		Data []struct {
			Card struct {
				Brand string `json:"brand"`
				Last4 string `json:"last4"`
			} `json:"card"`
		} `json:"data"`
	}
	if err := r.call(ctx, http.MethodGet, "/v1/payment_methods", url.Values{"customer": {customerRef}, "type": {"card"}, "limit": {"1"}}, &l); err != nil {
		return Card{}, err
	}
	if len(l.Data) == 0 {
		return Card{}, nil
	}
	return Card{Brand: l.Data[0].Card.Brand, Last4: l.Data[0].Card.Last4}, nil
}

// NormalizeStatus maps the provider's subscription status onto billing's.
func NormalizeStatus(s string) string {
	switch s {
	case "active", "trialing":
		return StatusActive
	case "past_due", "unpaid", "incomplete", "paused":
		return StatusPastDue
	case "canceled", "incomplete_expired":
		return StatusCanceled
	}
	return ""
}

func (r *Remote) Subscription(ctx context.Context, customerRef string) (Subscription, error) {
	var l struct {
		Data []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"data"`
	}
	if err := r.call(ctx, http.MethodGet, "/v1/subscriptions", url.Values{"customer": {customerRef}, "status": {"all"}, "limit": {"1"}}, &l); err != nil {
		return Subscription{}, err
	}
	if len(l.Data) == 0 {
		return Subscription{Status: StatusNone}, nil
	}
	return Subscription{Ref: l.Data[0].ID, Status: NormalizeStatus(l.Data[0].Status)}, nil
}

func (r *Remote) Pricing() Pricing {
	return Pricing{BillingMode: "subscription_with_usage", BillableUnit: "usd_of_model_usage", Currency: "usd", PassThrough: passThrough}
}

func (r *Remote) WebhookConfigured() bool { return len(r.WebhookSecrets) > 0 }

func (r *Remote) WebhookTolerance() time.Duration {
	if r.Tolerance > 0 {
		return r.Tolerance
	}
	return webhooksig.DefaultTolerance
}

// VerifyEvent checks the delivery under each configured secret (any one
// may match while a secret rolls) and parses it.
func (r *Remote) VerifyEvent(body []byte, header string, now time.Time) (Event, error) {
	if !r.WebhookConfigured() {
		return Event{}, ErrNotConfigured
	}
	var err error
	ok := false
	for _, s := range r.WebhookSecrets {
		if _, err = webhooksig.VerifyPayments(s, body, header, now, r.WebhookTolerance()); err == nil {
			ok = true
			break
		}
		if errors.Is(err, webhooksig.ErrStale) || errors.Is(err, webhooksig.ErrMalformed) || errors.Is(err, webhooksig.ErrMissing) {
			break // the same under every secret
		}
	}
	if !ok {
		return Event{}, fmt.Errorf("%w: %w", ErrSignature, err)
	}
	return ParseEvent(body)
}

// ParseEvent reads a (verified) event body.
func ParseEvent(body []byte) (Event, error) {
	var w struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Created int64  `json:"created"`
		Data    struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &w); err != nil || w.ID == "" || w.Type == "" {
		return Event{}, errors.New("not a payments event: it needs an id, a type and data.object")
	}
	var o struct {
		Object            string            `json:"object"`
		ID                string            `json:"id"`
		Customer          string            `json:"customer"`
		Subscription      string            `json:"subscription"`
		Status            string            `json:"status"`
		ClientReferenceID string            `json:"client_reference_id"`
		Metadata          map[string]string `json:"metadata"`
		SubscriptionMeta  *struct {
			Metadata map[string]string `json:"metadata"`
		} `json:"subscription_details"`
	}
	_ = json.Unmarshal(w.Data.Object, &o)
	e := Event{ID: w.ID, Type: w.Type, Created: time.Unix(w.Created, 0).UTC(), CustomerRef: o.Customer, SubscriptionRef: o.Subscription}
	e.WorkspaceID = o.Metadata["workspace_id"]
	if e.WorkspaceID == "" {
		e.WorkspaceID = o.ClientReferenceID
	}
	if e.WorkspaceID == "" && o.SubscriptionMeta != nil {
		e.WorkspaceID = o.SubscriptionMeta.Metadata["workspace_id"]
	}
	switch w.Type {
	case "checkout.session.completed":
		e.Status = StatusActive
	case "customer.subscription.created", "customer.subscription.updated", "customer.subscription.resumed", "customer.subscription.paused":
		e.SubscriptionRef = o.ID
		e.Status = NormalizeStatus(o.Status)
	case "customer.subscription.deleted":
		e.SubscriptionRef = o.ID
		e.Status = StatusCanceled
	case "invoice.paid", "invoice.payment_succeeded", "invoice.payment_failed", "invoice.finalized", "invoice.updated", "invoice.created":
		var wi wireInvoice
		_ = json.Unmarshal(w.Data.Object, &wi)
		in := wi.invoice()
		e.Invoice = &in
		switch w.Type {
		case "invoice.paid", "invoice.payment_succeeded":
			e.Status = StatusActive
		case "invoice.payment_failed":
			e.Status = StatusPastDue
		}
	}
	return e, nil
}
