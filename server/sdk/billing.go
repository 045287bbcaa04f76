package sdk

import "time"

// Billing shapes (spec 4.6). The payments provider's customer, session and
// subscription references are never part of them.

// BillingAccountStatus is a workspace's billing state.
type BillingAccountStatus struct {
	Provider     string     `json:"provider"` // payments or manual
	Status       string     `json:"status"`   // none, active, past_due, canceled
	HasCustomer  bool       `json:"has_customer"`
	ReconciledAt *time.Time `json:"reconciled_at"`
}

// BillingRedirect is a checkout or portal redirect.
type BillingRedirect struct {
	RedirectURL string `json:"redirect_url"`
	Provider    string `json:"provider"`
	Status      string `json:"status"`
}

// BillingRedirectResponse answers checkout-session and portal-session.
type BillingRedirectResponse struct {
	Data BillingRedirect `json:"data"`
}

// BillingReconciliation is what customer/reconcile found.
type BillingReconciliation struct {
	Reconciled bool                 `json:"reconciled"`
	Source     string               `json:"source"` // recorded, provider or none
	Account    BillingAccountStatus `json:"account"`
	Invoices   int                  `json:"invoices"`
}

// BillingReconciliationResponse answers customer/reconcile.
type BillingReconciliationResponse struct {
	Data BillingReconciliation `json:"data"`
}

// BillingInvoice is a safe invoice: amounts in cents, no provider ids.
type BillingInvoice struct {
	ID          string     `json:"id"`
	Number      string     `json:"number"`
	Status      string     `json:"status"`
	Currency    string     `json:"currency"`
	AmountDue   int64      `json:"amount_due"`
	AmountPaid  int64      `json:"amount_paid"`
	PeriodStart *time.Time `json:"period_start"`
	PeriodEnd   *time.Time `json:"period_end"`
	CreatedAt   time.Time  `json:"created_at"`
	// UsageUSD is the ledger total behind a manual-provider statement.
	UsageUSD string `json:"usage_usd,omitempty"`
}

// BillingInvoiceCollectionResponse answers the invoice list.
type BillingInvoiceCollectionResponse struct {
	Data []BillingInvoice `json:"data"`
	Meta ListMeta         `json:"meta"`
}

// BillingInvoiceResponse answers an invoice reconcile.
type BillingInvoiceResponse struct {
	Data BillingInvoice `json:"data"`
}

// BillingPaymentMethod is the card's brand and last four (null when none).
type BillingPaymentMethod struct {
	Brand *string `json:"brand"`
	Last4 *string `json:"last4"`
}

// BillingPaymentMethodResponse answers payment-method.
type BillingPaymentMethodResponse struct {
	Data BillingPaymentMethod `json:"data"`
}

// BillingPricingResponse answers pricing: no price ids or secrets.
type BillingPricingResponse struct {
	Data any `json:"data"`
}

// BillingSummary is the usage of a period from the ledger.
type BillingSummary struct {
	PeriodStart  time.Time            `json:"period_start"`
	PeriodEnd    time.Time            `json:"period_end"`
	TotalUSD     string               `json:"total_usd"`
	Entries      int64                `json:"entries"`
	InputTokens  int64                `json:"input_tokens"`
	OutputTokens int64                `json:"output_tokens"`
	ByModel      map[string]string    `json:"by_model"` // "provider/model" -> USD
	Budget       BudgetStatus         `json:"budget"`
	Account      BillingAccountStatus `json:"account"`
}

// BillingSummaryResponse answers summary.
type BillingSummaryResponse struct {
	Data BillingSummary `json:"data"`
}

// PaymentWebhookStatus is the payments webhook's configuration and dedupe
// counts.
type PaymentWebhookStatus struct {
	Provider         string           `json:"provider"`
	Configured       bool             `json:"configured"`
	Endpoint         string           `json:"endpoint"`
	ToleranceSeconds int64            `json:"tolerance_seconds"`
	Received         int64            `json:"received"`   // distinct events
	Duplicates       int64            `json:"duplicates"` // repeated deliveries refused
	ByOutcome        map[string]int64 `json:"by_outcome"` // applied, ignored, unmatched
	LastReceivedAt   *time.Time       `json:"last_received_at"`
}

// PaymentWebhookStatusResponse answers webhooks.
type PaymentWebhookStatusResponse struct {
	Data PaymentWebhookStatus `json:"data"`
}

// PaymentWebhookAck answers a payments webhook delivery.
type PaymentWebhookAck struct {
	Received bool   `json:"received"`
	Outcome  string `json:"outcome"`
	Status   string `json:"status,omitempty"`
}
