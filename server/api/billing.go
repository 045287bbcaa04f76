package api

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"reeve.dev/reeve/server/payments"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Billing (spec 4.6) through the payments provider (server/payments: the
// hosted API, or the built-in manual provider). The provider's customer,
// session and subscription references stay on the server: routes answer
// redirect URLs, statuses, card brand and last four, and amounts.

const paymentsWebhookOp = "postApiWebhooksPaymentsEvents"

func (s *Server) billingHandlers() map[string]handlerFunc {
	return map[string]handlerFunc{
		"createBillingCheckoutSession": s.checkoutSession,
		"reconcileBillingCustomer":     s.reconcileCustomer,
		"listBillingInvoices":          s.listInvoices,
		"reconcileBillingInvoice":      s.reconcileInvoice,
		"getBillingPaymentMethod":      s.paymentMethod,
		"createBillingPortalSession":   s.portalSession,
		"getBillingPricingCatalog":     s.pricing,
		"getBillingSummary":            s.billingSummary,
		"getPaymentWebhookStatus":      s.webhookStatus,
		paymentsWebhookOp:              s.paymentsWebhook,
	}
}

func (s *Server) payments() payments.Provider {
	if s.opts.Payments == nil {
		return payments.Manual{}
	}
	return s.opts.Payments
}

// providerError turns a provider failure into a 502 that names no secret.
func providerError(err error) error {
	s := err.Error()
	e := errorf(http.StatusBadGateway, "payments_unavailable", "the payments provider failed: %s", s)
	return e
}

// redirectURL checks a caller's success/cancel/return URL: absolute
// http(s), or empty for the default.
func redirectURL(c *call, field, def string) (string, error) {
	v, _ := c.body[field].(string)
	if v == "" {
		return def, nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", invalid(sdk.ErrorDetail{Field: "/" + field, Message: "want an absolute http(s) URL"})
	}
	return v, nil
}

func (s *Server) billingPage(c *call) string {
	return s.opts.AppURL + "/billing?workspace=" + url.QueryEscape(c.ws.ID)
}

func (s *Server) account(c *call) (store.BillingAccount, error) {
	a, err := s.st.BillingAccount(c.ctx(), c.ws.ID)
	if errors.Is(err, store.ErrNotFound) {
		return a, nil
	}
	return a, err
}

func accountJSON(a store.BillingAccount) sdk.BillingAccountStatus {
	return sdk.BillingAccountStatus{Provider: orDefault(a.Provider, payments.KindManual), Status: orDefault(a.Status, store.BillingNone),
		HasCustomer: a.CustomerRef != "", ReconciledAt: a.ReconciledAt}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// checkoutSession answers the provider's checkout redirect. The manual
// provider has no checkout: billing becomes active at once, and the
// redirect is the success URL (default: the app's billing page).
func (s *Server) checkoutSession(c *call) (int, any, error) {
	p := s.payments()
	success, err := redirectURL(c, "success_url", s.billingPage(c)+"&checkout=done")
	if err != nil {
		return 0, nil, err
	}
	cancel, err := redirectURL(c, "cancel_url", s.billingPage(c)+"&checkout=canceled")
	if err != nil {
		return 0, nil, err
	}
	acct, err := s.account(c)
	if err != nil {
		return 0, nil, err
	}
	customer := acct.CustomerRef
	if customer == "" || acct.Provider != p.Kind() {
		if customer, err = p.EnsureCustomer(c.ctx(), c.ws.ID, c.p.Email); err != nil {
			return 0, nil, providerError(err)
		}
	}
	redirect, err := p.Checkout(c.ctx(), payments.CheckoutRequest{WorkspaceID: c.ws.ID, CustomerRef: customer, SuccessURL: success, CancelURL: cancel})
	if err != nil {
		return 0, nil, providerError(err)
	}
	now := c.now()
	acct, err = s.st.UpdateBillingAccount(c.ctx(), c.ws.ID, func(a *store.BillingAccount) error {
		a.Provider, a.CustomerRef, a.UpdatedAt = p.Kind(), customer, now
		if p.Kind() == payments.KindManual {
			a.Status = store.BillingActive
		}
		return nil
	}, c.audit("billing.checkout", "billing", map[string]any{"provider": p.Kind()}))
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.BillingRedirectResponse{Data: sdk.BillingRedirect{RedirectURL: redirect, Provider: p.Kind(), Status: accountJSON(acct).Status}}, nil
}

// reconcileCustomer repairs drift: the customer reference is read from
// what the server already recorded for the workspace (its billing account,
// filled by checkout and by the provider's events) before any provider
// lookup; then the subscription, card and invoices are refreshed.
func (s *Server) reconcileCustomer(c *call) (int, any, error) {
	p := s.payments()
	acct, err := s.account(c)
	if err != nil {
		return 0, nil, err
	}
	source := "recorded"
	customer := acct.CustomerRef
	if customer == "" || acct.Provider != p.Kind() {
		source = "provider"
		if customer, err = p.FindCustomer(c.ctx(), c.ws.ID); err != nil {
			return 0, nil, providerError(err)
		}
	}
	if customer == "" {
		return 200, sdk.BillingReconciliationResponse{Data: sdk.BillingReconciliation{Reconciled: false, Source: "none", Account: accountJSON(acct)}}, nil
	}
	sub, err := p.Subscription(c.ctx(), customer)
	if err != nil {
		return 0, nil, providerError(err)
	}
	card, err := p.PaymentMethod(c.ctx(), customer)
	if err != nil {
		return 0, nil, providerError(err)
	}
	invs, err := p.Invoices(c.ctx(), customer, 100)
	if err != nil {
		return 0, nil, providerError(err)
	}
	now := c.now()
	for _, in := range invs {
		if err := s.st.UpsertInvoice(c.ctx(), storeInvoice(c.ws.ID, in, now)); err != nil {
			return 0, nil, err
		}
	}
	acct, err = s.st.UpdateBillingAccount(c.ctx(), c.ws.ID, func(a *store.BillingAccount) error {
		a.Provider, a.CustomerRef, a.UpdatedAt, a.ReconciledAt = p.Kind(), customer, now, &now
		if sub.Ref != "" {
			a.SubscriptionRef = sub.Ref
		}
		if sub.Status != "" {
			a.Status = sub.Status
		}
		a.CardBrand, a.CardLast4 = card.Brand, card.Last4
		return nil
	}, c.audit("billing.reconcile", "billing", map[string]any{"source": source}))
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.BillingReconciliationResponse{Data: sdk.BillingReconciliation{Reconciled: true, Source: source, Account: accountJSON(acct), Invoices: len(invs)}}, nil
}

func storeInvoice(ws string, in payments.Invoice, now time.Time) *store.Invoice {
	created := in.Created
	if created.IsZero() || created.Unix() <= 0 {
		created = now
	}
	return &store.Invoice{WorkspaceID: ws, ProviderRef: in.Ref, Number: in.Number, Status: orDefault(in.Status, "open"), Currency: in.Currency,
		AmountDue: in.AmountDue, AmountPaid: in.AmountPaid, PeriodStart: in.PeriodStart, PeriodEnd: in.PeriodEnd, CreatedAt: created, UpdatedAt: now}
}

func invoiceJSON(in store.Invoice) sdk.BillingInvoice {
	return sdk.BillingInvoice{ID: in.ID, Number: in.Number, Status: in.Status, Currency: in.Currency, AmountDue: in.AmountDue, AmountPaid: in.AmountPaid,
		PeriodStart: in.PeriodStart, PeriodEnd: in.PeriodEnd, CreatedAt: in.CreatedAt}
}

// listInvoices is the invoice history the server recorded from the
// provider (its events and reconciles); on the manual provider, the
// ledger's monthly totals, one statement a month.
func (s *Server) listInvoices(c *call) (int, any, error) {
	out := sdk.BillingInvoiceCollectionResponse{Data: []sdk.BillingInvoice{}}
	if s.payments().Kind() == payments.KindManual {
		ps, err := s.st.LedgerPeriods(c.ctx(), c.ws.ID)
		if err != nil {
			return 0, nil, err
		}
		for _, p := range ps {
			if len(p.Period) != len("2006-01") {
				continue
			}
			start, _ := time.Parse("2006-01", p.Period)
			end := start.AddDate(0, 1, 0)
			cents := int64((p.Total + 9_999_999) / 10_000_000) // whole cents, rounded up
			status := "open"
			if !c.now().Before(end) {
				status = "closed"
			}
			out.Data = append(out.Data, sdk.BillingInvoice{ID: "ledger-" + p.Period, Number: p.Period, Status: status, Currency: "usd",
				AmountDue: cents, PeriodStart: &start, PeriodEnd: &end, CreatedAt: start, UsageUSD: p.Total.String()})
		}
	} else {
		invs, err := s.st.Invoices(c.ctx(), c.ws.ID, 100)
		if err != nil {
			return 0, nil, err
		}
		for _, in := range invs {
			out.Data = append(out.Data, invoiceJSON(in))
		}
	}
	out.Meta.Count = len(out.Data)
	return 200, out, nil
}

// reconcileInvoice checks the workspace's recorded invoice first (404 when
// it has none of that id), then refreshes it from the provider.
func (s *Server) reconcileInvoice(c *call) (int, any, error) {
	id := c.r.PathValue("invoiceId")
	in, err := s.st.Invoice(c.ctx(), c.ws.ID, id)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, notFound("no invoice %q in this workspace", id)
	}
	if err != nil {
		return 0, nil, err
	}
	fresh, err := s.payments().Invoice(c.ctx(), in.ProviderRef)
	if err != nil {
		return 0, nil, providerError(err)
	}
	up := storeInvoice(c.ws.ID, fresh, c.now())
	up.ID, up.ProviderRef, up.CreatedAt = in.ID, in.ProviderRef, in.CreatedAt
	if err := s.st.UpsertInvoice(c.ctx(), up); err != nil {
		return 0, nil, err
	}
	return 200, sdk.BillingInvoiceResponse{Data: invoiceJSON(*up)}, nil
}

func (s *Server) paymentMethod(c *call) (int, any, error) {
	a, err := s.account(c)
	if err != nil {
		return 0, nil, err
	}
	pm := sdk.BillingPaymentMethod{}
	if a.CardLast4 != "" {
		brand, last4 := a.CardBrand, a.CardLast4
		pm.Brand, pm.Last4 = &brand, &last4
	}
	return 200, sdk.BillingPaymentMethodResponse{Data: pm}, nil
}

func (s *Server) portalSession(c *call) (int, any, error) {
	ret, err := redirectURL(c, "return_url", s.billingPage(c))
	if err != nil {
		return 0, nil, err
	}
	a, err := s.account(c)
	if err != nil {
		return 0, nil, err
	}
	if a.CustomerRef == "" {
		return 0, nil, errorf(http.StatusNotFound, sdk.CodeBillingNoCustomer, "no billing customer has been reconciled for this workspace yet")
	}
	u, err := s.payments().Portal(c.ctx(), a.CustomerRef, ret)
	if err != nil {
		return 0, nil, providerError(err)
	}
	return 200, sdk.BillingRedirectResponse{Data: sdk.BillingRedirect{RedirectURL: u, Provider: s.payments().Kind(), Status: orDefault(a.Status, store.BillingNone)}}, nil
}

func (s *Server) pricing(c *call) (int, any, error) {
	return 200, sdk.BillingPricingResponse{Data: s.payments().Pricing()}, nil
}

// billingSummary sums the ledger over [period_start, period_end) (dates
// or RFC 3339 times; default the current month), with the budget and the
// billing status.
func (s *Server) billingSummary(c *call) (int, any, error) {
	now := c.now()
	start, end := store.PeriodBounds(store.PeriodMonthly, now)
	parse := func(name string, def time.Time) (time.Time, error) {
		v := c.r.URL.Query().Get(name)
		if v == "" {
			return def, nil
		}
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02"} {
			if t, err := time.Parse(layout, v); err == nil {
				return t.UTC(), nil
			}
		}
		return time.Time{}, invalid(sdk.ErrorDetail{Field: name, Message: "want a date (YYYY-MM-DD) or an RFC 3339 time"})
	}
	var err error
	if start, err = parse("period_start", start); err != nil {
		return 0, nil, err
	}
	if end, err = parse("period_end", end); err != nil {
		return 0, nil, err
	}
	if !end.After(start) || end.Sub(start) > 366*24*time.Hour {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "period_end", Message: "want a period end after its start, at most a year later"})
	}
	sum := sdk.BillingSummary{PeriodStart: start, PeriodEnd: end, ByModel: map[string]string{}}
	totals := map[string]store.USD{}
	var total store.USD
	for m := time.Date(start.Year(), start.Month(), 1, 0, 0, 0, 0, time.UTC); m.Before(end); m = m.AddDate(0, 1, 0) {
		period := store.PeriodKey(store.PeriodMonthly, m)
		for after := int64(0); ; {
			es, err := s.st.LedgerEntries(c.ctx(), c.ws.ID, period, store.ListOptions{After: after, Limit: 500})
			if err != nil {
				return 0, nil, err
			}
			for _, e := range es {
				after = e.Seq
				if e.CreatedAt.Before(start) || !e.CreatedAt.Before(end) {
					continue
				}
				total += e.Cost
				sum.Entries++
				j := ledgerEntryJSON(e, false)
				sum.InputTokens += j.InputTokens
				sum.OutputTokens += j.OutputTokens
				totals[j.Provider+"/"+j.Model] += e.Cost
			}
			if len(es) < 500 {
				break
			}
		}
	}
	sum.TotalUSD = total.String()
	for k, v := range totals {
		sum.ByModel[k] = v.String()
	}
	adm, err := s.st.AdmitBudget(c.ctx(), c.ws.ID, 0, now)
	if err != nil {
		return 0, nil, err
	}
	sum.Budget = budgetJSON(adm)
	a, err := s.account(c)
	if err != nil {
		return 0, nil, err
	}
	sum.Account = accountJSON(a)
	return 200, sdk.BillingSummaryResponse{Data: sum}, nil
}

func (s *Server) webhookStatus(c *call) (int, any, error) {
	p := s.payments()
	st, err := s.st.PaymentEventStats(c.ctx(), p.Kind())
	if err != nil {
		return 0, nil, err
	}
	out := sdk.PaymentWebhookStatus{Provider: p.Kind(), Configured: p.WebhookConfigured(), Endpoint: s.opts.BaseURL + "/api/webhooks/payments/events",
		ToleranceSeconds: int64(p.WebhookTolerance() / time.Second), Received: st.Received, Duplicates: st.Duplicates, ByOutcome: st.ByOutcome, LastReceivedAt: st.Last}
	if out.ByOutcome == nil {
		out.ByOutcome = map[string]int64{}
	}
	return 200, sdk.PaymentWebhookStatusResponse{Data: out}, nil
}

// paymentsWebhook ingests the provider's billing events: the signature
// (timestamped, with a tolerance) is checked over the body as sent; an
// event id seen before is refused (409) and counted; a new event updates
// the workspace's billing status (active, past due, canceled) and invoices
// in the transaction that records it.
func (s *Server) paymentsWebhook(c *call) (int, any, error) {
	p := s.payments()
	if !p.WebhookConfigured() {
		return 0, nil, errorf(http.StatusNotFound, sdk.CodeNotConfigured, "this server has no payments webhook configured (REEVE_PAYMENTS_WEBHOOK_SECRET)")
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		return 0, nil, errorf(http.StatusRequestEntityTooLarge, sdk.CodeBodyTooLarge, "the delivery exceeds the limit of %d bytes", s.opts.MaxBodyBytes)
	}
	ev, err := p.VerifyEvent(body, c.r.Header.Get("Stripe-Signature"), c.now())
	if errors.Is(err, payments.ErrSignature) {
		s.log.Warn("payments webhook refused", "err", err)
		msg := "the payments webhook signature does not verify"
		if strings.Contains(err.Error(), "tolerance") {
			msg = "the payments webhook timestamp is outside the tolerance"
		}
		return 0, nil, errorf(http.StatusUnauthorized, sdk.CodePaymentsSignature, "%s", msg)
	}
	if err != nil {
		return 0, nil, invalid(sdk.ErrorDetail{Message: err.Error()})
	}
	now := c.now()
	ws := ev.WorkspaceID
	if ws == "" && ev.CustomerRef != "" {
		if a, err := s.st.BillingAccountByCustomer(c.ctx(), p.Kind(), ev.CustomerRef); err == nil {
			ws = a.WorkspaceID
		}
	}
	outcome := "applied"
	switch {
	case ws == "":
		outcome = "unmatched"
	case ev.Status == "" && ev.Invoice == nil:
		outcome = "ignored"
	}
	if ws != "" {
		if _, err := s.st.Workspace(c.ctx(), ws); err != nil {
			outcome, ws = "unmatched", ""
		}
	}
	fresh, err := s.st.RecordPaymentEvent(c.ctx(), store.PaymentEvent{Provider: p.Kind(), EventID: ev.ID, Type: ev.Type, WorkspaceID: ws, Outcome: outcome, ReceivedAt: now},
		func(tx *store.Tx) error {
			if outcome != "applied" {
				return nil
			}
			if ev.Invoice != nil && ev.Invoice.Ref != "" {
				if err := store.UpsertInvoiceTx(tx, storeInvoice(ws, *ev.Invoice, now)); err != nil {
					return err
				}
			}
			if ev.Status != "" {
				return store.SetBillingStatusTx(tx, store.BillingAccount{WorkspaceID: ws, Provider: p.Kind(), CustomerRef: ev.CustomerRef, SubscriptionRef: ev.SubscriptionRef, Status: ev.Status, UpdatedAt: now})
			}
			return nil
		})
	if err != nil {
		return 0, nil, err
	}
	if !fresh {
		return 0, nil, errorf(http.StatusConflict, sdk.CodePaymentsReplay, "event %s was received before; nothing changed", ev.ID)
	}
	if ws != "" {
		// The event is applied already; a lost audit line must not turn the
		// provider's delivery into a failure it would retry, but is logged.
		if err := s.st.AppendAudit(c.ctx(), store.AuditEntry{WorkspaceID: ws, Actor: "payments", Action: "billing.event", Target: "billing",
			Detail: mustJSON(map[string]string{"type": ev.Type, "status": ev.Status}), CreatedAt: now}); err != nil {
			s.log.Warn("payments webhook: the billing event is applied but its audit entry was not written", "workspace", ws, "event", ev.ID, "err", err)
		}
	}
	return 200, sdk.PaymentWebhookAck{Received: true, Outcome: outcome, Status: ev.Status}, nil
}
