package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/hookbridge/policy"
	"reeve.dev/reeve/internal/docschema"
)

// A session's receipt, as the daemon records it: the command line each
// turn's agent was launched with (a launch event, and the latest in the
// manifest) and the project policy in force (its hash when the session
// started, and again whenever it changes while the session lives). The
// control plane's adapter-receipts and governance views are made of
// these.

// policyHashOf is the hash of the policy of project as it is now:
// "sha256:<hex>" of the policy file's bytes, wire.PolicyNone when there is
// none, and policyUnreadable for a file that cannot be read as a document
// (unreadable, not a regular file, too large), whose decisions all deny.
func policyHashOf(project string) string {
	file := filepath.Join(project, policy.Dir, policy.File)
	info, err := os.Stat(file)
	if errors.Is(err, fs.ErrNotExist) {
		return wire.PolicyNone
	}
	if err != nil || !info.Mode().IsRegular() {
		return policyUnreadable
	}
	key := statKey{size: info.Size(), mod: info.ModTime()}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		key.dev, key.ino = uint64(st.Dev), st.Ino
	}
	if h, ok := policyHashes.Load(file); ok && h.(hashedFile).key == key {
		return h.(hashedFile).hash
	}
	b, err := docschema.ReadFile(file) // bounded, regular files only: what the policy reader reads
	if errors.Is(err, fs.ErrNotExist) {
		return wire.PolicyNone
	}
	if err != nil {
		return policyUnreadable
	}
	sum := sha256.Sum256(b)
	h := "sha256:" + hex.EncodeToString(sum[:])
	if int64(len(b)) == key.size {
		policyHashes.Store(file, hashedFile{key: key, hash: h})
	}
	return h
}

// policyUnreadable stands for a policy file that exists but cannot be read.
const policyUnreadable = "unreadable"

// policyHashes keeps the hash of each policy file as of its identity, size
// and modification time, so that a tool use's decision does not read and
// hash an unchanged file again. Any rewrite of the file (an editor's
// rename, an append, a same-size edit) changes one of them.
var policyHashes sync.Map // file → hashedFile

type statKey struct {
	dev, ino uint64
	size     int64
	mod      time.Time
}

type hashedFile struct {
	key  statKey
	hash string
}

// startPolicy is the policy in force as a session starts in project: its
// hash for the manifest and the event that records it.
func startPolicy(project string, file string) (string, wire.PolicyInForce) {
	h := policyHashOf(project)
	return h, wire.PolicyInForce{Change: wire.PolicyStart, Hash: h, File: file, At: time.Now().UTC()}
}

// notePolicy records, once, that the policy of a session's project is not
// the one last recorded: a policy event with both hashes, and the manifest's
// CurrentPolicyHash. It is called as a turn starts and at each decision the
// policy takes part in, the moments the policy is read.
func (m *Manager) notePolicy(ctx context.Context, sessionID string) {
	mf, err := m.manifest(ctx, sessionID)
	if err != nil || mf.PolicyHash == "" || mf.Directory == "" {
		return // a session older than the hash has nothing to compare with
	}
	h := policyHashOf(mf.Directory)
	if h == lastPolicyHash(mf) {
		return
	}
	m.manifestMu.Lock()
	defer m.manifestMu.Unlock()
	if mf, err = m.manifest(ctx, sessionID); err != nil || h == lastPolicyHash(mf) {
		return // another decision recorded it meanwhile
	}
	file := filepath.Join(mf.Directory, policy.Dir, policy.File)
	m.record(sessionID, wire.KindPolicy, wire.PolicyInForce{Change: wire.PolicyChanged, Hash: h, Previous: lastPolicyHash(mf), File: file, At: time.Now().UTC()})
	mf.CurrentPolicyHash = h
	m.logFailure(sessionID, "update manifest", m.saveManifest(ctx, sessionID, mf))
}

func lastPolicyHash(mf wire.Manifest) string {
	if mf.CurrentPolicyHash != "" {
		return mf.CurrentPolicyHash
	}
	return mf.PolicyHash
}

// recordLaunch records how a turn's agent was launched, when its process
// can say (every adapter's can).
func (m *Manager) recordLaunch(ctx context.Context, sessionID string, proc agents.Process, adapter agents.Adapter, dir string) {
	l, ok := proc.(agents.Launcher)
	if !ok {
		return
	}
	launch := l.Launch()
	mf, err := m.manifest(ctx, sessionID)
	if err != nil {
		m.logFailure(sessionID, "record launch", err)
		return
	}
	m.record(sessionID, wire.KindLaunch, wire.Launch{Turn: mf.Turns + 1, Agent: adapter.ID(), AgentVersion: mf.AgentVersion,
		Argv: launch.Argv, Env: launch.Env, Dir: dir})
	m.logFailure(sessionID, "update manifest", m.updateManifest(ctx, sessionID, func(mf *wire.Manifest) { mf.CommandLine = launch.Argv }))
}
