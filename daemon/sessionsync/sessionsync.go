// Package sessionsync publishes a paired daemon's sessions and their event
// logs to the control plane. The daemon's own log is the durable outbox:
// events are never copied elsewhere before upload, and a small cursor file
// remembers, per session, the last seq the control plane acknowledged. The
// control plane's answer is authoritative, so offline periods, daemon
// restarts and server restarts (even one that lost data) resume at the
// right seq, and nothing is lost or stored twice.
package sessionsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"reeve.dev/reeve/internal/atomicfile"
	"reeve.dev/reeve/internal/redact"
	"reeve.dev/reeve/server/sdk"
)

// Source is the daemon's sessions and their logs.
type Source interface {
	Sessions(ctx context.Context) ([]sdk.SyncSession, error)
	Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]sdk.SyncEvent, error)
}

// Detailer is a Source that adds costly fields (file digests) to a
// session only when it is about to be published.
type Detailer interface {
	Detail(ctx context.Context, s *sdk.SyncSession) error
}

// Publisher sends one batch; *sdk.Client with an issue token is one.
type Publisher interface {
	SyncSession(ctx context.Context, req sdk.SyncRequest) (sdk.SyncResult, error)
}

// Options configure a Syncer. Source, Publisher and CursorFile are required.
type Options struct {
	Source    Source
	Publisher Publisher
	// CursorFile keeps the acknowledged seq of each session (0600).
	CursorFile string
	// Mode is what leaves the machine: sdk.UploadFull, UploadRedacted
	// (default) or UploadMetadata.
	Mode string
	// Interval between passes; default 2s. Errors back off up to a minute.
	Interval time.Duration
	// Batch is the events per request; default and most sdk.MaxSyncEvents.
	Batch  int
	Logger *slog.Logger
}

// cursor is the file's content.
type cursor struct {
	// Acked is the last seq the control plane acknowledged per session.
	Acked map[string]int64 `json:"acked"`
	// Published is the session's updated_at last published.
	Published map[string]time.Time `json:"published"`
	// Access is the project access (access.yaml) last published with the
	// session, as its JSON; absent for none. A change to the file is
	// published on the next pass even when the session has no news.
	Access map[string]string `json:"access,omitempty"`
}

// Syncer runs the passes.
type Syncer struct {
	opts Options
	mu   sync.Mutex
	cur  cursor
}

// New loads the cursor file.
func New(opts Options) (*Syncer, error) {
	if opts.Source == nil || opts.Publisher == nil || opts.CursorFile == "" {
		return nil, errors.New("sessionsync: source, publisher and cursor file are required")
	}
	switch opts.Mode {
	case "":
		opts.Mode = sdk.UploadRedacted
	case sdk.UploadFull, sdk.UploadRedacted, sdk.UploadMetadata:
	default:
		return nil, fmt.Errorf("sessionsync: upload mode %q: want full, redacted or metadata", opts.Mode)
	}
	if opts.Interval <= 0 {
		opts.Interval = 2 * time.Second
	}
	if opts.Batch <= 0 || opts.Batch > sdk.MaxSyncEvents {
		opts.Batch = sdk.MaxSyncEvents
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Syncer{opts: opts, cur: cursor{Acked: map[string]int64{}, Published: map[string]time.Time{}, Access: map[string]string{}}}
	b, err := os.ReadFile(opts.CursorFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("sessionsync: read cursor: %w", err)
	default:
		// A damaged cursor only costs a resend: the server acknowledges
		// what it has and stores nothing twice.
		if json.Unmarshal(b, &s.cur) != nil || s.cur.Acked == nil || s.cur.Published == nil {
			s.cur = cursor{Acked: map[string]int64{}, Published: map[string]time.Time{}}
		}
		if s.cur.Access == nil {
			// A cursor from before access was synced: a session whose
			// project has a file is published again, with it.
			s.cur.Access = map[string]string{}
		}
	}
	return s, nil
}

// Run syncs until ctx ends, backing off while the control plane is away.
func (s *Syncer) Run(ctx context.Context) error {
	wait := s.opts.Interval
	for {
		if _, err := s.SyncOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.opts.Logger.Warn("session sync", "err", err, "retry_in", wait)
			wait = min(wait*2, time.Minute)
		} else {
			wait = s.opts.Interval
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Acked is the acknowledged seq of a session (for status and tests).
func (s *Syncer) Acked(sessionID string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.Acked[sessionID]
}

// SyncOnce publishes every session with news: changed fields or events
// past its acknowledged seq. It returns the events the control plane
// stored.
func (s *Syncer) SyncOnce(ctx context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sessions, err := s.opts.Source.Sessions(ctx)
	if err != nil {
		return 0, fmt.Errorf("list sessions: %w", err)
	}
	stored := 0
	for _, ss := range sessions {
		n, err := s.syncSession(ctx, ss)
		stored += n
		if err != nil {
			return stored, fmt.Errorf("session %s: %w", ss.ID, err)
		}
	}
	return stored, nil
}

func (s *Syncer) syncSession(ctx context.Context, ss sdk.SyncSession) (int, error) {
	stored := 0
	detailed := false
	access := accessPrint(ss.Access)
	for {
		acked := s.cur.Acked[ss.ID]
		evs, err := s.opts.Source.Events(ctx, ss.ID, acked, s.opts.Batch)
		if err != nil {
			return stored, fmt.Errorf("read events: %w", err)
		}
		if len(evs) == 0 && s.cur.Published[ss.ID].Equal(ss.UpdatedAt) && s.cur.Access[ss.ID] == access {
			return stored, nil
		}
		if d, ok := s.opts.Source.(Detailer); ok && !detailed {
			if err := d.Detail(ctx, &ss); err != nil {
				return stored, fmt.Errorf("describe: %w", err)
			}
			detailed = true
		}
		if evs == nil {
			evs = []sdk.SyncEvent{} // the request's events are an array, even empty
		}
		for i := range evs {
			switch s.opts.Mode {
			case sdk.UploadMetadata:
				evs[i].Data = nil
			case sdk.UploadRedacted:
				if len(evs[i].Data) > 0 {
					evs[i].Data = redact.JSON(evs[i].Data)
				}
			}
		}
		res, err := s.opts.Publisher.SyncSession(ctx, sdk.SyncRequest{Session: ss, UploadMode: s.opts.Mode, Events: evs})
		var ae *sdk.APIError
		if errors.As(err, &ae) && ae.Body.Code == sdk.CodeSyncGap {
			// The control plane holds less than we thought (restored from
			// a backup, or a cursor from elsewhere): resend from its seq.
			back, ok := ackedOf(ae)
			if !ok || back >= acked {
				return stored, err
			}
			s.cur.Acked[ss.ID] = back
			continue
		}
		if err != nil {
			return stored, err
		}
		stored += res.Stored
		s.cur.Acked[ss.ID] = res.AckedSeq
		if access == "" {
			delete(s.cur.Access, ss.ID)
		} else {
			s.cur.Access[ss.ID] = access
		}
		if len(evs) < s.opts.Batch {
			s.cur.Published[ss.ID] = ss.UpdatedAt
		}
		if err := s.save(); err != nil {
			return stored, err
		}
		if len(evs) < s.opts.Batch {
			return stored, nil
		}
	}
}

// accessPrint is a project access as compared between passes: its JSON,
// "" for none.
func accessPrint(a *sdk.ProjectAccess) string {
	if a == nil {
		return ""
	}
	b, _ := json.Marshal(a)
	return string(b)
}

func ackedOf(ae *sdk.APIError) (int64, bool) {
	var r sdk.SyncResult
	if len(ae.Data) == 0 || json.Unmarshal(ae.Data, &r) != nil {
		return 0, false
	}
	return r.AckedSeq, true
}

func (s *Syncer) save() error {
	b, err := json.Marshal(s.cur)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.opts.CursorFile), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(s.opts.CursorFile, b, 0o600)
}
