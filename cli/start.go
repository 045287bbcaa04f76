package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/config"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/supervisor"
	"reeve.dev/reeve/daemon/wire"
)

type startOptions struct {
	// daemonCmd is bound from the resolved launch's home.
	daemonCmd
	foreground bool
	// launch is the configuration, resolved from the flags, the
	// environment, the config file and the persisted launch before the
	// command runs; changes are what it changes in the persisted one.
	launch  home.Launch
	changes []launchChange
}

func newStartCmd(env *Env) *cobra.Command {
	opts := &startOptions{}
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start the daemon (supervisor and worker), in the background by default",
		Long: `Start the daemon (supervisor and worker), in the background by default.

The launch settings are saved in the home (launch.json) and used by every
later start, restart, run, pair and the service unit. A flag, a REEVE_*
variable or the config file changes a saved setting, and start says so; a
setting left unset keeps its saved value.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resolved, err := resolveLaunch(cmd.Flags(), env.Getenv)
			if err != nil {
				return configExit(err)
			}
			opts.launch, opts.changes = resolved.Launch, resolved.Changes
			dir := home.Dir(opts.launch.Home)
			opts.daemonCmd = daemonCmd{env: env, home: dir, homeFlag: givenHome(cmd, dir)}
			if err := applyKeyStore(cmd, env, dir); err != nil {
				return err
			}
			return runStart(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.foreground, "foreground", false, "run in the foreground instead of detaching")
	f.String("listen", config.DefaultListen, "address of the local API: host:port, a bare port, or a unix socket path")
	f.String("profile", config.DefaultProfile, "network profile: local, lan or relay")
	f.StringSlice("allowed-hosts", nil, "extra Host header values the local API accepts (comma-separated)")
	f.StringSlice("allowed-origins", nil, "Origin header values the local API accepts (comma-separated)")
	f.Bool("auth", false, "require the bearer token from the daemon home on every route but /health")
	f.String("config", "", "config file (default <home>/config.yaml)")
	f.String("default-agent", "", "agent of a run that names none (default: the first installed of claude, codex, gemini, else shell)")
	f.String("default-mode", config.DefaultMode, "operator mode of a session launched without one: detect or bypass")
	f.Int("hook-timeout-seconds", config.DefaultHookTimeoutSeconds, "how long a permission request waits for a human before it is denied")
	addKeyStoreFlag(cmd)
	return cmd
}

func runStart(ctx context.Context, opts *startOptions) error {
	if err := checkLaunch(opts.launch); err != nil {
		return err
	}
	if locked, _ := opts.home.Locked(); !locked {
		reportLaunchChanges(opts.env.Err, opts.home, opts.changes)
	}
	return opts.startDaemon(ctx, opts.launch, opts.foreground, "pass --listen with another port (--listen 127.0.0.1:0 picks a free one)")
}

// errAlreadyRunning is a start refused because a daemon already runs from
// the home; a command that only needs some daemon goes on with that one.
var errAlreadyRunning = errors.New("a daemon is already running")

// alreadyRunning is errAlreadyRunning with the message that says where.
type alreadyRunning struct{ msg string }

func (e alreadyRunning) Error() string      { return e.msg }
func (alreadyRunning) Is(target error) bool { return target == errAlreadyRunning }

// checkLaunch refuses a launch configuration that must not run, before any
// process is started.
func checkLaunch(l home.Launch) error {
	listen, err := config.ParseListen(l.Listen)
	if err != nil {
		return withExit(ExitUsage, err)
	}
	switch l.Profile {
	case "local", "relay":
		if !listen.IsLoopback() {
			return exitf(ExitUsage, "profile %s binds loopback only, but --listen %s is not a loopback address (use --profile lan --auth to serve the network)", l.Profile, l.Listen)
		}
	case "lan":
		if !listen.IsLoopback() && !l.Auth {
			return exitf(ExitUsage, "profile lan refuses to bind the non-loopback address %s without --auth", l.Listen)
		}
	default:
		return exitf(ExitUsage, "unknown profile %q (use local, lan or relay)", l.Profile)
	}
	return nil
}

// startDaemon validates the launch, persists it and starts the supervisor,
// then waits until the worker reports it is listening or why it is not.
// inUse says, in the terms of the calling command, how to choose another
// address when the one launched is taken. The launch's home is d's.
func (d *daemonCmd) startDaemon(ctx context.Context, l home.Launch, foreground bool, inUse string) error {
	env := d.env
	if err := checkLaunch(l); err != nil {
		return err
	}
	dir := home.Dir(l.Home)
	if err := dir.Prepare(); err != nil {
		return withExit(ExitFailure, err)
	}
	if locked, err := dir.Locked(); err != nil {
		return withExit(ExitFailure, err)
	} else if locked {
		pid := ""
		if p, err := home.ReadPID(dir.SupervisorPIDFile()); err == nil {
			pid = fmt.Sprintf(" (supervisor pid %d)", p.PID)
		}
		return &ExitError{Code: ExitConflict, Err: alreadyRunning{fmt.Sprintf("a daemon is already running from %s%s; use `%s` to apply new settings", dir, pid, d.reeve("restart"))}}
	}
	// The launch is persisted by the supervisor once it holds the home's
	// lock: written here, a start that loses the race would overwrite the
	// settings of the one that wins.
	exe, err := env.Executable()
	if err != nil {
		return withExit(ExitFailure, fmt.Errorf("locate the reeve executable: %w", err))
	}
	if foreground {
		return d.runSupervisorForeground(ctx, dir, l, exe, inUse)
	}
	return d.spawnSupervisor(ctx, dir, l, exe, inUse)
}

// envLaunch carries the launch from `start` to its supervisor.
const envLaunch = "REEVE_LAUNCH"

// runSupervisorForeground runs the supervisor in this process, logging to
// stderr, until interrupted.
func (d *daemonCmd) runSupervisorForeground(ctx context.Context, dir home.Dir, l home.Launch, exe, inUse string) error {
	env := d.env
	r, w := io.Pipe()
	go d.reportReadiness(dir, l, bufio.NewReader(r), nil, inUse)
	err := supervisor.Run(ctx, supervisor.Options{
		Home: dir, Executable: exe, WorkerArgs: workerArgs(dir), Log: env.Err, Status: w, Launch: &l,
	})
	w.Close()
	if err != nil {
		return startFailure(err.Error())
	}
	return nil
}

// spawnSupervisor starts a detached supervisor process and reads its first
// readiness report from a pipe passed as file descriptor 3.
func (d *daemonCmd) spawnSupervisor(ctx context.Context, dir home.Dir, l home.Launch, exe, inUse string) error {
	launch, err := json.Marshal(l)
	if err != nil {
		return withExit(ExitFailure, err)
	}
	logf, err := os.OpenFile(dir.LogFile(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return withExit(ExitFailure, fmt.Errorf("open daemon log: %w", err))
	}
	defer logf.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return withExit(ExitFailure, err)
	}
	defer statusR.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return withExit(ExitFailure, err)
	}
	defer devnull.Close()
	cmd := exec.Command(exe, "daemon-supervisor", "--home", string(dir))
	cmd.Stdin = devnull
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{statusW}
	cmd.Env = append(os.Environ(), "REEVE_STATUS_FD=3", envLaunch+"="+string(launch))
	// A new session detaches the daemon from this terminal and makes the
	// supervisor the leader of the process group that `stop --force` kills.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		statusW.Close()
		return withExit(ExitFailure, fmt.Errorf("start supervisor: %w", err))
	}
	statusW.Close()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()

	err = d.reportReadiness(dir, l, bufio.NewReader(statusR), exited, inUse)
	if exitCode(err) == ExitTimeout {
		// Still starting, not failed: the first open after an upgrade
		// migrates the event log, which on a long log outlasts the wait.
		// Killing it would undo the migration and make every later
		// start do it again from scratch; it carries on, holding the
		// home, and reports nowhere (its writes to the pipe fail).
		cmd.Process.Release()
		return err
	}
	if err != nil {
		// Make sure nothing is left half-started.
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
		}
		return err
	}
	cmd.Process.Release()
	return nil
}

// readyWithin bounds how long a start waits for the daemon's readiness
// before it leaves it starting (Env.readyWithin replaces it in tests).
const readyWithin = 60 * time.Second

// reportReadiness waits for the readiness line and tells the user the
// outcome, with progress on a slow start.
func (d *daemonCmd) reportReadiness(dir home.Dir, l home.Launch, r *bufio.Reader, exited <-chan struct{}, inUse string) error {
	env := d.env
	linec := make(chan []byte, 1)
	go func() {
		line, _ := r.ReadBytes('\n')
		linec <- line
	}()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	within := readyWithin
	if env.readyWithin > 0 {
		within = env.readyWithin
	}
	deadline := time.After(within)
	for {
		select {
		case line := <-linec:
			var rd wire.Readiness
			if len(line) == 0 || json.Unmarshal(line, &rd) != nil {
				return startFailure("the supervisor exited without reporting; see " + dir.LogFile() + lastLogLines(dir))
			}
			if !rd.Ready && rd.Reason == wire.ReadinessAddressInUse {
				return exitf(ExitConflict, "daemon did not start: %s; %s", rd.Error, inUse)
			}
			if !rd.Ready {
				return startFailure(rd.Error)
			}
			fmt.Fprintf(env.Err, "reeve: daemon started: worker pid %d listening on %s\n", rd.PID, describeEndpoint(rd.Network, rd.Address))
			if l.Auth {
				where := dir.TokenFile()
				if k, _ := dir.KeyStoreKind(); k == "keychain" {
					where = "the OS keychain"
				}
				fmt.Fprintf(env.Err, "reeve: token auth is on; the bearer token is in %s\n", where)
			}
			return nil
		case <-tick.C:
			fmt.Fprintln(env.Err, "reeve: waiting for the daemon to start...")
		case <-deadline:
			return exitf(ExitTimeout, "the daemon did not report ready within %s and is left starting (a first start after an upgrade migrates a long event log, which takes a while); `%s` says when it runs, `%s` ends it; see %s",
				within, d.reeve("status"), d.reeve("stop --force"), dir.LogFile())
		case <-exited:
			exited = nil // the pipe's EOF delivers the outcome
		}
	}
}

func startFailure(msg string) error {
	if strings.Contains(msg, "already running") {
		return &ExitError{Code: ExitConflict, Err: alreadyRunning{msg}}
	}
	return exitf(ExitFailure, "daemon did not start: %s", msg)
}

func workerArgs(dir home.Dir) []string {
	return []string{"daemon-worker", "--home", string(dir)}
}

func describeEndpoint(network, address string) string {
	if network == "unix" {
		return "unix socket " + address
	}
	return address
}

// lastLogLines quotes the end of the daemon log for a failed start.
func lastLogLines(dir home.Dir) string {
	b, err := os.ReadFile(dir.LogFile())
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return ":\n  " + strings.Join(lines, "\n  ")
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
