package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/worker"
)

// teamWorkerFlags are the flags every worker command that reaches the
// server shares (spec 4.13): they override the saved profile field by
// field.
type teamWorkerFlags struct {
	daemonCmd
	profileName    string
	server         string
	workspace      string
	executor       string
	credentialFile string
	runnerPool     string
	workdirs       []string
	regProfile     string
	agents         string
	transport      string
}

// workerProfileFlag is the --worker-profile of a suggested worker command:
// without it the command would act on the default profile, not name's.
func workerProfileFlag(name string) string {
	if name == "" {
		return ""
	}
	return " --worker-profile " + shellWord(name)
}

func (f *teamWorkerFlags) add(fs *pflag.FlagSet, transport bool) {
	fs.StringVar(&f.profileName, "worker-profile", "", "worker profile name, kept in <home>/workers/NAME (default \"default\")")
	fs.StringVar(&f.server, "server", "", "control-plane URL (default the profile's, else $REEVE_SERVER)")
	fs.StringVar(&f.workspace, "workspace", "", "workspace id the runner credential must belong to")
	fs.StringVar(&f.executor, "executor", "", "managed executor id the runner credential must be")
	fs.StringVar(&f.credentialFile, "credential-file", "", "file holding the runner credential (else $"+worker.CredentialEnv+", else the profile's)")
	fs.StringVar(&f.runnerPool, "runner-pool", "", "runner pool NAME this worker serves: it claims only runs naming this pool (without it, only runs naming none)")
	fs.StringArrayVar(&f.workdirs, "workdir", nil, "a directory runs may name (repeatable; default the profile's)")
	fs.StringVar(&f.regProfile, "registration-profile", "", "read the worker profile from PATH instead of the worker home")
	fs.StringVar(&f.agents, "agents", "", "comma-separated agents to offer; the daemon must have loaded each (default the profile's, else all it loaded)")
	if transport {
		fs.StringVar(&f.transport, "transport", "", "polling (default), relay or inbound")
	}
}

// resolve builds the effective profile: the registration profile file or
// the worker home's, with the flags on top.
func (f *teamWorkerFlags) resolve() (worker.Home, worker.Profile, worker.ProfileBlock, error) {
	h := worker.Home{Base: string(f.home), Profile: f.profileName}
	block := worker.ProfileBlock{Name: firstNonEmptyStr(f.profileName, worker.DefaultProfile), Home: h.Dir(), BaseHome: h.Base}
	var p worker.Profile
	switch {
	case f.regProfile != "":
		rp, err := worker.ReadProfile(f.regProfile)
		if err != nil {
			return h, p, block, exitf(ExitUsage, "--registration-profile: %v", err)
		}
		p, block.Source, block.File = rp, worker.ProfileFromFile, absPath(f.regProfile)
	default:
		hp, err := worker.ReadProfile(h.ProfileFile())
		switch {
		case err == nil:
			p, block.Source, block.File = hp, worker.ProfileFromHome, h.ProfileFile()
		case errors.Is(err, fs.ErrNotExist):
			block.Source = worker.ProfileFromFlags
		default:
			return h, p, block, withExit(ExitFailure, err)
		}
	}
	if p.Name != "" && f.profileName == "" {
		block.Name = p.Name
	}
	var dirs []string
	for _, d := range f.workdirs {
		dirs = append(dirs, absPath(d))
	}
	p = p.Merge(worker.Profile{
		ServerURL: f.server, WorkspaceID: f.workspace, ExecutorID: f.executor, RunnerPool: f.runnerPool,
		Transport: f.transport, Workdirs: dirs, Agents: splitList(f.agents),
	})
	if p.ServerURL == "" {
		p.ServerURL = f.env.Getenv("REEVE_SERVER")
	}
	p.ServerURL = strings.TrimRight(p.ServerURL, "/")
	p.Name = block.Name
	return h, p, block, nil
}

func (f *teamWorkerFlags) credential(p worker.Profile) (worker.Credential, error) {
	return worker.ResolveCredential(f.credentialFile, f.env.Getenv(worker.CredentialEnv), p)
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func firstNonEmptyStr(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func newTeamWorkerCmd(env *Env) *cobra.Command {
	return newGroupCmd("worker", "Run a team worker: claim workflow runs from the control plane and run them as governed agent work",
		newWorkerStartCmd(env), newWorkerRunOnceCmd(env), newWorkerStopCmd(env), newWorkerDoctorCmd(env), newWorkerResetCmd(env))
}

// ---- worker start ----

type workerStartOptions struct {
	teamWorkerFlags
	mode      string
	maxRuns   int
	claimWait int
	json      bool
}

func newWorkerStartCmd(env *Env) *cobra.Command {
	o := &workerStartOptions{}
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Run the persistent worker: long-poll for runs, heartbeat each lease, run it through the daemon, report the evidence",
		Long: `worker start runs in the foreground until SIGTERM (reeve worker stop) or Ctrl-C.
It checks, before any claim: the transport (polling; relay and inbound are refused),
the --agents against the daemon's loaded adapters, and the runner credential against
the server. It then claims one run at a time by long poll, runs it in a worktree of
its --workdir under the project policy, raises the permission requests the policy
leaves to a human as approvals on the run, and reports diff, checkpoints, usage and
exit status. Stopping mid-run stops the agent and gives the run back to the queue.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.bind(cmd, env); err != nil {
				return err
			}
			return runWorkerStart(cmd.Context(), o)
		},
	}
	o.add(cmd.Flags(), true)
	cmd.Flags().StringVar(&o.mode, "mode", "persistent", "lifecycle: persistent (run-once is the ephemeral one)")
	cmd.Flags().IntVar(&o.maxRuns, "max-runs", 0, "exit after N runs (0: run until stopped)")
	cmd.Flags().IntVar(&o.claimWait, "claim-wait", 30, "seconds one claim long-polls (1..60)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print one JSON line per finished run on stdout")
	return cmd
}

func runWorkerStart(ctx context.Context, o *workerStartOptions) error {
	if o.mode != "persistent" {
		return exitf(ExitUsage, "--mode must be persistent, got %q (for one lease use `%s`)", o.mode, o.reeve("worker run-once --lease TOKEN"+workerProfileFlag(o.profileName)))
	}
	if o.claimWait < 1 || o.claimWait > 60 {
		return exitf(ExitUsage, "--claim-wait must be 1..60 seconds, got %d", o.claimWait)
	}
	h, p, _, err := o.resolve()
	if err != nil {
		return err
	}
	if err := worker.CheckTransport(p.Transport); err != nil {
		return withExit(ExitUsage, err)
	}
	if p.ServerURL == "" {
		return exitf(ExitUsage, "no server: pass --server URL, set REEVE_SERVER, or pair with `%s`", o.reeve("pair --worker"+workerProfileFlag(o.profileName)))
	}
	cred, err := o.credential(p)
	if err != nil {
		return exitf(ExitUsage, "%v", err)
	}
	lock, err := h.AcquireLock()
	if errors.Is(err, worker.ErrRunning) {
		return exitf(ExitConflict, "%v: stop it with `%s`", err, o.reeve("worker stop"+workerProfileFlag(o.profileName)))
	}
	if err != nil {
		return withExit(ExitFailure, err)
	}
	defer lock.Release()
	id, err := h.EnsureIdentity()
	if err != nil {
		return withExit(ExitFailure, err)
	}
	d, err := worker.DialDaemon(ctx, o.home)
	if err != nil {
		return daemonExit(err)
	}
	defer d.Close()
	logf := func(format string, args ...any) {
		fmt.Fprintf(o.env.Err, "reeve worker: "+format+"\n", args...)
	}
	w, err := worker.New(ctx, worker.Options{
		Server: serverClient(p.ServerURL, cred.Value()), Daemon: d, Profile: p,
		ClaimWait: time.Duration(o.claimWait) * time.Second, MaxRuns: o.maxRuns, Logf: logf,
		OnLease: func(r worker.LeaseResult) {
			if o.json {
				writeJSONLine(o.env.Out, leaseLine(r))
			}
		},
	})
	if err != nil {
		return workerExit(err)
	}
	ex := w.Executor()
	logf("worker %s as executor %s (%s) in workspace %s; credential from %s; agents %s; workdirs %s; polling %s",
		id.WorkerID, ex.ID, ex.Name, ex.WorkspaceID, cred, strings.Join(w.Agents(), ","), strings.Join(p.Workdirs, ","), p.ServerURL)
	if err := w.Run(ctx); err != nil {
		return workerExit(err)
	}
	logf("stopped")
	return nil
}

// leaseLine is one finished run in `worker start --json` and run-once.
type leaseLineJSON struct {
	LeaseID     string `json:"lease_id"`
	RunID       string `json:"run_id"`
	Status      string `json:"status"`
	SessionID   string `json:"session_id,omitempty"`
	ExitCode    int    `json:"exit_code"`
	DiffSummary string `json:"diff_summary,omitempty"`
	Checkpoints int    `json:"checkpoints"`
	Error       string `json:"error,omitempty"`
}

func leaseLine(r worker.LeaseResult) leaseLineJSON {
	return leaseLineJSON{LeaseID: r.LeaseID, RunID: r.RunID, Status: r.Status, SessionID: r.Outcome.SessionID, ExitCode: r.Outcome.ExitCode,
		DiffSummary: diffOrEmpty(r), Checkpoints: len(r.Outcome.Checkpoints), Error: r.Error}
}

func diffOrEmpty(r worker.LeaseResult) string {
	if r.Outcome.SessionID == "" {
		return ""
	}
	return worker.DiffSummary(r.Outcome.Diff)
}

func serverClient(url, token string) *sdk.Client {
	// Long polls hold a request for up to a minute: the client's own
	// timeout is above that, each call has its context deadline.
	return &sdk.Client{BaseURL: url, Token: token, HTTP: &http.Client{Timeout: 2 * time.Minute}}
}

func daemonExit(err error) error {
	if errors.Is(err, controlclient.ErrNoDaemon) {
		return withExit(ExitNotRunning, err)
	}
	return withExit(ExitNotRunning, err)
}

// workerExit maps the worker's refusals to exit codes.
func workerExit(err error) error {
	var ae *sdk.APIError
	switch {
	case errors.Is(err, worker.ErrAgents), errors.Is(err, worker.ErrTransport):
		return withExit(ExitUsage, err)
	case errors.Is(err, worker.ErrRefused):
		return withExit(ExitDenied, err)
	case errors.As(err, &ae):
		switch ae.Status {
		case http.StatusUnauthorized, http.StatusForbidden:
			return withExit(ExitDenied, err)
		case http.StatusNotFound:
			return withExit(ExitNotFound, err)
		case http.StatusGone:
			return withExit(ExitTimeout, err)
		case http.StatusConflict:
			return withExit(ExitConflict, err)
		}
	}
	return withExit(ExitFailure, err)
}

// ---- worker run-once ----

type workerRunOnceOptions struct {
	teamWorkerFlags
	lease string
	json  bool
}

func newWorkerRunOnceCmd(env *Env) *cobra.Command {
	o := &workerRunOnceOptions{}
	cmd := &cobra.Command{
		Use:   "run-once --lease TOKEN",
		Short: "Run the one lease a lease token names (ephemeral), report it, clean up and exit",
		Long: `run-once reads the lease of TOKEN (rwl_...), runs its run through the daemon like
worker start, heartbeats and reports under the lease token, and exits: 0 when the run
succeeded, 10 when it failed or was cancelled, 5 when it was given back (this worker
lacks its directory or agent), 7 when the lease was lost. The lease token is the only
credential it needs (--lease, or $REEVE_LEASE_TOKEN).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.bind(cmd, env); err != nil {
				return err
			}
			return runWorkerRunOnce(cmd.Context(), o)
		},
	}
	o.add(cmd.Flags(), true)
	cmd.Flags().StringVar(&o.lease, "lease", "", "the lease token (rwl_...; default $REEVE_LEASE_TOKEN)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the result as JSON")
	return cmd
}

type runOnceJSON struct {
	leaseLineJSON
	Cleanup runOnceCleanup `json:"cleanup"`
}

type runOnceCleanup struct {
	Lease         string `json:"lease"` // completed, released or lost
	DaemonSession string `json:"daemon_session,omitempty"`
	Worktree      string `json:"worktree"`
}

func runWorkerRunOnce(ctx context.Context, o *workerRunOnceOptions) error {
	tok := firstNonEmptyStr(o.lease, o.env.Getenv("REEVE_LEASE_TOKEN"))
	if tok == "" {
		return exitf(ExitUsage, "--lease TOKEN is required")
	}
	if !strings.HasPrefix(tok, sdk.LeaseTokenPrefix) {
		return exitf(ExitUsage, "--lease: not a lease token (they start with %s)", sdk.LeaseTokenPrefix)
	}
	h, p, _, err := o.resolve()
	if err != nil {
		return err
	}
	if err := worker.CheckTransport(p.Transport); err != nil {
		return withExit(ExitUsage, err)
	}
	if p.ServerURL == "" {
		return exitf(ExitUsage, "no server: pass --server URL, set REEVE_SERVER, or pair with `%s`", o.reeve("pair --worker"+workerProfileFlag(o.profileName)))
	}
	if _, err := h.EnsureIdentity(); err != nil {
		return withExit(ExitFailure, err)
	}
	d, err := worker.DialDaemon(ctx, o.home)
	if err != nil {
		return daemonExit(err)
	}
	defer d.Close()
	logf := func(format string, args ...any) { fmt.Fprintf(o.env.Err, "reeve worker: "+format+"\n", args...) }
	res, err := worker.RunOnce(ctx, worker.Options{Server: serverClient(p.ServerURL, tok), Daemon: d, Profile: p, Logf: logf})
	if err != nil {
		var ae *sdk.APIError
		if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			return exitf(ExitDenied, "the server does not know this lease token (unknown, or its lease was revoked): %s", ae.Body.Message)
		}
		if errors.As(err, &ae) && (ae.Body.Code == sdk.CodeLeaseNotFound || ae.Status == http.StatusNotFound) {
			return exitf(ExitNotFound, "unknown lease token: %s", ae.Body.Message)
		}
		if errors.As(err, &ae) && (ae.Body.Code == sdk.CodeLeaseExpired || ae.Status == http.StatusGone) {
			return exitf(ExitTimeout, "the lease has expired or ended: %s", ae.Body.Message)
		}
		return workerExit(err)
	}
	cleanup := runOnceCleanup{Lease: "completed", DaemonSession: res.Outcome.SessionID, Worktree: "kept as the run's evidence"}
	switch res.Status {
	case "released", "lost":
		cleanup.Lease = res.Status
	}
	if res.Outcome.SessionID == "" {
		cleanup.Worktree = "none"
	}
	if o.json {
		if err := writeJSON(o.env.Out, runOnceJSON{leaseLineJSON: leaseLine(res), Cleanup: cleanup}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(o.env.Out, "run %s %s%s\n", res.RunID, res.Status, errSuffix(res.Error))
	}
	fmt.Fprintf(o.env.Err, "reeve worker: cleanup: lease %s; session %s; worktree %s\n", cleanup.Lease, firstNonEmptyStr(cleanup.DaemonSession, "none"), cleanup.Worktree)
	switch res.Status {
	case worker.StatusSucceeded:
		return nil
	case "released":
		return silentExit(ExitConflict)
	case "lost":
		return silentExit(ExitTimeout)
	}
	return silentExit(ExitSessionBad)
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// ---- worker stop ----

type workerStopOptions struct {
	daemonCmd
	profileName string
	timeout     int
	json        bool
}

type workerStopJSON struct {
	Action string `json:"action"` // stopped, cleared-stale, not-running
	PID    int    `json:"pid,omitempty"`
	Home   string `json:"home"`
}

func newWorkerStopCmd(env *Env) *cobra.Command {
	o := &workerStopOptions{}
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "SIGTERM the persistent worker (it stops its agent and gives the run back), or clear a stale lock",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.bind(cmd, env); err != nil {
				return err
			}
			return runWorkerStop(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.profileName, "worker-profile", "", "worker profile name (default \"default\")")
	cmd.Flags().IntVar(&o.timeout, "timeout", 60, "seconds to wait for the worker to exit")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the result as JSON")
	return cmd
}

func runWorkerStop(ctx context.Context, o *workerStopOptions) error {
	h := worker.Home{Base: string(o.home), Profile: o.profileName}
	st, err := h.LockState()
	if err != nil {
		return withExit(ExitFailure, err)
	}
	res := workerStopJSON{PID: st.PID, Home: h.Dir()}
	var code int
	switch st.State {
	case worker.LockAbsent:
		res.Action = "not-running"
		code = ExitNotRunning
	case worker.LockStale:
		if _, err := h.ClearStale(); err != nil {
			return withExit(ExitConflict, err)
		}
		res.Action = "cleared-stale"
	case worker.LockActive:
		if st.PID <= 0 {
			return exitf(ExitFailure, "a worker holds %s but its pidfile is unreadable", h.LockFile())
		}
		if err := syscall.Kill(st.PID, syscall.SIGTERM); err != nil {
			return withExit(ExitFailure, fmt.Errorf("signal worker pid %d: %w", st.PID, err))
		}
		deadline := time.Now().Add(time.Duration(o.timeout) * time.Second)
		for {
			now, err := h.LockState()
			if err == nil && now.State != worker.LockActive {
				break
			}
			if time.Now().After(deadline) {
				return exitf(ExitTimeout, "the worker (pid %d) did not exit within %ds", st.PID, o.timeout)
			}
			select {
			case <-ctx.Done():
				return withExit(ExitFailure, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		res.Action = "stopped"
	}
	if o.json {
		if err := writeJSON(o.env.Out, res); err != nil {
			return err
		}
	} else {
		switch res.Action {
		case "not-running":
			fmt.Fprintf(o.env.Out, "no worker is running from %s\n", h.Dir())
		case "cleared-stale":
			fmt.Fprintf(o.env.Out, "cleared the stale lock of worker pid %d in %s\n", res.PID, h.Dir())
		default:
			fmt.Fprintf(o.env.Out, "stopped worker pid %d\n", res.PID)
		}
	}
	if code != 0 {
		return silentExit(code)
	}
	return nil
}

// ---- worker doctor ----

type workerDoctorOptions struct {
	teamWorkerFlags
	json bool
}

func newWorkerDoctorCmd(env *Env) *cobra.Command {
	o := &workerDoctorOptions{}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check server, credential, workspace, workdirs, transport, agents and the process lock without claiming work",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.bind(cmd, env); err != nil {
				return err
			}
			return runWorkerDoctor(cmd.Context(), o)
		},
	}
	o.add(cmd.Flags(), true)
	cmd.Flags().BoolVar(&o.json, "json", false, "print the report as JSON")
	return cmd
}

func runWorkerDoctor(ctx context.Context, o *workerDoctorOptions) error {
	h, p, block, err := o.resolve()
	if err != nil {
		return err
	}
	in := worker.DoctorInput{Home: h, Profile: p, ProfileSource: block.Source, ProfileFile: block.File}
	in.Credential, in.CredentialErr = o.credential(p)
	if in.CredentialErr == nil && p.ServerURL != "" {
		in.Server = serverClient(p.ServerURL, in.Credential.Value())
	}
	if d, err := worker.DialDaemon(ctx, o.home); err == nil {
		defer d.Close()
		in.Daemon = d
	} else {
		in.DaemonErr = err
	}
	r := worker.Doctor(ctx, in)
	r.Profile.Name = block.Name
	if o.json {
		if err := writeJSON(o.env.Out, r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(o.env.Out, "profile %s (%s) in %s\n", r.Profile.Name, r.Profile.Source, r.Profile.Home)
		fmt.Fprintf(o.env.Out, "credential source: %s; process lock: %s\n", r.CredentialSource, r.ProcessLock)
		for _, c := range r.Checks {
			mark := "ok  "
			if !c.OK {
				mark = "FAIL"
			}
			fmt.Fprintf(o.env.Out, "%s %-15s %s\n", mark, c.Name, c.Detail)
		}
	}
	if !r.OK {
		return silentExit(ExitFailure)
	}
	return nil
}

// ---- worker reset ----

type workerResetOptions struct {
	daemonCmd
	profileName string
	json        bool
}

func newWorkerResetCmd(env *Env) *cobra.Command {
	o := &workerResetOptions{}
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Clear the local worker profile and identity (refused while the worker runs)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.bind(cmd, env); err != nil {
				return err
			}
			h := worker.Home{Base: string(o.home), Profile: o.profileName}
			removed, err := h.Reset()
			if errors.Is(err, worker.ErrRunning) {
				return withExit(ExitConflict, err)
			}
			if err != nil {
				return withExit(ExitFailure, err)
			}
			if removed == nil {
				removed = []string{}
			}
			if o.json {
				return writeJSON(env.Out, map[string]any{"home": h.Dir(), "removed": removed})
			}
			if len(removed) == 0 {
				fmt.Fprintf(env.Out, "nothing to clear in %s\n", h.Dir())
				return nil
			}
			for _, f := range removed {
				fmt.Fprintf(env.Out, "removed %s\n", filepath.Base(f))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.profileName, "worker-profile", "", "worker profile name (default \"default\")")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the result as JSON")
	return cmd
}
