package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/config"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/pairing"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/e2e"
	"reeve.dev/reeve/worker"
)

type pairOptions struct {
	daemonCmd
	code         string
	worker       bool
	transport    string
	server       string
	appURL       string
	autoUnlock   bool
	noAutoUnlock bool
	ttl          int
	name         string
	noBrowser    bool
	timeout      int
	json         bool
	// The worker profile (--worker): its workdirs, runner credential,
	// executor and agents.
	workdirs       []string
	credentialFile string
	executor       string
	agents         string
	workerProfile  string

	// interval between status polls; tests shorten it.
	interval time.Duration
	// open shows a URL to the user; default: xdg-open or open when there
	// is a display, else nothing (the URL is printed either way).
	open func(url string) error
}

// pairResult is what `reeve pair --json` prints: never the issue token.
type pairResult struct {
	InstallID         string `json:"install_id"`
	WorkspaceID       string `json:"workspace_id"`
	ServerURL         string `json:"server_url"`
	AppURL            string `json:"app_url"`
	RelayURL          string `json:"relay_url"`
	AnchorFingerprint string `json:"anchor_fingerprint"`
	Worker            bool   `json:"worker"`
	Transport         string `json:"transport"`
	AutoUnlock        bool   `json:"auto_unlock"`
	AutoUnlockTTL     int    `json:"auto_unlock_ttl_seconds"`
	CredentialsFile   string `json:"credentials_file"`
	Restarted         bool   `json:"daemon_restarted"`
	// WorkerProfile is the profile file `pair --worker` wrote, and where
	// its runner credential came from (never the value).
	WorkerProfile          string `json:"worker_profile,omitempty"`
	WorkerCredentialSource string `json:"worker_credential_source,omitempty"`
}

func newPairCmd(env *Env) *cobra.Command {
	opts := &pairOptions{}
	cmd := &cobra.Command{
		Use:   "pair [CODE]",
		Short: "Pair this daemon with a control plane: mint a code (or claim CODE), approve it in the browser, keep the credentials",
		Long: "Without CODE, pair mints an 8-character code, opens {app_url}/pair?code=... in the browser (or prints it)\n" +
			"and waits while you approve. With CODE (minted on the web), it claims that code and waits the same way.\n" +
			"On approval it writes the relay credentials to <home>/relay.json (mode 0600) and restarts a running daemon.\n" +
			"Remote control stays locked unless you pass --auto-unlock.",
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			if len(args) == 1 {
				opts.code = args[0]
			}
			if err := applyKeyStore(cmd, env, opts.home); err != nil {
				return err
			}
			return runPair(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.worker, "worker", false, "pair a team worker profile (default transport polling)")
	f.StringVar(&opts.transport, "transport", "", "how the control plane reaches this daemon: polling or relay (default relay; polling with --worker)")
	f.StringVar(&opts.server, "server", "", "control-plane URL (default $REEVE_SERVER, else the server of the current pairing)")
	f.StringVar(&opts.appURL, "app-url", "", "browser app URL (default: discovered from the server's .well-known document)")
	f.BoolVar(&opts.autoUnlock, "auto-unlock", false, "let remote clients control this daemon without an unlock on the machine, for --auto-unlock-ttl at a time")
	f.BoolVar(&opts.noAutoUnlock, "no-auto-unlock", false, "keep remote control locked until unlocked on the machine (the default)")
	f.IntVar(&opts.ttl, "auto-unlock-ttl", wire.UnlockTTLDefault, fmt.Sprintf("seconds an auto-unlock lasts, clamped to %d..%d", wire.UnlockTTLMin, wire.UnlockTTLMax))
	f.StringVar(&opts.name, "name", "", "machine name shown on the approval page (default the host name)")
	f.BoolVar(&opts.noBrowser, "no-browser", false, "print the approval URL without opening a browser")
	f.IntVar(&opts.timeout, "timeout", 900, "seconds to wait for approval")
	f.BoolVar(&opts.json, "json", false, "print the result as JSON")
	f.StringArrayVar(&opts.workdirs, "workdir", nil, "with --worker: a directory runs may name (repeatable)")
	f.StringVar(&opts.credentialFile, "credential-file", "", "with --worker: file holding the managed executor's runner credential (else $"+worker.CredentialEnv+"); kept in the worker profile, 0600")
	f.StringVar(&opts.executor, "executor", "", "with --worker: the managed executor id the credential is")
	f.StringVar(&opts.agents, "agents", "", "with --worker: comma-separated agents the worker offers")
	f.StringVar(&opts.workerProfile, "worker-profile", "", "with --worker: worker profile name (default \"default\")")
	addKeyStoreFlag(cmd)
	cmd.AddCommand(newPairAnchorCmd(env), newPairRotateTokenCmd(env))
	return cmd
}

func runPair(ctx context.Context, o *pairOptions) error {
	if o.autoUnlock && o.noAutoUnlock {
		return exitf(ExitUsage, "--auto-unlock and --no-auto-unlock contradict each other")
	}
	switch o.transport {
	case "":
		o.transport = "relay"
		if o.worker {
			o.transport = "polling"
		}
	case "polling", "relay":
	default:
		return exitf(ExitUsage, "--transport must be polling or relay, got %q", o.transport)
	}
	if o.timeout <= 0 {
		return exitf(ExitUsage, "--timeout must be a positive number of seconds, got %d", o.timeout)
	}
	workerProfile, workerCred, err := o.workerSettings()
	if err != nil {
		return err
	}
	ttl := wire.ClampUnlockTTL(o.ttl)
	if ttl != o.ttl {
		fmt.Fprintf(o.env.Err, "reeve: --auto-unlock-ttl %d is outside %d..%d; using %d\n", o.ttl, wire.UnlockTTLMin, wire.UnlockTTLMax, ttl)
	}
	if o.code != "" {
		c, err := pairing.NormalizeCode(o.code)
		if err != nil {
			return withExit(ExitUsage, err)
		}
		o.code = c
	}
	dir := o.home
	if err := dir.Prepare(); err != nil {
		return withExit(ExitFailure, err)
	}
	server, err := pairing.ServerURL(o.server, o.env.Getenv("REEVE_SERVER"), dir)
	if err != nil {
		return exitf(ExitUsage, "%v: pass --server URL (or set REEVE_SERVER)", err)
	}
	name := o.name
	if name == "" {
		name, _ = os.Hostname()
	}
	a, err := pairing.Begin(ctx, pairing.Options{
		Home: dir, Server: server, AppURL: o.appURL, Code: o.code, Name: name,
		Worker: o.worker, Transport: o.transport, AutoUnlock: o.autoUnlock, AutoUnlockTTL: ttl,
	})
	if err != nil {
		return o.pairExit(err, "pairing code")
	}
	code, expires := a.Code()
	approve := a.ApproveURL()
	fmt.Fprintf(o.env.Err, "reeve: pairing code %s (expires %s)\n", code[:4]+"-"+code[4:], expires.Local().Format("15:04:05"))
	fmt.Fprintf(o.env.Err, "reeve: this machine's trust anchor fingerprint: %s\n", a.Fingerprint)
	fmt.Fprintf(o.env.Err, "reeve: approve it at %s\n", approve)
	fmt.Fprintln(o.env.Err, "reeve: check that the page shows the same fingerprint before you approve")
	if !o.noBrowser {
		if err := o.opener()(approve); err != nil {
			fmt.Fprintf(o.env.Err, "reeve: could not open a browser (%v); open the URL above yourself\n", err)
		}
	}

	creds, err := a.Wait(ctx, o.interval, time.Now().Add(time.Duration(o.timeout)*time.Second), o.progress())
	if err != nil {
		return o.pairExit(err, "pairing status")
	}
	rc, err := a.Save(creds)
	if err != nil {
		return withExit(ExitFailure, err)
	}
	fmt.Fprintf(o.env.Err, "reeve: paired: install %s in workspace %s; credentials saved to %s (mode 0600)\n", rc.InstallID, rc.WorkspaceID, dir.RelayFile())
	if rc.AutoUnlock {
		fmt.Fprintf(o.env.Err, "reeve: remote control unlocks automatically for %ds at a time\n", ttl)
	} else {
		fmt.Fprintln(o.env.Err, "reeve: remote control stays locked until unlocked on this machine")
	}

	restarted, err := o.restartIfRunning(ctx, rc.Transport == "relay")
	if err != nil {
		return err
	}
	if rc.Transport == "relay" && !restarted {
		if err := o.persistRelayProfile(); err != nil {
			return err
		}
	}
	var profileFile string
	if o.worker {
		if profileFile, err = o.saveWorkerProfile(workerProfile, workerCred, rc); err != nil {
			return err
		}
	}
	res := pairResult{
		WorkerProfile: profileFile, WorkerCredentialSource: workerCred.Source,
		InstallID: rc.InstallID, WorkspaceID: rc.WorkspaceID, ServerURL: rc.ServerURL, AppURL: rc.AppURL, RelayURL: rc.RelayURL,
		AnchorFingerprint: a.Fingerprint, Worker: rc.Worker, Transport: rc.Transport, AutoUnlock: rc.AutoUnlock, AutoUnlockTTL: rc.AutoUnlockTTL,
		CredentialsFile: dir.RelayFile(), Restarted: restarted,
	}
	if o.json {
		return writeJSON(o.env.Out, res)
	}
	fmt.Fprintf(o.env.Out, "paired install %s (workspace %s) with %s\n", res.InstallID, res.WorkspaceID, res.ServerURL)
	return nil
}

// progress says what the pairing waits for when the state changes, and
// every half minute.
func (o *pairOptions) progress() func(pairing.State) {
	last, lastSaid := "", time.Now()
	return func(st pairing.State) {
		if st.Unreachable != nil {
			// The server may be restarting: the wait goes on until the
			// deadline.
			if time.Since(lastSaid) > 30*time.Second {
				fmt.Fprintf(o.env.Err, "reeve: cannot reach the server (%v); still trying\n", st.Unreachable)
				lastSaid = time.Now()
			}
			return
		}
		if st.State == last && time.Since(lastSaid) <= 30*time.Second {
			return
		}
		what := "waiting for approval in the browser"
		if st.ClaimedHere {
			what = "claimed for a workspace; waiting for approval"
		}
		fmt.Fprintf(o.env.Err, "reeve: %s (state %s, expires %s)...\n", what, st.State, st.ExpiresAt.Local().Format("15:04:05"))
		last, lastSaid = st.State, time.Now()
	}
}

// pairExit maps a failed pairing step to an exit code and a sentence.
func (h homeFlag) pairExit(err error, what string) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return exitf(ExitFailure, "pairing interrupted; the code stays valid until it expires")
	case errors.Is(err, pairing.ErrTimedOut):
		return exitf(ExitTimeout, "no decision in time; run `%s` again", h.reeve("pair"))
	case errors.Is(err, pairing.ErrDenied):
		return withExit(ExitDenied, err)
	case errors.Is(err, pairing.ErrCollected):
		return exitf(ExitConflict, "%v; run `%s` again", err, h.reeve("pair"))
	}
	return pairAPIExit(err, what)
}

// pairAPIExit maps a control-plane refusal to an exit code and a sentence.
func pairAPIExit(err error, what string) error {
	var ae *sdk.APIError
	if !errors.As(err, &ae) {
		return withExit(ExitFailure, fmt.Errorf("%s: %w", what, err))
	}
	switch ae.Status {
	case http.StatusNotFound:
		return exitf(ExitNotFound, "%s: no such code (%s)", what, ae.Body.Message)
	case http.StatusConflict:
		return exitf(ExitConflict, "%s: %s", what, ae.Body.Message)
	case http.StatusGone:
		return exitf(ExitTimeout, "%s: %s", what, ae.Body.Message)
	case http.StatusUnauthorized, http.StatusForbidden:
		return exitf(ExitDenied, "%s: refused: %s", what, ae.Body.Message)
	case http.StatusUnprocessableEntity:
		return exitf(ExitUsage, "%s: %s", what, ae.Body.Message)
	case http.StatusTooManyRequests:
		return exitf(ExitFailure, "%s: throttled by the server; retry in %s", what, ae.RetryAfter)
	}
	return withExit(ExitFailure, fmt.Errorf("%s: %w", what, err))
}

// restartIfRunning applies new credentials to a running daemon with the
// restart logic of `reeve restart`, naming the sessions it interrupts. A
// daemon paired for the relay and launched with the local profile comes
// back with the relay profile: both bind loopback only, and relay also
// connects out with the credentials.
func (o *pairOptions) restartIfRunning(ctx context.Context, relay bool) (bool, error) {
	dir := o.home
	locked, err := dir.Locked()
	if err != nil || !locked {
		return false, err
	}
	launch, err := dir.ReadLaunch()
	if err != nil {
		return false, withExit(ExitFailure, fmt.Errorf("a daemon is running but its launch configuration cannot be read (%w); run `%s`", err, o.reeve("restart")))
	}
	if relay && launch.Profile == "local" {
		launch.Profile = "relay"
		fmt.Fprintln(o.env.Err, "reeve: the daemon's profile becomes relay, so that it connects to the relay")
	}
	o.interrupted(ctx, "restarting the daemon to apply the credentials")
	fmt.Fprintln(o.env.Err, "reeve: restarting the daemon to apply the credentials")
	if _, err := o.stopDaemon(ctx, false, 15*time.Second); err != nil && exitCode(err) != ExitNotRunning {
		return false, err
	}
	if err := o.startDaemon(ctx, launch, false, "the credentials are saved: start the daemon on a free port with `"+o.reeve("restart --listen ADDR")+"`"); err != nil {
		return false, err
	}
	return true, nil
}

// persistRelayProfile makes the saved launch settings of a daemon that is
// not running use the relay profile, so that the next start, whoever does
// it, connects to the relay. A home never started gets launch settings
// from its config (or the defaults) with the relay profile.
func (o *pairOptions) persistRelayProfile() error {
	dir := o.home
	launch, err := dir.ReadLaunch()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r, lerr := config.Load(config.LoadOptions{Getenv: func(k string) string {
			if k == config.EnvName(config.KeyHome) {
				return string(dir)
			}
			return o.env.Getenv(k)
		}})
		if lerr != nil {
			fmt.Fprintf(o.env.Err, "reeve: the relay link runs in the relay profile: start the daemon with `%s` (%v)\n", o.reeve("start --profile relay"), lerr)
			return nil
		}
		launch = launchFrom(r)
	case err != nil:
		return withExit(ExitFailure, err)
	}
	if launch.Profile == "relay" {
		return nil
	}
	if launch.Profile == "lan" {
		fmt.Fprintf(o.env.Err, "reeve: the daemon launches with the lan profile, which does not connect to the relay: start it with `%s`\n", o.reeve("start --profile relay"))
		return nil
	}
	from := launch.Profile
	launch.Profile = "relay"
	if err := dir.WriteLaunch(launch); err != nil {
		return withExit(ExitFailure, err)
	}
	reportLaunchChanges(o.env.Err, dir, []launchChange{{Key: "profile", From: from, To: "relay", Source: "pair"}})
	return nil
}

func (o *pairOptions) opener() func(string) error {
	if o.open != nil {
		return o.open
	}
	return func(url string) error {
		prog := "xdg-open"
		if runtime.GOOS == "darwin" {
			prog = "open"
		} else if o.env.Getenv("DISPLAY") == "" && o.env.Getenv("WAYLAND_DISPLAY") == "" {
			return errors.New("no display")
		}
		path, err := exec.LookPath(prog)
		if err != nil {
			return fmt.Errorf("no %s", prog)
		}
		cmd := exec.Command(path, url)
		if err := cmd.Start(); err != nil {
			return err
		}
		go cmd.Wait()
		return nil
	}
}

// ---- pair anchor ----

type pairAnchorOptions struct {
	daemonCmd
	json bool
}

func newPairAnchorCmd(env *Env) *cobra.Command {
	opts := &pairAnchorOptions{}
	cmd := &cobra.Command{
		Use:   "anchor",
		Short: "Print the fingerprint of this daemon's trust anchor (its X25519 identity), as the approval page shows it",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			return runPairAnchor(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runPairAnchor(o *pairAnchorOptions) error {
	dir := o.home
	if err := dir.Prepare(); err != nil {
		return withExit(ExitFailure, err)
	}
	key, err := dir.EnsureAnchor()
	if err != nil {
		return withExit(ExitFailure, err)
	}
	pub := key.PublicKey().Bytes()
	fp := e2e.Fingerprint(pub)
	if o.json {
		return writeJSON(o.env.Out, map[string]string{"fingerprint": fp, "public_key": base64.StdEncoding.EncodeToString(pub), "file": dir.AnchorFile()})
	}
	fmt.Fprintln(o.env.Out, fp)
	return nil
}

// ---- pair rotate-token ----

type pairRotateOptions struct {
	daemonCmd
	json bool
}

func newPairRotateTokenCmd(env *Env) *cobra.Command {
	opts := &pairRotateOptions{}
	cmd := &cobra.Command{
		Use:   "rotate-token",
		Short: "Replace the local API token in the daemon home (a restart applies it)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			return runPairRotateToken(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runPairRotateToken(o *pairRotateOptions) error {
	dir := o.home
	if err := dir.Prepare(); err != nil {
		return withExit(ExitFailure, err)
	}
	if _, err := dir.RotateToken(); err != nil {
		return withExit(ExitFailure, err)
	}
	running, err := dir.Locked()
	if err != nil {
		return withExit(ExitFailure, err)
	}
	if o.json {
		return writeJSON(o.env.Out, map[string]any{"token_file": dir.TokenFile(), "daemon_running": running, "restart_required": running})
	}
	fmt.Fprintf(o.env.Out, "rotated the local API token in %s\n", dir.TokenFile())
	if running {
		fmt.Fprintf(o.env.Err, "reeve: the running daemon still uses the old token; run `%s` to apply the new one\n", o.reeve("restart"))
	} else {
		fmt.Fprintln(o.env.Err, "reeve: the daemon is not running; it uses the new token when it starts")
	}
	return nil
}

// workerSettings checks the --worker flags before any pairing request, so
// that a missing directory or an unreadable credential file fails first.
func (o *pairOptions) workerSettings() (worker.Profile, worker.Credential, error) {
	var p worker.Profile
	if !o.worker {
		if len(o.workdirs) > 0 || o.credentialFile != "" || o.executor != "" || o.agents != "" || o.workerProfile != "" {
			return p, worker.Credential{}, exitf(ExitUsage, "--workdir, --credential-file, --executor, --agents and --worker-profile go with --worker")
		}
		return p, worker.Credential{}, nil
	}
	for _, d := range o.workdirs {
		abs, err := existingDir(d)
		if err != nil {
			return p, worker.Credential{}, err
		}
		p.Workdirs = append(p.Workdirs, abs)
	}
	p.ExecutorID, p.Agents, p.Transport = o.executor, splitList(o.agents), o.transport
	cred, err := worker.ResolveCredential(o.credentialFile, o.env.Getenv(worker.CredentialEnv), worker.Profile{})
	switch {
	case errors.Is(err, worker.ErrNoCredential):
		// Paired without one: worker start then needs --credential-file.
	case err != nil:
		return p, cred, exitf(ExitUsage, "%v", err)
	default:
		if !strings.HasPrefix(cred.Value(), sdk.RunnerCredentialPrefix) {
			return p, cred, exitf(ExitUsage, "the runner credential (%s) does not look like one: runner credentials start with %s", cred, sdk.RunnerCredentialPrefix)
		}
		p.Credential = cred.Value()
	}
	return p, cred, nil
}

// saveWorkerProfile keeps the worker profile beside the pairing: the
// server and workspace it was approved for, and the runner credential.
func (o *pairOptions) saveWorkerProfile(p worker.Profile, cred worker.Credential, rc home.RelayCredentials) (string, error) {
	h := worker.Home{Base: string(o.home), Profile: o.workerProfile}
	if prev, err := worker.ReadProfile(h.ProfileFile()); err == nil {
		// A re-pairing keeps what it is not told to change.
		p = prev.Merge(p)
	}
	p.ServerURL, p.WorkspaceID, p.InstallID, p.PairedAt = rc.ServerURL, rc.WorkspaceID, rc.InstallID, time.Now().UTC()
	if p.Transport == "" {
		p.Transport = worker.TransportPolling
	}
	if err := h.WriteProfile(p); err != nil {
		return "", withExit(ExitFailure, fmt.Errorf("save the worker profile: %w", err))
	}
	fmt.Fprintf(o.env.Err, "reeve: worker profile saved to %s (transport %s)\n", h.ProfileFile(), p.Transport)
	if p.Credential == "" {
		fmt.Fprintf(o.env.Err, "reeve: no runner credential yet: create a managed executor for this worker and pass its credential to `%s`\n", o.reeve("worker start --credential-file FILE"+workerProfileFlag(o.workerProfile)))
	} else if cred.Source != "" {
		fmt.Fprintf(o.env.Err, "reeve: the runner credential (from %s) is kept in the worker profile (mode 0600)\n", cred)
	}
	if len(p.Workdirs) == 0 {
		fmt.Fprintf(o.env.Err, "reeve: no --workdir: runs need one (pass --workdir to `%s`, or pair again with it)\n", o.reeve("worker start"+workerProfileFlag(o.workerProfile)))
	}
	return h.ProfileFile(), nil
}
