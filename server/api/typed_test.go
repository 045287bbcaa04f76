package api_test

import (
	"context"
	"strings"
	"testing"

	"reeve.dev/reeve/server/api"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

func TestSessionAccessTransitions(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("sess@example.com")
	peer := s.AddMember(u.Workspace, "peer@example.com", sdk.RoleMember)
	base := "/api/resources/" + u.Workspace + "/sessions"
	sess := expect(t, do(t, s, "POST", base, u.Token, `{"title":"fix bug","source_kind":"cli"}`), 201, "create session")
	id := dataOf(sess)["id"].(string)
	expect(t, do(t, s, "GET", base+"/"+id, u.Token, nil), 200, "get session")
	expect(t, do(t, s, "GET", base+"/01ARZ3NDEKTSV4RRFFQ69G5FAV", u.Token, nil), 404, "unknown session")
	expect(t, do(t, s, "POST", "/api/resources/"+u.Workspace+"/sessions", u.Token, `{"title":"other","source_kind":"web"}`), 201, "second session")
	l := expect(t, do(t, s, "GET", base+"?source_kind=web", u.Token, nil), 200, "filtered list")
	if n := len(l.JSON["data"].([]any)); n != 1 {
		t.Fatalf("source_kind filter: %d sessions", n)
	}
	// The placeholder spelling reaches the same session.
	expect(t, do(t, s, "GET", "/api/sessions/"+id, u.Token, nil), 200, "placeholder get")

	share := `{"subject_type":"user","subject_id":` + itoa(peer.ID) + `,"role":"viewer"}`
	expect(t, do(t, s, "POST", base+"/"+id+"/access", u.Token, share), 201, "grant")
	acl := expect(t, do(t, s, "POST", base+"/"+id+"/access", u.Token, strings.Replace(share, "viewer", "steerer", 1)), 200, "update grant")
	expect(t, do(t, s, "POST", base+"/"+id+"/access", u.Token, `{"subject_type":"user","subject_id":99999,"role":"viewer"}`), 404, "unavailable principal")
	aclID := dataOf(acl)["id"].(string)
	expect(t, do(t, s, "DELETE", base+"/"+id+"/access/"+aclID, u.Token, nil), 200, "revoke")
	expect(t, do(t, s, "DELETE", base+"/"+id+"/access/"+aclID, u.Token, nil), 404, "revoke twice")

	req := expect(t, do(t, s, "POST", base+"/"+id+"/access-requests", peer.Token, `{"requested_role":"approver","reason":"on call"}`), 201, "request access")
	rid := dataOf(req)["id"].(string)
	expect(t, do(t, s, "POST", base+"/"+id+"/access-requests/01ARZ3NDEKTSV4RRFFQ69G5FAV/decision", u.Token, `{"decision":"approve"}`), 404, "unknown request")
	d := expect(t, do(t, s, "POST", base+"/"+id+"/access-requests/"+rid+"/decision", u.Token, `{"decision":"approve","role":"viewer"}`), 200, "decide")
	if at := dataOf(d)["attributes"].(map[string]any); at["state"] != "approved" || at["granted_role"] != "viewer" {
		t.Fatalf("decision %s", d.Body)
	}
	again := expect(t, do(t, s, "POST", base+"/"+id+"/access-requests/"+rid+"/decision", u.Token, `{"decision":"deny"}`), 409, "decide twice")
	if again.errCode() != sdk.CodeAlreadyDecided {
		t.Fatalf("code %s", again.errCode())
	}

	// Collaboration events feed the event delta cursor.
	for _, k := range []string{"task_created", "comment_created", "task_assigned"} {
		expect(t, do(t, s, "POST", base+"/"+id+"/collaboration-events", u.Token, `{"event_kind":"`+k+`"}`), 201, k)
	}
	all := expect(t, do(t, s, "GET", base+"/"+id+"/events", u.Token, nil), 200, "events")
	evs := all.JSON["data"].([]any)
	if len(evs) != 3 {
		t.Fatalf("events %d", len(evs))
	}
	first := int64(evs[0].(map[string]any)["seq"].(float64))
	after := expect(t, do(t, s, "GET", base+"/"+id+"/events?after_sequence="+itoa(first)+"&limit=1", u.Token, nil), 200, "events after")
	if got := after.JSON["data"].([]any); len(got) != 1 || got[0].(map[string]any)["attributes"].(map[string]any)["event_kind"] != "comment_created" {
		t.Fatalf("after_sequence: %s", after.Body)
	}

	// Memory retrieval: a source outside the working set is 422.
	src := expect(t, do(t, s, "POST", "/api/context-sources", u.Token, `{"name":"runbook","use_when":"deploys"}`), 201, "create source")
	srcID := dataOf(src)["id"].(string)
	hit := expect(t, do(t, s, "POST", base+"/"+id+"/memory-retrieval", u.Token, `{"query":"deploys","context_source_ids":["`+srcID+`"]}`), 200, "retrieve")
	if !strings.Contains(string(hit.Body), srcID) {
		t.Fatalf("retrieval missed: %s", hit.Body)
	}
	out := expect(t, do(t, s, "POST", base+"/"+id+"/memory-retrieval", u.Token, `{"query":"x","context_source_ids":["nope"]}`), 422, "outside working set")
	if out.errCode() != sdk.CodeOutsideWorkingSet {
		t.Fatalf("code %s", out.errCode())
	}
}

func TestBillingSupportGatewayPreflight(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("ops@example.com")
	member := s.AddMember(u.Workspace, "plain@example.com", sdk.RoleMember)
	grantSupport(t, s, member.ID) // support requests come from support operators
	ws := u.Workspace
	rb := "/api/resources/" + ws + "/billing"
	nb := expect(t, do(t, s, "POST", rb+"/portal-session", u.Token, `{}`), 404, "portal before reconcile")
	if nb.errCode() != sdk.CodeBillingNoCustomer {
		t.Fatalf("code %s", nb.errCode())
	}
	expect(t, do(t, s, "POST", rb+"/customer/reconcile", u.Token, nil), 200, "reconcile")
	p := expect(t, do(t, s, "POST", rb+"/portal-session", u.Token, `{"return_url":"https://app"}`), 200, "portal")
	if !strings.Contains(string(p.Body), "redirect_url") {
		t.Fatalf("portal: %s", p.Body)
	}

	// Support access: create, approve once, revoke only after approval.
	sp := "/api/support/workspaces/" + ws + "/access-requests"
	r := expect(t, do(t, s, "POST", sp, member.Token, `{"reason":"ticket 12","requested_scopes":["run_read"]}`), 201, "support request")
	rid := dataOf(r)["id"].(string)
	expect(t, do(t, s, "POST", sp+"/"+rid+"/approve", member.Token, `{}`), 403, "member approves")
	expect(t, do(t, s, "POST", sp+"/"+rid+"/revoke", u.Token, `{}`), 409, "revoke before approval")
	ap := expect(t, do(t, s, "POST", sp+"/"+rid+"/approve", u.Token, `{"expires_in_minutes":30}`), 200, "approve")
	if dataOf(ap)["attributes"].(map[string]any)["expires_at"] == nil {
		t.Fatalf("no expiry: %s", ap.Body)
	}
	expect(t, do(t, s, "POST", sp+"/"+rid+"/deny", u.Token, `{}`), 409, "deny after approval")
	expect(t, do(t, s, "POST", sp+"/"+rid+"/revoke", u.Token, `{"decision_reason":"done"}`), 200, "revoke")
	expect(t, do(t, s, "GET", "/api/support/workspaces/"+ws+"/posture", u.Token, nil), 200, "posture")

	// Gateway usage: idempotent replay, then the hard cap denies with 402.
	in, err := u.Client.CreateInstall(context.Background(), ws, "gw")
	if err != nil {
		t.Fatal(err)
	}
	usage := func(key, cost string) string {
		return `{"gateway_virtual_key_id":"g","idempotency_key":"` + key + `","run_id":"r","lease_id":"l","provider":"provider_a","model":"m","input_tokens":1,"output_tokens":1,"total_tokens":2,"cost_usd":"` + cost + `"}`
	}
	up := "/api/runtime/internal/gateway/workspaces/" + ws + "/usage"
	first := expect(t, do(t, s, "POST", up, in.IssueToken, usage("k1", "1.50")), 201, "usage")
	replay := expect(t, do(t, s, "POST", up, in.IssueToken, usage("k1", "1.50")), 200, "replay")
	if dataOf(first)["id"] != dataOf(replay)["id"] {
		t.Fatalf("replay is a different entry")
	}
	expect(t, do(t, s, "PATCH", "/api/workspaces/"+ws, u.Token, `{"budget_policy":{"hard_cap_usd":"2.00"}}`), 200, "set cap")
	expect(t, do(t, s, "POST", up, in.IssueToken, usage("k2", "0.40")), 201, "under the cap")
	d := expect(t, do(t, s, "POST", up, in.IssueToken, usage("k3", "0.20")), 402, "over the cap")
	if d.errCode() != sdk.CodeAdmissionDenied || !strings.Contains(string(d.Body), "hard_cap_exceeded") {
		t.Fatalf("admission: %s", d.Body)
	}
	expect(t, do(t, s, "PATCH", "/api/workspaces/"+ws, u.Token, `{"budget_policy":{"billing_active":false}}`), 200, "billing off")
	if d := do(t, s, "POST", up, in.IssueToken, usage("k4", "0.01")); d.Status != 402 || !strings.Contains(string(d.Body), "billing_inactive") {
		t.Fatalf("billing inactive: %d %s", d.Status, d.Body)
	}

	// Preflight: 422 with the readiness issues inside an ErrorEnvelope.
	pf := "/api/resources/" + ws + "/workflow-runs/preflight"
	bad := expect(t, do(t, s, "POST", pf, u.Token, `{"managed_executor_id":"ghost"}`), 422, "not runnable")
	res, _ := bad.JSON["data"].(map[string]any)
	if res == nil || res["runnable"] != false || bad.errCode() != sdk.CodeNotRunnable {
		t.Fatalf("preflight issues: %s", bad.Body)
	}
	for _, code := range []string{"agent_missing", "prompt_missing", "managed_executor_unknown", "billing_inactive"} {
		if !strings.Contains(string(bad.Body), `"code":"`+code+`"`) {
			t.Errorf("preflight does not report %s: %s", code, bad.Body)
		}
	}
	expect(t, do(t, s, "PATCH", "/api/workspaces/"+ws, u.Token, `{"budget_policy":{"billing_active":true,"hard_cap_usd":"100"}}`), 200, "billing on")
	expect(t, do(t, s, "POST", "/api/managed-executors", u.Token, `{"name":"ci","tags":["linux"]}`, api.WorkspaceHeader, ws), 201, "executor")
	ok := expect(t, do(t, s, "POST", pf, u.Token, `{"agent":"shell","prompt":"make test","tags":["linux"],"status":"queued"}`), 200, "runnable")
	if dataOf(ok)["runnable"] != true {
		t.Fatalf("preflight: %s", ok.Body)
	}
}
