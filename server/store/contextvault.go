package store

import (
	"context"
	"time"
)

// The context vault's persistence (docs/context-vault.md). The SQLite store
// implements ContextVaults; the API asks its Store for it.

// ContextSource is a vault or a git source.
type ContextSource struct {
	ID, WorkspaceID, Kind, Name, Description string
	UseWhen, UpdateWhen                      string
	RepoURL, Provider, Branch, HeadCommit    string
	SyncState                                string
	Epoch, HeadSeq                           int64
	RotationRequestedAt                      *time.Time
	State                                    string
	CreatedBy                                string
	CreatedAt, UpdatedAt                     time.Time
}

// ContextMember is a user granted a source.
type ContextMember struct {
	SourceID  string
	UserID    int64
	Role      string // owner or member
	State     string // active or removed
	AddedBy   string
	AddedAt   time.Time
	RemovedAt *time.Time
}

// ContextDevice is a device's public keys and enrollment state.
type ContextDevice struct {
	ID, WorkspaceID                    string
	UserID                             int64
	InstallID, Name                    string
	Recipient, SigningKey, Fingerprint string
	State, ApprovedBy                  string
	CreatedAt, UpdatedAt               time.Time
	RevokedAt                          *time.Time
}

// ContextKey is an epoch key wrapped to a device.
type ContextKey struct {
	SourceID       string
	Epoch          int64
	DeviceID       string
	Wrapped        string
	WrappedBy      string
	State          string // emitted or materialized
	CreatedAt      time.Time
	MaterializedAt *time.Time
}

// ContextEpoch is one published epoch of a vault.
type ContextEpoch struct {
	SourceID   string
	Epoch      int64
	CreatedBy  string // device id
	Reason     string
	CreatedAt  time.Time
	Recipients int // filled by Epochs
}

// ContextEvent is one event of a source's log.
type ContextEvent struct {
	SourceID, EventID, EntryID, Kind string
	Seq, Epoch                       int64
	Base, UseWhen, UpdateWhen        string
	Path, Commit                     string
	Ciphertext, Digest               string
	DeviceID                         string
	CreatedAt                        time.Time
}

// ContextPushResult is what became of one appended event.
type ContextPushResult struct {
	EventID   string
	Seq       int64
	Duplicate bool
}

// ContextRevocation records a device revoked or a member removed.
type ContextRevocation struct {
	ID, WorkspaceID, SourceID, Kind, DeviceID string
	UserID                                    int64
	RevokedBy                                 string
	RevokedAt                                 time.Time
}

// ContextHolder is a device that holds a source's current epoch key but is
// no longer eligible for it: the source must rotate to cut it off.
type ContextHolder struct {
	SourceID string
	Epoch    int64
	Device   ContextDevice
}

// ContextObligation is a key a device holds that an eligible device lacks.
type ContextObligation struct {
	SourceID string
	Epoch    int64
	Device   ContextDevice
}

// ContextProposal is a context correction waiting for a human.
type ContextProposal struct {
	ID, WorkspaceID, SourceID, SessionID string
	CorrectionKind, TargetKind, State    string
	Digest, Sealed                       string
	SealedTo                             []string
	ProofID, EventID, Writeback          string
	CreatedBy                            string
	CreatedAt                            time.Time
	DecidedBy                            string
	DecidedAt                            *time.Time
	Reason                               string
}

// ContextProof is a preview proof.
type ContextProof struct {
	ID, WorkspaceID, ProposalID, SourceID string
	CandidateDigest                       string
	BaseSeq                               int64
	DeviceID, MAC                         string
	IssuedAt                              time.Time
}

// ContextBackup is a device identity sealed with a recovery key.
type ContextBackup struct {
	WorkspaceID, DeviceID string
	UserID                int64
	Sealed                string
	Generation            int64
	CreatedAt             time.Time
}

// ContextWorkingSet is a session's composed working set.
type ContextWorkingSet struct {
	WorkspaceID, SessionID, Task string
	SourceIDs                    []string
	ComposedAt                   time.Time
}

// ContextVaults is the context vault's part of the store. Every method that
// checks and changes state does both in one transaction.
type ContextVaults interface {
	// Sources. CreateContextSource adds the creator as owner; ErrConflict
	// when the name is taken in the workspace.
	CreateContextSource(ctx context.Context, s ContextSource, owner int64, audit AuditEntry) error
	ContextSource(ctx context.Context, workspaceID, id string) (ContextSource, error)
	ContextSourceByName(ctx context.Context, workspaceID, name string) (ContextSource, error)
	// ContextSources lists every source of a workspace in creation order.
	ContextSources(ctx context.Context, workspaceID string) ([]ContextSource, error)
	UpdateContextSource(ctx context.Context, workspaceID, id string, fn func(*ContextSource) error, audit AuditEntry) (ContextSource, error)

	// Members. RemoveContextMember records the revocation; removing the last
	// owner is ErrConflict.
	ContextMembers(ctx context.Context, sourceID string) ([]ContextMember, error)
	PutContextMember(ctx context.Context, m ContextMember, audit AuditEntry) error
	RemoveContextMember(ctx context.Context, workspaceID, sourceID string, userID int64, rev ContextRevocation, audit AuditEntry) error

	// Devices. CreateContextDevice makes the first device of a user active
	// and any later one pending, in one transaction; ErrConflict when the
	// recipient is already enrolled.
	CreateContextDevice(ctx context.Context, d *ContextDevice, audit AuditEntry) error
	ContextDevice(ctx context.Context, workspaceID, id string) (ContextDevice, error)
	// ContextDeviceByInstall is the install's device that is not revoked.
	ContextDeviceByInstall(ctx context.Context, workspaceID, installID string) (ContextDevice, error)
	ContextDeviceByRecipient(ctx context.Context, workspaceID, recipient string) (ContextDevice, error)
	ContextDevices(ctx context.Context, workspaceID string) ([]ContextDevice, error)
	// UpdateContextDevice applies fn and stores keys (wraps for the device)
	// in one transaction: approval and acceptance of an enrollment.
	UpdateContextDevice(ctx context.Context, workspaceID, id string, fn func(*ContextDevice) error, keys []ContextKey, audit AuditEntry) (ContextDevice, error)
	// RevokeContextDevice revokes a device and records it.
	RevokeContextDevice(ctx context.Context, workspaceID, id string, rev ContextRevocation, audit AuditEntry) error

	// Keys and eligibility. A device is eligible for a source when it is
	// approved or active, its user an active member of the source and of
	// the workspace.
	ContextKeysOf(ctx context.Context, workspaceID, deviceID string) ([]ContextKey, error)
	EligibleContextDevices(ctx context.Context, workspaceID, sourceID string) ([]ContextDevice, error)
	// EmitContextKeys stores wraps for other devices after check, which sees
	// the eligible devices of the source, approves of the wraps; existing
	// wraps are kept (idempotent). It returns the wraps now stored.
	EmitContextKeys(ctx context.Context, workspaceID, sourceID string, keys []ContextKey, check func(eligible []ContextDevice) error, audit AuditEntry) ([]ContextKey, error)
	MaterializeContextKeys(ctx context.Context, deviceID string, refs []ContextKey, now time.Time) ([]ContextKey, error)
	// ContextObligations are the wraps deviceID can give: keys it holds of
	// sources it is eligible for, that an eligible device lacks.
	ContextObligations(ctx context.Context, workspaceID, deviceID string) ([]ContextObligation, error)
	// ContextHolders are the ineligible devices that hold the current epoch
	// key of a source deviceID is eligible for.
	ContextHolders(ctx context.Context, workspaceID, deviceID string) ([]ContextHolder, error)

	// Epochs. PublishContextEpoch makes e the source's epoch when it is the
	// next one (else ErrConflict), after check approves the wraps against
	// the eligible devices, and clears a requested rotation.
	PublishContextEpoch(ctx context.Context, workspaceID string, e ContextEpoch, keys []ContextKey, check func(eligible []ContextDevice) error, audit AuditEntry) error
	ContextEpochs(ctx context.Context, workspaceID string) ([]ContextEpoch, error)

	// Events. AppendContextEvents numbers new events after check approves
	// the source as it is now; an event id already present is a duplicate
	// when its digest matches, else ErrConflict; a base that is neither in
	// the source nor earlier in the batch is ErrUnknownBase.
	AppendContextEvents(ctx context.Context, workspaceID, sourceID string, events []ContextEvent, check func(ContextSource) error) ([]ContextPushResult, int64, error)
	ContextEvents(ctx context.Context, sourceID string, afterSeq int64, limit int) ([]ContextEvent, error)
	ContextEvent(ctx context.Context, sourceID, eventID string) (ContextEvent, error)

	// Proposals and preview proofs.
	CreateContextProposal(ctx context.Context, p ContextProposal, audit AuditEntry) error
	ContextProposal(ctx context.Context, workspaceID, id string) (ContextProposal, error)
	ContextProposals(ctx context.Context, workspaceID, state string) ([]ContextProposal, error)
	UpdateContextProposal(ctx context.Context, workspaceID, id string, fn func(*ContextProposal) error, audit AuditEntry) (ContextProposal, error)
	CreateContextProof(ctx context.Context, p ContextProof, fn func() error, audit AuditEntry) error
	ContextProof(ctx context.Context, workspaceID, id string) (ContextProof, error)

	// Recovery backups: PutContextBackup replaces the device's backup and
	// numbers it one generation higher.
	PutContextBackup(ctx context.Context, b *ContextBackup, audit AuditEntry) error
	ContextBackups(ctx context.Context, workspaceID string, userID int64) ([]ContextBackup, error)
	// RebindContextDevice moves a device to another install of its user
	// (recovery on a new machine).
	RebindContextDevice(ctx context.Context, workspaceID, deviceID, installID string, audit AuditEntry) (ContextDevice, error)

	// Working sets.
	PutContextWorkingSet(ctx context.Context, w ContextWorkingSet) error
	ContextWorkingSet(ctx context.Context, workspaceID, sessionID string) (ContextWorkingSet, error)
}

// ErrUnknownBase is returned by AppendContextEvents for an event that
// replaces an event the source does not have.
var ErrUnknownBase = errorString("unknown base event")

type errorString string

func (e errorString) Error() string { return string(e) }
