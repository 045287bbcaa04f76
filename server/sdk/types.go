// Package sdk holds the REST wire types of the reeve control plane and a
// typed client for them. It is a leaf: it imports only the standard library,
// so the command line, the daemon and tests can all depend on it.
package sdk

import (
	"encoding/json"
	"time"
)

// ErrorEnvelope is the body of every error answer of the control plane.
type ErrorEnvelope struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody carries a stable machine-readable code, a human message, field
// details (for validation failures) and the request id to quote in reports.
type ErrorBody struct {
	Code      string        `json:"code"`
	Message   string        `json:"message"`
	Details   []ErrorDetail `json:"details"`
	RequestID string        `json:"request_id"`
}

// ErrorDetail names one problem. Field is a JSON pointer into the request
// body (or "query:<name>" for a query parameter); empty for the whole body.
type ErrorDetail struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Stable error codes. Clients switch on these, never on messages.
const (
	CodeUnauthenticated      = "unauthenticated"            // 401: missing or bad credential
	CodeForbidden            = "forbidden"                  // 403: not a member, or role too low
	CodeNotFound             = "not_found"                  // 404: no such record
	CodeRouteNotFound        = "route_not_found"            // 404: no such route
	CodeWorkspaceNotFound    = "workspace_not_found"        // 404: the {workspace} does not exist
	CodePrincipalUnavailable = "principal_unavailable"      // 404: session share subject cannot be resolved
	CodeBillingNoCustomer    = "billing_customer_missing"   // 404: portal before any customer reconcile
	CodeMethodNotAllowed     = "method_not_allowed"         // 405
	CodeConflict             = "conflict"                   // 409: state forbids the change
	CodeAlreadyDecided       = "already_decided"            // 409: access request decided before
	CodeBodyTooLarge         = "body_too_large"             // 413
	CodeUnsupportedMedia     = "unsupported_media_type"     // 415
	CodeInvalidJSON          = "invalid_json"               // 400: the body is not JSON
	CodeValidation           = "validation_failed"          // 422: schema or parameter errors, in details
	CodeOutsideWorkingSet    = "source_outside_working_set" // 422: memory retrieval
	CodeAdmissionDenied      = "admission_denied"           // 402: billing inactive or hard cap
	CodeRateLimited          = "rate_limited"               // 429: runtime throttling
	CodeInternal             = "internal_error"             // 500
	CodeUnavailable          = "unavailable"                // 503: the database cannot be reached; retry
)

// Workspace roles, in increasing power.
const (
	RoleMember = "member"
	RoleAdmin  = "admin"
	RoleOwner  = "owner"
)

// Workspace policy modes (WorkspaceUpdateRequest.policy_mode).
const (
	PolicyOpenAccess    = "open_access"
	PolicyAllowlist     = "allowlist"
	PolicyCryptoPairing = "crypto_pairing"
)

// Workspace is a tenant. Its id is a ULID.
type Workspace struct {
	ID                 string          `json:"id"`
	Name               string          `json:"name"`
	Description        *string         `json:"description"`
	Labels             json.RawMessage `json:"labels"`
	PolicyMode         string          `json:"policy_mode"`
	NotificationPolicy json.RawMessage `json:"notification_policy"`
	BudgetPolicy       json.RawMessage `json:"budget_policy"`
	AuditRetentionDays *int            `json:"audit_retention_days"`
	CreatedAt          time.Time       `json:"created_at"`
	UpdatedAt          time.Time       `json:"updated_at"`
	// Role is the caller's role in the workspace.
	Role    string   `json:"role,omitempty"`
	Members []Member `json:"members,omitempty"`
}

// Member is a user's membership of a workspace.
type Member struct {
	UserID int64  `json:"user_id"`
	Email  string `json:"email"`
	Role   string `json:"role"`
}

// WorkspaceResponse is the answer of get, create and update.
type WorkspaceResponse struct {
	Data Workspace `json:"data"`
}

// WorkspaceCollectionResponse is the answer of listWorkspaces.
type WorkspaceCollectionResponse struct {
	Data []Workspace `json:"data"`
	Meta ListMeta    `json:"meta"`
}

// WorkspaceCreateRequest is the body of createWorkspace. The spec does not
// show it; name is the only field the service needs.
type WorkspaceCreateRequest struct {
	Name        string  `json:"name"`
	Description *string `json:"description,omitempty"`
}

// WorkspaceUpdateRequest is the body of updateWorkspace (spec 4.3). A nil
// pointer leaves the field alone; to clear a nullable field send JSON null
// through a raw request.
type WorkspaceUpdateRequest struct {
	Name               *string         `json:"name,omitempty"`
	Description        *string         `json:"description,omitempty"`
	Labels             json.RawMessage `json:"labels,omitempty"`
	PolicyMode         *string         `json:"policy_mode,omitempty"`
	NotificationPolicy json.RawMessage `json:"notification_policy,omitempty"`
	BudgetPolicy       json.RawMessage `json:"budget_policy,omitempty"`
	AuditRetentionDays *int            `json:"audit_retention_days,omitempty"`
}

// ListMeta accompanies every collection answer.
type ListMeta struct {
	Count int `json:"count"`
	// NextAfter is the cursor (a record sequence) for the next page, or 0.
	NextAfter int64 `json:"next_after,omitempty"`
}

// Record is one item of the generic record engine that serves the routes
// whose schemas are still placeholders (spec 4.0), and the typed routes
// whose full semantics come later.
type Record struct {
	ID          string         `json:"id"`
	Collection  string         `json:"collection"`
	WorkspaceID string         `json:"workspace_id"`
	Seq         int64          `json:"seq"`
	Attributes  map[string]any `json:"attributes"`
	CreatedBy   string         `json:"created_by"`
	CreatedAt   time.Time      `json:"created_at"`
	UpdatedAt   time.Time      `json:"updated_at"`
}

// GenericApiResponse is the placeholder answer: a record or a list.
type GenericApiResponse struct {
	Data json.RawMessage `json:"data"`
	Meta *ListMeta       `json:"meta,omitempty"`
}

// RecordResponse is a GenericApiResponse holding one record.
type RecordResponse struct {
	Data Record `json:"data"`
}

// RecordCollectionResponse is a GenericApiResponse holding a list.
type RecordCollectionResponse struct {
	Data []Record `json:"data"`
	Meta ListMeta `json:"meta"`
}

// APIToken describes a personal API token; the plaintext is never in it.
type APIToken struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

// APITokenCreateRequest is the body of POST /api/me/api-tokens.
type APITokenCreateRequest struct {
	Name          string `json:"name"`
	ExpiresInDays *int   `json:"expires_in_days,omitempty"`
}

// APITokenCreated is the one answer that carries a token's plaintext.
type APITokenCreated struct {
	APIToken
	Token string `json:"token"`
}

// APITokenCreatedResponse wraps APITokenCreated.
type APITokenCreatedResponse struct {
	Data APITokenCreated `json:"data"`
}

// APITokenCollectionResponse lists the caller's tokens.
type APITokenCollectionResponse struct {
	Data []APIToken `json:"data"`
	Meta ListMeta   `json:"meta"`
}

// User is a human principal.
type User struct {
	ID    int64  `json:"id"`
	Email string `json:"email"`
}

// LoginResult is the answer of the login callback: a bearer token for the
// browser app (spec 5: may become a cookie before general availability).
type LoginResult struct {
	Token     string    `json:"token"`
	TokenType string    `json:"token_type"`
	ExpiresAt time.Time `json:"expires_at"`
	User      User      `json:"user"`
}

// LoginRequest spends a one-time login code (POST /api/auth/callback).
type LoginRequest struct {
	Code string `json:"code"`
}

// LoginResponse wraps LoginResult.
type LoginResponse struct {
	Data LoginResult `json:"data"`
}

// Health is the answer of GET /api/health.
type Health struct {
	Status   string          `json:"status"`
	Version  string          `json:"version"`
	Database *HealthDatabase `json:"database,omitempty"`
}

// HealthDatabase is the state of the server's database as /api/health
// found it (a down database answers 503 instead).
type HealthDatabase struct {
	Engine        string  `json:"engine"` // sqlite or postgres
	Status        string  `json:"status"` // ok
	SchemaVersion int     `json:"schema_version"`
	LatencyMS     float64 `json:"latency_ms"`
}

// Discovery is the .well-known document a command line reads to find the
// browser app and the relay.
type Discovery struct {
	APIURL     string `json:"api_url"`
	AppURL     string `json:"app_url"`
	RelayURL   string `json:"relay_url"`
	OpenAPIURL string `json:"openapi_url"`
	LoginURL   string `json:"login_url"`
	Version    string `json:"version"`
}

// DiscoveryPath is where Discovery is served.
const DiscoveryPath = "/api/.well-known/reeve-configuration"

// Install is a machine paired to a workspace.
type Install struct {
	ID          string     `json:"id"`
	WorkspaceID string     `json:"workspace_id"`
	Name        string     `json:"name"`
	CreatedAt   time.Time  `json:"created_at"`
	LastSeenAt  *time.Time `json:"last_seen_at"`
	// The machine it was paired from (empty for installs created directly):
	// its anchor fingerprint identifies it, and the public key lets a remote
	// client check the key exchange against the anchor.
	AnchorFingerprint string `json:"anchor_fingerprint,omitempty"`
	AnchorPublicKey   string `json:"anchor_public_key,omitempty"`
	Worker            bool   `json:"worker,omitempty"`
	Transport         string `json:"transport,omitempty"`
	// IssueToken is present only in the answer that created the install.
	IssueToken string `json:"issue_token,omitempty"`
}

// InstallResponse wraps Install.
type InstallResponse struct {
	Data Install `json:"data"`
}

// RelayToken is a short-lived relay JWT.
type RelayToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	RelayURL  string    `json:"relay_url"`
	// AccessToken (client tokens only) is the access token the daemon
	// checks each request against (AccessClaims); it is sent inside the
	// end-to-end channel, never to the relay.
	AccessToken string `json:"access_token,omitempty"`
}

// RelayTokenResponse wraps RelayToken.
type RelayTokenResponse struct {
	Data RelayToken `json:"data"`
}
