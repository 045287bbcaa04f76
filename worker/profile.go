// Package worker is the team worker: a process that claims workflow-run
// leases from the control plane (by long poll), runs each one as governed
// agent work through the local daemon (the same runtime as `reeve run`),
// heartbeats the lease while it runs, and reports the evidence. It also
// keeps the worker's profile, identity and process lock in the worker
// home, resolves its runner credential, and answers `worker doctor`.
package worker

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"reeve.dev/reeve/internal/atomicfile"
)

// Transports a worker can be reached by. Polling is the default and the
// only one this build runs; see ErrTransport.
const (
	TransportPolling = "polling"
	TransportRelay   = "relay"
	TransportInbound = "inbound"
)

// DefaultProfile is the profile name when none is given.
const DefaultProfile = "default"

// Home is a worker home: <base>/workers/<profile>. It holds the profile,
// the identity and the process lock, every file 0600 in a 0700 directory.
// Base is the reeve home (the daemon home the worker runs agents through).
type Home struct {
	Base    string
	Profile string
}

// Dir is the worker home's directory.
func (h Home) Dir() string {
	name := h.Profile
	if name == "" {
		name = DefaultProfile
	}
	return filepath.Join(h.Base, "workers", name)
}

func (h Home) path(name string) string { return filepath.Join(h.Dir(), name) }

// ProfileFile, IdentityFile, LockFile and PIDFile are the home's files.
func (h Home) ProfileFile() string  { return h.path("profile.json") }
func (h Home) IdentityFile() string { return h.path("identity.json") }
func (h Home) LockFile() string     { return h.path("worker.lock") }
func (h Home) PIDFile() string      { return h.path("worker.pid") }

// Prepare creates the home (0700) and proves it writable.
func (h Home) Prepare() error {
	if h.Base == "" {
		return errors.New("worker home: no base directory")
	}
	if err := validProfileName(h.Profile); err != nil {
		return err
	}
	if err := atomicfile.EnsurePrivateDir(h.Dir()); err != nil {
		return fmt.Errorf("worker home: %w", err)
	}
	return atomicfile.CheckWritable(h.Dir())
}

func validProfileName(name string) error {
	if name == "" {
		return nil
	}
	if name == "." || name == ".." || strings.ContainsAny(name, `/\`) || strings.ContainsRune(name, 0) {
		return fmt.Errorf("profile name %q: use letters, digits, '-', '_' or '.'", name)
	}
	return nil
}

// Profile is what a worker is registered as: which control plane and
// workspace it serves, as which executor, over which transport, with
// which directories and agents. `reeve pair --worker` writes it; flags
// of `worker start` and `worker doctor` override it field by field.
type Profile struct {
	Name        string `json:"name"`
	ServerURL   string `json:"server_url"`
	WorkspaceID string `json:"workspace_id"`
	ExecutorID  string `json:"executor_id,omitempty"`
	RunnerPool  string `json:"runner_pool,omitempty"`
	Transport   string `json:"transport,omitempty"`
	// Workdirs are the directories runs may name (absolute paths). A run
	// names one by its path or by its base name.
	Workdirs []string `json:"workdirs,omitempty"`
	// Agents are the agents this worker offers; empty means every agent
	// the daemon loaded.
	Agents []string `json:"agents,omitempty"`
	Tags   []string `json:"tags,omitempty"`
	// Credential is the runner credential kept with the profile (the
	// "profile" credential source). The file is 0600; it is never printed.
	Credential string `json:"credential,omitempty"`
	// CredentialFile names a file holding the credential instead.
	CredentialFile string    `json:"credential_file,omitempty"`
	InstallID      string    `json:"install_id,omitempty"` // the daemon pairing this profile came with
	PairedAt       time.Time `json:"paired_at,omitzero"`
}

// ReadProfile reads a profile file; fs.ErrNotExist when there is none.
func ReadProfile(path string) (Profile, error) {
	var p Profile
	b, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("profile %s: %w", path, err)
	}
	return p, nil
}

// WriteProfile writes the home's profile (0600, atomically).
func (h Home) WriteProfile(p Profile) error {
	if err := h.Prepare(); err != nil {
		return err
	}
	if p.Name == "" {
		p.Name = h.Profile
	}
	if p.Name == "" {
		p.Name = DefaultProfile
	}
	return writeJSON(h.ProfileFile(), p)
}

// Identity is the worker's stable id, created on first use and kept until
// `worker reset`.
type Identity struct {
	WorkerID  string    `json:"worker_id"`
	Hostname  string    `json:"hostname"`
	CreatedAt time.Time `json:"created_at"`
}

// ReadIdentity reads the identity; fs.ErrNotExist when there is none.
func (h Home) ReadIdentity() (Identity, error) {
	var id Identity
	b, err := os.ReadFile(h.IdentityFile())
	if err != nil {
		return id, err
	}
	return id, json.Unmarshal(b, &id)
}

// EnsureIdentity returns the identity, creating it once.
func (h Home) EnsureIdentity() (Identity, error) {
	id, err := h.ReadIdentity()
	if err == nil && id.WorkerID != "" {
		return id, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return id, fmt.Errorf("worker identity: %w", err)
	}
	if err := h.Prepare(); err != nil {
		return id, err
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return id, err
	}
	host, _ := os.Hostname()
	id = Identity{WorkerID: "wkr_" + hex.EncodeToString(b[:]), Hostname: host, CreatedAt: time.Now().UTC()}
	return id, writeJSON(h.IdentityFile(), id)
}

// Reset removes the profile and identity (and a stale lock's files). It
// refuses while a worker process holds the lock. It returns the files it
// removed.
func (h Home) Reset() ([]string, error) {
	st, err := h.LockState()
	if err != nil {
		return nil, err
	}
	if st.State == LockActive {
		return nil, fmt.Errorf("%w (pid %d): stop it first with `reeve worker stop`", ErrRunning, st.PID)
	}
	var removed []string
	for _, f := range []string{h.ProfileFile(), h.IdentityFile(), h.PIDFile(), h.LockFile()} {
		err := os.Remove(f)
		if err == nil {
			removed = append(removed, f)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return removed, err
		}
	}
	// The directory goes too when nothing else is in it.
	os.Remove(h.Dir())
	return removed, nil
}

// Merge overlays the non-empty fields of o on p.
func (p Profile) Merge(o Profile) Profile {
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&p.Name, o.Name)
	set(&p.ServerURL, o.ServerURL)
	set(&p.WorkspaceID, o.WorkspaceID)
	set(&p.ExecutorID, o.ExecutorID)
	set(&p.RunnerPool, o.RunnerPool)
	set(&p.Transport, o.Transport)
	set(&p.Credential, o.Credential)
	set(&p.CredentialFile, o.CredentialFile)
	if len(o.Workdirs) > 0 {
		p.Workdirs = slices.Clone(o.Workdirs)
	}
	if len(o.Agents) > 0 {
		p.Agents = slices.Clone(o.Agents)
	}
	if len(o.Tags) > 0 {
		p.Tags = slices.Clone(o.Tags)
	}
	return p
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'), atomicfile.PrivateFile)
}
