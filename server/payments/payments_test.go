package payments

import (
	"errors"
	"testing"
	"time"

	"reeve.dev/reeve/server/webhooksig"
)

func TestFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if p, err := FromEnv(env(nil)); err != nil || p.Kind() != KindManual {
		t.Fatalf("no key: %v %v", p, err)
	}
	if _, err := FromEnv(env(map[string]string{"REEVE_PAYMENTS_API_KEY": "sk"})); err == nil {
		t.Fatal("a key without a price was accepted")
	}
	p, err := FromEnv(env(map[string]string{"REEVE_PAYMENTS_API_KEY": "sk", "REEVE_PAYMENTS_PRICE": "price", "REEVE_PAYMENTS_WEBHOOK_SECRET": "a, b"}))
	if err != nil || p.Kind() != KindPayments || len(p.(*Remote).WebhookSecrets) != 2 || !p.WebhookConfigured() {
		t.Fatalf("configured: %+v %v", p, err)
	}
}

// Either secret of a rolling pair verifies; a stale or forged delivery is
// ErrSignature; events map onto billing statuses.
func TestVerifyAndParseEvents(t *testing.T) {
	r := &Remote{WebhookSecrets: [][]byte{[]byte("old"), []byte("new")}}
	now := time.Now()
	body := []byte(`{"id":"evt_1","type":"customer.subscription.updated","created":1,"data":{"object":{"object":"subscription","id":"sub_9","customer":"cus_1","status":"past_due","metadata":{"workspace_id":"W1"}}}}`)
	for _, secret := range []string{"old", "new"} {
		ev, err := r.VerifyEvent(body, webhooksig.SignPayments(now, body, []byte(secret)), now)
		if err != nil || ev.Status != StatusPastDue || ev.WorkspaceID != "W1" || ev.SubscriptionRef != "sub_9" || ev.CustomerRef != "cus_1" {
			t.Fatalf("%s: %+v %v", secret, ev, err)
		}
	}
	if _, err := r.VerifyEvent(body, webhooksig.SignPayments(now, body, []byte("other")), now); !errors.Is(err, ErrSignature) {
		t.Fatalf("forged: %v", err)
	}
	if _, err := r.VerifyEvent(body, webhooksig.SignPayments(now.Add(-time.Hour), body, []byte("new")), now); !errors.Is(err, ErrSignature) {
		t.Fatalf("stale: %v", err)
	}
	if _, err := (Manual{}).VerifyEvent(body, "", now); !errors.Is(err, ErrNotConfigured) {
		t.Fatalf("manual: %v", err)
	}
	for typ, want := range map[string]string{"checkout.session.completed": StatusActive, "customer.subscription.deleted": StatusCanceled,
		"invoice.payment_failed": StatusPastDue, "invoice.paid": StatusActive, "customer.created": ""} {
		ev, err := ParseEvent([]byte(`{"id":"e","type":"` + typ + `","data":{"object":{"id":"x","client_reference_id":"W2","amount_due":5}}}`))
		if err != nil || ev.Status != want || ev.WorkspaceID != "W2" {
			t.Errorf("%s: %+v %v", typ, ev, err)
		}
	}
	if _, err := ParseEvent([]byte(`{"type":"x"}`)); err == nil {
		t.Error("an event without an id parsed")
	}
	for in, want := range map[string]string{"trialing": StatusActive, "unpaid": StatusPastDue, "incomplete_expired": StatusCanceled, "weird": ""} {
		if NormalizeStatus(in) != want {
			t.Errorf("NormalizeStatus(%s) = %s", in, NormalizeStatus(in))
		}
	}
}
