// Package runtime is the daemon worker process: it opens the store, binds the
// local API and serves until its supervisor goes away or it is told to stop.
package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/oklog/ulid/v2"

	"reeve.dev/reeve/agents/registry"
	"reeve.dev/reeve/contextvault"
	"reeve.dev/reeve/daemon/config"
	"reeve.dev/reeve/daemon/control"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/relaylink"
	"reeve.dev/reeve/daemon/sessionsync"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/daemon/worktree"
	"reeve.dev/reeve/hookbridge/hookprog"
	"reeve.dev/reeve/internal/memtrim"
	"reeve.dev/reeve/internal/version"
	"reeve.dev/reeve/server/sdk"
)

// AddressInUseError is a listen address another process holds. The
// command that started the daemon says which of its own flags or
// settings changes the address (wire.ReadinessAddressInUse).
type AddressInUseError struct{ Address, Port string }

func (e *AddressInUseError) Error() string {
	return fmt.Sprintf("listen %s: port %s is already in use by another process", e.Address, e.Port)
}

// FatalError is a start-up failure that retrying will not cure.
type FatalError struct{ Err error }

func (e *FatalError) Error() string { return e.Err.Error() }
func (e *FatalError) Unwrap() error { return e.Err }

// Options configure a worker.
type Options struct {
	Home home.Dir
	// Stdin is the pipe from the supervisor: EOF means the supervisor died
	// and the worker must not outlive it.
	Stdin io.Reader
	// Status receives one wire.Readiness line once the worker listens or
	// has failed to start. May be nil.
	Status io.Writer
	// Log receives the worker's diagnostics.
	Log io.Writer
	// SupervisorPID is reported by /health.
	SupervisorPID int
}

// Run serves until ctx ends or the supervisor's pipe closes.
func Run(ctx context.Context, opts Options) error {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	err := run(ctx, opts)
	if err != nil {
		var fe *FatalError
		var inUse *AddressInUseError
		r := wire.Readiness{Error: err.Error(), Fatal: errors.As(err, &fe)}
		if errors.As(err, &inUse) {
			r.Reason = wire.ReadinessAddressInUse
		}
		report(opts.Status, r)
	}
	return err
}

func run(ctx context.Context, opts Options) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	launch, err := opts.Home.ReadLaunch()
	if err != nil {
		return &FatalError{fmt.Errorf("read launch configuration: %w", err)}
	}
	listen, err := config.ParseListen(launch.Listen)
	if err != nil {
		return &FatalError{err}
	}
	id, err := opts.Home.EnsureIdentity(func() string { return ulid.Make().String() })
	if err != nil {
		return &FatalError{fmt.Errorf("daemon identity: %w", err)}
	}
	var token string
	if launch.Auth {
		if token, err = opts.Home.EnsureToken(); err != nil {
			return &FatalError{fmt.Errorf("auth token: %w", err)}
		}
	}
	st, err := store.Open(ctx, store.Options{Path: opts.Home.StoreFile()})
	if err != nil {
		return &FatalError{fmt.Errorf("open store: %w", err)}
	}
	defer st.Close()

	// Hooks run a copy in the home, not this executable, which a versioned
	// install or `go run` may move or delete while the daemon runs.
	hookProgram, err := hookprog.Install(string(opts.Home))
	if err != nil {
		return &FatalError{fmt.Errorf("install the hook program that governs agents: %w", err)}
	}
	agentRegistry := registry.New(registry.Options{})
	mgr, err := NewManager(ctx, ManagerOptions{
		Store: st, Agents: agentRegistry, Home: opts.Home,
		DefaultAgent: launch.DefaultAgent, Env: agentEnv(), Log: opts.Log,
		HookProgram: hookProgram, HookTimeout: time.Duration(launch.HookTimeout) * time.Second, DefaultMode: launch.DefaultMode,
		Policy: projectPolicy, Context: contextvault.SessionContext(string(opts.Home), opts.Log),
	})
	if err != nil {
		return &FatalError{err}
	}
	// Runs before st.Close (deferred earlier): ending turns are recorded.
	defer mgr.Close()

	ln, err := bind(listen)
	if err != nil {
		return &FatalError{err}
	}
	defer ln.Close()

	// The relay link serves remote channels with the same API as /ws.
	var api *control.API
	link, remoteCtl := startLink(opts, launch.Profile, id.DaemonID, func(ctx context.Context, fc control.FrameConn) { api.ServeControl(ctx, fc) })
	started := time.Now()
	boundPort := ""
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok {
		boundPort = fmt.Sprint(tcp.Port)
	}
	api = control.New(control.Options{
		Directories:    st,
		AllowedHosts:   launch.AllowedHosts,
		AllowedOrigins: launch.AllowedOrigins,
		BoundPort:      boundPort,
		Token:          token,
		Sessions:       mgr,
		Permissions:    mgr,
		Worktrees:      mgr,
		Log:            st,
		Discover:       mgr.Discover,
		DaemonID:       id.DaemonID,
		Remote:         remoteCtl,
		Health: func(ctx context.Context) wire.Health {
			n, _ := st.CountActiveSessions(ctx)
			return wire.Health{
				Status: "ok", Version: version.Version, DaemonID: id.DaemonID, Profile: launch.Profile,
				WorkerPID: os.Getpid(), SupervisorPID: opts.SupervisorPID,
				StartedAt: started.UTC(), UptimeSeconds: time.Since(started).Seconds(),
				Sessions: n, Auth: launch.Auth, Relay: relaylink.Health(link, launch.Profile),
				Agents: agentRegistry.IDs(),
			}
		},
	})
	// Connections outlive ctx by a moment: when the worker stops, the
	// control protocol first tells each client so (api.Stop).
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return serveCtx }}

	ep := home.Endpoint{Network: listen.Network, Address: ln.Addr().String(), PID: os.Getpid(), Since: started.UTC()}
	if err := opts.Home.WriteEndpoint(ep); err != nil {
		return &FatalError{err}
	}
	defer removeOwnEndpoint(opts.Home)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if opts.Stdin != nil {
		go func() {
			io.Copy(io.Discard, opts.Stdin)
			fmt.Fprintln(opts.Log, "worker: supervisor pipe closed; shutting down")
			cancel()
		}()
	}
	startSessionSync(ctx, opts, launch, st)
	if link != nil {
		go link.Run(ctx)
	} else if launch.Profile == "relay" {
		fmt.Fprintln(opts.Log, "worker: profile relay: not paired, so no relay link; serving the local API only")
	}
	fmt.Fprintf(opts.Log, "worker: pid %d listening on %s %s\n", os.Getpid(), ep.Network, ep.Address)
	report(opts.Status, wire.Readiness{Ready: true, Network: ep.Network, Address: ep.Address, PID: ep.PID})
	// Start-up garbage (package initialisation, migrations) would otherwise
	// stay resident until the scavenger gets to it, and so would the code
	// pages only start-up ran; an idle daemon should be small from the
	// first minute.
	memtrim.AfterStartup()

	select {
	case err := <-served:
		return fmt.Errorf("serve local API: %w", err)
	case <-ctx.Done():
	}
	api.Stop("the daemon is stopping")
	shutdownCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	stopServing()
	fmt.Fprintln(opts.Log, "worker: stopped")
	return nil
}

// startLink builds the relay link for profile relay when the daemon is
// paired; remote is nil without one, so the unlock routes stay out.
func startLink(opts Options, profile, daemonID string, serve func(context.Context, control.FrameConn)) (*relaylink.Link, control.Remote) {
	if profile != "relay" {
		return nil, nil
	}
	link, err := relaylink.FromHome(opts.Home, relaylink.Options{DaemonID: daemonID, Log: opts.Log, Serve: serve})
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(opts.Log, "worker: profile relay: %v\n", err)
		}
		return nil, nil
	}
	return link, link
}

// bind opens the listener, turning the common failures into messages that
// name the address and what to do.
func bind(l config.Listen) (net.Listener, error) {
	if l.Network == "unix" {
		return bindUnix(l.Address)
	}
	ln, err := net.Listen("tcp", l.Address)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			_, port, _ := net.SplitHostPort(l.Address)
			return nil, &AddressInUseError{Address: l.Address, Port: port}
		}
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil, fmt.Errorf("listen %s: that address is not on this machine", l.Address)
		}
		return nil, fmt.Errorf("listen %s: %w", l.Address, err)
	}
	return ln, nil
}

// bindUnix listens on a unix socket, replacing a stale socket file left by a
// dead daemon but never one that still answers.
func bindUnix(path string) (net.Listener, error) {
	if _, err := os.Lstat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen unix %s: a process is already listening on that socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen unix %s: remove stale socket: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen unix %s: %w", path, err)
	}
	// Only the owner may talk to the daemon through its socket.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict socket %s: %w", path, err)
	}
	return ln, nil
}

func removeOwnEndpoint(dir home.Dir) {
	if ep, err := dir.ReadEndpoint(); err == nil && ep.PID == os.Getpid() {
		os.Remove(dir.EndpointFile())
	}
}

func report(w io.Writer, r wire.Readiness) {
	if w == nil {
		return
	}
	b, _ := json.Marshal(r)
	w.Write(append(b, '\n'))
}

// IsFatal reports whether err is a FatalError, for exit-code mapping.
func IsFatal(err error) bool {
	var fe *FatalError
	return errors.As(err, &fe)
}

// agentEnv is the environment agents start with: the worker's, with pagers
// off, because nobody is at a session's terminal to page through output.
func agentEnv() []string {
	return append(os.Environ(), "PAGER=cat", "GIT_PAGER=cat")
}

// startSessionSync publishes the sessions of a paired daemon to its
// control plane (session_upload: redacted by default; off disables it).
func startSessionSync(ctx context.Context, opts Options, launch home.Launch, st *store.Store) {
	mode := launch.SessionUpload
	if mode == "" {
		mode = sdk.UploadRedacted
	}
	if mode == "off" {
		return
	}
	rc, err := opts.Home.ReadRelayCredentials()
	if err != nil || rc.IssueToken == "" || rc.ServerURL == "" {
		return // not paired
	}
	y, err := sessionsync.New(sessionsync.Options{
		Source: &sessionsync.StoreSource{Store: st, Branch: func(s store.Session) string {
			if s.Worktree == "" {
				return ""
			}
			return worktree.BranchName(s.ID)
		}, StateDir: func(id string) string { return filepath.Join(string(opts.Home), "sessions", id) }},
		Publisher:  &sdk.Client{BaseURL: rc.ServerURL, Token: rc.IssueToken, HTTP: &http.Client{Timeout: 60 * time.Second}},
		CursorFile: opts.Home.SessionSyncFile(),
		Mode:       mode,
		Logger:     slog.New(slog.NewTextHandler(opts.Log, nil)),
	})
	if err != nil {
		fmt.Fprintf(opts.Log, "worker: session sync: %v\n", err)
		return
	}
	fmt.Fprintf(opts.Log, "worker: publishing sessions to %s (%s)\n", rc.ServerURL, mode)
	go y.Run(ctx)
}
