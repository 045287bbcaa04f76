package api

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"reeve.dev/reeve/server/auth"
)

// A verified delivery's principal names its provider, and grants nothing:
// no route that needs a credential accepts it in place of one, and no
// workspace-scoped route lets it act in a workspace.
func TestWebhookPrincipalReachesNoOtherRoute(t *testing.T) {
	p := auth.Principal{Kind: auth.KindWebhook, Workspace: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Provider: "code-host", DeliveryID: "d-1"}
	if got := p.Actor(); got != "webhook:code-host" {
		t.Fatalf("actor %q", got)
	}
	s := &Server{}
	checked := 0
	for _, rt := range Routes() {
		if rt.Auth == AuthPublic || rt.Auth == AuthWebhook {
			continue
		}
		rt := rt
		c := &call{s: s, route: &rt, p: p, r: httptest.NewRequest(rt.Method, "/", nil)}
		err := s.authenticate(c)
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
			t.Errorf("%s %s: a webhook principal without a credential got %v, want 401", rt.Method, rt.Path, err)
		}
		if rt.Scope == ScopeNone {
			continue
		}
		c = &call{s: s, route: &rt, p: p}
		if err := s.scope(c); !errors.As(err, &ae) || ae.Status != http.StatusForbidden || c.ws != nil {
			t.Errorf("%s %s: a webhook principal was scoped into a workspace: %v", rt.Method, rt.Path, err)
		}
		checked++
	}
	if checked < 50 {
		t.Fatalf("only %d workspace-scoped routes checked", checked)
	}
}

func TestWithDelivery(t *testing.T) {
	in := map[string]any{"status": "queued"}
	out := withDelivery(in, "d-1").(map[string]any)
	if out["delivery_id"] != "d-1" || out["status"] != "queued" {
		t.Fatalf("detail %v", out)
	}
	if _, touched := in["delivery_id"]; touched {
		t.Fatal("the caller's detail was changed")
	}
	if got := withDelivery(nil, "d-2").(map[string]any); got["delivery_id"] != "d-2" {
		t.Fatalf("nil detail: %v", got)
	}
	kept := withDelivery(map[string]any{"delivery_id": "own"}, "d-3").(map[string]any)
	if kept["delivery_id"] != "own" {
		t.Fatalf("an existing delivery_id was overwritten: %v", kept)
	}
	if got := withDelivery([]string{"x"}, "d-4"); len(got.([]string)) != 1 {
		t.Fatalf("a non-object detail changed: %v", got)
	}
}
