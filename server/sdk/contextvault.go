package sdk

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// The context vault's REST shapes (docs/context-vault.md). The server keeps
// ciphertext, wrapped keys and the descriptors people mark server-visible
// (use_when, update_when); everything else about an entry is sealed on a
// device.

// Context vault error codes.
const (
	CodeFingerprintMismatch = "fingerprint_mismatch" // 422: enrollment approval compared the wrong fingerprint
	CodeDeviceNotEligible   = "device_not_eligible"  // 422: a wrap for a revoked or non-member device
	CodeMissingWrap         = "missing_wrap"         // 422: a new epoch leaves an eligible device without its key
	CodeStaleEpoch          = "stale_epoch"          // 409: written under an epoch the vault has rotated past
	CodeEpochTaken          = "epoch_taken"          // 409: another device published that epoch first
	CodeEventReplayed       = "event_replayed"       // 409: an event id pushed again with other content
	CodeUnknownBase         = "unknown_base"         // 422: an event replaces an event the vault does not have (out of order)
	CodeNoDevice            = "no_device"            // 403/422: the install has no context device, or a vault has none to seal to
)

// Context source kinds, states and roles.
const (
	ContextKindVault = "vault"
	ContextKindGit   = "git"

	ContextMemberOwner  = "owner"
	ContextMemberMember = "member"

	DevicePending  = "pending"
	DeviceApproved = "approved"
	DeviceActive   = "active"
	DeviceRevoked  = "revoked"

	KeyEmitted      = "emitted"
	KeyMaterialized = "materialized"

	EventPut    = "put"
	EventDelete = "delete"
	EventDoc    = "doc" // a document of a git source: descriptors only

	ProposalPending   = "pending"
	ProposalPreviewed = "previewed"
	ProposalAccepted  = "accepted"
	ProposalRejected  = "rejected"
)

// ContextSource is a vault or a git repository of markdown, as the server
// sees it: no entry content.
type ContextSource struct {
	ID          string    `json:"id"`
	WorkspaceID string    `json:"workspace_id"`
	Kind        string    `json:"kind"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	UseWhen     string    `json:"use_when"`
	UpdateWhen  string    `json:"update_when"`
	RepoURL     string    `json:"repo_url,omitempty"`
	Provider    string    `json:"provider,omitempty"`
	Branch      string    `json:"branch,omitempty"`
	HeadCommit  string    `json:"head_commit,omitempty"`
	SyncState   string    `json:"sync_state,omitempty"`
	Epoch       int64     `json:"epoch"`
	HeadSeq     int64     `json:"head_seq"`
	State       string    `json:"state"`
	RotationDue bool      `json:"rotation_due"`
	CreatedBy   string    `json:"created_by"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// Role is the caller's membership role; "" when not a member.
	Role    string          `json:"role,omitempty"`
	Members []ContextMember `json:"members,omitempty"`
}

// ContextMember is a user granted a source.
type ContextMember struct {
	UserID    int64      `json:"user_id"`
	Email     string     `json:"email,omitempty"`
	Role      string     `json:"role"`
	State     string     `json:"state"`
	AddedBy   string     `json:"added_by"`
	AddedAt   time.Time  `json:"added_at"`
	RemovedAt *time.Time `json:"removed_at,omitempty"`
}

// ContextSourceRequest creates or changes a source (user routes and the
// runtime vault creation).
type ContextSourceRequest struct {
	Kind        string `json:"kind,omitempty"`
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
	UseWhen     string `json:"use_when,omitempty"`
	UpdateWhen  string `json:"update_when,omitempty"`
	RepoURL     string `json:"repo_url,omitempty"`
	Provider    string `json:"provider,omitempty"`
	Branch      string `json:"branch,omitempty"`
}

// ContextDevice is a device's public identity and enrollment state.
type ContextDevice struct {
	ID          string     `json:"id"`
	WorkspaceID string     `json:"workspace_id"`
	UserID      int64      `json:"user_id"`
	InstallID   string     `json:"install_id"`
	Name        string     `json:"name"`
	Recipient   string     `json:"recipient"`
	SigningKey  string     `json:"signing_key"`
	Fingerprint string     `json:"fingerprint"`
	State       string     `json:"state"`
	ApprovedBy  string     `json:"approved_by,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
}

// ContextEnrollRequest is what a new device sends to ask for enrollment.
type ContextEnrollRequest struct {
	Name       string `json:"name"`
	Recipient  string `json:"recipient"`
	SigningKey string `json:"signing_key"`
}

// ContextWrappedKey is an epoch key wrapped to one device.
type ContextWrappedKey struct {
	VaultID   string     `json:"vault_id"`
	Epoch     int64      `json:"epoch"`
	DeviceID  string     `json:"device_id"`
	Wrapped   string     `json:"wrapped"`
	WrappedBy string     `json:"wrapped_by,omitempty"`
	State     string     `json:"state,omitempty"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

// ContextApproveRequest approves a pending device: the fingerprint the
// approver compared and the keys it wraps for the new device.
type ContextApproveRequest struct {
	Fingerprint string              `json:"fingerprint"`
	Keys        []ContextWrappedKey `json:"keys,omitempty"`
}

// ContextDeviceVault is a source as a device sees it: its keys and the
// devices it must wrap to.
type ContextDeviceVault struct {
	ContextSource
	Keys []ContextWrappedKey `json:"keys"`
	// Recipients are the devices eligible for the vault's keys now.
	Recipients       []ContextDevice `json:"recipients"`
	PendingProposals int             `json:"pending_proposals"`
}

// ContextEpochRequest publishes a vault's next epoch with a wrap for every
// eligible device.
type ContextEpochRequest struct {
	Epoch  int64               `json:"epoch"`
	Reason string              `json:"reason,omitempty"`
	Keys   []ContextWrappedKey `json:"keys"`
}

// ContextEpoch is one published epoch.
type ContextEpoch struct {
	VaultID    string    `json:"vault_id"`
	Epoch      int64     `json:"epoch"`
	CreatedBy  string    `json:"created_by_device"`
	Reason     string    `json:"reason"`
	Recipients int       `json:"recipients"`
	CreatedAt  time.Time `json:"created_at"`
}

// ContextEvent is one event of a source's log: an entry put or deleted
// (sealed), or a git document's descriptors.
type ContextEvent struct {
	Seq        int64     `json:"seq,omitempty"`
	VaultID    string    `json:"vault_id,omitempty"`
	EventID    string    `json:"event_id"`
	EntryID    string    `json:"entry_id"`
	Kind       string    `json:"kind"`
	Epoch      int64     `json:"epoch"`
	Base       string    `json:"base,omitempty"`
	UseWhen    string    `json:"use_when,omitempty"`
	UpdateWhen string    `json:"update_when,omitempty"`
	Path       string    `json:"path,omitempty"`
	Commit     string    `json:"commit,omitempty"`
	Ciphertext string    `json:"ciphertext,omitempty"`
	Digest     string    `json:"digest,omitempty"`
	DeviceID   string    `json:"device_id,omitempty"`
	CreatedAt  time.Time `json:"created_at,omitzero"`
}

// ContextPushRequest appends events to a source.
type ContextPushRequest struct {
	VaultID string         `json:"vault_id"`
	Events  []ContextEvent `json:"events"`
}

// ContextPushResult says what became of one pushed event.
type ContextPushResult struct {
	EventID   string `json:"event_id"`
	Seq       int64  `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

// ContextPush is the answer of a push.
type ContextPush struct {
	Accepted []ContextPushResult `json:"accepted"`
	HeadSeq  int64               `json:"head_seq"`
}

// ContextPullRequest reads a source's events after a cursor.
type ContextPullRequest struct {
	VaultID  string `json:"vault_id"`
	AfterSeq int64  `json:"after_seq"`
	Limit    int    `json:"limit,omitempty"`
}

// ContextPull is a page of events.
type ContextPull struct {
	Events  []ContextEvent `json:"events"`
	HeadSeq int64          `json:"head_seq"`
	More    bool           `json:"more"`
}

// ContextGrantObligation is a key the calling device holds and an eligible
// device lacks.
type ContextGrantObligation struct {
	VaultID string        `json:"vault_id"`
	Epoch   int64         `json:"epoch"`
	Device  ContextDevice `json:"device"`
}

// ContextEmitRequest delivers wraps; with Member it first grants the
// vault to that user (a team grant).
type ContextEmitRequest struct {
	VaultID string              `json:"vault_id"`
	Member  *ContextMemberGrant `json:"member,omitempty"`
	Keys    []ContextWrappedKey `json:"keys,omitempty"`
}

// ContextMemberGrant names the user a team grant adds.
type ContextMemberGrant struct {
	UserID int64  `json:"user_id,omitempty"`
	Email  string `json:"email,omitempty"`
	Role   string `json:"role,omitempty"`
}

// ContextKeyRef names one epoch of one vault.
type ContextKeyRef struct {
	VaultID string `json:"vault_id"`
	Epoch   int64  `json:"epoch"`
}

// ContextMaterializedRequest acknowledges keys the device has unwrapped.
type ContextMaterializedRequest struct {
	Keys []ContextKeyRef `json:"keys"`
}

// ContextRevokeRequest revokes a device, or removes a member from a vault.
type ContextRevokeRequest struct {
	VaultID  string `json:"vault_id,omitempty"`
	DeviceID string `json:"device_id,omitempty"`
	UserID   int64  `json:"user_id,omitempty"`
	Email    string `json:"email,omitempty"`
}

// ContextRevocation is a device or member cut off from a vault whose key
// it still holds until the vault rotates.
type ContextRevocation struct {
	VaultID   string     `json:"vault_id"`
	Kind      string     `json:"kind"` // device or member
	DeviceID  string     `json:"device_id,omitempty"`
	UserID    int64      `json:"user_id"`
	Epoch     int64      `json:"epoch"` // the epoch it can still read
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	Enforced  bool       `json:"enforced"`
}

// ContextProposal is a context correction waiting for a human. Sealed is
// its content, encrypted to the vault's devices when it arrived; the
// server keeps only that and a digest, and drops the seal once decided.
type ContextProposal struct {
	ID             string     `json:"id"`
	WorkspaceID    string     `json:"workspace_id"`
	SourceID       string     `json:"context_source_id"`
	SessionID      string     `json:"session_id"`
	CorrectionKind string     `json:"correction_kind"`
	TargetKind     string     `json:"target_kind"`
	State          string     `json:"state"`
	Digest         string     `json:"digest"`
	Sealed         string     `json:"sealed,omitempty"`
	SealedTo       []string   `json:"sealed_to"`
	ProofID        string     `json:"proof_id,omitempty"`
	EventID        string     `json:"event_id,omitempty"`
	Writeback      string     `json:"writeback,omitempty"`
	CreatedBy      string     `json:"created_by"`
	CreatedAt      time.Time  `json:"created_at"`
	DecidedBy      string     `json:"decided_by,omitempty"`
	DecidedAt      *time.Time `json:"decided_at,omitempty"`
	Reason         string     `json:"reason,omitempty"`
}

// ContextProposalContent is what a proposal seals.
type ContextProposalContent struct {
	Title          string         `json:"title"`
	Summary        string         `json:"summary,omitempty"`
	ProposedText   string         `json:"proposed_text,omitempty"`
	CorrectionKind string         `json:"correction_kind"`
	TargetKind     string         `json:"target_kind"`
	Metadata       map[string]any `json:"metadata,omitempty"`
}

// ContextPreviewRequest asks for a preview proof: the device has shown a
// person what a candidate adds to the vault as of BaseSeq.
type ContextPreviewRequest struct {
	ProposalID      string `json:"proposal_id,omitempty"`
	VaultID         string `json:"vault_id"`
	CandidateDigest string `json:"candidate_digest"`
	BaseSeq         int64  `json:"base_seq"`
	Adds            int    `json:"adds"`
	Changes         int    `json:"changes"`
	Duplicates      int    `json:"duplicates"`
}

// ContextPreviewProof is the server's signed record of a preview.
type ContextPreviewProof struct {
	ID              string    `json:"id"`
	ProposalID      string    `json:"proposal_id,omitempty"`
	VaultID         string    `json:"vault_id"`
	CandidateDigest string    `json:"candidate_digest"`
	BaseSeq         int64     `json:"base_seq"`
	DeviceID        string    `json:"device_id"`
	IssuedAt        time.Time `json:"issued_at"`
	MAC             string    `json:"mac"`
}

// ContextWritebackRequest reports that an accepted proposal was written:
// into a vault (EventID) or as a pull request of a git source.
type ContextWritebackRequest struct {
	ProofID         string `json:"proof_id"`
	CandidateDigest string `json:"candidate_digest"`
	EventID         string `json:"event_id,omitempty"`
	Branch          string `json:"branch,omitempty"`
	URL             string `json:"url,omitempty"`
}

// ContextDecisionRequest rejects a proposal.
type ContextDecisionRequest struct {
	Decision string `json:"decision"` // reject
	Reason   string `json:"reason,omitempty"`
}

// ContextBackup is a device identity sealed with a recovery key.
type ContextBackup struct {
	DeviceID   string    `json:"device_id"`
	UserID     int64     `json:"user_id,omitempty"`
	Sealed     string    `json:"sealed"`
	Generation int64     `json:"generation"`
	CreatedAt  time.Time `json:"created_at,omitzero"`
}

// ContextDescriptor is an entry as the server can see it.
type ContextDescriptor struct {
	SourceID   string  `json:"context_source_id"`
	SourceKind string  `json:"source_kind"`
	EntryID    string  `json:"entry_id"`
	EventID    string  `json:"event_id"`
	Seq        int64   `json:"seq"`
	Epoch      int64   `json:"epoch"`
	UseWhen    string  `json:"use_when"`
	UpdateWhen string  `json:"update_when"`
	Path       string  `json:"path,omitempty"`
	Score      float64 `json:"score"`
	Conflict   bool    `json:"conflict"`
	Ciphertext string  `json:"ciphertext,omitempty"`
}

// ContextWorkingSet is the sources and entries a session may draw on.
type ContextWorkingSet struct {
	SessionID  string              `json:"session_id"`
	Task       string              `json:"task"`
	SourceIDs  []string            `json:"context_source_ids"`
	Entries    []ContextDescriptor `json:"entries"`
	ComposedAt time.Time           `json:"composed_at"`
}

// ContextRetrieval answers a memory retrieval.
type ContextRetrieval struct {
	Query     string              `json:"query"`
	SourceIDs []string            `json:"context_source_ids"`
	Results   []ContextDescriptor `json:"results"`
}

// Data wraps one answer, as every context-vault route answers.
type Data[T any] struct {
	Data T `json:"data"`
}

// ---- the device's client (runtime routes, install issue token) ----

// ContextClient calls the runtime context-vault routes of one workspace
// with a paired install's issue token.
type ContextClient struct {
	*Client
	WorkspaceID string
}

func (c *ContextClient) rt(path string) string {
	return "/api/runtime/workspaces/" + c.WorkspaceID + path
}

func do[T any](ctx context.Context, c *Client, method, path string, body any) (T, error) {
	var out Data[T]
	_, err := c.Do(ctx, method, path, body, &out)
	return out.Data, err
}

// Enroll asks for enrollment of this install's device.
func (c *ContextClient) Enroll(ctx context.Context, r ContextEnrollRequest) (ContextDevice, error) {
	return do[ContextDevice](ctx, c.Client, http.MethodPost, c.rt("/crypto/device-enrollments"), r)
}

// Devices lists the workspace's context devices.
func (c *ContextClient) Devices(ctx context.Context) ([]ContextDevice, error) {
	return do[[]ContextDevice](ctx, c.Client, http.MethodGet, c.rt("/crypto/device-enrollments"), nil)
}

// Device reads one device (enrollment).
func (c *ContextClient) Device(ctx context.Context, id string) (ContextDevice, error) {
	return do[ContextDevice](ctx, c.Client, http.MethodGet, c.rt("/crypto/device-enrollments/"+url.PathEscape(id)), nil)
}

// Approve approves a pending device.
func (c *ContextClient) Approve(ctx context.Context, id string, r ContextApproveRequest) (ContextDevice, error) {
	return do[ContextDevice](ctx, c.Client, http.MethodPost, c.rt("/crypto/device-enrollments/"+url.PathEscape(id)+"/approve"), r)
}

// Materialized completes this device's enrollment.
func (c *ContextClient) Materialized(ctx context.Context, id string) (ContextDevice, error) {
	return do[ContextDevice](ctx, c.Client, http.MethodPost, c.rt("/crypto/device-enrollments/"+url.PathEscape(id)+"/materialized"), map[string]any{})
}

// Vaults lists the sources this device may use, with its keys.
func (c *ContextClient) Vaults(ctx context.Context) ([]ContextDeviceVault, error) {
	return do[[]ContextDeviceVault](ctx, c.Client, http.MethodGet, c.rt("/context-vaults"), nil)
}

// Vault reads one source as this device sees it.
func (c *ContextClient) Vault(ctx context.Context, id string) (ContextDeviceVault, error) {
	return do[ContextDeviceVault](ctx, c.Client, http.MethodGet, c.rt("/context-vaults/"+url.PathEscape(id)), nil)
}

// CreateVault creates a vault or git source owned by this device's user.
func (c *ContextClient) CreateVault(ctx context.Context, r ContextSourceRequest) (ContextDeviceVault, error) {
	return do[ContextDeviceVault](ctx, c.Client, http.MethodPost, c.rt("/context-vaults"), r)
}

// PublishEpoch publishes a vault's next epoch.
func (c *ContextClient) PublishEpoch(ctx context.Context, vaultID string, r ContextEpochRequest) (ContextEpoch, error) {
	return do[ContextEpoch](ctx, c.Client, http.MethodPost, c.rt("/context-vaults/"+url.PathEscape(vaultID)+"/epochs"), r)
}

// Push appends events.
func (c *ContextClient) Push(ctx context.Context, r ContextPushRequest) (ContextPush, error) {
	return do[ContextPush](ctx, c.Client, http.MethodPost, c.rt("/context-vault/events/push"), r)
}

// Pull reads events after a cursor.
func (c *ContextClient) Pull(ctx context.Context, r ContextPullRequest) (ContextPull, error) {
	return do[ContextPull](ctx, c.Client, http.MethodPost, c.rt("/context-vault/events/pull"), r)
}

// PendingGrants lists keys this device should wrap for others.
func (c *ContextClient) PendingGrants(ctx context.Context) ([]ContextGrantObligation, error) {
	return do[[]ContextGrantObligation](ctx, c.Client, http.MethodPost, c.rt("/context-vault/grants/pending"), map[string]any{})
}

// Emit delivers wraps (and, with a member, grants the vault first).
func (c *ContextClient) Emit(ctx context.Context, r ContextEmitRequest) ([]ContextWrappedKey, error) {
	return do[[]ContextWrappedKey](ctx, c.Client, http.MethodPost, c.rt("/context-vault/grants/mark-emitted"), r)
}

// MarkMaterialized acknowledges unwrapped keys.
func (c *ContextClient) MarkMaterialized(ctx context.Context, keys []ContextKeyRef) ([]ContextWrappedKey, error) {
	return do[[]ContextWrappedKey](ctx, c.Client, http.MethodPost, c.rt("/context-vault/grants/materialized"), ContextMaterializedRequest{Keys: keys})
}

// PendingRevocations lists revoked parties that still hold a current key.
func (c *ContextClient) PendingRevocations(ctx context.Context) ([]ContextRevocation, error) {
	return do[[]ContextRevocation](ctx, c.Client, http.MethodPost, c.rt("/context-vault/grants/revocations/pending"), map[string]any{})
}

// Revoke revokes a device or removes a vault member.
func (c *ContextClient) Revoke(ctx context.Context, r ContextRevokeRequest) ([]ContextRevocation, error) {
	return do[[]ContextRevocation](ctx, c.Client, http.MethodPost, c.rt("/context-vault/grants/mark-revoked"), r)
}

// Proposals lists proposals for the sources this device belongs to.
func (c *ContextClient) Proposals(ctx context.Context, state string) ([]ContextProposal, error) {
	q := ""
	if state != "" {
		q = "?state=" + url.QueryEscape(state)
	}
	return do[[]ContextProposal](ctx, c.Client, http.MethodGet, c.rt("/context-update-proposals"+q), nil)
}

// PreviewProof records a preview of a candidate.
func (c *ContextClient) PreviewProof(ctx context.Context, r ContextPreviewRequest) (ContextPreviewProof, error) {
	return do[ContextPreviewProof](ctx, c.Client, http.MethodPost, c.rt("/context-vault/candidates/preview-proof"), r)
}

// Writeback reports an accepted proposal as written.
func (c *ContextClient) Writeback(ctx context.Context, proposalID string, r ContextWritebackRequest) (ContextProposal, error) {
	return do[ContextProposal](ctx, c.Client, http.MethodPost, c.rt("/context-update-proposals/"+url.PathEscape(proposalID)+"/writeback-receipt"), r)
}

// Decide rejects a proposal.
func (c *ContextClient) Decide(ctx context.Context, proposalID string, r ContextDecisionRequest) (ContextProposal, error) {
	return do[ContextProposal](ctx, c.Client, http.MethodPost, c.rt("/context-update-proposals/"+url.PathEscape(proposalID)+"/decision"), r)
}

// PutBackup stores this device's recovery backup.
func (c *ContextClient) PutBackup(ctx context.Context, b ContextBackup) (ContextBackup, error) {
	return do[ContextBackup](ctx, c.Client, http.MethodPut, c.rt("/crypto/recovery-backup"), map[string]any{"sealed": b.Sealed})
}

// Backups lists the recovery backups of this install's user.
func (c *ContextClient) Backups(ctx context.Context) ([]ContextBackup, error) {
	return do[[]ContextBackup](ctx, c.Client, http.MethodGet, c.rt("/crypto/recovery-backup"), nil)
}

// Restore binds a restored identity's device to this install.
func (c *ContextClient) Restore(ctx context.Context, deviceID string) (ContextDevice, error) {
	return do[ContextDevice](ctx, c.Client, http.MethodPost, c.rt("/crypto/recovery-backup/restore"), map[string]any{"device_id": deviceID})
}

// Epochs lists a vault's epochs (user route, or any caller of the
// workspace's crypto/epochs list).
func (c *Client) ContextEpochs(ctx context.Context, workspaceID string) ([]ContextEpoch, error) {
	return do[[]ContextEpoch](ctx, c, http.MethodGet, "/api/workspaces/"+workspaceID+"/crypto/epochs", nil)
}

// ---- user routes ----

// ContextSources lists a workspace's context sources (user token).
func (c *Client) ContextSources(ctx context.Context, workspaceID string) ([]ContextSource, error) {
	var out Data[[]ContextSource]
	_, err := c.doWS(ctx, workspaceID, http.MethodGet, "/api/context-sources", nil, &out)
	return out.Data, err
}

// CreateContextSource creates a source (user token).
func (c *Client) CreateContextSource(ctx context.Context, workspaceID string, r ContextSourceRequest) (ContextSource, error) {
	var out Data[ContextSource]
	_, err := c.doWS(ctx, workspaceID, http.MethodPost, "/api/context-sources", r, &out)
	return out.Data, err
}

// WorkingSet composes a session's working set (user token).
func (c *Client) WorkingSet(ctx context.Context, workspaceID, sessionID string) (ContextWorkingSet, error) {
	var out Data[ContextWorkingSet]
	_, err := c.Do(ctx, http.MethodPost, "/api/resources/"+workspaceID+"/sessions/"+url.PathEscape(sessionID)+"/context-working-set", nil, &out)
	return out.Data, err
}

// RetrieveMemory searches a session's working set (user token).
func (c *Client) RetrieveMemory(ctx context.Context, workspaceID, sessionID, query string, limit int, sources []string) (ContextRetrieval, error) {
	body := map[string]any{"query": query}
	if limit > 0 {
		body["limit"] = limit
	}
	if sources != nil {
		body["context_source_ids"] = sources
	}
	var out Data[ContextRetrieval]
	_, err := c.Do(ctx, http.MethodPost, "/api/resources/"+workspaceID+"/sessions/"+url.PathEscape(sessionID)+"/memory-retrieval", body, &out)
	return out.Data, err
}

// doWS sends a caller-scoped request in the given workspace.
func (c *Client) doWS(ctx context.Context, workspaceID, method, path string, body, out any) (int, error) {
	cc := *c
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	cc.HTTP = &http.Client{Timeout: hc.Timeout, Transport: headerTransport{base: hc.Transport, key: "X-Reeve-Workspace", value: workspaceID}}
	return cc.Do(ctx, method, path, body, out)
}

type headerTransport struct {
	base       http.RoundTripper
	key, value string
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(t.key, t.value)
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}
