package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/version"
)

// ProfileBlock says which profile a command used and where it lives.
type ProfileBlock struct {
	Name     string `json:"name"`
	Source   string `json:"source"` // file (--registration-profile), home (the worker home's profile.json) or flags (none saved)
	File     string `json:"file,omitempty"`
	Home     string `json:"home"`     // the worker home
	BaseHome string `json:"baseHome"` // the reeve home it lives in
}

// Profile sources.
const (
	ProfileFromFile  = "file"
	ProfileFromHome  = "home"
	ProfileFromFlags = "flags"
)

// Check is one line of the doctor's verdict.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// DoctorReport is `worker doctor --json`: everything a worker would need
// before it claims, checked without claiming. It never holds the
// credential's value.
type DoctorReport struct {
	OK               bool           `json:"ok"`
	Profile          ProfileBlock   `json:"profile"`
	Server           string         `json:"server"`
	WorkspaceID      string         `json:"workspaceId,omitempty"`
	ExecutorID       string         `json:"executorId,omitempty"`
	RunnerPool       string         `json:"runnerPool,omitempty"`
	Identity         *Identity      `json:"identity,omitempty"`
	CredentialSource string         `json:"credentialSource"`
	CredentialFile   string         `json:"credentialFile,omitempty"`
	Executor         *ExecutorBlock `json:"executor,omitempty"`
	Transport        string         `json:"transport"`
	Workdirs         []WorkdirBlock `json:"workdirs"`
	Agents           AgentsBlock    `json:"agents"`
	ProcessLock      string         `json:"processLock"`
	ProcessLockPID   int            `json:"processLockPid,omitempty"`
	SupportPacket    SupportPacket  `json:"supportPacket"`
	Checks           []Check        `json:"checks"`
	Daemon           *wire.Health   `json:"-"`
}

// ExecutorBlock is what the server says the credential is.
type ExecutorBlock struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	WorkspaceID string   `json:"workspaceId"`
	Tags        []string `json:"tags"`
	Agents      []string `json:"agents"`
}

// WorkdirBlock is one workdir and whether runs can use it.
type WorkdirBlock struct {
	Path   string `json:"path"`
	Exists bool   `json:"exists"`
	Git    bool   `json:"git"`
}

// AgentsBlock compares the asked agents with the daemon's.
type AgentsBlock struct {
	Asked   []string `json:"asked"`
	Loaded  []string `json:"loaded"`
	Missing []string `json:"missing"`
}

// SupportPacket is what a support person needs to place a worker: no
// secret, no prompt, nothing from a run.
type SupportPacket struct {
	Version       string    `json:"version"`
	OS            string    `json:"os"`
	Arch          string    `json:"arch"`
	GoVersion     string    `json:"goVersion"`
	Hostname      string    `json:"hostname"`
	WorkerID      string    `json:"workerId,omitempty"`
	DaemonID      string    `json:"daemonId,omitempty"`
	DaemonVersion string    `json:"daemonVersion,omitempty"`
	DaemonRunning bool      `json:"daemonRunning"`
	GeneratedAt   time.Time `json:"generatedAt"`
}

// DoctorInput is what the command resolved before the doctor runs; the
// errors of each step are part of the verdict, not a reason to stop.
type DoctorInput struct {
	Home          Home
	Profile       Profile
	ProfileSource string
	ProfileFile   string
	Credential    Credential
	CredentialErr error
	// Server is a client with the credential (nil without one).
	Server Server
	// Daemon is the local daemon (nil with DaemonErr when unreachable).
	Daemon    Daemon
	DaemonErr error
}

// Doctor checks a worker's setup: server and credential (one read of the
// executor it is), workspace, workdirs, transport, agents, process lock.
func Doctor(ctx context.Context, in DoctorInput) DoctorReport {
	p := in.Profile
	host, _ := os.Hostname()
	r := DoctorReport{
		Profile: ProfileBlock{Name: firstNonEmpty(p.Name, in.Home.Profile, DefaultProfile), Source: in.ProfileSource, File: in.ProfileFile,
			Home: in.Home.Dir(), BaseHome: in.Home.Base},
		Server: p.ServerURL, WorkspaceID: p.WorkspaceID, ExecutorID: p.ExecutorID, RunnerPool: p.RunnerPool,
		CredentialSource: in.Credential.Source, CredentialFile: in.Credential.Path,
		Transport: firstNonEmpty(p.Transport, TransportPolling), Workdirs: []WorkdirBlock{},
		Agents:        AgentsBlock{Asked: nonNil(p.Agents), Loaded: []string{}, Missing: []string{}},
		SupportPacket: SupportPacket{Version: version.Version, OS: runtime.GOOS, Arch: runtime.GOARCH, GoVersion: runtime.Version(), Hostname: host, GeneratedAt: time.Now().UTC()},
	}
	if r.CredentialSource == "" {
		r.CredentialSource = CredentialNone
	}
	add := func(name string, ok bool, detail string) {
		r.Checks = append(r.Checks, Check{Name: name, OK: ok, Detail: detail})
	}

	if id, err := in.Home.ReadIdentity(); err == nil {
		r.Identity = &id
		r.SupportPacket.WorkerID = id.WorkerID
	}
	switch {
	case p.ServerURL == "":
		add("server", false, "no server: pass --server URL or pair with `reeve pair --worker`")
	default:
		add("server", true, p.ServerURL)
	}
	switch {
	case in.CredentialErr != nil:
		add("credential", false, in.CredentialErr.Error())
	case in.Server == nil:
		add("credential", false, "not checked: no server")
	default:
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		ex, err := in.Server.WorkerIdentity(cctx)
		cancel()
		if err != nil {
			add("credential", false, credentialErr(err).Error())
			break
		}
		r.Executor = &ExecutorBlock{ID: ex.ID, Name: ex.Name, WorkspaceID: ex.WorkspaceID, Tags: nonNil(ex.Tags), Agents: nonNil(ex.Agents)}
		add("credential", true, "accepted: executor "+ex.ID+" ("+ex.Name+")")
		switch {
		case p.WorkspaceID == "":
			r.WorkspaceID = ex.WorkspaceID
			add("workspace", true, ex.WorkspaceID+" (from the credential)")
		case p.WorkspaceID == ex.WorkspaceID:
			add("workspace", true, ex.WorkspaceID)
		default:
			add("workspace", false, "the credential belongs to workspace "+ex.WorkspaceID+", not "+p.WorkspaceID)
		}
		if p.ExecutorID != "" && p.ExecutorID != ex.ID {
			add("executor", false, "the credential is executor "+ex.ID+"'s, not "+p.ExecutorID+"'s")
		}
		if len(ex.Agents) > 0 {
			var outside []string
			for _, a := range p.Agents {
				if !slices.Contains(ex.Agents, a) {
					outside = append(outside, a)
				}
			}
			if len(outside) > 0 {
				add("executor-agents", false, "the executor does not allow "+join(outside))
			}
		}
	}

	if len(p.Workdirs) == 0 {
		add("workdirs", false, "no --workdir: runs need a directory")
	}
	for _, w := range p.Workdirs {
		b := WorkdirBlock{Path: w}
		if fi, err := os.Stat(w); err == nil && fi.IsDir() {
			b.Exists = true
			if _, err := os.Stat(filepath.Join(w, ".git")); err == nil {
				b.Git = true
			}
		}
		r.Workdirs = append(r.Workdirs, b)
		switch {
		case !b.Exists:
			add("workdir", false, w+" does not exist")
		case !b.Git:
			add("workdir", true, w+" (not a git repository: runs get no worktree of their own)")
		default:
			add("workdir", true, w)
		}
	}

	if err := CheckRunnerPool(p.RunnerPool); err != nil {
		add("runner-pool", false, err.Error())
	} else if p.RunnerPool != "" {
		add("runner-pool", true, p.RunnerPool+" (claims only runs naming this pool)")
	} else {
		add("runner-pool", true, "none (claims only runs naming no pool)")
	}

	if err := CheckTransport(p.Transport); err != nil {
		add("transport", false, err.Error())
	} else {
		add("transport", true, r.Transport)
	}

	if in.Daemon == nil {
		msg := "the daemon is not running: start it with `reeve start`"
		if in.DaemonErr != nil {
			msg = in.DaemonErr.Error()
		}
		add("daemon", false, msg)
	} else {
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		h, err := in.Daemon.Health(hctx)
		cancel()
		if err != nil {
			add("daemon", false, err.Error())
		} else {
			r.Daemon = &h
			r.SupportPacket.DaemonRunning, r.SupportPacket.DaemonID, r.SupportPacket.DaemonVersion = true, h.DaemonID, h.Version
			add("daemon", true, "running (pid "+itoa(h.WorkerPID)+")")
			r.Agents.Loaded = nonNil(h.Agents)
			if _, err := CheckAgents(h, p.Agents); err != nil {
				for _, a := range p.Agents {
					if !slices.Contains(h.Agents, a) {
						r.Agents.Missing = append(r.Agents.Missing, a)
					}
				}
				add("agents", false, err.Error())
			} else {
				add("agents", true, join(firstNonEmptySlice(p.Agents, h.Agents)))
			}
		}
	}

	lock, err := in.Home.LockState()
	r.ProcessLock, r.ProcessLockPID = lock.State, lock.PID
	switch {
	case err != nil:
		add("process-lock", false, err.Error())
	case lock.State == LockStale:
		add("process-lock", false, "stale: a worker (pid "+itoa(lock.PID)+") died without cleaning up; `reeve worker stop` clears it")
	default:
		add("process-lock", true, lock.State)
	}
	r.OK = true
	for _, c := range r.Checks {
		r.OK = r.OK && c.OK
	}
	return r
}

// ErrDoctor means a doctor check failed.
var ErrDoctor = errors.New("worker doctor found problems")

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func firstNonEmptySlice(a, b []string) []string {
	if len(a) > 0 {
		return a
	}
	return b
}

func join(s []string) string { return strings.Join(s, ", ") }

func itoa(n int) string { return strconv.Itoa(n) }
