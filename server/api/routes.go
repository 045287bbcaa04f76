package api

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// AuthKind says which credential a route accepts.
type AuthKind string

const (
	AuthPublic AuthKind = "public" // no credential
	AuthUser   AuthKind = "user"   // login session or personal API token
	AuthDaemon AuthKind = "daemon" // per-install issue token
	AuthRelay  AuthKind = "relay"  // relay JWT
	// AuthRelayService is the relay service credential (rvr_) a relay
	// instance presents on the presence and bus routes.
	AuthRelayService AuthKind = "relay-service"
	AuthWebhook      AuthKind = "webhook" // public ingestion; verification scheme not shown in the spec
	// AuthRunner is a team worker's runner credential (rwc_) or lease
	// token (rwl_) on /api/runtime/worker/* (docs/workers.md).
	AuthRunner AuthKind = "runner"
)

// Scope says where the workspace of a request comes from.
type Scope int

const (
	// ScopeNone: the route is about the caller (tokens, workspace list) or
	// public; no workspace applies.
	ScopeNone Scope = iota
	// ScopePath: the {workspace} path value.
	ScopePath
	// ScopeCaller: the caller's workspace — fixed for daemons and relay
	// tokens; for users the X-Reeve-Workspace header, else their first
	// workspace.
	ScopeCaller
)

// WorkspaceHeader selects the workspace of a ScopeCaller route for a user
// who belongs to several.
const WorkspaceHeader = "X-Reeve-Workspace"

// Body describes a route's JSON request body.
type Body struct {
	Schema   string // component name in requestSchemas
	Required bool
}

// Param is a documented query parameter.
type Param struct {
	Name        string
	Type        string // "string" or "integer"
	Description string
}

// Route is one row of the route table: everything the mux, the validator,
// the auth layer and the OpenAPI document need to know about an operation.
type Route struct {
	Method      string
	Path        string // Go 1.22 pattern path, e.g. /api/workspaces/{workspace}
	OperationID string
	Summary     string
	Tag         string
	Auth        AuthKind
	Scope       Scope
	MinRole     string // for users on workspace routes; "" means member
	Placeholder bool
	Body        *Body
	Query       []Param
	// Success lists the success statuses; SuccessSchema their body (empty
	// for 204). Errors lists extra documented error statuses (402, 404, 409).
	Success       []int
	SuccessSchema string
	Errors        []int
	// ErrorSchemas overrides the documented body of an error status.
	ErrorSchemas map[int]string
	// AliasOf is the operation id of the route this one mirrors.
	AliasOf string
	// TwinOf is the operation id of the typed route a placeholder spelling
	// acts like (/api/provider-keys beside /api/resources/{w}/provider-keys):
	// the same handler, body, role and query.
	TwinOf string

	engine  engineKind
	handler handlerFunc
}

// IsAlias reports whether r was generated as an alias.
func (r Route) IsAlias() bool { return r.AliasOf != "" }

func (r Route) key() string { return r.Method + " " + r.Path }

// ---- table builders ----

func route(method, path, opID, tag string) Route {
	r := Route{Method: method, Path: path, OperationID: opID, Tag: tag, Auth: defaultAuth(path)}
	if opID == "" {
		r.OperationID = OperationID(method, path)
	}
	switch {
	case strings.Contains(path, "{workspace}"):
		r.Scope = ScopePath
	case r.Auth == AuthPublic:
		r.Scope = ScopeNone
	case r.Auth == AuthWebhook:
		r.Scope = ScopeNone
	default:
		r.Scope = ScopeCaller
	}
	return r
}

// defaultAuth applies spec 5 rule 1 to a path.
func defaultAuth(path string) AuthKind {
	switch {
	case path == "/api/health", strings.HasPrefix(path, "/api/.well-known/"), path == "/api/openapi.json":
		return AuthPublic
	case strings.HasPrefix(path, "/api/webhooks/"):
		return AuthWebhook
	case strings.HasPrefix(path, "/api/runtime/internal/relay/"):
		return AuthRelay
	case strings.HasPrefix(path, "/api/runtime/worker/"):
		return AuthRunner
	case strings.HasPrefix(path, "/api/runtime/"):
		return AuthDaemon
	default:
		return AuthUser
	}
}

// placeholder builds a spec 4.0 placeholder route with its default shapes.
func placeholder(method, path, tag string) Route {
	r := route(method, path, "", tag)
	r.Placeholder = true
	r.SuccessSchema = "GenericApiResponse"
	switch method {
	case http.MethodGet:
		r.Success = []int{200}
	case http.MethodPut, http.MethodPatch:
		r.Success = []int{200}
		r.Body = &Body{Schema: "PlaceholderRequest", Required: true}
	case http.MethodPost:
		r.Success = []int{200, 201}
		r.Body = &Body{Schema: "PlaceholderRequest"}
	case http.MethodDelete:
		r.Success = []int{200, 204}
		r.Body = &Body{Schema: "PlaceholderRequest"}
	}
	return r
}

// typed builds a route the spec names, with its success status and schema.
func typed(method, path, opID, tag string, status int, resp string) Route {
	r := route(method, path, opID, tag)
	r.Success = []int{status}
	r.SuccessSchema = resp
	return r
}

func (r Route) body(schema string, required bool) Route {
	r.Body = &Body{Schema: schema, Required: required}
	return r
}
func (r Route) resp(schema string) Route   { r.SuccessSchema = schema; return r }
func (r Route) noBody() Route              { r.Body = nil; return r }
func (r Route) role(min string) Route      { r.MinRole = min; return r }
func (r Route) auth(a AuthKind) Route      { r.Auth = a; return r }
func (r Route) scope(s Scope) Route        { r.Scope = s; return r }
func (r Route) summary(s string) Route     { r.Summary = s; return r }
func (r Route) errs(codes ...int) Route    { r.Errors = append(r.Errors, codes...); return r }
func (r Route) success(codes ...int) Route { r.Success = codes; return r }
func (r Route) query(ps ...Param) Route    { r.Query = append(r.Query, ps...); return r }
func (r Route) errBody(status int, schema string) Route {
	m := map[int]string{}
	for k, v := range r.ErrorSchemas {
		m[k] = v
	}
	m[status] = schema
	r.ErrorSchemas = m
	return r
}

func qInt(name, d string) Param { return Param{Name: name, Type: "integer", Description: d} }
func qStr(name, d string) Param { return Param{Name: name, Type: "string", Description: d} }

// many expands "GET, POST" style rows of the spec.
func many(tag string, methods string, paths ...string) []Route {
	var out []Route
	for _, p := range paths {
		for _, m := range strings.Split(methods, ",") {
			out = append(out, placeholder(strings.TrimSpace(m), p, tag))
		}
	}
	return out
}

func prefixed(prefix string, rel ...string) []string {
	out := make([]string, len(rel))
	for i, r := range rel {
		out[i] = prefix + r
	}
	return out
}

// specRoutes is the table as the spec lists it (sections 4.1 to 4.12),
// before aliases are generated.
func specRoutes() []Route {
	var t []Route
	add := func(rs ...Route) { t = append(t, rs...) }

	// 4.1 Identity and tokens.
	add(
		placeholder("GET", "/api/auth/login", "Identity").auth(AuthPublic).scope(ScopeNone).summary("Start the user login"),
		placeholder("GET", "/api/auth/callback", "Identity").auth(AuthPublic).scope(ScopeNone).
			summary("Finish the login. With one-time login links it never spends the code: it answers 303 to the sign-in page, which spends it with a POST").query(qStr("code", "one-time login code")).
			success(http.StatusSeeOther).resp("").errs(401),
		// The service's own: the one way a one-time code is spent.
		typed("POST", "/api/auth/callback", "", "Identity", 200, "LoginResponse").auth(AuthPublic).scope(ScopeNone).body("LoginRequest", true).errs(401, 404).
			summary("Exchange a one-time login code for a session bearer token (the code works once)"),
		placeholder("POST", "/api/auth/logout", "Identity").scope(ScopeNone).summary("Revoke the presented bearer token"),
		typed("GET", "/api/me/api-tokens", "", "Identity", 200, "ApiTokenCollectionResponse").scope(ScopeNone).summary("List the caller's personal API tokens"),
		typed("POST", "/api/me/api-tokens", "", "Identity", 201, "ApiTokenCreatedResponse").scope(ScopeNone).body("ApiTokenCreateRequest", true).summary("Create a personal API token; the plaintext is returned once"),
		typed("DELETE", "/api/me/api-tokens/{tokenId}", "", "Identity", 204, "").scope(ScopeNone).errs(404).summary("Revoke a personal API token"),
		typed("GET", "/api/health", "", "Meta", 200, "Health").summary("Liveness"),
		typed("GET", "/api/.well-known/{document}", "", "Meta", 200, "Discovery").errs(404).summary("Discovery documents: reeve-configuration (app_url and relay_url) and jwks.json (the evidence signing keys, current first, retired ones kept)"),
		typed("GET", "/api/openapi.json", "", "Meta", 200, "OpenApiDocument").summary("This OpenAPI document"),
	)

	// 4.2 Pairing, installs and relay credentials. The code lookup and deny
	// routes, and GET /api/runtime/install, are the service's own (the
	// approval page and `reeve doctor` need them).
	pc := "/api/pairing-codes/{code}"
	add(
		placeholder("POST", "/api/workspaces/{workspace}/pairing-codes", "Pairing").role("admin").body("WorkspacePairingCodeRequest", false).success(201).resp("PairingCodeResponse").errs(429).summary("Browser mints a pairing code"),
		typed("POST", "/api/pairing-codes", "", "Pairing", 201, "PairingCodeResponse").auth(AuthPublic).scope(ScopeNone).body("PairingCodeCreateRequest", true).errs(429).summary("Daemon mints a pairing code and receives the status token"),
		typed("POST", pc+"/claim", "", "Pairing", 200, "PairingCodeResponse").auth(AuthPublic).scope(ScopeNone).body("PairingCodeClaimRequest", false).errs(401, 403, 404, 409, 410, 429).summary("Claim a code; a claiming daemon receives a status_token"),
		typed("GET", pc+"/status", "", "Pairing", 200, "PairingCodeResponse").auth(AuthPublic).scope(ScopeNone).errs(401, 404, 410, 429).summary("Poll with the status token (Authorization: Bearer); the first answer after approval carries relay_credentials"),
		typed("GET", pc, "", "Pairing", 200, "PairingCodeResponse").scope(ScopeNone).errs(404, 410, 429).summary("Show a code to a signed-in user: the machine's name and anchor fingerprint"),
		typed("POST", pc+"/approve", "", "Pairing", 200, "PairingCodeResponse").scope(ScopeNone).body("PairingDecisionRequest", false).errs(404, 409, 410, 429).summary("Approve: binds the machine to the workspace and retires its earlier install"),
		typed("POST", pc+"/deny", "", "Pairing", 200, "PairingCodeResponse").scope(ScopeNone).body("PairingDecisionRequest", false).errs(404, 409, 410, 429).summary("Deny: the machine is not paired"),
		typed("GET", "/api/workspaces/{workspace}/installs", "", "Pairing", 200, "InstallCollectionResponse").summary("List paired machines"),
		typed("POST", "/api/workspaces/{workspace}/installs", "", "Pairing", 201, "InstallResponse").role("admin").body("InstallCreateRequest", false).summary("Register a machine; returns its issue token once"),
		typed("GET", "/api/workspaces/{workspace}/installs/{install}", "", "Pairing", 200, "InstallResponse").errs(404),
		typed("DELETE", "/api/workspaces/{workspace}/installs/{install}", "", "Pairing", 204, "").role("admin").errs(404).summary("Detach a paired daemon: its issue token and relay JWTs stop working at once"),
		typed("POST", "/api/workspaces/{workspace}/installs/{install}/heartbeat", "", "Pairing", 200, "InstallResponse").auth(AuthDaemon).body("PlaceholderRequest", false).errs(404).summary("The daemon reports it is alive (its own issue token); updates last_seen_at"),
		typed("POST", "/api/workspaces/{workspace}/relay-token", "", "Pairing", 201, "RelayTokenResponse").body("PlaceholderRequest", false).summary("Relay JWT for a browser client"),
		typed("POST", "/api/runtime/relay-token", "", "Runtime", 201, "RelayTokenResponse").body("PlaceholderRequest", false).summary("Daemon exchanges its issue token for a relay JWT"),
		typed("GET", "/api/runtime/install", "", "Runtime", 200, "InstallResponse").summary("The install of the presented issue token (a read-only credential check)"),
		typed("POST", "/api/runtime/agent-sessions/sync", "syncDaemonSession", "Runtime", 200, "SessionSyncResponse").body("SessionSyncRequest", true).errs(409, 413, 422).
			summary("A paired daemon publishes a session and the next events of its log (at most 500, consecutive seqs); answers the acknowledged seq. 409 sync_gap when the batch skips ahead"),
		typed("POST", "/api/runtime/internal/relay/validate", "", "Runtime", 200, "RelayValidateResponse").body("RelayValidateRequest", false).summary("Relay admits a WebSocket upgrade by validating the presented JWT"),
	)

	// 4.3 Workspaces.
	ws := "/api/workspaces/{workspace}"
	add(
		typed("GET", "/api/workspaces", "listWorkspaces", "Workspaces", 200, "WorkspaceCollectionResponse").scope(ScopeNone),
		typed("POST", "/api/workspaces", "createWorkspace", "Workspaces", 201, "WorkspaceResponse").scope(ScopeNone).body("WorkspaceCreateRequest", true),
		typed("GET", ws, "getWorkspace", "Workspaces", 200, "WorkspaceResponse"),
		typed("PATCH", ws, "updateWorkspace", "Workspaces", 200, "WorkspaceResponse").body("WorkspaceUpdateRequest", true).role("admin"),
		placeholder("PUT", ws, "Workspaces").body("WorkspaceUpdateRequest", true).role("admin").summary("Replace the workspace settings"),
		placeholder("DELETE", ws, "Workspaces").role("owner").success(204).summary("Delete the workspace"),
	)
	add(many("Workspaces", "GET", prefixed(ws, "/audit", "/audit/export", "/sync-sources", "/insights", "/insights/summary")...)...)
	add(placeholder("GET", ws+"/invitations", "Workspaces").role("admin").resp("InvitationCollectionResponse").query(qInt("after", "return invitations after this seq"), qInt("limit", "")).
		summary("List invitations with their state (pending, accepted, revoked, expired); never their tokens"))
	add(placeholder("GET", ws+"/crypto/epochs", "Workspaces").resp("ContextEpochCollectionResponse").summary("Every context vault's epochs and how many devices got each key"))
	add(
		placeholder("POST", ws+"/gitops/webhook/code-host", "Workspaces"),
		placeholder("PATCH", ws+"/insights/{insight}", "Workspaces"),
		placeholder("POST", ws+"/insights/{insight}/convert", "Workspaces"),
		placeholder("POST", ws+"/insights/detect", "Workspaces"),
		placeholder("POST", ws+"/invitations", "Workspaces").role("admin").body("InvitationCreateRequest", true).success(201).resp("InvitationCreatedResponse").errs(409).
			summary("Invite an email with a role; answers the single-use accept link once (also printed on the server's console)"),
		placeholder("DELETE", ws+"/invitations/{invitation}", "Workspaces").role("admin").noBody().success(200).resp("InvitationResponse").errs(404, 409).summary("Revoke a pending invitation"),
		// Extensions: members are listed, and an invitation accepted by the
		// signed-in user it was sent to.
		typed("GET", ws+"/members", "listWorkspaceMembers", "Workspaces", 200, "MemberCollectionResponse").summary("List the workspace's members and their roles"),
		typed("POST", "/api/invitations/accept", "acceptWorkspaceInvitation", "Workspaces", 200, "InvitationAcceptedResponse").scope(ScopeNone).body("InvitationAcceptRequest", true).errs(403, 404, 409, 410).
			summary("Accept an invitation as the signed-in user whose email it names: they become a member with its role"),
		placeholder("PATCH", ws+"/members/{member}", "Workspaces").role("admin").body("MemberUpdateRequest", true).errs(404, 409).summary("Change a member's role"),
		placeholder("DELETE", ws+"/members/{member}", "Workspaces").role("admin").errs(404, 409).summary("Remove a member"),
		placeholder("POST", ws+"/members/transfer-owner", "Workspaces").role("owner").body("MemberTransferOwnerRequest", true).errs(404).summary("Transfer ownership"),
		placeholder("POST", ws+"/sync-sources", "Workspaces"),
		placeholder("GET", ws+"/sync-sources/{source}", "Workspaces"),
	)

	for i := range t {
		if strings.HasSuffix(t[i].Path, "/audit") || strings.HasSuffix(t[i].Path, "/audit/export") {
			t[i].SuccessSchema = "AuditCollectionResponse"
		}
	}

	// 4.4 Agent sessions.
	s := "/api/resources/{workspace}/sessions"
	si := s + "/{agentSession}"
	const as = "Agent Sessions"
	add(
		typed("GET", s, "listAgentSessions", as, 200, "AgentSessionCollectionResponse").query(qStr("status", ""), qStr("source_kind", ""), qInt("limit", "")),
		typed("POST", s, "createAgentSession", as, 201, "AgentSessionResponse").body("AgentSessionCreateRequest", true),
		typed("GET", si, "getAgentSession", as, 200, "AgentSessionResponse").errs(404),
		typed("POST", si+"/access", "shareAgentSessionAccess", as, 201, "AgentSessionAccessShareResponse").success(200, 201).body("AgentSessionAccessShareRequest", true).errs(404),
		typed("POST", si+"/access-requests", "requestAgentSessionAccess", as, 201, "AgentSessionAccessRequestResponse").body("AgentSessionAccessRequestCreateRequest", true),
		typed("POST", si+"/access-requests/{accessRequestId}/decision", "decideAgentSessionAccessRequest", as, 200, "AgentSessionAccessRequestDecisionResponse").body("AgentSessionAccessRequestDecisionRequest", true).errs(404, 409),
		typed("DELETE", si+"/access/{aclEntry}", "revokeAgentSessionAccess", as, 200, "AgentSessionAccessRevokeResponse").errs(404),
		typed("GET", si+"/adapter-receipts", "exportAgentSessionAdapterReceipts", as, 200, "AgentSessionAdapterReceiptsResponse"),
		typed("GET", si+"/approval-audit", "getAgentSessionApprovalAudit", as, 200, "AgentSessionApprovalAuditResponse"),
		typed("POST", si+"/attempt-graph", "composeAgentSessionAttemptGraph", as, 201, "AgentSessionAttemptGraphResponse"),
		typed("GET", si+"/collaboration", "showAgentSessionCollaboration", as, 200, "AgentSessionCollaborationResponse"),
		typed("POST", si+"/collaboration-events", "storeAgentSessionCollaborationEvent", as, 201, "AgentSessionCollaborationEventResponse").body("AgentSessionCollaborationEventStoreRequest", true),
		typed("GET", si+"/compute-evidence", "exportAgentSessionComputeEvidence", as, 200, "AgentSessionComputeEvidenceResponse"),
		typed("POST", si+"/context-corrections", "createAgentSessionContextCorrection", as, 201, "AgentSessionContextCorrectionResponse").body("AgentSessionContextCorrectionCreateRequest", true).errs(404).summary("A context correction becomes a proposal for a human, sealed to the source's devices"),
		typed("POST", si+"/context-working-set", "composeAgentSessionContextWorkingSet", as, 200, "AgentSessionContextWorkingSetResponse").errs(404).summary("Compose the session's working set: its sources and the entries whose descriptors fit its task"),
		typed("GET", si+"/events", "listAgentSessionEvents", as, 200, "AgentSessionEventDeltaResponse").query(qInt("after_sequence", "return events after this sequence"), qInt("limit", "")),
		typed("POST", si+"/fan-in-review", "composeAgentSessionFanInReview", as, 201, "AgentSessionFanInReviewResponse"),
		typed("GET", si+"/governance", "getAgentSessionGovernance", as, 200, "AgentSessionGovernanceResponse"),
		typed("GET", si+"/guardrail-evidence", "exportAgentSessionGuardrailEvidence", as, 200, "AgentSessionGuardrailEvidenceResponse"),
		typed("GET", si+"/mcp-tools", "exportAgentSessionMcpTools", as, 200, "AgentSessionMcpToolsResponse"),
		typed("POST", si+"/memory-retrieval", "retrieveAgentSessionMemory", as, 200, "AgentSessionMemoryRetrievalResponse").body("AgentSessionMemoryRetrievalRequest", true).errs(404).summary("Search the working set's descriptors; 422 for a source outside it"),
		typed("POST", si+"/model-routing-decision", "composeAgentSessionModelRoutingDecision", as, 200, "AgentSessionModelRoutingResponse"),
		typed("GET", si+"/readiness", "exportAgentSessionReadiness", as, 200, "AgentSessionReadinessResponse"),
		typed("GET", si+"/receipt-export", "exportAgentSessionReceipt", as, 200, "AgentSessionReceiptExportResponse"),
		typed("GET", si+"/room", "showAgentSessionRoom", as, 200, "AgentSessionRoomResponse"),
		typed("POST", si+"/routing-decisions", "createAgentSessionRoutingDecision", as, 201, "RoutingDecisionResponse").body("RoutingDecisionCreateRequest", true),
		typed("POST", si+"/run-attempts", "queueAgentSessionRunAttempt", as, 201, "WorkflowRunResponse").body("AgentSessionRunAttemptRequest", false),
		typed("GET", si+"/spend", "exportAgentSessionSpend", as, 200, "AgentSessionSpendResponse"),
		typed("GET", si+"/support-debug", "getAgentSessionSupportDebug", as, 200, "AgentSessionSupportDebugResponse"),
		typed("GET", si+"/trace-export", "exportAgentSessionTrace", as, 200, "AgentSessionTraceExportResponse"),
		typed("POST", si+"/verification-attempts", "createAgentSessionVerificationAttempt", as, 201, "SessionVerificationAttemptRecordedResponse").body("SessionVerificationAttemptCreateRequest", true),
		typed("POST", si+"/verification-pack", "resolveAgentSessionVerificationPack", as, 201, "SessionVerificationPackResolvedResponse").body("SessionVerificationPackResolveRequest", false),
		// Responses not shown in the spec: the record engine answers 201.
		typed("POST", si+"/verification-repair-handoffs", "createAgentSessionVerificationRepairHandoff", as, 201, "GenericApiResponse").body("SessionVerificationRepairHandoffCreateRequest", true),
	)
	for i := range t {
		if t[i].Tag == as {
			t[i].Errors = append(t[i].Errors, 403)
			if t[i].Body != nil {
				t[i].Errors = append(t[i].Errors, 422)
			}
		}
	}

	// 4.5 Sessions (placeholders).
	add(many("Sessions", "GET,POST", "/api/sessions")...)
	ss := "/api/sessions/{agentSession}"
	add(placeholder("GET", ss, "Sessions"))
	for _, p := range []struct{ m, s string }{
		{"POST", "/access"}, {"POST", "/access-requests"}, {"POST", "/access-requests/{accessRequestId}/decision"}, {"DELETE", "/access/{aclEntry}"},
		{"GET", "/adapter-receipts"}, {"GET", "/approval-audit"}, {"POST", "/attempt-graph"},
		{"GET", "/collaboration"}, {"POST", "/collaboration-events"}, {"GET", "/compute-evidence"},
		{"GET", "/effective-policy"}, {"GET", "/events"}, {"POST", "/fan-in-review"},
		{"GET", "/governance"}, {"GET", "/guardrail-evidence"}, {"GET", "/mcp-tools"},
		{"POST", "/model-routing-decision"},
		{"POST", "/policy-change-proposals"}, {"POST", "/policy-change-proposals/open-pr"},
	} {
		add(placeholder(p.m, ss+p.s, "Sessions"))
	}
	// The context routes of 4.5 behave as their 4.4 twins (context vault).
	add(
		placeholder("POST", ss+"/context-corrections", "Sessions").body("AgentSessionContextCorrectionCreateRequest", true).success(201).resp("AgentSessionContextCorrectionResponse").errs(404, 422).summary("A session's context correction becomes a proposal, sealed to the source's devices"),
		placeholder("POST", ss+"/context-working-set", "Sessions").body("PlaceholderRequest", false).success(200).resp("AgentSessionContextWorkingSetResponse").errs(404).summary("Compose the session's working set over server-visible descriptors"),
		placeholder("POST", ss+"/memory-retrieval", "Sessions").body("AgentSessionMemoryRetrievalRequest", true).success(200).resp("AgentSessionMemoryRetrievalResponse").errs(404, 422).summary("Search the working set's descriptors; 422 for a source outside it"),
	)

	// 4.6 Billing.
	for _, p := range []struct{ m, s string }{
		{"POST", "/checkout-session"}, {"POST", "/customer/reconcile"}, {"GET", "/invoices"}, {"POST", "/invoices/{invoiceId}/reconcile"},
		{"GET", "/payment-method"}, {"POST", "/portal-session"}, {"GET", "/pricing"}, {"GET", "/summary"}, {"GET", "/webhooks"},
	} {
		add(placeholder(p.m, "/api/billing"+p.s, "Billing"))
	}
	b := "/api/resources/{workspace}/billing"
	add(
		typed("POST", b+"/checkout-session", "createBillingCheckoutSession", "Billing", 200, "BillingCheckoutSessionResponse").body("BillingCheckoutSessionRequest", false).role("admin"),
		typed("POST", b+"/customer/reconcile", "reconcileBillingCustomer", "Billing", 200, "BillingCustomerReconciliationResponse").role("admin"),
		typed("GET", b+"/invoices", "listBillingInvoices", "Billing", 200, "BillingInvoiceCollectionResponse"),
		typed("POST", b+"/invoices/{invoiceId}/reconcile", "reconcileBillingInvoice", "Billing", 200, "BillingInvoiceReconciliationResponse").role("admin"),
		typed("GET", b+"/payment-method", "getBillingPaymentMethod", "Billing", 200, "BillingPaymentMethodResponse"),
		typed("POST", b+"/portal-session", "createBillingPortalSession", "Billing", 200, "BillingPortalSessionResponse").body("BillingPortalSessionRequest", false).role("admin").errs(404),
		typed("GET", b+"/pricing", "getBillingPricingCatalog", "Billing", 200, "BillingPricingCatalogResponse"),
		typed("GET", b+"/summary", "getBillingSummary", "Billing", 200, "BillingSummaryResponse").query(qStr("period_start", ""), qStr("period_end", "")),
		typed("GET", b+"/webhooks", "getPaymentWebhookStatus", "Billing", 200, "PaymentWebhookStatusResponse"),
	)

	// 4.7 Provider keys.
	add(many("Provider Keys", "GET,POST", "/api/provider-keys")...)
	add(placeholder("GET", "/api/provider-keys/{providerKey}", "Provider Keys"), placeholder("DELETE", "/api/provider-keys/{providerKey}", "Provider Keys").role("admin"))
	add(placeholder("POST", "/api/provider-keys/{providerKey}/rotate", "Provider Keys"))
	pk := "/api/resources/{workspace}/provider-keys"
	add(
		typed("GET", pk, "listProviderKeys", "Provider Keys", 200, "ProviderKeyCollectionResponse"),
		typed("POST", pk, "createProviderKey", "Provider Keys", 201, "ProviderKeyResponse").body("CreateProviderKeyRequest", true).role("admin"),
		typed("POST", pk+"/{providerKey}/rotate", "rotateProviderKey", "Provider Keys", 200, "ProviderKeyResponse").body("RotateProviderKeyRequest", false).role("admin").errs(404).
			summary("Replace the secret (a new fingerprint and version); a managed_byok key without a new secret is 422"),
		typed("GET", pk+"/{providerKey}", "getProviderKey", "Provider Keys", 200, "ProviderKeyResponse").errs(404),
		typed("DELETE", pk+"/{providerKey}", "deleteProviderKey", "Provider Keys", 200, "ProviderKeyResponse").role("admin").errs(404).summary("Delete the key and its sealed secret"),
	)

	// 4.8 Support.
	sw := "/api/support/workspaces/{workspace}"
	add(
		typed("GET", "/api/resources/{workspace}/posture", "getResourceSupportWorkspacePosture", "Support", 200, "SupportWorkspacePostureResponse").role("admin"),
		typed("GET", sw+"/posture", "getSupportWorkspacePosture", "Support", 200, "SupportWorkspacePostureResponse").role("admin"),
		typed("GET", sw+"/access-requests", "listSupportAccessRequests", "Support", 200, "SupportAccessRequestCollectionResponse").role("admin"),
		typed("POST", sw+"/access-requests", "createSupportAccessRequest", "Support", 201, "SupportAccessRequestResponse").body("SupportAccessRequestCreateRequest", true),
		typed("POST", sw+"/access-requests/{supportAccessRequest}/approve", "approveSupportAccessRequest", "Support", 200, "SupportAccessRequestResponse").body("SupportAccessDecisionRequest", false).role("admin").errs(404, 409),
		typed("POST", sw+"/access-requests/{supportAccessRequest}/deny", "denySupportAccessRequest", "Support", 200, "SupportAccessRequestResponse").body("SupportAccessDecisionRequest", false).role("admin").errs(404, 409),
		typed("POST", sw+"/access-requests/{supportAccessRequest}/revoke", "revokeSupportAccessRequest", "Support", 200, "SupportAccessRequestResponse").body("SupportAccessDecisionRequest", false).role("admin").errs(404, 409),
	)

	// 4.9 Insights.
	add(
		placeholder("GET", "/api/insights", "Insights"),
		placeholder("PATCH", "/api/insights/{insight}", "Insights"),
		placeholder("POST", "/api/insights/{insight}/convert", "Insights"),
		placeholder("POST", "/api/insights/detect", "Insights"),
		placeholder("GET", "/api/insights/summary", "Insights"),
	)
	add(insightRoutes()...) // insights.go

	// 4.10 Workflow runs.
	add(typed("POST", "/api/resources/{workspace}/workflow-runs/preflight", "preflightWorkflowRun", "Workflow Runs", 200, "WorkflowRunPreflightResponse").
		body("WorkflowRunPreflightRequest", false).errBody(422, "WorkflowRunPreflightNotRunnableResponse"))
	wr := "/api/workflow-runs"
	add(many("Workflow Runs", "GET,POST", wr)...)
	add(many("Workflow Runs", "GET,PATCH", wr+"/{workflowRun}")...)
	for _, p := range []struct{ m, s string }{
		{"POST", "/action-proposals/{proposalKey}/decision"}, {"POST", "/action-proposals/{proposalKey}/execute"},
		{"POST", "/approvals/{nodeKey}"}, {"GET", "/audit-packet"}, {"POST", "/cancel"},
		{"GET", "/contract-health"}, {"POST", "/verify-contract-health"},
		{"POST", "/events"}, {"POST", "/execution-receipts/{executionReceipt}/verify"}, {"GET", "/gates"},
		{"POST", "/nodes/{node}/context/proposals"}, {"POST", "/nodes/{node}/context/receipts"}, {"POST", "/nodes/{node}/context/resolve"},
		{"GET", "/policy-simulation"}, {"GET", "/replay"}, {"POST", "/rerun"}, {"GET", "/story"},
		{"GET", "/telemetry"}, {"GET", "/trace-feed"}, {"GET", "/trace-feed/export"},
	} {
		add(placeholder(p.m, wr+"/{workflowRun}"+p.s, "Workflow Runs"))
	}
	add(placeholder("POST", wr+"/preflight", "Workflow Runs"), placeholder("GET", wr+"/replay", "Workflow Runs"))

	// 4.11 Runtime.
	add(typed("POST", "/api/runtime/internal/gateway/workspaces/{workspace}/usage", "postApiRuntimeInternalGatewayWorkspacesWorkspaceUsage", "Runtime", 201, "GatewayUsageRecordResponse").
		success(200, 201).body("GatewayUsageRecordRequest", true).errs(402, 409).errBody(402, "GatewayUsageAdmissionDeniedResponse").
		summary("Finalize a usage entry: admission (billing active, the period's hard cap) and the append are one step; a replayed idempotency_key answers 200 with the entry, 409 idempotency_conflict with another body"))
	add(typed("GET", "/api/workspaces/{workspace}/gateway/ledger", "listGatewayLedger", "Billing", 200, "GatewayLedgerResponse").role("admin").
		query(qStr("period", "only entries of this month (YYYY-MM)"), qInt("after", "entries after this seq"), qInt("limit", "1 to 500, default 100")).
		summary("The gateway usage ledger: entries, period totals (months and days) and the budget in force; admins only"))
	rt := "/api/runtime"
	add(typed("POST", rt+"/internal/gateway/workspaces/{workspace}/provider-key-material", "releaseProviderKeyMaterial", "Runtime", 200, "ProviderKeyMaterialResponse").
		body("ProviderKeyMaterialRequest", true).errs(404, 409).
		summary("The gateway (a paired install of the workspace) receives a key's secret for a workflow run a worker holds now; audited, refused (403) for any other run"))
	// Relay instances, not JWT holders, call presence and the bus; they
	// span workspaces.
	for _, p := range []struct{ path, summary string }{
		{"/bus/publish", "Relay instance publishes envelopes to other instances' inboxes"},
		{"/bus/pull", "Relay instance long-polls its inbox"},
		{"/presence/resolve", "Which relay instance holds a runtime target's daemon"},
		{"/presence/upsert", "Relay instance reports the daemon connections it holds and lost"},
	} {
		add(placeholder("POST", rt+"/internal/relay"+p.path, "Runtime").auth(AuthRelayService).scope(ScopeNone).summary(p.summary))
	}
	rw := rt + "/workspaces/{workspace}"
	add(
		placeholder("POST", rw+"/agent-hooks/plans", "Runtime"),
		placeholder("POST", rw+"/contract/authorize", "Runtime"),
	)
	// The context vault (docs/context-vault.md): the calling install's
	// device. The rows marked "own" are the service's own (spec 4.11 does
	// not show 34 of the group's operations).
	cvr := func(method, path string, status int, resp, body string, required bool, summary string, errs ...int) Route {
		r := typed(method, rw+path, "", "Runtime", status, resp).summary(summary).errs(403)
		if body != "" {
			r = r.body(body, required).errs(422)
		}
		return r.errs(errs...)
	}
	add(
		cvr("GET", "/context-vaults", 200, "ContextDeviceVaultCollectionResponse", "", false, "The sources this device's user belongs to, with the keys wrapped to this device and the devices to wrap for"),
		cvr("POST", "/context-vaults", 201, "ContextDeviceVaultResponse", "ContextSourceCreateRequest", true, "Create a vault (epoch 0: publish epoch 1 next) or a git source, owned by this device's user", 409),
		cvr("GET", "/context-vaults/{contextVault}", 200, "ContextDeviceVaultResponse", "", false, "One source as this device sees it (own)", 404),
		cvr("POST", "/context-vaults/{contextVault}/epochs", 201, "ContextEpochResponse", "ContextEpochRequest", true, "Publish the vault's next epoch, wrapped to exactly the eligible devices (own)", 404, 409),
		cvr("POST", "/context-vault/events/push", 200, "ContextPushResponse", "ContextPushRequest", true, "Append sealed events; a replayed id with the same content is a duplicate, with other content 409; an unknown base 422", 404, 409),
		cvr("POST", "/context-vault/events/pull", 200, "ContextPullResponse", "ContextPullRequest", true, "Events after a cursor, in sequence order", 404),
		cvr("POST", "/context-vault/grants/pending", 200, "ContextGrantObligationCollectionResponse", "PlaceholderRequest", false, "Keys this device holds that an eligible device lacks"),
		cvr("POST", "/context-vault/grants/mark-emitted", 200, "ContextWrappedKeyCollectionResponse", "ContextEmitRequest", true, "Deliver wraps for other devices; with a member, share the vault with that user first (a team grant)", 404),
		cvr("POST", "/context-vault/grants/materialized", 200, "ContextWrappedKeyCollectionResponse", "ContextMaterializedRequest", true, "This device unwrapped these keys", 404),
		cvr("POST", "/context-vault/grants/revocations/pending", 200, "ContextRevocationCollectionResponse", "PlaceholderRequest", false, "Revoked devices and removed members that still hold a current key: the vaults to rotate"),
		cvr("POST", "/context-vault/grants/mark-revoked", 200, "ContextRevocationCollectionResponse", "ContextRevokeRequest", true, "Revoke a device or remove a vault member; its vaults become due for rotation", 404, 409),
		cvr("POST", "/context-vault/candidates/preview-proof", 201, "ContextPreviewProofResponse", "ContextPreviewRequest", true, "Record that a person saw what a candidate adds (a signed proof)", 404, 409),
		cvr("GET", "/context-update-proposals", 200, "ContextProposalCollectionResponse", "", false, "Proposals for this device's sources; the seal only for devices it was sealed to (own)").query(qStr("state", "pending, previewed, accepted or rejected")),
		cvr("POST", "/context-update-proposals/{proposal}/writeback-receipt", 200, "ContextProposalResponse", "ContextWritebackRequest", true, "Accept a previewed proposal as written (vault event or pull request); the seal is dropped", 404, 409),
		cvr("POST", "/context-update-proposals/{proposal}/decision", 200, "ContextProposalResponse", "ContextDecisionRequest", true, "Reject a proposal; the seal is dropped (own)", 404, 409),
		cvr("GET", "/crypto/device-enrollments", 200, "ContextDeviceCollectionResponse", "", false, "The workspace's context devices (public keys, fingerprints, states)"),
		cvr("POST", "/crypto/device-enrollments", 201, "ContextDeviceResponse", "ContextEnrollRequest", true, "Enroll this machine's device: active when its user's first, else pending", 409).success(200, 201),
		cvr("GET", "/crypto/device-enrollments/{enrollment}", 200, "ContextDeviceResponse", "", false, "One device", 404),
		cvr("POST", "/crypto/device-enrollments/{enrollment}/approve", 200, "ContextDeviceResponse", "ContextApproveRequest", true, "Approve a pending device of the same user after comparing its fingerprint; hand it keys", 404, 409),
		cvr("POST", "/crypto/device-enrollments/{enrollment}/materialized", 200, "ContextDeviceResponse", "PlaceholderRequest", false, "The approved device took its keys: it becomes active", 404, 409),
		cvr("GET", "/crypto/recovery-backup", 200, "ContextBackupCollectionResponse", "", false, "The recovery backups (sealed device identities) of this install's user (own)"),
		cvr("PUT", "/crypto/recovery-backup", 200, "ContextBackupResponse", "ContextBackupRequest", true, "Store this device's identity sealed with a recovery key (own)"),
		cvr("POST", "/crypto/recovery-backup/restore", 200, "ContextDeviceResponse", "ContextRestoreRequest", true, "Move a restored device to this machine (own)", 404, 409),
	)

	// 4.12 Other groups.
	add(integrationWebhookRoutes()...) // integration_webhooks.go

	// Context sources and vaults (docs/context-vault.md).
	for _, g := range []struct{ tag, base, item, noun string }{
		{"Context Sources", "/api/context-sources", "{contextSource}", "source"},
		{"Context Vaults", "/api/context-vaults", "{contextVault}", "vault"},
	} {
		it := g.base + "/" + g.item
		add(
			typed("GET", g.base, "", g.tag, 200, "ContextSourceCollectionResponse").summary("Every context "+g.noun+" of the workspace: names and server-visible descriptors"),
			typed("POST", g.base, "", g.tag, 201, "ContextSourceResponse").body("ContextSourceCreateRequest", true).errs(409, 422).summary("Create a context "+g.noun+"; the caller owns it"),
			typed("GET", it, "", g.tag, 200, "ContextSourceResponse").errs(404).summary("One context "+g.noun+" (by id or name) with its members"),
			typed("PUT", it, "", g.tag, 200, "ContextSourceResponse").body("ContextSourceUpdateRequest", true).errs(403, 404, 409, 422).summary("Replace a "+g.noun+"'s settings (owner or workspace admin)"),
			typed("PATCH", it, "", g.tag, 200, "ContextSourceResponse").body("ContextSourceUpdateRequest", true).errs(403, 404, 409, 422).summary("Change a "+g.noun+"'s settings; rotation_requested asks its devices to rotate"),
		)
	}
	cs := "/api/context-sources/{contextSource}"
	add(
		typed("POST", cs+"/indexes", "", "Context Sources", 200, "ContextSourceIndexResponse").body("PlaceholderRequest", false).errs(404).summary("The source's descriptor index: live entries, conflicts, descriptors"),
		typed("POST", cs+"/sync-git", "", "Context Sources", 200, "ContextSourceResponse").body("PlaceholderRequest", false).errs(404, 422).summary("Ask the devices holding a git source to fetch it and report its documents"),
	)

	add(placeholder("POST", "/api/onboarding/complete", "Onboarding"))
	add(many("Onboarding", "GET,PUT", "/api/onboarding/current")...)
	add(many("Onboarding", "POST", "/api/onboarding/early-access", "/api/onboarding/intro-call", "/api/onboarding/prepare-workspace")...)

	me := "/api/managed-executors"
	add(many("Managed Executors", "GET,POST", me)...)
	add(placeholder("DELETE", me+"/{managedExecutor}", "Managed Executors"),
		placeholder("POST", me+"/{managedExecutor}/rotate-credential", "Managed Executors"),
		placeholder("PATCH", me+"/{managedExecutor}/tags", "Managed Executors"))

	sg := "/api/share-groups"
	// Share groups are the workspace's teams (session ACL subjects and
	// owning teams); admins shape them.
	add(placeholder("GET", sg, "Share Groups"), placeholder("POST", sg, "Share Groups").role("admin"))
	add(placeholder("GET", sg+"/{shareGroup}", "Share Groups"),
		placeholder("POST", sg+"/{shareGroup}/members", "Share Groups").role("admin").body("ShareGroupMemberRequest", true).errs(404).summary("Add a workspace member to the group (a team)"),
		placeholder("DELETE", sg+"/{shareGroup}/members/{user}", "Share Groups").role("admin").noBody().errs(404).summary("Remove a user (by user id) from the group"))

	add(placeholder("GET", "/api/mcp/receipts", "MCP"))
	add(many("MCP", "GET,POST", "/api/mcp/servers")...)
	add(placeholder("POST", "/api/mcp/servers/{mcpServer}/policies", "MCP"), placeholder("POST", "/api/mcp/tool-calls", "MCP"))

	add(integrationEventRoutes()...) // integration_events.go

	rp := "/api/review-packets"
	add(many("Review Packets", "GET,POST", rp)...)
	add(placeholder("GET", rp+"/{reviewPacket}", "Review Packets"),
		placeholder("PATCH", rp+"/{reviewPacket}/decision", "Review Packets"),
		placeholder("GET", rp+"/{reviewPacket}/export", "Review Packets"))
	add(reviewPacketRoutes()...) // reviewpackets.go: the typed spellings these placeholders twin

	add(ingestRoutes()...) // webhook_ingest.go
	add(placeholder("POST", "/api/webhooks/payments/events", "Webhooks").success(200).errs(409, 413).
		summary("The payments provider's billing events, signed t=<unix>,v1=<hmac> (5-minute tolerance): 200 applied, 401 bad or stale signature, 409 an event id received before, 404 when no payments webhook is configured"))
	add(teamResourceRoutes()...)       // the service's own (teamresources.go)
	add(workerRoutes()...)             // the service's own (leases.go)
	add(workflowDefinitionRoutes()...) // the service's own (workflowdefs.go)
	tuneWorkflowRoutes(t)              // bodies and answers of the workflow-run and executor rows (workflows.go)
	return t
}

// aliasPrefixes are the two spellings of a workspace-scoped path (spec 2).
var aliasPrefixes = [2]string{"/api/workspaces/{workspace}", "/api/resources/{workspace}"}

// aliasPath returns the other spelling of a workspace-scoped path, if any.
func aliasPath(path string) (string, bool) {
	for i, p := range aliasPrefixes {
		if path == p || strings.HasPrefix(path, p+"/") {
			return aliasPrefixes[1-i] + strings.TrimPrefix(path, p), true
		}
	}
	return "", false
}

// Routes returns the whole table: the spec rows plus a generated alias for
// every workspace-scoped row whose other spelling the spec does not list,
// sorted by path then method. It panics on a malformed table, which the
// tests exercise.
func Routes() []Route {
	base := specRoutes()
	seen := map[string]bool{}
	for _, r := range base {
		if seen[r.key()] {
			panic(fmt.Sprintf("route table: duplicate %s", r.key()))
		}
		seen[r.key()] = true
	}
	twin(base)
	all := append([]Route(nil), base...)
	for _, r := range base {
		ap, ok := aliasPath(r.Path)
		if !ok || seen[r.Method+" "+ap] {
			continue
		}
		a := r
		a.Path = ap
		a.AliasOf = r.OperationID
		a.OperationID = OperationID(r.Method, ap)
		a.Summary = strings.TrimSpace("Alias of " + r.OperationID + ". " + r.Summary)
		seen[a.key()] = true
		all = append(all, a)
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].Path != all[j].Path {
			return all[i].Path < all[j].Path
		}
		return all[i].Method < all[j].Method
	})
	classifyAll(all)
	ids := map[string]string{}
	for _, r := range all {
		if prev, dup := ids[r.OperationID]; dup {
			panic(fmt.Sprintf("route table: operation id %s used by %s and %s", r.OperationID, prev, r.key()))
		}
		ids[r.OperationID] = r.key()
	}
	return all
}

// OperationKey names the records and action a route acts on: its method
// and its path with the workspace segments removed. Routes with one key
// are one operation and must share one gate.
func OperationKey(r Route) string { return r.Method + " " + collectionTemplate(r.Path) }

// twin makes each placeholder that spells a typed operation without the
// workspace in its path act as that operation: same handler (bound by
// TwinOf), body schema, role, query and answers.
func twin(all []Route) {
	typedBy := map[string]Route{}
	for _, r := range all {
		if !r.Placeholder && !r.IsAlias() && strings.Contains(r.Path, "{workspace}") {
			typedBy[OperationKey(r)] = r
		}
	}
	for i := range all {
		r := &all[i]
		if !r.Placeholder {
			continue
		}
		t, ok := typedBy[OperationKey(*r)]
		if !ok || t.Auth != r.Auth {
			continue
		}
		r.TwinOf = t.OperationID
		r.Body, r.MinRole, r.Query = t.Body, t.MinRole, t.Query
		r.Success, r.SuccessSchema, r.Errors, r.ErrorSchemas = t.Success, t.SuccessSchema, t.Errors, t.ErrorSchemas
		r.Summary = strings.TrimSpace("Same operation as " + t.OperationID + ". " + t.Summary)
	}
}
