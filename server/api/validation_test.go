package api_test

import (
	"context"
	"strings"
	"testing"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// TestTypedRequestShapes sends one bad body per typed request shape of
// spec 4.3, 4.4, 4.6, 4.7, 4.8, 4.10 and 4.11 and expects 422 naming the
// field; a good body of the same shape must pass validation.
func TestTypedRequestShapes(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("v@example.com")
	grantSupport(t, s, u.ID) // support requests come from support operators
	in, err := u.Client.CreateInstall(context.Background(), u.Workspace, "m")
	if err != nil {
		t.Fatal(err)
	}
	ws := u.Workspace
	made := expect(t, do(t, s, "POST", "/api/resources/"+ws+"/sessions", u.Token, `{"title":"t","source_kind":"cli"}`), 201, "session")
	sess := "/api/resources/" + ws + "/sessions/" + dataOf(made)["id"].(string)
	sup := "/api/support/workspaces/" + ws + "/access-requests"
	cases := []struct {
		name, method, path string
		token              string
		bad                string
		field              string
		good               string
	}{
		{"WorkspaceUpdateRequest enum", "PATCH", "/api/workspaces/" + ws, "", `{"policy_mode":"closed"}`, "/policy_mode", `{"policy_mode":"allowlist","description":null,"labels":null,"audit_retention_days":null}`},
		{"WorkspaceUpdateRequest int", "PATCH", "/api/workspaces/" + ws, "", `{"audit_retention_days":"30"}`, "/audit_retention_days", `{"audit_retention_days":30,"labels":["a"],"budget_policy":{"hard_cap_usd":5}}`},
		{"WorkspaceUpdateRequest budget cap", "PATCH", "/api/workspaces/" + ws, "", `{"budget_policy":{"hard_cap_usd":"-1"}}`, "/budget_policy/hard_cap_usd", `{"budget_policy":{"hard_cap_usd":"12.50","period":"daily"}}`},
		{"WorkspaceUpdateRequest budget member", "PATCH", "/api/workspaces/" + ws, "", `{"budget_policy":{"hardcap":"5"}}`, "/budget_policy", `{"budget_policy":null}`},
		{"WorkspaceUpdateRequest budget period", "PATCH", "/api/workspaces/" + ws, "", `{"budget_policy":{"period":"yearly"}}`, "/budget_policy/period", ""},
		{"WorkspaceUpdateRequest labels", "PATCH", "/api/workspaces/" + ws, "", `{"labels":"red"}`, "/labels", ""},
		{"AgentSessionCreateRequest required", "POST", "/api/resources/" + ws + "/sessions", "", `{"source_kind":"cli"}`, "/title", `{"title":"t","source_kind":"cli","summary":null,"visibility_scope":"team"}`},
		{"AgentSessionCreateRequest enum", "POST", "/api/resources/" + ws + "/sessions", "", `{"title":"t","source_kind":"cli","visibility_scope":"public"}`, "/visibility_scope", ""},
		{"AgentSessionCreateRequest array", "POST", "/api/resources/" + ws + "/sessions", "", `{"title":"t","source_kind":"cli","policy_source_refs":[1]}`, "/policy_source_refs/0", ""},
		{"AgentSessionAccessShareRequest", "POST", sess + "/access", "", `{"subject_type":"user","subject_id":"7","role":"viewer"}`, "/subject_id", ""},
		{"AgentSessionAccessShareRequest role", "POST", sess + "/access", "", `{"subject_type":"user","subject_id":7,"role":"boss"}`, "/role", ""},
		{"AgentSessionAccessRequestCreateRequest", "POST", sess + "/access-requests", "", `{"requested_role":"owner"}`, "/requested_role", ""},
		{"AgentSessionAccessRequestDecisionRequest", "POST", sess + "/access-requests/x/decision", "", `{"decision":"maybe"}`, "/decision", ""},
		{"AgentSessionCollaborationEventStoreRequest", "POST", sess + "/collaboration-events", "", `{"event_kind":"task_deleted"}`, "/event_kind", ""},
		{"AgentSessionCollaborationEventStoreRequest nullable", "POST", sess + "/collaboration-events", "", `{"event_kind":"comment_created","assignee":"bob"}`, "/assignee", ""},
		{"AgentSessionContextCorrectionCreateRequest", "POST", sess + "/context-corrections", "", `{"correction_kind":"new_memory","title":"x"}`, "/target_kind", ""},
		{"AgentSessionContextCorrectionCreateRequest union", "POST", sess + "/context-corrections", "", `{"correction_kind":"new_memory","target_kind":"memory_candidate","title":"x","context_source_id":true}`, "/context_source_id", ""},
		{"AgentSessionMemoryRetrievalRequest", "POST", sess + "/memory-retrieval", "", `{"limit":3}`, "/query", ""},
		{"RoutingDecisionCreateRequest", "POST", sess + "/routing-decisions", "", `{"decision_kind":"maybe"}`, "/decision_kind", ""},
		{"AgentSessionRunAttemptRequest", "POST", sess + "/run-attempts", "", `{"managed_executor_id":5}`, "/managed_executor_id", ""},
		{"SessionVerificationAttemptCreateRequest", "POST", sess + "/verification-attempts", "", `{"status":"ok"}`, "/status", ""},
		{"SessionVerificationPackResolveRequest", "POST", sess + "/verification-pack", "", `{"workflow_run_id":3}`, "/workflow_run_id", ""},
		{"SessionVerificationRepairHandoffCreateRequest", "POST", sess + "/verification-repair-handoffs", "", `{"requested_action":"fix"}`, "/verification_attempt_id", ""},
		{"BillingCheckoutSessionRequest", "POST", "/api/resources/" + ws + "/billing/checkout-session", "", `{"success_url":1}`, "/success_url", `{"success_url":"https://a"}`},
		{"BillingPortalSessionRequest", "POST", "/api/resources/" + ws + "/billing/portal-session", "", `{"return_url":false}`, "/return_url", ""},
		{"CreateProviderKeyRequest", "POST", "/api/resources/" + ws + "/provider-keys", "", `{"provider":"provider_d","mode":"managed_byok"}`, "/provider", `{"provider":"provider_a","mode":"managed_byok","team_id":null,"key_ref":null,"secret":"s3cr3t-value"}`},
		{"CreateProviderKeyRequest mode", "POST", "/api/resources/" + ws + "/provider-keys", "", `{"provider":"other"}`, "/mode", ""},
		{"SupportAccessRequestCreateRequest", "POST", sup, "", `{"reason":"r","requested_scopes":["root"]}`, "/requested_scopes/0", `{"reason":"r","requested_scopes":["billing_read"]}`},
		{"SupportAccessDecisionRequest", "POST", sup + "/x/approve", "", `{"expires_in_minutes":"x"}`, "/expires_in_minutes", ""},
		{"WorkflowRunPreflightRequest", "POST", "/api/resources/" + ws + "/workflow-runs/preflight", "", `{"status":"running"}`, "/status", ""},
		{"WorkflowRunPreflightRequest union", "POST", "/api/resources/" + ws + "/workflow-runs/preflight", "", `{"workflow_definition_id":[1]}`, "/workflow_definition_id", `{"integration_event_id":null,"runtime_target_id":null,"status":"draft","agent":"shell","prompt":"p"}`},
		{"GatewayUsageRecordRequest enum", "POST", "/api/runtime/internal/gateway/workspaces/" + ws + "/usage", in.IssueToken,
			`{"gateway_virtual_key_id":"g","idempotency_key":"k","run_id":"r","lease_id":"l","provider":"provider_c","model":"m","input_tokens":1,"output_tokens":1,"total_tokens":2,"cost_usd":"0.01"}`, "/provider",
			`{"gateway_virtual_key_id":"g","idempotency_key":"k","run_id":"r","lease_id":"l","provider":"provider_d","model":"m","input_tokens":1,"output_tokens":1,"total_tokens":2,"cost_usd":"0.01","latency_ms":null}`},
		{"GatewayUsageRecordRequest required", "POST", "/api/runtime/internal/gateway/workspaces/" + ws + "/usage", in.IssueToken, `{"idempotency_key":"k"}`, "/run_id", ""},
		{"WorkspaceCreateRequest", "POST", "/api/workspaces", "", `{"name":""}`, "/name", `{"name":"second"}`},
		{"ApiTokenCreateRequest", "POST", "/api/me/api-tokens", "", `{}`, "/name", `{"name":"ci"}`},
	}
	for _, c := range cases {
		tok := c.token
		if tok == "" {
			tok = u.Token
		}
		a := expect(t, do(t, s, c.method, c.path, tok, c.bad), 422, c.name)
		if a.errCode() != sdk.CodeValidation {
			t.Errorf("%s: code %s", c.name, a.errCode())
		}
		found := false
		for _, d := range a.JSON["error"].(map[string]any)["details"].([]any) {
			found = found || d.(map[string]any)["field"] == c.field
		}
		if !found {
			t.Errorf("%s: details do not name %s: %s", c.name, c.field, a.Body)
		}
		if c.good != "" {
			// Preflight answers a schema-valid body that names records it
			// cannot find with 422 not_runnable: the body itself passed.
			if g := do(t, s, c.method, c.path, tok, c.good); g.Status >= 400 && g.errCode() != "not_runnable" {
				t.Errorf("%s: good body rejected: %d %s", c.name, g.Status, g.Body)
			}
		}
	}
	// Required bodies must be present.
	a := expect(t, do(t, s, "PATCH", "/api/workspaces/"+ws, u.Token, nil), 422, "missing required body")
	if !strings.Contains(string(a.Body), "body is required") {
		t.Errorf("missing body message: %s", a.Body)
	}
	// Integer query parameters are validated.
	expect(t, do(t, s, "GET", sess+"/events?after_sequence=abc", u.Token, nil), 422, "after_sequence")
}

// TestBadInput covers what a careless or hostile client sends: never a
// 500, never Go's plain text.
func TestBadInput(t *testing.T) {
	s := servertest.Start(t, servertest.Options{MaxBodyBytes: 4096})
	u := s.NewUser("bad@example.com")
	ws := u.Workspace
	cases := []struct {
		name, method, path, body string
		headers                  []string
		status                   int
		code                     string
	}{
		{"non-JSON body", "POST", "/api/workflow-runs", "{not json", nil, 400, sdk.CodeInvalidJSON},
		{"truncated JSON", "PATCH", "/api/workspaces/" + ws, `{"name":`, nil, 400, sdk.CodeInvalidJSON},
		{"array body", "POST", "/api/workflow-runs", `[1,2]`, nil, 422, sdk.CodeValidation},
		{"string body", "PATCH", "/api/workspaces/" + ws, `"x"`, nil, 422, sdk.CodeValidation},
		{"null body", "POST", "/api/resources/" + ws + "/sessions", `null`, nil, 422, sdk.CodeValidation},
		{"oversized body", "POST", "/api/workflow-runs", `{"x":"` + strings.Repeat("a", 5000) + `"}`, nil, 413, sdk.CodeBodyTooLarge},
		{"wrong media type", "POST", "/api/workflow-runs", `{}`, []string{"Content-Type", "text/plain"}, 415, sdk.CodeUnsupportedMedia},
		{"unknown workspace", "GET", "/api/workspaces/01ARZ3NDEKTSV4RRFFQ69G5FAV", "", nil, 404, sdk.CodeWorkspaceNotFound},
		{"malformed workspace id", "GET", "/api/resources/not-a-ulid/insights", "", nil, 404, sdk.CodeWorkspaceNotFound},
		{"unknown workspace header", "GET", "/api/workflow-runs", "", []string{"X-Reeve-Workspace", "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, 404, sdk.CodeWorkspaceNotFound},
		{"wrong method", "DELETE", "/api/workspaces", "", nil, 405, sdk.CodeMethodNotAllowed},
		{"wrong method on item", "POST", "/api/workspaces/" + ws, "{}", nil, 405, sdk.CodeMethodNotAllowed},
		{"unknown route", "GET", "/api/nothing/here", "", nil, 404, sdk.CodeRouteNotFound},
		{"unknown record", "GET", "/api/workflow-runs/01ARZ3NDEKTSV4RRFFQ69G5FAV", "", nil, 404, sdk.CodeNotFound},
		{"unknown well-known", "GET", "/api/.well-known/other", "", nil, 404, sdk.CodeNotFound},
	}
	for _, c := range cases {
		var body any
		if c.body != "" {
			body = c.body
		}
		a := expect(t, do(t, s, c.method, c.path, u.Token, body, c.headers...), c.status, c.name)
		if a.errCode() != c.code {
			t.Errorf("%s: code %s, want %s", c.name, a.errCode(), c.code)
		}
		if c.status == 405 && a.Header.Get("Allow") == "" {
			t.Errorf("%s: no Allow header", c.name)
		}
	}
}
