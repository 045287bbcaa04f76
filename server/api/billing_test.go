package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/server/host"
	"reeve.dev/reeve/server/payments"
	"reeve.dev/reeve/server/payments/paymentstest"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/webhooksig"
)

const testWebhookSecret = "whsec_billing_test_secret_0001"

func paymentsEvent(id, typ, object string) string {
	return `{"id":"` + id + `","object":"event","type":"` + typ + `","created":` + fmt.Sprint(time.Now().Unix()) + `,"data":{"object":` + object + `}}`
}

// The billing flow against the payments provider's own mock server:
// checkout redirect, webhook activation, a usage period in the ledger, the
// summary, reconcile (customer, card, invoices), the invoice list and a
// portal redirect; forged, stale and replayed webhooks change nothing; a
// past-due or canceled subscription stops the ledger with 402.
func TestBillingThroughThePaymentsAPI(t *testing.T) {
	mock := paymentstest.Start(t)
	s := startHost(t, host.Options{Payments: &payments.Remote{BaseURL: mock, Key: "sk_test_123", Price: "price_secret_123", WebhookSecrets: [][]byte{[]byte(testWebhookSecret)}}})
	u := s.NewUser("billing@example.com")
	ws := u.Workspace
	b := "/api/resources/" + ws + "/billing"
	leak := func(a answer) {
		t.Helper()
		// (a checkout redirect URL names its session in its path: that is
		// the redirect itself, not a returned reference)
		for _, bad := range []string{"cus_", "sub_", "price_secret", "sk_test", "whsec_"} {
			if strings.Contains(string(a.Body), bad) {
				t.Fatalf("answer carries a provider reference or secret (%s): %s", bad, a.Body)
			}
		}
	}
	webhook := func(body string, at time.Time, secret string) answer {
		t.Helper()
		return do(t, s, "POST", "/api/webhooks/payments/events", "", body, "Stripe-Signature", webhooksig.SignPayments(at, []byte(body), []byte(secret)))
	}
	status := func() string {
		t.Helper()
		a := expect(t, do(t, s, "GET", b+"/summary", u.Token, nil), 200, "summary")
		leak(a)
		return dataOf(a)["account"].(map[string]any)["status"].(string)
	}

	e := expect(t, do(t, s, "POST", b+"/portal-session", u.Token, `{}`), 404, "portal before any customer")
	if e.errCode() != sdk.CodeBillingNoCustomer {
		t.Fatalf("portal: %s", e.Body)
	}
	expect(t, do(t, s, "POST", b+"/checkout-session", u.Token, `{"success_url":"javascript:alert(1)"}`), 422, "bad success url")
	m := s.AddMember(ws, "member@example.com", "member")
	expect(t, do(t, s, "POST", b+"/checkout-session", m.Token, `{}`), 403, "member checkout")
	co := expect(t, do(t, s, "POST", b+"/checkout-session", u.Token, `{"success_url":"https://app.example/done","cancel_url":"https://app.example/cancel"}`), 200, "checkout")
	leak(co)
	if !strings.HasPrefix(dataOf(co)["redirect_url"].(string), "https://checkout.stripe.com/") || dataOf(co)["provider"] != "payments" || len(dataOf(co)) != 3 {
		t.Fatalf("checkout: %s", co.Body)
	}
	if status() != "none" {
		t.Fatal("billing active before the provider said so")
	}

	// Webhook activation; forged, stale and replayed deliveries refused.
	now := time.Now()
	completed := paymentsEvent("evt_done_1", "checkout.session.completed", `{"object":"checkout.session","id":"cs_test_1","customer":"cus_WEBHOOK","subscription":"sub_1","client_reference_id":"`+ws+`","metadata":{"workspace_id":"`+ws+`"}}`)
	if a := webhook(completed, now, "whsec_forged_secret_000000000"); a.Status != 401 || a.errCode() != sdk.CodePaymentsSignature {
		t.Fatalf("forged: %d %s", a.Status, a.Body)
	}
	if a := webhook(completed, now.Add(-10*time.Minute), testWebhookSecret); a.Status != 401 || !strings.Contains(string(a.Body), "tolerance") {
		t.Fatalf("stale: %d %s", a.Status, a.Body)
	}
	if a := do(t, s, "POST", "/api/webhooks/payments/events", "", completed); a.Status != 401 {
		t.Fatalf("unsigned: %d %s", a.Status, a.Body)
	}
	if status() != "none" {
		t.Fatal("a refused webhook changed the billing status")
	}
	expect(t, webhook(completed, now, testWebhookSecret), 200, "activation")
	if status() != "active" {
		t.Fatal("checkout.session.completed did not activate billing")
	}
	if a := webhook(completed, now, testWebhookSecret); a.Status != 409 || a.errCode() != sdk.CodePaymentsReplay {
		t.Fatalf("replay: %d %s", a.Status, a.Body)
	}

	// A usage period in the ledger, and its summary.
	in, err := u.Client.CreateInstall(context.Background(), ws, "gw")
	if err != nil {
		t.Fatal(err)
	}
	up := "/api/runtime/internal/gateway/workspaces/" + ws + "/usage"
	for i, cost := range []string{"0.25", "1.125", "0.000000005"} {
		expect(t, doRuntime(t, s, "POST", up, in.IssueToken, gatewayUsageBody(fmt.Sprintf("u%d", i), cost)), 201, "usage")
	}
	sum := dataOf(expect(t, do(t, s, "GET", b+"/summary", u.Token, nil), 200, "summary"))
	if sum["total_usd"] != "1.375000005" || sum["entries"].(float64) != 3 || sum["input_tokens"].(float64) != 30 {
		t.Fatalf("summary: %v", sum)
	}
	if a := do(t, s, "GET", b+"/summary?period_start=2020-01-01&period_end=2020-02-01", u.Token, nil); dataOf(a)["total_usd"] != "0.00" {
		t.Fatalf("an empty period: %s", a.Body)
	}
	expect(t, do(t, s, "GET", b+"/summary?period_start=yesterday", u.Token, nil), 422, "bad period")

	// Reconcile reads the recorded customer, then the provider's card and
	// invoices; the invoice list and payment method show only safe fields.
	rec := expect(t, do(t, s, "POST", b+"/customer/reconcile", u.Token, `{}`), 200, "reconcile")
	leak(rec)
	if dataOf(rec)["source"] != "recorded" || dataOf(rec)["reconciled"] != true {
		t.Fatalf("reconcile: %s", rec.Body)
	}
	pm := dataOf(expect(t, do(t, s, "GET", b+"/payment-method", u.Token, nil), 200, "payment method"))
	if pm["brand"] != "visa" || pm["last4"] != "4242" || len(pm) != 2 {
		t.Fatalf("payment method: %v", pm)
	}
	invs := expect(t, do(t, s, "GET", b+"/invoices", u.Token, nil), 200, "invoices")
	leak(invs)
	list := invs.JSON["data"].([]any)
	if len(list) == 0 {
		t.Fatalf("no invoices after reconcile: %s", invs.Body)
	}
	invID := list[0].(map[string]any)["id"].(string)
	leak(expect(t, do(t, s, "POST", b+"/invoices/"+invID+"/reconcile", u.Token, `{}`), 200, "invoice reconcile"))
	expect(t, do(t, s, "POST", b+"/invoices/in_not_ours/reconcile", u.Token, `{}`), 404, "another invoice")
	portal := expect(t, do(t, s, "POST", b+"/portal-session", u.Token, `{"return_url":"https://app.example/billing"}`), 200, "portal")
	leak(portal)
	if !strings.HasPrefix(dataOf(portal)["redirect_url"].(string), "https://") {
		t.Fatalf("portal: %s", portal.Body)
	}
	pr := expect(t, do(t, s, "GET", b+"/pricing", m.Token, nil), 200, "pricing")
	leak(pr)
	if dataOf(pr)["billing_mode"] != "subscription_with_usage" {
		t.Fatalf("pricing: %s", pr.Body)
	}

	// Past due stops the ledger with 402; paid again resumes; canceled stops.
	failed := paymentsEvent("evt_fail_1", "invoice.payment_failed", `{"object":"invoice","id":"in_fail_1","customer":"cus_WEBHOOK","subscription":"sub_1","status":"open","currency":"usd","amount_due":1375,"amount_paid":0,"created":`+fmt.Sprint(now.Unix())+`}`)
	expect(t, webhook(failed, now, testWebhookSecret), 200, "payment failed")
	if status() != "past_due" {
		t.Fatal("invoice.payment_failed did not make billing past due")
	}
	d := expect(t, doRuntime(t, s, "POST", up, in.IssueToken, gatewayUsageBody("after-fail", "0.01")), 402, "usage while past due")
	if !strings.Contains(string(d.Body), "billing_inactive") {
		t.Fatalf("402: %s", d.Body)
	}
	paid := paymentsEvent("evt_paid_1", "customer.subscription.updated", `{"object":"subscription","id":"sub_1","customer":"cus_WEBHOOK","status":"active"}`)
	expect(t, webhook(paid, now, testWebhookSecret), 200, "subscription active")
	expect(t, doRuntime(t, s, "POST", up, in.IssueToken, gatewayUsageBody("after-paid", "0.01")), 201, "usage once paid")
	gone := paymentsEvent("evt_gone_1", "customer.subscription.deleted", `{"object":"subscription","id":"sub_1","customer":"cus_WEBHOOK","status":"canceled"}`)
	expect(t, webhook(gone, now, testWebhookSecret), 200, "subscription canceled")
	if status() != "canceled" {
		t.Fatal("customer.subscription.deleted did not cancel billing")
	}
	expect(t, doRuntime(t, s, "POST", up, in.IssueToken, gatewayUsageBody("after-cancel", "0.01")), 402, "usage once canceled")
	// The failed invoice arrived through the webhook.
	if a := do(t, s, "GET", b+"/invoices", u.Token, nil); !strings.Contains(string(a.Body), `"amount_due":1375`) {
		t.Fatalf("webhook invoice missing: %s", a.Body)
	}
	wh := dataOf(expect(t, do(t, s, "GET", b+"/webhooks", u.Token, nil), 200, "webhook status"))
	if wh["configured"] != true || wh["received"].(float64) != 4 || wh["duplicates"].(float64) != 1 || wh["tolerance_seconds"].(float64) != 300 {
		t.Fatalf("webhook status: %v", wh)
	}
	// The placeholder spelling acts on the caller's workspace.
	expect(t, do(t, s, "GET", "/api/billing/webhooks", u.Token, nil), 200, "placeholder spelling")
}

// A self-hosted server without a payments account: checkout activates at
// once, invoices are the ledger's monthly statements, no webhook.
func TestBillingWithTheManualProvider(t *testing.T) {
	s := startHost(t, host.Options{Payments: payments.Manual{}})
	u := s.NewUser("manual@example.com")
	b := "/api/resources/" + u.Workspace + "/billing"
	co := dataOf(expect(t, do(t, s, "POST", b+"/checkout-session", u.Token, `{}`), 200, "checkout"))
	if co["provider"] != "manual" || co["status"] != "active" || !strings.Contains(co["redirect_url"].(string), "/billing?workspace="+u.Workspace) {
		t.Fatalf("manual checkout: %v", co)
	}
	in, err := u.Client.CreateInstall(context.Background(), u.Workspace, "gw")
	if err != nil {
		t.Fatal(err)
	}
	expect(t, doRuntime(t, s, "POST", "/api/runtime/internal/gateway/workspaces/"+u.Workspace+"/usage", in.IssueToken, gatewayUsageBody("m1", "2.001")), 201, "usage")
	invs := expect(t, do(t, s, "GET", b+"/invoices", u.Token, nil), 200, "invoices")
	if list := invs.JSON["data"].([]any); len(list) != 1 || list[0].(map[string]any)["amount_due"].(float64) != 201 || list[0].(map[string]any)["usage_usd"] != "2.001" {
		t.Fatalf("manual invoices: %s", invs.Body)
	}
	expect(t, do(t, s, "POST", b+"/portal-session", u.Token, `{}`), 200, "portal")
	if a := do(t, s, "POST", "/api/webhooks/payments/events", "", `{"id":"evt","type":"x"}`); a.Status != 404 || a.errCode() != sdk.CodeNotConfigured {
		t.Fatalf("manual webhook: %d %s", a.Status, a.Body)
	}
	if wh := dataOf(expect(t, do(t, s, "GET", b+"/webhooks", u.Token, nil), 200, "webhooks")); wh["configured"] != false || wh["provider"] != "manual" {
		t.Fatalf("webhook status: %v", wh)
	}
}
