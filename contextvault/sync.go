package contextvault

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"reeve.dev/reeve/contextvault/entrylog"
	"reeve.dev/reeve/contextvault/seal"
	"reeve.dev/reeve/server/sdk"
)

// Content is what an entry seals.
type Content struct {
	Title     string    `json:"title"`
	Tags      []string  `json:"tags,omitempty"`
	Body      string    `json:"body"`
	CreatedAt time.Time `json:"created_at"`
	Device    string    `json:"device"`
}

// NewEntry is an entry to add or change.
type NewEntry struct {
	Title      string
	Tags       []string
	Body       string
	UseWhen    string // server-visible
	UpdateWhen string // server-visible
	// EntryID replaces an existing entry (its every live version) instead
	// of adding one.
	EntryID string
}

// Added is an entry written.
type Added struct {
	Vault   string `json:"vault"`
	VaultID string `json:"vault_id"`
	EntryID string `json:"entry_id"`
	EventID string `json:"event_id"`
	Epoch   int64  `json:"epoch"`
	Pushed  bool   `json:"pushed"`
}

func newID() string { return ulid.Make().String() }

// Add seals an entry under the vault's current epoch into the outbox;
// sync-push (or Add's caller) sends it. Replacing an entry in conflict
// replaces every one of its versions, ending the conflict.
func (v *Vault) Add(ctx context.Context, ref string, e NewEntry) (Added, error) {
	src, err := v.l.source(ref)
	if err != nil {
		return Added{}, err
	}
	if src.Kind != sdk.ContextKindVault {
		return Added{}, fmt.Errorf("%w: %s is a git source: change it with `reeve context propose`", ErrRefused, src.Name)
	}
	if src.Gone {
		return Added{}, fmt.Errorf("%w: this device no longer belongs to %s", ErrRefused, src.Name)
	}
	if strings.TrimSpace(e.Title) == "" {
		return Added{}, fmt.Errorf("%w: an entry needs a title", ErrRefused)
	}
	key, err := v.epochKey(src.ID, src.Epoch)
	if err != nil {
		return Added{}, err
	}
	now := v.o.Now().UTC()
	plain, _ := json.Marshal(Content{Title: e.Title, Tags: e.Tags, Body: e.Body, CreatedAt: now, Device: v.DeviceID()})
	entryID := e.EntryID
	var heads []entrylog.Event
	if entryID == "" {
		entryID = newID()
	} else {
		en, err := v.entry(src.ID, entryID)
		if err != nil {
			return Added{}, err
		}
		heads = en.Heads
	}
	var events []Event
	seal1 := func(kind, base string, body []byte) error {
		ev := Event{SourceID: src.ID, EventID: newID(), EntryID: entryID, Kind: kind, Epoch: src.Epoch, Base: base,
			UseWhen: e.UseWhen, UpdateWhen: e.UpdateWhen, DeviceID: v.DeviceID(), CreatedAt: now}
		ct, err := seal.Seal(key, headerOf(ev), body)
		if err != nil {
			return err
		}
		ev.Ciphertext = ct
		events = append(events, ev)
		return nil
	}
	// The new version replaces the newest live one; other live versions
	// (a conflict) are retired by deletes, so the conflict ends here.
	base, retire := "", []entrylog.Event(nil)
	if live := (entrylog.Entry{Heads: heads}).Live(); len(live) > 0 {
		base, retire = live[len(live)-1].EventID, live[:len(live)-1]
	} else if len(heads) > 0 {
		base = heads[len(heads)-1].EventID // bringing a deleted entry back
	}
	if err := seal1(sdk.EventPut, base, plain); err != nil {
		return Added{}, err
	}
	for _, h := range retire {
		if err := seal1(sdk.EventDelete, h.EventID, []byte("{}")); err != nil {
			return Added{}, err
		}
	}
	if err := v.l.tx(ctx, func(tx *sql.Tx) error {
		for _, ev := range events {
			if err := insertEvent(tx, ev); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return Added{}, err
	}
	return Added{Vault: src.Name, VaultID: src.ID, EntryID: entryID, EventID: events[0].EventID, Epoch: src.Epoch}, nil
}

// Remove deletes an entry (every live version of it).
func (v *Vault) Remove(ctx context.Context, ref, entryID string) (Added, error) {
	src, err := v.l.source(ref)
	if err != nil {
		return Added{}, err
	}
	en, err := v.entry(src.ID, entryID)
	if err != nil {
		return Added{}, err
	}
	key, err := v.epochKey(src.ID, src.Epoch)
	if err != nil {
		return Added{}, err
	}
	now := v.o.Now().UTC()
	var first string
	err = v.l.tx(ctx, func(tx *sql.Tx) error {
		for _, h := range en.Live() {
			ev := Event{SourceID: src.ID, EventID: newID(), EntryID: entryID, Kind: sdk.EventDelete, Epoch: src.Epoch, Base: h.EventID, DeviceID: v.DeviceID(), CreatedAt: now}
			ct, err := seal.Seal(key, headerOf(ev), []byte("{}"))
			if err != nil {
				return err
			}
			ev.Ciphertext = ct
			if first == "" {
				first = ev.EventID
			}
			if err := insertEvent(tx, ev); err != nil {
				return err
			}
		}
		return nil
	})
	return Added{Vault: src.Name, VaultID: src.ID, EntryID: entryID, EventID: first, Epoch: src.Epoch}, err
}

func headerOf(e Event) seal.Header {
	return seal.Header{VaultID: e.SourceID, EntryID: e.EntryID, EventID: e.EventID, Base: e.Base, Kind: e.Kind, Epoch: e.Epoch, UseWhen: e.UseWhen, UpdateWhen: e.UpdateWhen}
}

func logEvents(evs []Event) []entrylog.Event {
	out := make([]entrylog.Event, len(evs))
	for i, e := range evs {
		// Unpushed events sort after every pushed one, in the order written.
		seq := e.Seq
		if seq == 0 {
			seq = 1<<62 + e.N
		}
		out[i] = entrylog.Event{Seq: seq, EventID: e.EventID, EntryID: e.EntryID, Base: e.Base, Kind: e.Kind}
	}
	return out
}

func (v *Vault) entry(sourceID, entryID string) (entrylog.Entry, error) {
	evs, err := v.l.events(`source_id = ? AND entry_id = ? ORDER BY n`, sourceID, entryID)
	if err != nil {
		return entrylog.Entry{}, err
	}
	for _, en := range entrylog.Fold(logEvents(evs)) {
		if en.EntryID == entryID {
			return en, nil
		}
	}
	return entrylog.Entry{}, fmt.Errorf("%w: no entry %s", ErrNotFound, entryID)
}

// reseal seals the outbox of a source again under a new epoch: events no
// server took yet must not stay readable with a key that was rotated
// away. Their ids change, so nothing half-pushed can clash.
func (v *Vault) reseal(ctx context.Context, sourceID string, epoch int64) error {
	out, err := v.l.outbox(sourceID)
	if err != nil || len(out) == 0 {
		return err
	}
	newKey, err := v.epochKey(sourceID, epoch)
	if err != nil {
		return err
	}
	renamed := map[string]string{}
	return v.l.tx(ctx, func(tx *sql.Tx) error {
		for _, e := range out {
			if e.Epoch == epoch {
				continue
			}
			oldKey, err := v.epochKey(sourceID, e.Epoch)
			if err != nil {
				return err
			}
			plain, err := seal.Open(oldKey, headerOf(e), e.Ciphertext)
			if err != nil {
				return fmt.Errorf("reseal %s: %w", e.EventID, err)
			}
			old := e.EventID
			e.EventID, e.Epoch = newID(), epoch
			if nb, ok := renamed[e.Base]; ok {
				e.Base = nb
			}
			renamed[old] = e.EventID
			if e.Ciphertext, err = seal.Seal(newKey, headerOf(e), plain); err != nil {
				return err
			}
			if _, err := tx.Exec(`UPDATE events SET event_id = ?, epoch = ?, base = ?, ciphertext = ? WHERE n = ?`, e.EventID, e.Epoch, e.Base, e.Ciphertext, e.N); err != nil {
				return err
			}
		}
		return nil
	})
}

// PushResult is what a push sent.
type PushResult struct {
	Vault      string `json:"vault"`
	Pushed     int    `json:"pushed"`
	Duplicates int    `json:"duplicates"`
	HeadSeq    int64  `json:"head_seq"`
}

// pushBatch bounds the events of one push request.
const pushBatch = 200

// SyncPush sends the outbox of one source (ref) or all. It resumes where
// it stopped: an event the server took before an interruption comes back
// as a duplicate with its sequence number. When the vault rotated, the
// outbox is sealed again under the new key first.
func (v *Vault) SyncPush(ctx context.Context, ref string) ([]PushResult, error) {
	srv, err := v.server()
	if err != nil {
		return nil, err
	}
	srcs, err := v.pick(ref)
	if err != nil {
		return nil, err
	}
	var out []PushResult
	for _, s := range srcs {
		if s.Kind != sdk.ContextKindVault || s.Gone {
			continue
		}
		res := PushResult{Vault: s.Name}
		for retried := false; ; {
			evs, err := v.l.outbox(s.ID)
			if err != nil {
				return out, err
			}
			if len(evs) == 0 {
				break
			}
			batch := evs[:min(len(evs), pushBatch)]
			req := sdk.ContextPushRequest{VaultID: s.ID}
			for _, e := range batch {
				req.Events = append(req.Events, sdk.ContextEvent{EventID: e.EventID, EntryID: e.EntryID, Kind: e.Kind, Epoch: e.Epoch, Base: e.Base,
					UseWhen: e.UseWhen, UpdateWhen: e.UpdateWhen, Ciphertext: e.Ciphertext})
			}
			ack, err := srv.Push(ctx, req)
			if Code(err) == sdk.CodeStaleEpoch && !retried {
				// The vault rotated: take the new key, seal again, retry.
				retried = true
				if _, err := v.Refresh(ctx); err != nil {
					return out, err
				}
				cur, err := v.l.source(s.ID)
				if err != nil {
					return out, err
				}
				if err := v.reseal(ctx, s.ID, cur.Epoch); err != nil {
					return out, err
				}
				continue
			}
			if err != nil {
				return out, apiErr("push "+s.Name, err)
			}
			if err := v.l.tx(ctx, func(tx *sql.Tx) error {
				for _, a := range ack.Accepted {
					if _, err := tx.Exec(`UPDATE events SET seq = ? WHERE source_id = ? AND event_id = ?`, a.Seq, s.ID, a.EventID); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return out, err
			}
			for _, a := range ack.Accepted {
				if a.Duplicate {
					res.Duplicates++
				} else {
					res.Pushed++
				}
			}
			res.HeadSeq = ack.HeadSeq
		}
		out = append(out, res)
	}
	return out, nil
}

// pick is one source by reference, or every source.
func (v *Vault) pick(ref string) ([]Source, error) {
	if ref != "" {
		s, err := v.l.source(ref)
		if err != nil {
			return nil, err
		}
		return []Source{s}, nil
	}
	return v.l.sources()
}

// PullResult is what a pull brought.
type PullResult struct {
	Vault   string   `json:"vault"`
	Pulled  int      `json:"pulled"`
	Cursor  int64    `json:"cursor"`
	Refused []string `json:"refused,omitempty"`
}

// pullPage is how many events one pull request asks for.
const pullPage = 500

// SyncPull fetches what others wrote since this device's cursor. Each
// event is checked before it is kept: its sequence number must follow the
// cursor, it must not be a replay of an event held under another number,
// the event it replaces must be known, and a sealed event must open with
// its epoch's key. The first event that fails is refused with the reason;
// the cursor stays before it and nothing after it is taken, so a retry
// (or another server) can still deliver the true log.
func (v *Vault) SyncPull(ctx context.Context, ref string) ([]PullResult, error) {
	srv, err := v.server()
	if err != nil {
		return nil, err
	}
	if _, err := v.Refresh(ctx); err != nil {
		return nil, err
	}
	srcs, err := v.pick(ref)
	if err != nil {
		return nil, err
	}
	var out []PullResult
	var firstErr error
	for _, s := range srcs {
		if s.Gone {
			continue
		}
		res := PullResult{Vault: s.Name, Cursor: s.Cursor}
		for {
			page, err := srv.Pull(ctx, sdk.ContextPullRequest{VaultID: s.ID, AfterSeq: res.Cursor, Limit: pullPage})
			if err != nil {
				return out, apiErr("pull "+s.Name, err)
			}
			n, cursor, refusal, err := v.apply(ctx, s, res.Cursor, page.Events)
			if err != nil {
				return out, err
			}
			res.Pulled += n
			res.Cursor = cursor
			if refusal != nil {
				res.Refused = append(res.Refused, refusal.Error())
				if firstErr == nil {
					firstErr = refusal
				}
				break
			}
			if !page.More || len(page.Events) == 0 {
				break
			}
		}
		out = append(out, res)
	}
	return out, firstErr
}

// ErrEvent is an event refused by a pull.
type ErrEvent struct {
	Vault   string
	Seq     int64
	EventID string
	Reason  string
}

func (e *ErrEvent) Error() string {
	return fmt.Sprintf("%s: refused event %s at seq %d: %s; nothing from it on was taken", e.Vault, e.EventID, e.Seq, e.Reason)
}

func (e *ErrEvent) Unwrap() error { return ErrRefused }

// apply checks and keeps a page of pulled events, in one transaction.
func (v *Vault) apply(ctx context.Context, s Source, cursor int64, evs []sdk.ContextEvent) (int, int64, error, error) {
	var refusal error
	n := 0
	err := v.l.tx(ctx, func(tx *sql.Tx) error {
		for _, e := range evs {
			refuse := func(reason string) {
				refusal = &ErrEvent{Vault: s.Name, Seq: e.Seq, EventID: e.EventID, Reason: reason}
			}
			if e.Seq <= cursor {
				refuse(fmt.Sprintf("out of order: seq %d does not follow %d (replayed or reordered)", e.Seq, cursor))
				return nil
			}
			var seq int64
			var held string
			err := tx.QueryRow(`SELECT seq, ciphertext FROM events WHERE source_id = ? AND event_id = ?`, s.ID, e.EventID).Scan(&seq, &held)
			switch {
			case err == nil && held == e.Ciphertext && (seq == 0 || seq == e.Seq):
				// Our own event coming back (its push answer may have been
				// lost): adopt its number.
				if _, err := tx.Exec(`UPDATE events SET seq = ? WHERE source_id = ? AND event_id = ?`, e.Seq, s.ID, e.EventID); err != nil {
					return err
				}
				cursor = e.Seq
				continue
			case err == nil:
				refuse(fmt.Sprintf("replayed: this device already has event %s (seq %d)", e.EventID, seq))
				return nil
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
			if e.Base != "" {
				var have int
				if err := tx.QueryRow(`SELECT count(*) FROM events WHERE source_id = ? AND event_id = ? AND entry_id = ?`, s.ID, e.Base, e.EntryID).Scan(&have); err != nil {
					return err
				}
				if have == 0 {
					refuse("out of order: it replaces event " + e.Base + ", which this device has not seen")
					return nil
				}
			}
			ev := Event{SourceID: s.ID, EventID: e.EventID, Seq: e.Seq, EntryID: e.EntryID, Kind: e.Kind, Epoch: e.Epoch, Base: e.Base,
				UseWhen: e.UseWhen, UpdateWhen: e.UpdateWhen, Path: e.Path, Commit: e.Commit, Ciphertext: e.Ciphertext, DeviceID: e.DeviceID, CreatedAt: e.CreatedAt}
			if s.Kind == sdk.ContextKindVault {
				key, err := v.epochKey(s.ID, e.Epoch)
				switch {
				case errors.Is(err, ErrNoKey):
					// Kept sealed; readable once the key is granted.
				case err != nil:
					return err
				default:
					if _, err := seal.Open(key, headerOf(ev), ev.Ciphertext); err != nil {
						refuse("tampered: " + err.Error())
						return nil
					}
				}
			}
			if err := insertEvent(tx, ev); err != nil {
				return err
			}
			cursor = e.Seq
			n++
		}
		return nil
	})
	if err == nil {
		_, err = v.l.db.Exec(`UPDATE sources SET cursor = ? WHERE id = ?`, cursor, s.ID)
	}
	return n, cursor, refusal, err
}

// SyncAllResult is what sync-all did.
type SyncAllResult struct {
	Refresh   RefreshResult   `json:"refresh"`
	Pushed    []PushResult    `json:"pushed"`
	Pulled    []PullResult    `json:"pulled"`
	Git       []GitSyncResult `json:"git,omitempty"`
	Grants    GrantsResult    `json:"grants"`
	Revokes   RevokesResult   `json:"revokes"`
	Rotations []EpochResult   `json:"rotations"`
}

// SyncAll brings this device and the server level: pending revocations
// and rotations are enforced first (so nothing new is sealed to someone
// cut off), then the outbox goes, others' events come, git sources are
// fetched and their documents reported, and keys owed to others are
// wrapped.
func (v *Vault) SyncAll(ctx context.Context) (SyncAllResult, error) {
	var res SyncAllResult
	var err error
	if res.Revokes, err = v.RevokesProcess(ctx, RevokeTarget{}); err != nil {
		return res, err
	}
	if res.Rotations, err = v.RotationsProcess(ctx); err != nil {
		return res, err
	}
	if res.Pushed, err = v.SyncPush(ctx, ""); err != nil {
		return res, err
	}
	if res.Git, err = v.SyncGit(ctx); err != nil {
		return res, err
	}
	if res.Pulled, err = v.SyncPull(ctx, ""); err != nil {
		return res, err
	}
	if res.Grants, err = v.GrantsProcess(ctx); err != nil {
		return res, err
	}
	res.Refresh, err = v.Refresh(ctx)
	return res, err
}

func parseUserID(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}

func equalFold(a, b string) bool {
	return strings.EqualFold(strings.TrimSpace(a), strings.TrimSpace(b))
}
