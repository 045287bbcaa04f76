// Package home lays out the daemon home directory: the pidfiles, the
// persisted launch configuration, the bound endpoint and the local API token.
// Every file here is written atomically with mode 0600 in a 0700 directory.
package home

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"reeve.dev/reeve/internal/atomicfile"
)

// Dir is a daemon home directory.
type Dir string

// Paths of the files the daemon keeps in its home.
func (d Dir) path(name string) string    { return filepath.Join(string(d), name) }
func (d Dir) LaunchFile() string         { return d.path("launch.json") }
func (d Dir) SupervisorPIDFile() string  { return d.path("supervisor.pid") }
func (d Dir) SupervisorLockFile() string { return d.path("supervisor.lock") }
func (d Dir) WorkerPIDFile() string      { return d.path("worker.pid") }
func (d Dir) EndpointFile() string       { return d.path("endpoint.json") }
func (d Dir) TokenFile() string          { return d.path("auth-token") }
func (d Dir) IdentityFile() string       { return d.path("identity.json") }
func (d Dir) StoreFile() string          { return d.path("reeve.db") }
func (d Dir) LogFile() string            { return d.path("daemon.log") }

// SessionSyncFile keeps the control plane's acknowledged event seqs.
func (d Dir) SessionSyncFile() string { return d.path("session-sync.json") }

// Prepare creates the home with mode 0700 (tightening an existing one) and
// proves it is writable, so a bad home fails before any process starts.
func (d Dir) Prepare() error {
	if d == "" {
		return errors.New("daemon home is empty")
	}
	if err := atomicfile.EnsurePrivateDir(string(d)); err != nil {
		return fmt.Errorf("daemon home: %w", err)
	}
	if err := atomicfile.CheckWritable(string(d)); err != nil {
		return fmt.Errorf("daemon home: %w", err)
	}
	return nil
}

// Launch is the configuration `start` used, persisted so that `restart` and
// the supervisor's worker restarts reuse exactly the same settings.
type Launch struct {
	Home           string   `json:"home"`
	ConfigFile     string   `json:"config_file,omitempty"`
	Listen         string   `json:"listen"`
	Profile        string   `json:"profile"`
	AllowedHosts   []string `json:"allowed_hosts"`
	AllowedOrigins []string `json:"allowed_origins"`
	Auth           bool     `json:"auth"`
	DefaultAgent   string   `json:"default_agent,omitempty"`
	HookTimeout    int      `json:"hook_timeout_seconds,omitempty"`
	DefaultMode    string   `json:"default_mode,omitempty"`
	SessionUpload  string   `json:"session_upload,omitempty"`
}

// WriteLaunch persists the launch configuration.
func (d Dir) WriteLaunch(l Launch) error { return writeJSON(d.LaunchFile(), l) }

// ReadLaunch loads the persisted launch configuration; fs.ErrNotExist when
// the daemon was never started from this home.
func (d Dir) ReadLaunch() (Launch, error) {
	var l Launch
	return l, readJSON(d.LaunchFile(), &l)
}

// PIDFile records a process of the daemon.
type PIDFile struct {
	PID       int       `json:"pid"`
	PGID      int       `json:"pgid,omitempty"`
	StartedAt time.Time `json:"started_at"`
}

// WritePID writes a pidfile.
func WritePID(path string, p PIDFile) error { return writeJSON(path, p) }

// ReadPID reads a pidfile; fs.ErrNotExist when absent.
func ReadPID(path string) (PIDFile, error) {
	var p PIDFile
	return p, readJSON(path, &p)
}

// Endpoint is where the worker actually listens, written once it is bound so
// that clients find it even when the configured port was 0.
type Endpoint struct {
	Network string    `json:"network"` // "tcp" or "unix"
	Address string    `json:"address"`
	PID     int       `json:"pid"`
	Since   time.Time `json:"since"`
}

// WriteEndpoint records the bound endpoint.
func (d Dir) WriteEndpoint(e Endpoint) error { return writeJSON(d.EndpointFile(), e) }

// ReadEndpoint reads the bound endpoint; fs.ErrNotExist when none is bound.
func (d Dir) ReadEndpoint() (Endpoint, error) {
	var e Endpoint
	return e, readJSON(d.EndpointFile(), &e)
}

// Identity names this daemon installation.
type Identity struct {
	DaemonID  string    `json:"daemon_id"`
	CreatedAt time.Time `json:"created_at"`
}

// EnsureIdentity returns the daemon identity, creating it on first use.
func (d Dir) EnsureIdentity(newID func() string) (Identity, error) {
	var id Identity
	err := readJSON(d.IdentityFile(), &id)
	if err == nil && id.DaemonID != "" {
		return id, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return id, err
	}
	id = Identity{DaemonID: newID(), CreatedAt: time.Now().UTC()}
	return id, writeJSON(d.IdentityFile(), id)
}

// ReadIdentity reads the identity without creating it (for read-only reports).
func (d Dir) ReadIdentity() (Identity, error) {
	var id Identity
	return id, readJSON(d.IdentityFile(), &id)
}

// EnsureToken returns the local API bearer token, creating a random one on
// first use.
func (d Dir) EnsureToken() (string, error) {
	tok, err := d.ReadToken()
	if err == nil {
		return tok, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return d.RotateToken()
}

// RotateToken replaces the token with a fresh random one.
func (d Dir) RotateToken() (string, error) {
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	tok := "rvl_" + hex.EncodeToString(buf)
	if kc, err := d.inKeychain(); err != nil {
		return "", err
	} else if kc {
		return tok, d.keychain().Set(secretToken, []byte(tok))
	}
	if err := atomicfile.WriteFile(d.TokenFile(), []byte(tok+"\n"), atomicfile.PrivateFile); err != nil {
		return "", err
	}
	return tok, nil
}

// ReadToken reads the token; fs.ErrNotExist when none was created.
func (d Dir) ReadToken() (string, error) {
	if kc, err := d.inKeychain(); err != nil {
		return "", err
	} else if kc {
		return d.secret(secretToken)
	}
	b, err := os.ReadFile(d.TokenFile())
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", d.TokenFile())
	}
	return tok, nil
}

// RemoveRuntimeFiles deletes the files that describe a running daemon; they
// are stale once it has stopped.
func (d Dir) RemoveRuntimeFiles() {
	for _, p := range []string{d.SupervisorPIDFile(), d.WorkerPIDFile(), d.EndpointFile()} {
		os.Remove(p)
	}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	return atomicfile.WriteFile(path, append(b, '\n'), atomicfile.PrivateFile)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}
