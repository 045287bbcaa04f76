package sdk

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// CodeExpired is the error code of a pairing code used after its expiry
// (410).
const CodeExpired = "expired"

// Pairing-code states (spec 3.1). A code moves pending → claimed →
// approved, or to denied; a daemon-minted code may go from pending
// straight to approved when the user picks the workspace as they approve.
const (
	PairingPending  = "pending"
	PairingClaimed  = "claimed"
	PairingApproved = "approved"
	PairingDenied   = "denied"
)

// PairingMachine is what the daemon told about itself: the approval page
// shows its name and anchor fingerprint.
type PairingMachine struct {
	Name              string `json:"name"`
	AnchorFingerprint string `json:"anchor_fingerprint"`
	Worker            bool   `json:"worker"`
	Transport         string `json:"transport"`
}

// RelayCredentials are handed to the daemon once, in the first status
// answer after approval. IssueToken is the only copy of the install's
// credential.
type RelayCredentials struct {
	InstallID   string `json:"install_id"`
	WorkspaceID string `json:"workspace_id"`
	IssueToken  string `json:"issue_token"`
	RelayURL    string `json:"relay_url"`
	ServerURL   string `json:"server_url"`
	AppURL      string `json:"app_url"`
}

// PairingCode is the answer of every pairing route.
type PairingCode struct {
	Code        string          `json:"code"`
	State       string          `json:"state"`
	Approved    bool            `json:"approved"`
	Initiator   string          `json:"initiator"` // browser or daemon
	WorkspaceID *string         `json:"workspace_id"`
	ExpiresAt   time.Time       `json:"expires_at"`
	ApprovalURL string          `json:"approval_url"`
	Machine     *PairingMachine `json:"machine"`
	InstallID   string          `json:"install_id,omitempty"`
	// StatusToken is returned once, to whoever will poll: the daemon that
	// minted the code, or the daemon that claimed a browser-minted one.
	StatusToken      string            `json:"status_token,omitempty"`
	RelayCredentials *RelayCredentials `json:"relay_credentials"`
}

// PairingCodeResponse wraps PairingCode.
type PairingCodeResponse struct {
	Data PairingCode `json:"data"`
}

// PairingMachineRequest is how a daemon describes itself when it mints
// (POST /api/pairing-codes) or claims a code.
type PairingMachineRequest struct {
	Name string `json:"name,omitempty"`
	// AnchorPublicKey is the daemon's X25519 anchor public key, standard
	// base64; its fingerprint identifies the machine.
	AnchorPublicKey string `json:"anchor_public_key"`
	Worker          bool   `json:"worker,omitempty"`
	Transport       string `json:"transport,omitempty"` // polling or relay
}

// WorkspacePairingCodeRequest mints a browser-side code.
type WorkspacePairingCodeRequest struct {
	// ExpiresInSeconds defaults to 900 (1..3600).
	ExpiresInSeconds int `json:"expires_in_seconds,omitempty"`
}

// PairingDecisionRequest approves or denies; Workspace is required for a
// daemon-minted code that no workspace has claimed yet.
type PairingDecisionRequest struct {
	Workspace string `json:"workspace,omitempty"`
}

// InstallCollectionResponse lists installs.
type InstallCollectionResponse struct {
	Data []Install `json:"data"`
	Meta ListMeta  `json:"meta"`
}

func codePath(code string) string { return "/api/pairing-codes/" + url.PathEscape(code) }

// MintPairingCode is the daemon-minted initiation: no credential needed;
// the answer carries the code and the status token to poll with.
func (c *Client) MintPairingCode(ctx context.Context, req PairingMachineRequest) (PairingCode, error) {
	var r PairingCodeResponse
	_, err := c.Do(ctx, http.MethodPost, "/api/pairing-codes", req, &r)
	return r.Data, err
}

// CreateWorkspacePairingCode is the browser-minted initiation (an admin of
// the workspace).
func (c *Client) CreateWorkspacePairingCode(ctx context.Context, workspace string, req WorkspacePairingCodeRequest) (PairingCode, error) {
	var r PairingCodeResponse
	_, err := c.Do(ctx, http.MethodPost, "/api/workspaces/"+url.PathEscape(workspace)+"/pairing-codes", req, &r)
	return r.Data, err
}

// ClaimPairingCode claims a browser-minted code for this daemon; the answer
// carries the status token.
func (c *Client) ClaimPairingCode(ctx context.Context, code string, req PairingMachineRequest) (PairingCode, error) {
	var r PairingCodeResponse
	_, err := c.Do(ctx, http.MethodPost, codePath(code)+"/claim", req, &r)
	return r.Data, err
}

// ClaimPairingCodeForWorkspace is a user claiming a daemon-minted code for
// a workspace (the spec's swapped roles).
func (c *Client) ClaimPairingCodeForWorkspace(ctx context.Context, code, workspace string) (PairingCode, error) {
	var r PairingCodeResponse
	_, err := c.Do(ctx, http.MethodPost, codePath(code)+"/claim", map[string]any{"workspace": workspace}, &r)
	return r.Data, err
}

// PairingStatus polls a code with its status token (not the client's
// token). After approval the first answer carries RelayCredentials.
func (c *Client) PairingStatus(ctx context.Context, code, statusToken string) (PairingCode, error) {
	poll := *c
	poll.Token = statusToken
	var r PairingCodeResponse
	_, err := poll.Do(ctx, http.MethodGet, codePath(code)+"/status", nil, &r)
	return r.Data, err
}

// GetPairingCode shows a code to a signed-in user: the machine's name and
// anchor fingerprint, and its state.
func (c *Client) GetPairingCode(ctx context.Context, code string) (PairingCode, error) {
	var r PairingCodeResponse
	_, err := c.Do(ctx, http.MethodGet, codePath(code), nil, &r)
	return r.Data, err
}

// ApprovePairingCode approves the machine of a code.
func (c *Client) ApprovePairingCode(ctx context.Context, code string, req PairingDecisionRequest) (PairingCode, error) {
	var r PairingCodeResponse
	_, err := c.Do(ctx, http.MethodPost, codePath(code)+"/approve", req, &r)
	return r.Data, err
}

// DenyPairingCode refuses the machine of a code.
func (c *Client) DenyPairingCode(ctx context.Context, code string, req PairingDecisionRequest) (PairingCode, error) {
	var r PairingCodeResponse
	_, err := c.Do(ctx, http.MethodPost, codePath(code)+"/deny", req, &r)
	return r.Data, err
}

func installPath(workspace, install string) string {
	return "/api/workspaces/" + url.PathEscape(workspace) + "/installs/" + url.PathEscape(install)
}

// ListInstalls lists the machines paired to a workspace (detached ones are
// gone).
func (c *Client) ListInstalls(ctx context.Context, workspace string) ([]Install, error) {
	var r InstallCollectionResponse
	_, err := c.Do(ctx, http.MethodGet, "/api/workspaces/"+url.PathEscape(workspace)+"/installs", nil, &r)
	return r.Data, err
}

// GetInstall reads one install.
func (c *Client) GetInstall(ctx context.Context, workspace, install string) (Install, error) {
	var r InstallResponse
	_, err := c.Do(ctx, http.MethodGet, installPath(workspace, install), nil, &r)
	return r.Data, err
}

// DetachInstall detaches a daemon: its issue token and relay JWTs stop
// working at once.
func (c *Client) DetachInstall(ctx context.Context, workspace, install string) error {
	_, err := c.Do(ctx, http.MethodDelete, installPath(workspace, install), nil, nil)
	return err
}

// Heartbeat reports the daemon alive; the client's token must be that
// install's issue token.
func (c *Client) Heartbeat(ctx context.Context, workspace, install string) (Install, error) {
	var r InstallResponse
	_, err := c.Do(ctx, http.MethodPost, installPath(workspace, install)+"/heartbeat", map[string]any{}, &r)
	return r.Data, err
}

// RuntimeInstall reads the install the client's issue token belongs to:
// a read-only check that the credential still works.
func (c *Client) RuntimeInstall(ctx context.Context) (Install, error) {
	var r InstallResponse
	_, err := c.Do(ctx, http.MethodGet, "/api/runtime/install", nil, &r)
	return r.Data, err
}
