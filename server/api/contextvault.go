package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"reeve.dev/reeve/contextvault/entrylog"
	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// The context vault's routes (docs/context-vault.md): context sources and
// vaults for people, the runtime routes devices use to enroll, publish
// epochs, wrap keys and sync sealed events, and the session routes that
// compose working sets and turn corrections into proposals. The server
// never holds a key that opens an entry.

func (s *Server) contextVaultHandlers() map[string]handlerFunc {
	rt := "postApiRuntimeWorkspacesWorkspace"
	return map[string]handlerFunc{
		// People: sources and vaults (spec 4.12), epochs (4.3).
		"getApiContextSources":                                              s.cvListSources(""),
		"postApiContextSources":                                             s.cvCreateSource(""),
		"getApiContextSourcesContextSource":                                 s.cvGetSource(""),
		"putApiContextSourcesContextSource":                                 s.cvUpdateSource("", false),
		"patchApiContextSourcesContextSource":                               s.cvUpdateSource("", true),
		"postApiContextSourcesContextSourceIndexes":                         s.cvIndex,
		"postApiContextSourcesContextSourceSyncGit":                         s.cvSyncGit,
		"getApiContextVaults":                                               s.cvListSources(sdk.ContextKindVault),
		"postApiContextVaults":                                              s.cvCreateSource(sdk.ContextKindVault),
		"getApiContextVaultsContextVault":                                   s.cvGetSource(sdk.ContextKindVault),
		"putApiContextVaultsContextVault":                                   s.cvUpdateSource(sdk.ContextKindVault, false),
		"patchApiContextVaultsContextVault":                                 s.cvUpdateSource(sdk.ContextKindVault, true),
		"getApiWorkspacesWorkspaceCryptoEpochs":                             s.cvEpochs,
		"composeAgentSessionContextWorkingSet":                              s.cvWorkingSet,
		"retrieveAgentSessionMemory":                                        s.cvRetrieve,
		"createAgentSessionContextCorrection":                               s.cvCorrection,
		"postApiSessionsAgentSessionContextWorkingSet":                      s.cvWorkingSet,
		"postApiSessionsAgentSessionMemoryRetrieval":                        s.cvRetrieve,
		"postApiSessionsAgentSessionContextCorrections":                     s.cvCorrection,
		"getApiRuntimeWorkspacesWorkspaceContextVaults":                     s.cvDeviceVaults,
		rt + "ContextVaults":                                                s.cvDeviceCreateVault,
		"getApiRuntimeWorkspacesWorkspaceContextVaultsContextVault":         s.cvDeviceVault,
		rt + "ContextVaultsContextVaultEpochs":                              s.cvPublishEpoch,
		rt + "ContextVaultEventsPush":                                       s.cvPush,
		rt + "ContextVaultEventsPull":                                       s.cvPull,
		rt + "ContextVaultGrantsPending":                                    s.cvGrantsPending,
		rt + "ContextVaultGrantsMarkEmitted":                                s.cvEmit,
		rt + "ContextVaultGrantsMaterialized":                               s.cvMaterialized,
		rt + "ContextVaultGrantsRevocationsPending":                         s.cvRevocationsPending,
		rt + "ContextVaultGrantsMarkRevoked":                                s.cvRevoke,
		rt + "ContextVaultCandidatesPreviewProof":                           s.cvPreviewProof,
		"getApiRuntimeWorkspacesWorkspaceContextUpdateProposals":            s.cvProposals,
		rt + "ContextUpdateProposalsProposalWritebackReceipt":               s.cvWriteback,
		rt + "ContextUpdateProposalsProposalDecision":                       s.cvDecide,
		"getApiRuntimeWorkspacesWorkspaceCryptoDeviceEnrollments":           s.cvDevices,
		rt + "CryptoDeviceEnrollments":                                      s.cvEnroll,
		"getApiRuntimeWorkspacesWorkspaceCryptoDeviceEnrollmentsEnrollment": s.cvDevice,
		rt + "CryptoDeviceEnrollmentsEnrollmentApprove":                     s.cvApprove,
		rt + "CryptoDeviceEnrollmentsEnrollmentMaterialized":                s.cvAccept,
		"getApiRuntimeWorkspacesWorkspaceCryptoRecoveryBackup":              s.cvBackups,
		"putApiRuntimeWorkspacesWorkspaceCryptoRecoveryBackup":              s.cvPutBackup,
		rt + "CryptoRecoveryBackupRestore":                                  s.cvRestore,
	}
}

// cvStore is the store's context-vault part: 501 when the store has none.
func (c *call) cvStore() (store.ContextVaults, error) {
	cv, ok := c.s.st.(store.ContextVaults)
	if !ok {
		return nil, errorf(http.StatusNotImplemented, "not_implemented", "this server's store does not keep context vaults")
	}
	return cv, nil
}

// decode reads the validated body into v.
func (c *call) decode(v any) error {
	if len(c.rawBody) == 0 {
		return nil
	}
	if err := json.Unmarshal(c.rawBody, v); err != nil {
		return invalid(sdk.ErrorDetail{Message: err.Error()})
	}
	return nil
}

func cvError(err error) error {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return err
	case errors.Is(err, store.ErrNotFound):
		return notFound("%s", strings.TrimSuffix(err.Error(), ": "+store.ErrNotFound.Error()))
	case errors.Is(err, store.ErrConflict):
		return errorf(http.StatusConflict, sdk.CodeConflict, "%s", strings.TrimSuffix(err.Error(), ": "+store.ErrConflict.Error()))
	case errors.Is(err, store.ErrUnknownBase):
		return errorf(http.StatusUnprocessableEntity, sdk.CodeUnknownBase, "%s (push the events it replaces first, in order)", strings.TrimSuffix(err.Error(), ": "+store.ErrUnknownBase.Error()))
	}
	return err
}

// ---- conversions ----

func cvSourceJSON(s store.ContextSource) sdk.ContextSource {
	return sdk.ContextSource{
		ID: s.ID, WorkspaceID: s.WorkspaceID, Kind: s.Kind, Name: s.Name, Description: s.Description,
		UseWhen: s.UseWhen, UpdateWhen: s.UpdateWhen, RepoURL: s.RepoURL, Provider: s.Provider, Branch: s.Branch,
		HeadCommit: s.HeadCommit, SyncState: s.SyncState, Epoch: s.Epoch, HeadSeq: s.HeadSeq, State: s.State,
		RotationDue: s.RotationRequestedAt != nil, CreatedBy: s.CreatedBy, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
	}
}

func cvDeviceJSON(d store.ContextDevice) sdk.ContextDevice {
	return sdk.ContextDevice{
		ID: d.ID, WorkspaceID: d.WorkspaceID, UserID: d.UserID, InstallID: d.InstallID, Name: d.Name,
		Recipient: d.Recipient, SigningKey: d.SigningKey, Fingerprint: d.Fingerprint, State: d.State,
		ApprovedBy: d.ApprovedBy, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, RevokedAt: d.RevokedAt,
	}
}

func cvDevicesJSON(ds []store.ContextDevice) []sdk.ContextDevice {
	out := make([]sdk.ContextDevice, len(ds))
	for i, d := range ds {
		out[i] = cvDeviceJSON(d)
	}
	return out
}

func cvKeyJSON(k store.ContextKey) sdk.ContextWrappedKey {
	c := k.CreatedAt
	return sdk.ContextWrappedKey{VaultID: k.SourceID, Epoch: k.Epoch, DeviceID: k.DeviceID, Wrapped: k.Wrapped, WrappedBy: k.WrappedBy, State: k.State, CreatedAt: &c}
}

func cvKeysJSON(ks []store.ContextKey) []sdk.ContextWrappedKey {
	out := make([]sdk.ContextWrappedKey, len(ks))
	for i, k := range ks {
		out[i] = cvKeyJSON(k)
	}
	return out
}

func cvEventJSON(e store.ContextEvent) sdk.ContextEvent {
	return sdk.ContextEvent{Seq: e.Seq, VaultID: e.SourceID, EventID: e.EventID, EntryID: e.EntryID, Kind: e.Kind, Epoch: e.Epoch,
		Base: e.Base, UseWhen: e.UseWhen, UpdateWhen: e.UpdateWhen, Path: e.Path, Commit: e.Commit,
		Ciphertext: e.Ciphertext, Digest: e.Digest, DeviceID: e.DeviceID, CreatedAt: e.CreatedAt}
}

func cvProposalJSON(p store.ContextProposal, withSeal bool) sdk.ContextProposal {
	out := sdk.ContextProposal{ID: p.ID, WorkspaceID: p.WorkspaceID, SourceID: p.SourceID, SessionID: p.SessionID,
		CorrectionKind: p.CorrectionKind, TargetKind: p.TargetKind, State: p.State, Digest: p.Digest, SealedTo: p.SealedTo,
		ProofID: p.ProofID, EventID: p.EventID, Writeback: p.Writeback, CreatedBy: p.CreatedBy, CreatedAt: p.CreatedAt,
		DecidedBy: p.DecidedBy, DecidedAt: p.DecidedAt, Reason: p.Reason}
	if out.SealedTo == nil {
		out.SealedTo = []string{}
	}
	if withSeal {
		out.Sealed = p.Sealed
	}
	return out
}

func data(v any) map[string]any { return map[string]any{"data": v} }

func list[T any](v []T) map[string]any {
	if v == nil {
		v = []T{}
	}
	return map[string]any{"data": v, "meta": sdk.ListMeta{Count: len(v)}}
}

// ---- who is calling ----

// userOfInstall is the user who approved an install's pairing: the owner
// of the device that speaks through it.
func userOfInstall(in store.Install) (int64, bool) {
	id, ok := strings.CutPrefix(in.CreatedBy, "user:")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(id, 10, 64)
	return n, err == nil
}

// device is the calling install's device: 403 no_device when it has none
// (or it was revoked).
func (c *call) device(cv store.ContextVaults) (store.ContextDevice, error) {
	if c.p.Kind != auth.KindDaemon {
		return store.ContextDevice{}, forbidden("this route is for a paired machine's device")
	}
	d, err := cv.ContextDeviceByInstall(c.ctx(), c.ws.ID, c.p.InstallID)
	if errors.Is(err, store.ErrNotFound) {
		return d, errorf(http.StatusForbidden, sdk.CodeNoDevice, "this machine has no context device (or it was revoked); run `reeve context init`")
	}
	return d, err
}

// deviceCall begins a runtime call: the store and the calling device,
// and the body decoded into req when it is not nil.
func (c *call) deviceCall(req any) (store.ContextVaults, store.ContextDevice, error) {
	cv, err := c.cvStore()
	if err != nil {
		return nil, store.ContextDevice{}, err
	}
	me, err := c.device(cv)
	if err != nil {
		return nil, me, err
	}
	if req != nil {
		if err := c.decode(req); err != nil {
			return nil, me, err
		}
	}
	return cv, me, nil
}

// eligibleSource reads a source the device is eligible for: 404 when
// there is none, 403 when the device may not use it.
func (c *call) eligibleSource(cv store.ContextVaults, me store.ContextDevice, ref string) (store.ContextSource, error) {
	src, err := c.source(cv, ref, "")
	if err != nil {
		return src, err
	}
	return src, c.eligible(cv, me, src.ID)
}

// eligible checks a device may use a source now: approved or active, its
// user an active member of the source and of the workspace.
func (c *call) eligible(cv store.ContextVaults, d store.ContextDevice, sourceID string) error {
	el, err := cv.EligibleContextDevices(c.ctx(), c.ws.ID, sourceID)
	if err != nil {
		return err
	}
	for _, e := range el {
		if e.ID == d.ID {
			return nil
		}
	}
	return forbidden("device %s may not use context source %s (not a member's approved device)", d.ID, sourceID)
}

// source reads a source by id or by name; kind, when set, must match.
func (c *call) source(cv store.ContextVaults, ref, kind string) (store.ContextSource, error) {
	src, err := cv.ContextSource(c.ctx(), c.ws.ID, ref)
	if errors.Is(err, store.ErrNotFound) {
		src, err = cv.ContextSourceByName(c.ctx(), c.ws.ID, ref)
	}
	if errors.Is(err, store.ErrNotFound) || (err == nil && kind != "" && src.Kind != kind) {
		return src, notFound("no context %s %q", or(kind, "source"), ref)
	}
	return src, err
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// memberRole is a user's active role in a source, "" when none.
func memberRole(ms []store.ContextMember, userID int64) string {
	for _, m := range ms {
		if m.UserID == userID && m.State == "active" {
			return m.Role
		}
	}
	return ""
}

// descriptors folds a source's events into the server-visible view of
// its entries (no content).
func (c *call) descriptors(cv store.ContextVaults, src store.ContextSource) ([]sdk.ContextDescriptor, error) {
	var all []store.ContextEvent
	for after := int64(0); ; {
		page, err := cv.ContextEvents(c.ctx(), src.ID, after, 1000)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Seq
	}
	byID := make(map[string]store.ContextEvent, len(all))
	evs := make([]entrylog.Event, len(all))
	for i, e := range all {
		byID[e.EventID] = e
		evs[i] = entrylog.Event{Seq: e.Seq, EventID: e.EventID, EntryID: e.EntryID, Base: e.Base, Kind: e.Kind}
	}
	var out []sdk.ContextDescriptor
	for _, en := range entrylog.Fold(evs) {
		if en.Deleted() {
			continue
		}
		live := en.Live()
		e := byID[live[len(live)-1].EventID]
		out = append(out, sdk.ContextDescriptor{SourceID: src.ID, SourceKind: src.Kind, EntryID: e.EntryID, EventID: e.EventID, Seq: e.Seq,
			Epoch: e.Epoch, UseWhen: e.UseWhen, UpdateWhen: e.UpdateWhen, Path: e.Path, Conflict: en.Conflict(), Ciphertext: e.Ciphertext})
	}
	return out, nil
}

func cvTarget(kind, id string) string { return fmt.Sprintf("context-%s/%s", kind, id) }
