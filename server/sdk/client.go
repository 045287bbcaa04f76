package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client is a typed client of the control plane REST API.
type Client struct {
	// BaseURL is the server origin, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// Token is sent as a bearer credential when non-empty: a user token,
	// a personal API token, an install issue token or a relay JWT.
	Token string
	// HTTP defaults to http.DefaultClient.
	HTTP *http.Client
}

// APIError is a non-2xx answer decoded from its ErrorEnvelope.
type APIError struct {
	Status int
	Body   ErrorBody
	// RetryAfter is the server's Retry-After on a 429 (or 503), else 0.
	RetryAfter time.Duration
	// Data is the "data" member some errors carry beside "error" (the
	// preflight result, a sync gap's acknowledged seq).
	Data json.RawMessage
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Body.Code, e.Body.Message)
}

// IsCode reports whether err is an APIError with the given code.
func IsCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Body.Code == code
}

// Do sends one request. body, when not nil, is encoded as JSON (a
// json.RawMessage or []byte is sent as is); out, when not nil, receives the
// decoded answer. It returns the status code and, for a non-2xx answer, an
// *APIError.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		switch b := body.(type) {
		case []byte:
			rd = bytes.NewReader(b)
		case json.RawMessage:
			rd = bytes.NewReader(b)
		default:
			buf, err := json.Marshal(body)
			if err != nil {
				return 0, fmt.Errorf("encode request: %w", err)
			}
			rd = bytes.NewReader(buf)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		var env ErrorEnvelope
		var retry time.Duration
		if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n > 0 {
			retry = time.Duration(n) * time.Second
		}
		if jerr := json.Unmarshal(data, &env); jerr != nil || env.Error.Code == "" {
			return resp.StatusCode, &APIError{Status: resp.StatusCode, Body: ErrorBody{Code: "unexpected_answer", Message: strings.TrimSpace(string(data))}, RetryAfter: retry}
		}
		var extra struct {
			Data json.RawMessage `json:"data"`
		}
		_ = json.Unmarshal(data, &extra)
		return resp.StatusCode, &APIError{Status: resp.StatusCode, Body: env.Error, RetryAfter: retry, Data: extra.Data}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode answer of %s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// Health reads GET /api/health.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	_, err := c.Do(ctx, http.MethodGet, "/api/health", nil, &h)
	return h, err
}

// Discover reads the .well-known document.
func (c *Client) Discover(ctx context.Context) (Discovery, error) {
	var d Discovery
	_, err := c.Do(ctx, http.MethodGet, DiscoveryPath, nil, &d)
	return d, err
}

// Login exchanges a one-time login code for a bearer token (POST: a GET
// of the callback never spends a code).
func (c *Client) Login(ctx context.Context, code string) (LoginResult, error) {
	var r LoginResponse
	_, err := c.Do(ctx, http.MethodPost, "/api/auth/callback", LoginRequest{Code: code}, &r)
	return r.Data, err
}

// Logout revokes the client's own token.
func (c *Client) Logout(ctx context.Context) error {
	_, err := c.Do(ctx, http.MethodPost, "/api/auth/logout", map[string]any{}, nil)
	return err
}

// ListWorkspaces lists the caller's workspaces.
func (c *Client) ListWorkspaces(ctx context.Context) ([]Workspace, error) {
	var r WorkspaceCollectionResponse
	_, err := c.Do(ctx, http.MethodGet, "/api/workspaces", nil, &r)
	return r.Data, err
}

// CreateWorkspace creates a workspace owned by the caller.
func (c *Client) CreateWorkspace(ctx context.Context, req WorkspaceCreateRequest) (Workspace, error) {
	var r WorkspaceResponse
	_, err := c.Do(ctx, http.MethodPost, "/api/workspaces", req, &r)
	return r.Data, err
}

// GetWorkspace reads one workspace.
func (c *Client) GetWorkspace(ctx context.Context, id string) (Workspace, error) {
	var r WorkspaceResponse
	_, err := c.Do(ctx, http.MethodGet, "/api/workspaces/"+url.PathEscape(id), nil, &r)
	return r.Data, err
}

// UpdateWorkspace patches a workspace.
func (c *Client) UpdateWorkspace(ctx context.Context, id string, req WorkspaceUpdateRequest) (Workspace, error) {
	var r WorkspaceResponse
	_, err := c.Do(ctx, http.MethodPatch, "/api/workspaces/"+url.PathEscape(id), req, &r)
	return r.Data, err
}

// ListAPITokens lists the caller's personal API tokens.
func (c *Client) ListAPITokens(ctx context.Context) ([]APIToken, error) {
	var r APITokenCollectionResponse
	_, err := c.Do(ctx, http.MethodGet, "/api/me/api-tokens", nil, &r)
	return r.Data, err
}

// CreateAPIToken creates a personal API token; the answer holds the only
// copy of its plaintext.
func (c *Client) CreateAPIToken(ctx context.Context, req APITokenCreateRequest) (APITokenCreated, error) {
	var r APITokenCreatedResponse
	_, err := c.Do(ctx, http.MethodPost, "/api/me/api-tokens", req, &r)
	return r.Data, err
}

// RevokeAPIToken revokes one of the caller's tokens.
func (c *Client) RevokeAPIToken(ctx context.Context, id string) error {
	_, err := c.Do(ctx, http.MethodDelete, "/api/me/api-tokens/"+url.PathEscape(id), nil, nil)
	return err
}

// CreateInstall registers a machine in a workspace and returns its issue
// token (once).
func (c *Client) CreateInstall(ctx context.Context, workspace, name string) (Install, error) {
	var r InstallResponse
	_, err := c.Do(ctx, http.MethodPost, "/api/workspaces/"+url.PathEscape(workspace)+"/installs", map[string]any{"name": name}, &r)
	return r.Data, err
}

// RuntimeRelayToken exchanges the client's install issue token for a relay
// JWT.
func (c *Client) RuntimeRelayToken(ctx context.Context) (RelayToken, error) {
	var r RelayTokenResponse
	_, err := c.Do(ctx, http.MethodPost, "/api/runtime/relay-token", map[string]any{}, &r)
	return r.Data, err
}

// CreateRecord posts attrs to a record-engine collection path (for example
// "/api/workflow-runs").
func (c *Client) CreateRecord(ctx context.Context, path string, attrs map[string]any) (Record, error) {
	var r RecordResponse
	_, err := c.Do(ctx, http.MethodPost, path, attrs, &r)
	return r.Data, err
}

// ListRecords lists a record-engine collection path.
func (c *Client) ListRecords(ctx context.Context, path string) ([]Record, error) {
	var r RecordCollectionResponse
	_, err := c.Do(ctx, http.MethodGet, path, nil, &r)
	return r.Data, err
}

// GetRecord reads one record by its item path.
func (c *Client) GetRecord(ctx context.Context, path string) (Record, error) {
	var r RecordResponse
	_, err := c.Do(ctx, http.MethodGet, path, nil, &r)
	return r.Data, err
}
