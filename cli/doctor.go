package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/config"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/internal/version"
)

type doctorOptions struct {
	daemonCmd
	config  string
	json    bool
	offline bool
}

// doctorReport is the --json shape of `reeve doctor`.
type doctorReport struct {
	Identity  doctorIdentity  `json:"identity"`
	Config    doctorConfig    `json:"config"`
	Endpoints doctorEndpoints `json:"endpoints"`
	Relay     doctorRelay     `json:"relay"`
	Checks    []doctorCheck   `json:"checks"`
}

type doctorIdentity struct {
	DaemonID string `json:"daemon_id,omitempty"`
	Hostname string `json:"hostname"`
	Home     string `json:"home"`
	Version  string `json:"version"`
}

type doctorConfig struct {
	File     string   `json:"file"`
	Exists   bool     `json:"exists"`
	Valid    bool     `json:"valid"`
	Problems []string `json:"problems,omitempty"`
}

type doctorEndpoints struct {
	State          string   `json:"state"`
	Listen         string   `json:"listen,omitempty"` // as launched
	Bound          string   `json:"bound,omitempty"`  // as bound now
	Profile        string   `json:"profile,omitempty"`
	Auth           bool     `json:"auth"`
	AllowedHosts   []string `json:"allowed_hosts"`
	AllowedOrigins []string `json:"allowed_origins"`
	Error          string   `json:"error,omitempty"`
}

type doctorCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

func newDoctorCmd(env *Env) *cobra.Command {
	opts := &doctorOptions{}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Report identity, endpoints, relay state and config (read-only; repairs nothing)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			return runDoctor(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.config, "config", "", "config file to check (default $REEVE_CONFIG, else the launched one, else <home>/config.yaml)")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	cmd.Flags().BoolVar(&opts.offline, "offline", false, "report the persisted relay state without asking the control plane whether the credential still works")
	return cmd
}

func runDoctor(ctx context.Context, opts *doctorOptions) error {
	dir := opts.home
	rep := doctorReport{Relay: doctorRelay{State: "not paired"}}
	host, _ := os.Hostname()
	rep.Identity = doctorIdentity{Hostname: host, Home: string(dir), Version: version.Version}
	if id, err := dir.ReadIdentity(); err == nil {
		rep.Identity.DaemonID = id.DaemonID
	}

	launch, launchErr := dir.ReadLaunch()
	rep.Config = checkConfigFile(opts.configPath(dir, launch))

	st, err := probeDaemon(ctx, &opts.daemonCmd)
	if err != nil {
		return withExit(ExitFailure, err)
	}
	rep.Endpoints = doctorEndpoints{State: st.State, Error: st.Reachability.Error, AllowedHosts: []string{}, AllowedOrigins: []string{}}
	if st.Reachability.Address != "" {
		rep.Endpoints.Bound = describeEndpoint(st.Reachability.Network, st.Reachability.Address)
	}
	if launchErr == nil {
		rep.Endpoints.Listen, rep.Endpoints.Profile, rep.Endpoints.Auth = launch.Listen, launch.Profile, launch.Auth
		rep.Endpoints.AllowedHosts = append(rep.Endpoints.AllowedHosts, launch.AllowedHosts...)
		rep.Endpoints.AllowedOrigins = append(rep.Endpoints.AllowedOrigins, launch.AllowedOrigins...)
	}
	rep.Checks = fileChecks(dir, launchErr == nil && launch.Auth)
	var relayCheck *doctorCheck
	if rep.Relay, relayCheck = opts.relayState(ctx, dir, opts.offline); relayCheck != nil {
		rep.Checks = append(rep.Checks, *relayCheck)
	}
	if c := opts.relayProfileCheck(dir, launch, launchErr); c != nil {
		rep.Checks = append(rep.Checks, *c)
	}

	if opts.json {
		if err := writeJSON(opts.env.Out, rep); err != nil {
			return err
		}
	} else {
		printDoctor(opts.env, rep)
	}
	for _, c := range rep.Checks {
		if !c.OK {
			return silentExit(ExitFailure)
		}
	}
	return nil
}

func (o *doctorOptions) configPath(dir home.Dir, launch home.Launch) string {
	switch {
	case o.config != "":
		return absPath(o.config)
	case o.env.Getenv("REEVE_CONFIG") != "":
		return absPath(o.env.Getenv("REEVE_CONFIG"))
	case launch.ConfigFile != "":
		return launch.ConfigFile
	}
	return filepath.Join(string(dir), "config.yaml")
}

func checkConfigFile(path string) doctorConfig {
	c := doctorConfig{File: path}
	if _, err := os.Stat(path); err != nil {
		c.Valid = true // no file: defaults apply
		return c
	}
	c.Exists = true
	problems, err := config.ValidateFile(path)
	if err != nil {
		c.Problems = []string{err.Error()}
		return c
	}
	for _, p := range problems {
		c.Problems = append(c.Problems, p.String())
	}
	c.Valid = len(problems) == 0
	return c
}

// fileChecks verifies the modes that keep the home private. It reports; it
// never chmods anything.
func fileChecks(dir home.Dir, auth bool) []doctorCheck {
	var checks []doctorCheck
	info, err := os.Stat(string(dir))
	switch {
	case err != nil:
		checks = append(checks, doctorCheck{Name: "home", OK: false, Detail: err.Error()})
		return checks
	case info.Mode().Perm() != 0o700:
		checks = append(checks, doctorCheck{Name: "home", OK: false, Detail: fmt.Sprintf("%s is mode %04o, want 0700", dir, info.Mode().Perm())})
	default:
		checks = append(checks, doctorCheck{Name: "home", OK: true, Detail: string(dir) + " is mode 0700"})
	}
	for _, f := range []string{dir.TokenFile(), dir.LaunchFile(), dir.IdentityFile(), dir.StoreFile(), dir.LogFile(), dir.SupervisorPIDFile(), dir.EndpointFile(), dir.RelayFile(), dir.AnchorFile()} {
		info, err := os.Stat(f)
		if err != nil {
			if k, _ := dir.KeyStoreKind(); f == dir.TokenFile() && auth && k != "keychain" {
				checks = append(checks, doctorCheck{Name: filepath.Base(f), OK: false, Detail: "token auth is on but the token file is missing"})
			}
			continue
		}
		ok := info.Mode().Perm() == 0o600
		detail := fmt.Sprintf("mode %04o", info.Mode().Perm())
		if !ok {
			detail += ", want 0600"
		}
		checks = append(checks, doctorCheck{Name: filepath.Base(f), OK: ok, Detail: detail})
	}
	return checks
}

func printDoctor(env *Env, r doctorReport) {
	w := tabwriter.NewWriter(env.Out, 0, 4, 2, ' ', 0)
	id := r.Identity.DaemonID
	if id == "" {
		id = "(created on first start)"
	}
	fmt.Fprintf(w, "identity\tdaemon %s on %s, reeve %s\n", id, r.Identity.Hostname, r.Identity.Version)
	fmt.Fprintf(w, "home\t%s\n", r.Identity.Home)
	cfg := r.Config.File
	switch {
	case !r.Config.Exists:
		cfg += " (absent; defaults apply)"
	case r.Config.Valid:
		cfg += " (valid)"
	default:
		cfg += fmt.Sprintf(" (%d problems)", len(r.Config.Problems))
	}
	fmt.Fprintf(w, "config\t%s\n", cfg)
	for _, p := range r.Config.Problems {
		fmt.Fprintf(w, "\t  %s\n", p)
	}
	ep := r.Endpoints.State
	if r.Endpoints.Bound != "" {
		ep += " on " + r.Endpoints.Bound
	} else if r.Endpoints.Listen != "" {
		ep += " (launched with --listen " + r.Endpoints.Listen + ")"
	}
	if r.Endpoints.Profile != "" {
		ep += fmt.Sprintf(", profile %s, auth %v", r.Endpoints.Profile, r.Endpoints.Auth)
	}
	fmt.Fprintf(w, "endpoint\t%s\n", ep)
	if r.Endpoints.Error != "" {
		fmt.Fprintf(w, "\t  %s\n", r.Endpoints.Error)
	}
	for i, l := range describeRelay(r.Relay) {
		label := "relay"
		if i > 0 {
			label = ""
		}
		fmt.Fprintf(w, "%s\t%s\n", label, l)
	}
	for _, c := range r.Checks {
		mark := "ok"
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "check %s\t%s: %s\n", c.Name, mark, c.Detail)
	}
	w.Flush()
}
