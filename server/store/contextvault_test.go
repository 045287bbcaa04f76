package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// cvStore is what the context-vault tests need of an engine.
type cvStore interface {
	Store
	ContextVaults
}

type cvFix struct {
	s          cvStore
	ws         string
	alice, bob int64 // members of ws
	now        time.Time
	a1, a2, b1 ContextDevice
	vault      ContextSource
	ctx        context.Context
	t          *testing.T
}

func newCVFix(t *testing.T, e engine) *cvFix {
	t.Helper()
	return setupCV(t, e.open(t))
}

func setupCV(t *testing.T, s cvStore) *cvFix {
	ctx := context.Background()
	f := &cvFix{s: s, ctx: ctx, t: t, now: time.Now().UTC().Truncate(time.Millisecond)}
	a, _, err := s.EnsureUser(ctx, "alice@example.com")
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := s.EnsureUser(ctx, "bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	f.alice, f.bob = a.ID, b.ID
	f.ws = newID()
	if err := s.CreateWorkspace(ctx, Workspace{ID: f.ws, Name: "w", PolicyMode: "open_access", CreatedAt: f.now, UpdatedAt: f.now}, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.AddMember(ctx, f.ws, b.ID, "member", f.now); err != nil {
		t.Fatal(err)
	}
	f.a1 = f.device(a.ID, "inst-a1", "")
	f.a2 = f.device(a.ID, "inst-a2", "")
	f.b1 = f.device(b.ID, "inst-b1", "")
	f.vault = ContextSource{ID: newID(), WorkspaceID: f.ws, Kind: "vault", Name: "team", State: "active", CreatedBy: "user:1", CreatedAt: f.now, UpdatedAt: f.now}
	if err := s.CreateContextSource(ctx, f.vault, a.ID, f.audit("source.create")); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *cvFix) audit(action string) AuditEntry {
	return AuditEntry{WorkspaceID: f.ws, Actor: "test", Action: action, Target: "t"}
}

func (f *cvFix) device(user int64, install, state string) ContextDevice {
	f.t.Helper()
	d := ContextDevice{WorkspaceID: f.ws, UserID: user, InstallID: install, Name: install, Recipient: "age1" + install, SigningKey: "sk-" + install, Fingerprint: "FP-" + install, State: state, CreatedAt: f.now, UpdatedAt: f.now}
	if err := f.s.CreateContextDevice(f.ctx, &d, f.audit("device.create")); err != nil {
		f.t.Fatal(err)
	}
	return d
}

func (f *cvFix) key(src string, epoch int64, dev string) ContextKey {
	return ContextKey{SourceID: src, Epoch: epoch, DeviceID: dev, Wrapped: "wrap-" + dev, WrappedBy: f.a1.ID, CreatedAt: f.now}
}

func allow([]ContextDevice) error { return nil }

func ids(ds []ContextDevice) map[string]bool {
	m := map[string]bool{}
	for _, d := range ds {
		m[d.ID] = true
	}
	return m
}

func TestContextSources(t *testing.T) { eachEngine(t, testContextSources) }

func testContextSources(t *testing.T, e engine) {
	f := newCVFix(t, e)
	got, err := f.s.ContextSource(f.ctx, f.ws, f.vault.ID)
	if err != nil || got.Name != "team" || got.Kind != "vault" {
		t.Fatalf("ContextSource = %+v, %v", got, err)
	}
	if _, err := f.s.ContextSource(f.ctx, "other-ws", f.vault.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a source was read from another workspace: %v", err)
	}
	if got, err := f.s.ContextSourceByName(f.ctx, f.ws, "team"); err != nil || got.ID != f.vault.ID {
		t.Fatalf("ContextSourceByName = %+v, %v", got, err)
	}
	dup := f.vault
	dup.ID = newID()
	if err := f.s.CreateContextSource(f.ctx, dup, f.alice, f.audit("x")); !errors.Is(err, ErrConflict) {
		t.Fatalf("a second source with the same name: %v, want ErrConflict", err)
	}
	// More than any page size: every source is listed.
	for i := 0; i < 600; i++ {
		src := ContextSource{ID: newID(), WorkspaceID: f.ws, Kind: "git", Name: "git-" + newID(), State: "active", CreatedBy: "t", CreatedAt: f.now, UpdatedAt: f.now}
		if err := f.s.CreateContextSource(f.ctx, src, f.alice, AuditEntry{}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := f.s.ContextSources(f.ctx, f.ws)
	if err != nil || len(all) != 601 {
		t.Fatalf("ContextSources: %d, %v; want 601", len(all), err)
	}
	up, err := f.s.UpdateContextSource(f.ctx, f.ws, f.vault.ID, func(s *ContextSource) error {
		s.UseWhen, s.Description = "always", "d"
		return nil
	}, f.audit("source.update"))
	if err != nil || up.UseWhen != "always" {
		t.Fatalf("UpdateContextSource = %+v, %v", up, err)
	}
	if _, err := f.s.UpdateContextSource(f.ctx, f.ws, f.vault.ID, func(s *ContextSource) error { s.Name = all[1].Name; return nil }, AuditEntry{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("renaming onto another source's name: %v", err)
	}
}

func TestContextMembers(t *testing.T) { eachEngine(t, testContextMembers) }

func testContextMembers(t *testing.T, e engine) {
	f := newCVFix(t, e)
	ms, err := f.s.ContextMembers(f.ctx, f.vault.ID)
	if err != nil || len(ms) != 1 || ms[0].UserID != f.alice || ms[0].Role != "owner" {
		t.Fatalf("members after create = %+v, %v", ms, err)
	}
	if err := f.s.PutContextMember(f.ctx, ContextMember{SourceID: f.vault.ID, UserID: f.bob, Role: "member", AddedBy: "t", AddedAt: f.now}, f.audit("member.add")); err != nil {
		t.Fatal(err)
	}
	rev := ContextRevocation{WorkspaceID: f.ws, SourceID: f.vault.ID, Kind: "member", UserID: f.bob, RevokedBy: "t", RevokedAt: f.now}
	if err := f.s.RemoveContextMember(f.ctx, f.ws, f.vault.ID, f.bob, rev, f.audit("member.remove")); err != nil {
		t.Fatal(err)
	}
	ms, _ = f.s.ContextMembers(f.ctx, f.vault.ID)
	if len(ms) != 2 || ms[1].State != "removed" || ms[1].RemovedAt == nil {
		t.Fatalf("after removal = %+v", ms)
	}
	if err := f.s.RemoveContextMember(f.ctx, f.ws, f.vault.ID, f.bob, rev, AuditEntry{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removing a removed member: %v", err)
	}
	rev.UserID = f.alice
	if err := f.s.RemoveContextMember(f.ctx, f.ws, f.vault.ID, f.alice, rev, AuditEntry{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("removing the last owner: %v, want ErrConflict", err)
	}
	// Re-adding brings the member back.
	if err := f.s.PutContextMember(f.ctx, ContextMember{SourceID: f.vault.ID, UserID: f.bob, Role: "member", AddedBy: "t", AddedAt: f.now}, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if ms, _ = f.s.ContextMembers(f.ctx, f.vault.ID); ms[1].State != "active" || ms[1].RemovedAt != nil {
		t.Fatalf("re-added member = %+v", ms[1])
	}
}

func TestContextDevices(t *testing.T) { eachEngine(t, testContextDevices) }

func testContextDevices(t *testing.T, e engine) {
	f := newCVFix(t, e)
	if f.a1.State != "active" || f.a2.State != "pending" || f.b1.State != "active" {
		t.Fatalf("states: first of alice %s, second %s, first of bob %s", f.a1.State, f.a2.State, f.b1.State)
	}
	d := ContextDevice{WorkspaceID: f.ws, UserID: f.alice, InstallID: "x", Recipient: f.a1.Recipient, CreatedAt: f.now, UpdatedAt: f.now}
	if err := f.s.CreateContextDevice(f.ctx, &d, AuditEntry{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a recipient enrolled twice: %v", err)
	}
	d = ContextDevice{WorkspaceID: f.ws, UserID: f.alice, InstallID: "inst-a1", Recipient: "age1new", CreatedAt: f.now, UpdatedAt: f.now}
	if err := f.s.CreateContextDevice(f.ctx, &d, AuditEntry{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a second device on one install: %v", err)
	}
	if got, err := f.s.ContextDevice(f.ctx, f.ws, f.a2.ID); err != nil || got.InstallID != "inst-a2" {
		t.Fatalf("ContextDevice = %+v, %v", got, err)
	}
	if got, err := f.s.ContextDeviceByInstall(f.ctx, f.ws, "inst-b1"); err != nil || got.ID != f.b1.ID {
		t.Fatalf("ContextDeviceByInstall = %+v, %v", got, err)
	}
	if got, err := f.s.ContextDeviceByRecipient(f.ctx, f.ws, f.b1.Recipient); err != nil || got.ID != f.b1.ID {
		t.Fatalf("ContextDeviceByRecipient = %+v, %v", got, err)
	}
	if all, err := f.s.ContextDevices(f.ctx, f.ws); err != nil || len(all) != 3 {
		t.Fatalf("ContextDevices = %d, %v", len(all), err)
	}
	// Approval stores the new device's wraps with its state, atomically.
	boom := errors.New("refused")
	if _, err := f.s.UpdateContextDevice(f.ctx, f.ws, f.a2.ID, func(*ContextDevice) error { return boom }, []ContextKey{f.key(f.vault.ID, 1, f.a2.ID)}, AuditEntry{}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if ks, _ := f.s.ContextKeysOf(f.ctx, f.ws, f.a2.ID); len(ks) != 0 {
		t.Fatal("a refused approval stored keys")
	}
	got, err := f.s.UpdateContextDevice(f.ctx, f.ws, f.a2.ID, func(d *ContextDevice) error { d.State, d.ApprovedBy = "approved", f.a1.ID; return nil }, nil, f.audit("device.approve"))
	if err != nil || got.State != "approved" {
		t.Fatalf("approve = %+v, %v", got, err)
	}
	rev := ContextRevocation{WorkspaceID: f.ws, Kind: "device", DeviceID: f.a2.ID, UserID: f.alice, RevokedBy: "t", RevokedAt: f.now}
	if err := f.s.RevokeContextDevice(f.ctx, f.ws, f.a2.ID, rev, f.audit("device.revoke")); err != nil {
		t.Fatal(err)
	}
	if err := f.s.RevokeContextDevice(f.ctx, f.ws, f.a2.ID, rev, AuditEntry{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoking twice: %v", err)
	}
	if _, err := f.s.ContextDeviceByInstall(f.ctx, f.ws, "inst-a2"); !errors.Is(err, ErrNotFound) {
		t.Fatal("a revoked device still speaks for its install")
	}
	// Rebinding moves a device to a new install, not onto a taken one.
	if _, err := f.s.RebindContextDevice(f.ctx, f.ws, f.a1.ID, "inst-b1", AuditEntry{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("rebind onto a taken install: %v", err)
	}
	if got, err := f.s.RebindContextDevice(f.ctx, f.ws, f.a1.ID, "inst-a9", f.audit("device.rebind")); err != nil || got.InstallID != "inst-a9" {
		t.Fatalf("rebind = %+v, %v", got, err)
	}
}

func TestContextEligibilityEpochsAndKeys(t *testing.T) {
	eachEngine(t, testContextEligibilityEpochsAndKeys)
}

func testContextEligibilityEpochsAndKeys(t *testing.T, e engine) {
	f := newCVFix(t, e)
	el, err := f.s.EligibleContextDevices(f.ctx, f.ws, f.vault.ID)
	if err != nil || len(el) != 1 || el[0].ID != f.a1.ID {
		t.Fatalf("eligible = %+v, %v (pending a2 and non-member b1 are not)", el, err)
	}
	// Epoch 1 by a1, the only eligible device.
	e1 := ContextEpoch{SourceID: f.vault.ID, Epoch: 1, CreatedBy: f.a1.ID, Reason: "first", CreatedAt: f.now}
	if err := f.s.PublishContextEpoch(f.ctx, f.ws, e1, []ContextKey{f.key(f.vault.ID, 1, f.a1.ID)}, allow, f.audit("epoch")); err != nil {
		t.Fatal(err)
	}
	if err := f.s.PublishContextEpoch(f.ctx, f.ws, e1, nil, allow, AuditEntry{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("publishing epoch 1 twice: %v", err)
	}
	refuse := errors.New("missing wrap")
	e2 := ContextEpoch{SourceID: f.vault.ID, Epoch: 2, CreatedBy: f.a1.ID, Reason: "r", CreatedAt: f.now}
	if err := f.s.PublishContextEpoch(f.ctx, f.ws, e2, nil, func([]ContextDevice) error { return refuse }, AuditEntry{}); !errors.Is(err, refuse) {
		t.Fatal(err)
	}
	if src, _ := f.s.ContextSource(f.ctx, f.ws, f.vault.ID); src.Epoch != 1 {
		t.Fatalf("a refused epoch moved the vault to %d", src.Epoch)
	}
	// Bob joins: his device is owed epoch 1 by a1.
	if err := f.s.PutContextMember(f.ctx, ContextMember{SourceID: f.vault.ID, UserID: f.bob, Role: "member", AddedBy: "t", AddedAt: f.now}, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	obl, err := f.s.ContextObligations(f.ctx, f.ws, f.a1.ID)
	if err != nil || len(obl) != 1 || obl[0].Device.ID != f.b1.ID || obl[0].Epoch != 1 {
		t.Fatalf("obligations = %+v, %v", obl, err)
	}
	if obl, _ := f.s.ContextObligations(f.ctx, f.ws, f.b1.ID); len(obl) != 0 {
		t.Fatalf("a device without keys has obligations: %+v", obl)
	}
	added, err := f.s.EmitContextKeys(f.ctx, f.ws, f.vault.ID, []ContextKey{f.key(f.vault.ID, 1, f.b1.ID)}, func(el []ContextDevice) error {
		if !ids(el)[f.b1.ID] {
			return errors.New("bob not eligible")
		}
		return nil
	}, f.audit("grant"))
	if err != nil || len(added) != 1 {
		t.Fatalf("emit = %+v, %v", added, err)
	}
	if again, err := f.s.EmitContextKeys(f.ctx, f.ws, f.vault.ID, []ContextKey{f.key(f.vault.ID, 1, f.b1.ID)}, allow, AuditEntry{}); err != nil || len(again) != 0 {
		t.Fatalf("emitting again = %+v, %v; want nothing new", again, err)
	}
	if obl, _ := f.s.ContextObligations(f.ctx, f.ws, f.a1.ID); len(obl) != 0 {
		t.Fatalf("obligations after the grant = %+v", obl)
	}
	mat, err := f.s.MaterializeContextKeys(f.ctx, f.b1.ID, []ContextKey{{SourceID: f.vault.ID, Epoch: 1}}, f.now)
	if err != nil || len(mat) != 1 || mat[0].State != "materialized" {
		t.Fatalf("materialize = %+v, %v", mat, err)
	}
	if _, err := f.s.MaterializeContextKeys(f.ctx, f.b1.ID, []ContextKey{{SourceID: f.vault.ID, Epoch: 7}}, f.now); !errors.Is(err, ErrNotFound) {
		t.Fatalf("materializing a key that was never wrapped: %v", err)
	}
	if ks, _ := f.s.ContextKeysOf(f.ctx, f.ws, f.b1.ID); len(ks) != 1 || ks[0].Wrapped != "wrap-"+f.b1.ID {
		t.Fatalf("keys of b1 = %+v", ks)
	}
	// Bob is removed: his device holds the current key and is no longer
	// eligible, so a1 sees it as a holder to rotate away from.
	rev := ContextRevocation{WorkspaceID: f.ws, SourceID: f.vault.ID, Kind: "member", UserID: f.bob, RevokedBy: "t", RevokedAt: f.now}
	if err := f.s.RemoveContextMember(f.ctx, f.ws, f.vault.ID, f.bob, rev, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	hs, err := f.s.ContextHolders(f.ctx, f.ws, f.a1.ID)
	if err != nil || len(hs) != 1 || hs[0].Device.ID != f.b1.ID || hs[0].Epoch != 1 {
		t.Fatalf("holders = %+v, %v", hs, err)
	}
	if hs, _ := f.s.ContextHolders(f.ctx, f.ws, f.b1.ID); len(hs) != 0 {
		t.Fatal("a removed member's device sees holders of a vault it left")
	}
	if err := f.s.PublishContextEpoch(f.ctx, f.ws, e2, []ContextKey{f.key(f.vault.ID, 2, f.a1.ID)}, allow, f.audit("epoch")); err != nil {
		t.Fatal(err)
	}
	if hs, _ := f.s.ContextHolders(f.ctx, f.ws, f.a1.ID); len(hs) != 0 {
		t.Fatalf("holders after rotation = %+v", hs)
	}
	eps, err := f.s.ContextEpochs(f.ctx, f.ws)
	if err != nil || len(eps) != 2 || eps[0].Recipients != 2 || eps[1].Recipients != 1 {
		t.Fatalf("epochs = %+v, %v", eps, err)
	}
}

// Concurrent publishers of one epoch: exactly one wins.
func TestContextEpochRace(t *testing.T) { eachEngine(t, testContextEpochRace) }

func testContextEpochRace(t *testing.T, e engine) {
	f := newCVFix(t, e)
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, conflicts := 0, 0
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := f.s.PublishContextEpoch(f.ctx, f.ws, ContextEpoch{SourceID: f.vault.ID, Epoch: 1, CreatedBy: f.a1.ID, CreatedAt: f.now}, []ContextKey{f.key(f.vault.ID, 1, f.a1.ID)}, allow, AuditEntry{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ErrConflict):
				conflicts++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || conflicts != 19 {
		t.Fatalf("wins %d conflicts %d", wins, conflicts)
	}
}

func TestContextEvents(t *testing.T) { eachEngine(t, testContextEvents) }

func testContextEvents(t *testing.T, e engine) {
	f := newCVFix(t, e)
	ev := func(id, entry, base, digest string) ContextEvent {
		return ContextEvent{EventID: id, EntryID: entry, Kind: "put", Epoch: 1, Base: base, Ciphertext: "ct-" + id, Digest: digest, DeviceID: f.a1.ID, CreatedAt: f.now}
	}
	res, head, err := f.s.AppendContextEvents(f.ctx, f.ws, f.vault.ID, []ContextEvent{ev("e1", "n1", "", "d1"), ev("e2", "n1", "e1", "d2")}, func(ContextSource) error { return nil })
	if err != nil || head != 2 || len(res) != 2 || res[1].Seq != 2 {
		t.Fatalf("append = %+v %d %v", res, head, err)
	}
	// A replay with the same content is a duplicate; with other content a
	// conflict; a base the source lacks is refused; nothing is written.
	res, head, err = f.s.AppendContextEvents(f.ctx, f.ws, f.vault.ID, []ContextEvent{ev("e1", "n1", "", "d1")}, func(ContextSource) error { return nil })
	if err != nil || !res[0].Duplicate || res[0].Seq != 1 || head != 2 {
		t.Fatalf("replay = %+v %d %v", res, head, err)
	}
	if _, _, err := f.s.AppendContextEvents(f.ctx, f.ws, f.vault.ID, []ContextEvent{ev("e3", "n1", "e2", "d3"), ev("e1", "n1", "", "other")}, func(ContextSource) error { return nil }); !errors.Is(err, ErrConflict) {
		t.Fatalf("replay with other content: %v", err)
	}
	if _, _, err := f.s.AppendContextEvents(f.ctx, f.ws, f.vault.ID, []ContextEvent{ev("e4", "n1", "nope", "d4")}, func(ContextSource) error { return nil }); !errors.Is(err, ErrUnknownBase) {
		t.Fatalf("unknown base: %v", err)
	}
	if _, _, err := f.s.AppendContextEvents(f.ctx, f.ws, f.vault.ID, []ContextEvent{ev("e5", "n2", "e1", "d5")}, func(ContextSource) error { return nil }); !errors.Is(err, ErrUnknownBase) {
		t.Fatalf("a base of another entry: %v", err)
	}
	refused := errors.New("stale")
	if _, _, err := f.s.AppendContextEvents(f.ctx, f.ws, f.vault.ID, []ContextEvent{ev("e6", "n3", "", "d6")}, func(ContextSource) error { return refused }); !errors.Is(err, refused) {
		t.Fatal(err)
	}
	all, err := f.s.ContextEvents(f.ctx, f.vault.ID, 0, 0)
	if err != nil || len(all) != 2 {
		t.Fatalf("events = %d, %v; the refused pushes left nothing", len(all), err)
	}
	if after, _ := f.s.ContextEvents(f.ctx, f.vault.ID, 1, 10); len(after) != 1 || after[0].EventID != "e2" {
		t.Fatalf("events after 1 = %+v", after)
	}
	if e, err := f.s.ContextEvent(f.ctx, f.vault.ID, "e2"); err != nil || e.Base != "e1" || e.Ciphertext != "ct-e2" {
		t.Fatalf("ContextEvent = %+v, %v", e, err)
	}
	// Concurrent pushes number events without gaps or repeats.
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			id := newID()
			if _, _, err := f.s.AppendContextEvents(f.ctx, f.ws, f.vault.ID, []ContextEvent{ev(id, id, "", id)}, func(ContextSource) error { return nil }); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	all, _ = f.s.ContextEvents(f.ctx, f.vault.ID, 0, 0)
	for i, e := range all {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
	if len(all) != 52 {
		t.Fatalf("%d events, want 52", len(all))
	}
}

func TestContextProposalsAndProofs(t *testing.T) { eachEngine(t, testContextProposalsAndProofs) }

func testContextProposalsAndProofs(t *testing.T, e engine) {
	f := newCVFix(t, e)
	p := ContextProposal{ID: newID(), WorkspaceID: f.ws, SourceID: f.vault.ID, SessionID: "s1", CorrectionKind: "new_memory", TargetKind: "memory_candidate", State: "pending", Digest: "dg", Sealed: "sealed", SealedTo: []string{f.a1.ID}, CreatedBy: "user:1", CreatedAt: f.now}
	if err := f.s.CreateContextProposal(f.ctx, p, f.audit("proposal.create")); err != nil {
		t.Fatal(err)
	}
	got, err := f.s.ContextProposal(f.ctx, f.ws, p.ID)
	if err != nil || got.Sealed != "sealed" || len(got.SealedTo) != 1 {
		t.Fatalf("proposal = %+v, %v", got, err)
	}
	if ps, err := f.s.ContextProposals(f.ctx, f.ws, "pending"); err != nil || len(ps) != 1 {
		t.Fatalf("pending = %d, %v", len(ps), err)
	}
	proof := ContextProof{ID: newID(), WorkspaceID: f.ws, ProposalID: p.ID, SourceID: f.vault.ID, CandidateDigest: "dg", BaseSeq: 0, DeviceID: f.a1.ID, MAC: "mac", IssuedAt: f.now}
	if err := f.s.CreateContextProof(f.ctx, proof, nil, f.audit("proof")); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.s.ContextProposal(f.ctx, f.ws, p.ID); got.State != "previewed" || got.ProofID != proof.ID {
		t.Fatalf("after the proof: %+v", got)
	}
	if pr, err := f.s.ContextProof(f.ctx, f.ws, proof.ID); err != nil || pr.MAC != "mac" {
		t.Fatalf("proof = %+v, %v", pr, err)
	}
	up, err := f.s.UpdateContextProposal(f.ctx, f.ws, p.ID, func(p *ContextProposal) error {
		p.State, p.Sealed, p.EventID = "accepted", "", "ev1"
		return nil
	}, f.audit("proposal.accept"))
	if err != nil || up.State != "accepted" || up.Sealed != "" {
		t.Fatalf("accept = %+v, %v", up, err)
	}
	if ps, _ := f.s.ContextProposals(f.ctx, f.ws, "pending"); len(ps) != 0 {
		t.Fatal("an accepted proposal is still pending")
	}
}

func TestContextBackupsAndWorkingSets(t *testing.T) { eachEngine(t, testContextBackupsAndWorkingSets) }

func testContextBackupsAndWorkingSets(t *testing.T, e engine) {
	f := newCVFix(t, e)
	b := ContextBackup{WorkspaceID: f.ws, DeviceID: f.a1.ID, UserID: f.alice, Sealed: "s1", CreatedAt: f.now}
	if err := f.s.PutContextBackup(f.ctx, &b, f.audit("backup")); err != nil || b.Generation != 1 {
		t.Fatalf("first backup: gen %d, %v", b.Generation, err)
	}
	b.Sealed = "s2"
	if err := f.s.PutContextBackup(f.ctx, &b, f.audit("backup")); err != nil || b.Generation != 2 {
		t.Fatalf("second backup: gen %d, %v", b.Generation, err)
	}
	bs, err := f.s.ContextBackups(f.ctx, f.ws, f.alice)
	if err != nil || len(bs) != 1 || bs[0].Sealed != "s2" {
		t.Fatalf("backups = %+v, %v", bs, err)
	}
	if bs, _ := f.s.ContextBackups(f.ctx, f.ws, f.bob); len(bs) != 0 {
		t.Fatal("bob sees alice's backup")
	}
	w := ContextWorkingSet{WorkspaceID: f.ws, SessionID: "s1", Task: "fix billing", SourceIDs: []string{f.vault.ID}, ComposedAt: f.now}
	if err := f.s.PutContextWorkingSet(f.ctx, w); err != nil {
		t.Fatal(err)
	}
	w.Task = "again"
	if err := f.s.PutContextWorkingSet(f.ctx, w); err != nil {
		t.Fatal(err)
	}
	got, err := f.s.ContextWorkingSet(f.ctx, f.ws, "s1")
	if err != nil || got.Task != "again" || len(got.SourceIDs) != 1 {
		t.Fatalf("working set = %+v, %v", got, err)
	}
	if _, err := f.s.ContextWorkingSet(f.ctx, f.ws, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing working set: %v", err)
	}
}
