package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/config"
)

func newConfigCmd(env *Env) *cobra.Command {
	return newGroupCmd("config", "Inspect the daemon configuration", newConfigResolveCmd(env))
}

type configResolveOptions struct {
	env *Env
	// resolved is the configuration from the flags the user set, the
	// environment and the config file, resolved before the command runs.
	resolved *config.Resolved
	json     bool
}

// resolvedConfig is the stable --json shape of `reeve config resolve`.
type resolvedConfig struct {
	ConfigFile string                   `json:"config_file"` // the file read, "" if none
	Settings   config.Settings          `json:"settings"`
	Sources    map[string]config.Source `json:"sources"`
}

func newConfigResolveCmd(env *Env) *cobra.Command {
	opts := &configResolveOptions{env: env}
	cmd := &cobra.Command{
		Use:   "resolve",
		Short: "Print the effective daemon configuration and where each value came from",
		Long: "Print the effective daemon configuration and where each value came from.\n\n" +
			"Precedence: flags > REEVE_* environment > config file > defaults. The config file is\n" +
			"<home>/config.yaml unless --config or REEVE_CONFIG names another; the home comes only\n" +
			"from --home, REEVE_HOME or the per-user default, never from the file.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := config.Load(config.LoadOptions{Flags: cmd.Flags(), Getenv: env.Getenv})
			if err != nil {
				return configExit(err)
			}
			opts.resolved = r
			return runConfigResolve(opts)
		},
	}
	// Declared here as well as on the root so the command resolves another
	// home on its own; a local flag shadows the root's persistent one.
	cmd.Flags().String("home", "", "daemon home to resolve (default $REEVE_HOME, else a per-user directory)")
	cmd.Flags().String("config", "", "config file (default $REEVE_CONFIG, else <home>/config.yaml)")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runConfigResolve(opts *configResolveOptions) error {
	r := opts.resolved
	if opts.json {
		return writeJSON(opts.env.Out, resolvedConfig{ConfigFile: r.File, Settings: r.Settings, Sources: r.Sources})
	}
	s := r.Settings
	values := map[string]string{
		config.KeyHome:         s.Home,
		config.KeyConfigFile:   s.ConfigFile,
		"listen":               s.Listen,
		"profile":              s.Profile,
		"allowed_hosts":        formatList(s.AllowedHosts),
		"allowed_origins":      formatList(s.AllowedOrigins),
		"auth":                 strconv.FormatBool(s.Auth),
		"default_agent":        s.DefaultAgent,
		"hook_timeout_seconds": strconv.Itoa(s.HookTimeoutSeconds),
		"default_mode":         s.DefaultMode,
		"session_upload":       s.SessionUpload,
	}
	tw := tabwriter.NewWriter(opts.env.Out, 0, 0, 2, ' ', 0)
	for _, key := range config.Keys() {
		v, ok := values[key]
		if !ok {
			return fmt.Errorf("config resolve: no display for key %q", key)
		}
		if v == "" {
			v = `""`
		}
		source := string(r.Sources[key])
		if key == config.KeyConfigFile && r.File == "" {
			source += ", not present"
		}
		fmt.Fprintf(tw, "%s\t%s\t(%s)\n", key, v, source)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write configuration: %w", err)
	}
	return nil
}

func formatList(xs []string) string { return "[" + strings.Join(xs, ", ") + "]" }

// configExit maps a config loading failure to its exit code: a bad file is
// invalid, a named file that is missing is not found, and a bad flag or
// environment value is a usage error.
func configExit(err error) error {
	var fe *config.FileError
	var se *config.SettingError
	switch {
	case errors.As(err, &fe):
		return withExit(ExitInvalid, err)
	case errors.As(err, &se):
		return withExit(ExitUsage, err)
	case errors.Is(err, fs.ErrNotExist):
		return withExit(ExitNotFound, err)
	}
	return withExit(ExitFailure, err)
}
