package sessionsync

import (
	"context"
	"encoding/json"
	"path/filepath"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/server/sdk"
)

// StoreSource reads the daemon's store.
type StoreSource struct {
	Store *store.Store
	// Branch names a session's worktree branch; nil leaves it empty.
	Branch func(store.Session) string
}

func (s StoreSource) Sessions(ctx context.Context) ([]sdk.SyncSession, error) {
	ss, err := s.Store.ListSessions(ctx, store.SessionFilter{})
	if err != nil {
		return nil, err
	}
	dirs := map[string]string{}
	out := make([]sdk.SyncSession, 0, len(ss))
	for _, x := range ss {
		name, ok := dirs[x.DirectoryID]
		if !ok {
			if d, err := s.Store.Directory(ctx, x.DirectoryID); err == nil {
				name = filepath.Base(d.Path)
			}
			dirs[x.DirectoryID] = name
		}
		var m struct {
			Turns int `json:"turns"`
		}
		_ = json.Unmarshal(x.Manifest, &m)
		o := sdk.SyncSession{ID: x.ID, DirectoryName: name, Agent: x.Agent, Model: x.Model, Status: string(x.Status), Turns: m.Turns,
			CreatedAt: x.CreatedAt, UpdatedAt: x.UpdatedAt}
		if !x.EndedAt.IsZero() {
			t := x.EndedAt
			o.EndedAt = &t
		}
		if s.Branch != nil {
			o.WorktreeBranch = s.Branch(x)
		}
		out = append(out, o)
	}
	return out, nil
}

func (s StoreSource) Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]sdk.SyncEvent, error) {
	evs, err := s.Store.Events(ctx, sessionID, afterSeq, limit)
	if err != nil {
		return nil, err
	}
	out := make([]sdk.SyncEvent, len(evs))
	for i, e := range evs {
		out[i] = sdk.SyncEvent{Seq: e.Seq, Kind: e.Kind, TS: e.TS, Data: e.Data}
	}
	return out, nil
}
