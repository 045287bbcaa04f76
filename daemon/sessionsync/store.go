package sessionsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/hookbridge/policy"
	"reeve.dev/reeve/server/sdk"
)

// StoreSource reads the daemon's store. Use it by pointer: it keeps the
// digests of evidence files it has hashed.
type StoreSource struct {
	Store *store.Store
	// Branch names a session's worktree branch; nil leaves it empty.
	Branch func(store.Session) string
	// StateDir is a session's private directory (the agent's settings and
	// raw output, one file per turn), whose files are the session's
	// evidence; nil sends none.
	StateDir func(sessionID string) string

	mu      sync.Mutex
	digests map[string]fileDigest  // path → digest of a file as last seen
	access  map[string]accessCache // checkout → its access.yaml as last read
}

// fileDigest is a file's SHA-256 as of its size and modification time, so
// a file that has not changed is not read again.
type fileDigest struct {
	size int64
	mod  time.Time
	sum  string
}

// maxEvidenceFiles bounds the files listed per session (the schema's
// limit): the newest are kept.
const maxEvidenceFiles = 50

const maxInt = int(^uint(0) >> 1)

func (s *StoreSource) Sessions(ctx context.Context) ([]sdk.SyncSession, error) {
	ss, err := s.Store.ListSessions(ctx, store.SessionFilter{})
	if err != nil {
		return nil, err
	}
	type dirInfo struct {
		name   string
		access *sdk.ProjectAccess
	}
	dirs := map[string]dirInfo{}
	out := make([]sdk.SyncSession, 0, len(ss))
	for _, x := range ss {
		di, ok := dirs[x.DirectoryID]
		if !ok {
			if d, err := s.Store.Directory(ctx, x.DirectoryID); err == nil {
				di = dirInfo{name: filepath.Base(d.Path), access: s.projectAccess(d.Path)}
			}
			dirs[x.DirectoryID] = di
		}
		name := di.name
		var m wire.Manifest
		_ = json.Unmarshal(x.Manifest, &m)
		o := sdk.SyncSession{ID: x.ID, DirectoryName: name, Agent: x.Agent, Model: x.Model, Status: string(x.Status), Turns: m.Turns,
			CreatedAt: x.CreatedAt, UpdatedAt: x.UpdatedAt, Mode: m.PermissionMode, Guarded: m.Guarded, AgentVersion: m.AgentVersion,
			PolicyHash: m.PolicyHash, CurrentPolicyHash: m.CurrentPolicyHash, CommandLine: m.CommandLine}
		if !x.EndedAt.IsZero() {
			t := x.EndedAt
			o.EndedAt = &t
		}
		if s.Branch != nil {
			o.WorktreeBranch = s.Branch(x)
		}
		o.Access = di.access
		out = append(out, o)
	}
	return out, nil
}

// projectAccess is the access.yaml of the checkout at dir, as
// policy.LoadProjectAccess reads it (nil: none). Every pass asks, and most
// find the file as it was: its bytes are read (a small file) and compared
// with those last parsed, so validation runs again only when the file
// changed — and any change, however quick, is seen.
func (s *StoreSource) projectAccess(dir string) *sdk.ProjectAccess {
	data, err := os.ReadFile(filepath.Join(dir, ".reeve", "access.yaml"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return policy.LoadProjectAccess(dir).Bounded() // it refuses, saying why
	}
	key := accessKey{exists: err == nil, content: string(data)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.access[dir]; ok && c.key == key {
		return c.access
	}
	a := policy.LoadProjectAccess(dir).Bounded()
	if s.access == nil {
		s.access = map[string]accessCache{}
	}
	s.access[dir] = accessCache{key: key, access: a}
	return a
}

// accessKey is an access.yaml as read: whether it exists and its bytes.
type accessKey struct {
	exists  bool
	content string
}

type accessCache struct {
	key    accessKey
	access *sdk.ProjectAccess
}

// Detail adds what costs file reads to a session about to be published:
// the evidence files' digests (the policy file, the
// agent's executable and the session's state directory). Unchanged files
// are not hashed again.
func (s *StoreSource) Detail(ctx context.Context, o *sdk.SyncSession) error {
	x, err := s.Store.Session(ctx, o.ID)
	if err != nil {
		return err
	}
	var m wire.Manifest
	_ = json.Unmarshal(x.Manifest, &m)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.digests == nil {
		s.digests = map[string]fileDigest{}
	}
	var files []sdk.EvidenceFile
	add := func(role, path string) {
		if f, ok := s.digest(path); ok {
			files = append(files, sdk.EvidenceFile{Role: role, Path: path, SHA256: f.sum, Size: f.size})
		}
	}
	if m.PolicyFile != "" {
		// The file as it is now; the hash of the policy in force at the
		// start (and at each change) is the manifest's.
		add("policy", m.PolicyFile)
	}
	if m.AgentPath != "" {
		add("agent", m.AgentPath)
	}
	if s.StateDir != nil {
		dir := s.StateDir(o.ID)
		ents, _ := os.ReadDir(dir)
		type named struct {
			name string
			mod  time.Time
		}
		var list []named
		for _, e := range ents {
			if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
				list = append(list, named{e.Name(), info.ModTime()})
			}
		}
		// Newest first, so the cap drops the oldest turns' output.
		sort.Slice(list, func(i, j int) bool {
			if !list[i].mod.Equal(list[j].mod) {
				return list[i].mod.After(list[j].mod)
			}
			return list[i].name < list[j].name
		})
		for _, e := range list {
			if len(files) >= maxEvidenceFiles {
				break
			}
			add("state", filepath.Join(dir, e.name))
		}
	}
	o.EvidenceFiles = files
	return nil
}

// digest hashes path unless its size and modification time are those of
// the last hash.
func (s *StoreSource) digest(path string) (fileDigest, bool) {
	info, err := os.Stat(path)
	if err != nil || !info.Mode().IsRegular() {
		return fileDigest{}, false
	}
	if d, ok := s.digests[path]; ok && d.size == info.Size() && d.mod.Equal(info.ModTime()) {
		return d, true
	}
	f, err := os.Open(path)
	if err != nil {
		return fileDigest{}, false
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fileDigest{}, false
	}
	// The size read, not the size stat saw: a growing file is described
	// by what was hashed, and hashed again when it changes.
	d := fileDigest{size: n, mod: info.ModTime(), sum: hex.EncodeToString(h.Sum(nil))}
	if n == info.Size() {
		s.digests[path] = d
	}
	return d, true
}

// Events returns the session's events after afterSeq up to its durable
// mark: an event a crash of the machine could take back, and its seq then
// go to another event, must never reach the control plane, which would
// hold it for good while the log does not. The store shows no reader an
// event before it is on disk (store.DurableSeq); the mark keeps this
// copy's promise explicit whatever the store's commit does.
func (s *StoreSource) Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]sdk.SyncEvent, error) {
	mark, err := s.Store.DurableSeq(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if mark <= afterSeq {
		return []sdk.SyncEvent{}, nil
	}
	if n := int(min(mark-afterSeq, int64(maxInt))); limit <= 0 || n < limit {
		limit = n
	}
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
