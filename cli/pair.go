package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/e2e"
)

// pairCodeAlphabet is the server's: no 0/O or 1/I/L.
const pairCodeAlphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"

type pairOptions struct {
	env          *Env
	cmd          *cobra.Command
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
}

func newPairCmd(env *Env) *cobra.Command {
	opts := &pairOptions{env: env}
	cmd := &cobra.Command{
		Use:   "pair [CODE]",
		Short: "Pair this daemon with a control plane: mint a code (or claim CODE), approve it in the browser, keep the credentials",
		Long: "Without CODE, pair mints an 8-character code, opens {app_url}/pair?code=... in the browser (or prints it)\n" +
			"and waits while you approve. With CODE (minted on the web), it claims that code and waits the same way.\n" +
			"On approval it writes the relay credentials to <home>/relay.json (mode 0600) and restarts a running daemon.\n" +
			"Remote control stays locked unless you pass --auto-unlock.",
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.cmd = cmd
			if len(args) == 1 {
				opts.code = args[0]
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
	cmd.AddCommand(newPairAnchorCmd(env), newPairRotateTokenCmd(env))
	return cmd
}

// normalizePairCode accepts a code as people type it and checks its shape
// before any request.
func normalizePairCode(s string) (string, error) {
	c := strings.ToUpper(strings.NewReplacer("-", "", " ", "").Replace(s))
	if len(c) != 8 || strings.Trim(c, pairCodeAlphabet) != "" {
		return "", exitf(ExitUsage, "%q is not a pairing code: 8 characters of %s", s, pairCodeAlphabet)
	}
	return c, nil
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
	ttl := wire.ClampUnlockTTL(o.ttl)
	if ttl != o.ttl {
		fmt.Fprintf(o.env.Err, "reeve: --auto-unlock-ttl %d is outside %d..%d; using %d\n", o.ttl, wire.UnlockTTLMin, wire.UnlockTTLMax, ttl)
	}
	if o.code != "" {
		c, err := normalizePairCode(o.code)
		if err != nil {
			return err
		}
		o.code = c
	}
	dir, err := homeDir(o.cmd, o.env)
	if err != nil {
		return err
	}
	if err := dir.Prepare(); err != nil {
		return withExit(ExitFailure, err)
	}
	server := o.server
	if server == "" {
		server = o.env.Getenv("REEVE_SERVER")
	}
	if server == "" {
		if prev, err := dir.ReadRelayCredentials(); err == nil {
			server = prev.ServerURL
		}
	}
	if server == "" {
		return exitf(ExitUsage, "no control plane to pair with: pass --server URL (or set REEVE_SERVER)")
	}
	server = strings.TrimRight(server, "/")
	key, err := dir.EnsureAnchor()
	if err != nil {
		return withExit(ExitFailure, err)
	}
	pub := key.PublicKey().Bytes()
	fingerprint := e2e.Fingerprint(pub)

	client := &sdk.Client{BaseURL: server, HTTP: &http.Client{Timeout: 30 * time.Second}}
	appURL, relayURL := strings.TrimRight(o.appURL, "/"), ""
	if d, err := client.Discover(ctx); err == nil {
		if appURL == "" {
			appURL = strings.TrimRight(d.AppURL, "/")
		}
		relayURL = d.RelayURL
	} else if appURL == "" {
		return withExit(ExitFailure, fmt.Errorf("discover the app at %s: %w (pass --app-url to skip discovery)", server, err))
	}

	name := o.name
	if name == "" {
		name, _ = os.Hostname()
	}
	req := sdk.PairingMachineRequest{Name: name, AnchorPublicKey: base64.StdEncoding.EncodeToString(pub), Worker: o.worker, Transport: o.transport}
	var pc sdk.PairingCode
	if o.code == "" {
		pc, err = client.MintPairingCode(ctx, req)
	} else {
		pc, err = client.ClaimPairingCode(ctx, o.code, req)
	}
	if err != nil {
		return pairAPIExit(err, "pairing code")
	}
	approve := appURL + "/pair?code=" + pc.Code
	fmt.Fprintf(o.env.Err, "reeve: pairing code %s (expires %s)\n", pc.Code[:4]+"-"+pc.Code[4:], pc.ExpiresAt.Local().Format("15:04:05"))
	fmt.Fprintf(o.env.Err, "reeve: this machine's trust anchor fingerprint: %s\n", fingerprint)
	fmt.Fprintf(o.env.Err, "reeve: approve it at %s\n", approve)
	fmt.Fprintln(o.env.Err, "reeve: check that the page shows the same fingerprint before you approve")
	if !o.noBrowser {
		if err := o.opener()(approve); err != nil {
			fmt.Fprintf(o.env.Err, "reeve: could not open a browser (%v); open the URL above yourself\n", err)
		}
	}

	creds, err := o.poll(ctx, client, pc)
	if err != nil {
		return err
	}
	if creds.RelayURL != "" {
		relayURL = creds.RelayURL
	}
	if creds.AppURL != "" && o.appURL == "" {
		appURL = strings.TrimRight(creds.AppURL, "/")
	}
	rc := home.RelayCredentials{
		InstallID: creds.InstallID, WorkspaceID: creds.WorkspaceID, IssueToken: creds.IssueToken,
		ServerURL: server, AppURL: appURL, RelayURL: relayURL,
		Worker: o.worker, Transport: o.transport, PairedAt: time.Now().UTC(),
		AutoUnlock: o.autoUnlock, AutoUnlockTTL: ttl,
	}
	if err := dir.WriteRelayCredentials(rc); err != nil {
		return withExit(ExitFailure, fmt.Errorf("save relay credentials: %w", err))
	}
	fmt.Fprintf(o.env.Err, "reeve: paired: install %s in workspace %s; credentials saved to %s (mode 0600)\n", rc.InstallID, rc.WorkspaceID, dir.RelayFile())
	if rc.AutoUnlock {
		fmt.Fprintf(o.env.Err, "reeve: remote control unlocks automatically for %ds at a time\n", ttl)
	} else {
		fmt.Fprintln(o.env.Err, "reeve: remote control stays locked until unlocked on this machine")
	}

	restarted, err := restartIfRunning(ctx, o.env, dir, rc.Transport == "relay")
	if err != nil {
		return err
	}
	if l, lerr := dir.ReadLaunch(); rc.Transport == "relay" && (lerr != nil || l.Profile != "relay") {
		fmt.Fprintln(o.env.Err, "reeve: the relay link runs in the relay profile: start the daemon with `reeve start --profile relay`")
	}
	res := pairResult{
		InstallID: rc.InstallID, WorkspaceID: rc.WorkspaceID, ServerURL: rc.ServerURL, AppURL: rc.AppURL, RelayURL: rc.RelayURL,
		AnchorFingerprint: fingerprint, Worker: rc.Worker, Transport: rc.Transport, AutoUnlock: rc.AutoUnlock, AutoUnlockTTL: rc.AutoUnlockTTL,
		CredentialsFile: dir.RelayFile(), Restarted: restarted,
	}
	if o.json {
		return writeJSON(o.env.Out, res)
	}
	fmt.Fprintf(o.env.Out, "paired install %s (workspace %s) with %s\n", res.InstallID, res.WorkspaceID, res.ServerURL)
	return nil
}

// poll waits for the decision, saying what it waits for when the state
// changes and every half minute.
func (o *pairOptions) poll(ctx context.Context, client *sdk.Client, pc sdk.PairingCode) (*sdk.RelayCredentials, error) {
	interval := o.interval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	deadline := time.Now().Add(time.Duration(o.timeout) * time.Second)
	last, lastSaid := "", time.Now()
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil, exitf(ExitFailure, "pairing interrupted; the code stays valid until it expires")
		case <-time.After(wait):
		}
		wait = interval
		if time.Now().After(deadline) {
			return nil, exitf(ExitTimeout, "no decision within %ds; run `reeve pair` again", o.timeout)
		}
		st, err := client.PairingStatus(ctx, pc.Code, pc.StatusToken)
		var ae *sdk.APIError
		switch {
		case errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests:
			wait = max(interval, ae.RetryAfter)
			continue
		case errors.As(err, &ae):
			return nil, pairAPIExit(err, "pairing status")
		case err != nil:
			// The server may be restarting: keep trying until the deadline.
			if time.Since(lastSaid) > 30*time.Second {
				fmt.Fprintf(o.env.Err, "reeve: cannot reach the server (%v); still trying\n", err)
				lastSaid = time.Now()
			}
			continue
		}
		switch st.State {
		case sdk.PairingApproved:
			if st.RelayCredentials == nil {
				return nil, exitf(ExitConflict, "the pairing was approved but its credential was already collected by another `reeve pair`; run `reeve pair` again")
			}
			return st.RelayCredentials, nil
		case sdk.PairingDenied:
			return nil, exitf(ExitDenied, "the pairing was denied in the browser")
		}
		if st.State != last || time.Since(lastSaid) > 30*time.Second {
			what := "waiting for approval in the browser"
			if st.State == sdk.PairingClaimed && pc.Initiator == "daemon" {
				what = "claimed for a workspace; waiting for approval"
			}
			fmt.Fprintf(o.env.Err, "reeve: %s (state %s, expires %s)...\n", what, st.State, st.ExpiresAt.Local().Format("15:04:05"))
			last, lastSaid = st.State, time.Now()
		}
	}
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
// restart logic of `reeve restart`. A daemon paired for the relay and
// launched with the local profile comes back with the relay profile: both
// bind loopback only, and relay also connects out with the credentials.
func restartIfRunning(ctx context.Context, env *Env, dir home.Dir, relay bool) (bool, error) {
	locked, err := dir.Locked()
	if err != nil || !locked {
		return false, err
	}
	launch, err := dir.ReadLaunch()
	if err != nil {
		return false, withExit(ExitFailure, fmt.Errorf("a daemon is running but its launch configuration cannot be read (%w); run `reeve restart`", err))
	}
	if relay && launch.Profile == "local" {
		launch.Profile = "relay"
		fmt.Fprintln(env.Err, "reeve: the daemon's profile becomes relay, so that it connects to the relay")
	}
	fmt.Fprintln(env.Err, "reeve: restarting the daemon to apply the credentials")
	if _, err := stopDaemon(ctx, env, dir, false, 15*time.Second); err != nil && exitCode(err) != ExitNotRunning {
		return false, err
	}
	if err := startDaemon(ctx, env, launch, false); err != nil {
		return false, err
	}
	return true, nil
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
	env  *Env
	cmd  *cobra.Command
	json bool
}

func newPairAnchorCmd(env *Env) *cobra.Command {
	opts := &pairAnchorOptions{env: env}
	cmd := &cobra.Command{
		Use:   "anchor",
		Short: "Print the fingerprint of this daemon's trust anchor (its X25519 identity), as the approval page shows it",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { opts.cmd = cmd; return runPairAnchor(opts) },
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runPairAnchor(o *pairAnchorOptions) error {
	dir, err := homeDir(o.cmd, o.env)
	if err != nil {
		return err
	}
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
	env  *Env
	cmd  *cobra.Command
	json bool
}

func newPairRotateTokenCmd(env *Env) *cobra.Command {
	opts := &pairRotateOptions{env: env}
	cmd := &cobra.Command{
		Use:   "rotate-token",
		Short: "Replace the local API token in the daemon home (a restart applies it)",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { opts.cmd = cmd; return runPairRotateToken(opts) },
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runPairRotateToken(o *pairRotateOptions) error {
	dir, err := homeDir(o.cmd, o.env)
	if err != nil {
		return err
	}
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
		fmt.Fprintln(o.env.Err, "reeve: the running daemon still uses the old token; run `reeve restart` to apply the new one")
	} else {
		fmt.Fprintln(o.env.Err, "reeve: the daemon is not running; it uses the new token when it starts")
	}
	return nil
}
