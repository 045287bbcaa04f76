package api_test

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"reeve.dev/reeve/server/api"
	"reeve.dev/reeve/server/openapi"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

func TestOperationIDRule(t *testing.T) {
	cases := map[string]string{
		"POST /api/sessions/{agentSession}/access-requests":               "postApiSessionsAgentSessionAccessRequests",
		"POST /api/runtime/internal/gateway/workspaces/{workspace}/usage": "postApiRuntimeInternalGatewayWorkspacesWorkspaceUsage",
		"GET /api/workflow-runs/{workflowRun}/trace-feed/export":          "getApiWorkflowRunsWorkflowRunTraceFeedExport",
		"DELETE /api/share-groups/{shareGroup}/members/{user}":            "deleteApiShareGroupsShareGroupMembersUser",
		"POST /api/webhooks/payments-thin/events":                         "postApiWebhooksPaymentsThinEvents",
		"GET /api/.well-known/{document}":                                 "getApiWellKnownDocument",
	}
	for k, want := range cases {
		m, p, _ := strings.Cut(k, " ")
		if got := api.OperationID(m, p); got != want {
			t.Errorf("OperationID(%s) = %s, want %s", k, got, want)
		}
	}
	// Every placeholder and alias in the table carries the rule's id.
	for _, r := range api.Routes() {
		if (r.Placeholder || r.IsAlias()) && r.OperationID != api.OperationID(r.Method, r.Path) {
			t.Errorf("%s %s: operation id %s breaks the 4.0 rule", r.Method, r.Path, r.OperationID)
		}
	}
}

func TestTableHasSpecRowsAndAliases(t *testing.T) {
	byID := map[string]api.Route{}
	byKey := map[string]api.Route{}
	for _, r := range api.Routes() {
		byID[r.OperationID] = r
		byKey[r.Method+" "+r.Path] = r
	}
	for _, id := range []string{"listWorkspaces", "createWorkspace", "getWorkspace", "updateWorkspace", "createAgentSession", "decideAgentSessionAccessRequest",
		"createBillingPortalSession", "createProviderKey", "approveSupportAccessRequest", "getResourceInsights", "preflightWorkflowRun",
		"postApiRuntimeInternalGatewayWorkspacesWorkspaceUsage", "postApiSessionsAgentSessionAccessRequests"} {
		if _, ok := byID[id]; !ok {
			t.Errorf("operation %s missing", id)
		}
	}
	// Spec 2: /api/resources/{workspace}/... mirrors /api/workspaces/{workspace}/...
	for _, r := range api.Routes() {
		for _, pair := range [][2]string{{"/api/workspaces/{workspace}", "/api/resources/{workspace}"}, {"/api/resources/{workspace}", "/api/workspaces/{workspace}"}} {
			if r.Path == pair[0] || strings.HasPrefix(r.Path, pair[0]+"/") {
				other := pair[1] + strings.TrimPrefix(r.Path, pair[0])
				if _, ok := byKey[r.Method+" "+other]; !ok {
					t.Errorf("%s %s has no alias %s", r.Method, r.Path, other)
				}
			}
		}
	}
	if a := byKey["GET /api/resources/{workspace}"]; a.AliasOf != "getWorkspace" {
		t.Errorf("GET /api/resources/{workspace} should alias getWorkspace, got %+v", a.AliasOf)
	}
}

// TestServedAndDocumentedRoutesMatch checks both ways: every operation of
// the served document is answered by a route (never route_not_found or
// method_not_allowed), and every route of the table is in the document.
func TestServedAndDocumentedRoutesMatch(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	a := expect(t, do(t, s, "GET", "/api/openapi.json", "", nil), 200, "openapi")
	if string(a.Body) != string(openapi.Document) {
		t.Fatalf("served document differs from the committed one")
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(a.Body, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for p, ops := range doc.Paths {
		for m := range ops {
			documented[strings.ToUpper(m)+" "+p] = true
		}
	}
	table := map[string]bool{}
	for _, r := range api.Routes() {
		table[r.Method+" "+r.Path] = true
		if !documented[r.Method+" "+r.Path] {
			t.Errorf("served route %s %s is not documented", r.Method, r.Path)
		}
	}
	keys := make([]string, 0, len(documented))
	for k := range documented {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !table[k] {
			t.Errorf("documented %s is not in the table", k)
		}
		m, p, _ := strings.Cut(k, " ")
		path := strings.NewReplacer("{workspace}", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "{document}", "reeve-configuration").Replace(p)
		for strings.Contains(path, "{") {
			i, j := strings.Index(path, "{"), strings.Index(path, "}")
			path = path[:i] + "x" + path[j+1:]
		}
		got := do(t, s, m, path, "", "{}")
		if c := got.errCode(); c == sdk.CodeRouteNotFound || c == sdk.CodeMethodNotAllowed || got.Status >= 500 {
			t.Errorf("documented %s is not served: %d %s", k, got.Status, got.Body)
		}
	}
	if len(documented) < 300 {
		t.Fatalf("only %d operations documented", len(documented))
	}
	// And what is not documented is not served. (Paths outside /api are
	// the pages of server/web.)
	for _, k := range []string{"GET /api/nope", "GET /api/sessions/x/unknown", "POST /api/health", "GET /api"} {
		m, p, _ := strings.Cut(k, " ")
		got := do(t, s, m, p, "", nil)
		if c := got.errCode(); c != sdk.CodeRouteNotFound && c != sdk.CodeMethodNotAllowed {
			t.Errorf("undocumented %s answered %d %s", k, got.Status, got.Body)
		}
		got.checkEnvelope(t, k)
	}
}

// fill substitutes path parameters: {workspace} with ws, others with a
// syntactically valid id that exists nowhere.
func fill(path, ws string) string {
	path = strings.ReplaceAll(path, "{workspace}", ws)
	for strings.Contains(path, "{") {
		i, j := strings.Index(path, "{"), strings.Index(path, "}")
		path = path[:i] + "01ARZ3NDEKTSV4RRFFQ69G5FAV" + path[j+1:]
	}
	return path
}

// TestAuthMatrix is generated from the route table: every non-public route
// answers 401 without a credential, 401 with a bad one, and 403 to a
// principal of another workspace.
func TestAuthMatrix(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	ctx := context.Background()
	a := s.NewUser("a@example.com")
	b := s.NewUser("b@example.com")
	member := s.AddMember(a.Workspace, "m@example.com", sdk.RoleMember)
	bInstall, err := b.Client.CreateInstall(ctx, b.Workspace, "b-laptop")
	if err != nil {
		t.Fatal(err)
	}
	bRelay, err := s.Client(bInstall.IssueToken).RuntimeRelayToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bExec, err := b.Client.CreateManagedExecutor(ctx, b.Workspace, sdk.ManagedExecutorCreateRequest{Name: "b-runner"})
	if err != nil {
		t.Fatal(err)
	}
	bad := map[api.AuthKind]string{api.AuthUser: "rvp_notarealtoken", api.AuthDaemon: "rvi_notarealtoken", api.AuthRelay: "eyJhbGciOiJIUzI1NiJ9.e30.bm9wZQ", api.AuthRelayService: "rvr_notarealcredential", api.AuthRunner: "rwc_notarealcredential"}
	stranger := map[api.AuthKind]string{api.AuthUser: b.Token, api.AuthDaemon: bInstall.IssueToken, api.AuthRelay: bRelay.Token, api.AuthRunner: bExec.Credential}
	// Routes about the caller alone, where "another workspace" does not
	// apply. Listed so the set cannot grow unnoticed.
	self := map[string]bool{
		"GET /api/workspaces": true, "POST /api/workspaces": true, "POST /api/auth/logout": true,
		"GET /api/me/api-tokens": true, "POST /api/me/api-tokens": true, "DELETE /api/me/api-tokens/{tokenId}": true,
		"POST /api/pairing-codes/{code}/approve": true, "POST /api/pairing-codes/{code}/deny": true, "GET /api/pairing-codes/{code}": true,
		"POST /api/invitations/accept": true,
	}
	// Relay instances span workspaces: their routes have no workspace.
	for _, p := range []string{"bus/publish", "bus/pull", "presence/resolve", "presence/upsert"} {
		self["POST /api/runtime/internal/relay/"+p] = true
	}
	n403 := 0
	for _, r := range api.Routes() {
		key := r.Method + " " + r.Path
		switch r.Auth {
		case api.AuthPublic, api.AuthWebhook:
			if strings.HasPrefix(r.Path, "/api/runtime/") || strings.HasPrefix(r.Path, "/api/workspaces/") {
				t.Errorf("%s is public", key)
			}
			continue
		}
		path := fill(r.Path, a.Workspace)
		expect(t, do(t, s, r.Method, path, "", "{}"), 401, key+" without credential")
		expect(t, do(t, s, r.Method, path, bad[r.Auth], "{}"), 401, key+" with a bad credential")
		// A user token on a daemon route (and the reverse) is not valid there.
		if r.Auth != api.AuthUser {
			expect(t, do(t, s, r.Method, path, a.Token, "{}"), 401, key+" with a user token")
		}
		switch {
		case self[key]:
			if r.Scope != api.ScopeNone {
				t.Errorf("%s is listed as self but is workspace-scoped", key)
			}
			continue
		case r.Scope == api.ScopeNone:
			t.Errorf("%s has no workspace scope and is not listed as self", key)
			continue
		}
		ans := do(t, s, r.Method, path, stranger[r.Auth], "{}", api.WorkspaceHeader, a.Workspace)
		expect(t, ans, 403, key+" by another workspace")
		n403++
		if r.Auth == api.AuthUser && r.Scope == api.ScopePath && (r.MinRole == sdk.RoleAdmin || r.MinRole == sdk.RoleOwner) {
			expect(t, do(t, s, r.Method, path, member.Token, "{}"), 403, key+" by a plain member")
		}
	}
	if n403 < 250 {
		t.Fatalf("only %d routes checked for 403", n403)
	}
}
