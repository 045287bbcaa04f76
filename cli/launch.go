package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"reeve.dev/reeve/daemon/config"
	"reeve.dev/reeve/daemon/home"
)

// The persisted launch configuration (<home>/launch.json) decides how the
// daemon starts, whoever starts it: start, run, restart, pair and the
// service unit. A setting given now (a flag, a REEVE_* variable, the config
// file) changes it, and the command says so; a setting left at its default
// keeps the persisted value, so a plain `reeve start` after pairing keeps
// the relay profile and the chosen listen address.

// launchChange is one setting a command changes in the persisted launch.
type launchChange struct {
	Key    string `json:"key"`
	From   string `json:"from"`
	To     string `json:"to"`
	Source string `json:"source"` // flag, env or file
}

// resolvedLaunch is the launch a command would start with, beside the one
// persisted in the home (nil when there is none).
type resolvedLaunch struct {
	Launch    home.Launch
	Persisted *home.Launch
	Changes   []launchChange
}

// resolveLaunch resolves the launch configuration: settings given through
// flags, the environment or the config file win; those left at their
// default keep the persisted value. The config file a previous start named
// with --config stays in use until another is named.
func resolveLaunch(flags *pflag.FlagSet, getenv func(string) string) (resolvedLaunch, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var out resolvedLaunch
	homePath, _, _, fileSrc, err := config.Locate(config.LoadOptions{Flags: flags, Getenv: getenv})
	if err != nil {
		return out, err
	}
	prev, err := home.Dir(homePath).ReadLaunch()
	switch {
	case err == nil:
		out.Persisted = &prev
	case errors.Is(err, fs.ErrNotExist):
	default:
		return out, err
	}
	lookup := getenv
	if out.Persisted != nil && fileSrc == config.SourceDefault && prev.ConfigFile != "" {
		if _, err := os.Stat(prev.ConfigFile); err == nil {
			lookup = func(k string) string {
				if k == config.EnvName(config.KeyConfigFile) {
					return prev.ConfigFile
				}
				return getenv(k)
			}
		}
	}
	r, err := config.Load(config.LoadOptions{Flags: flags, Getenv: lookup})
	if err != nil {
		return out, err
	}
	out.Launch = launchFrom(r)
	if out.Persisted == nil {
		return out, nil
	}
	l := &out.Launch
	keep := func(key string) bool { return r.Sources[key] == config.SourceDefault }
	if keep("listen") {
		l.Listen = prev.Listen
	}
	if keep("profile") {
		l.Profile = prev.Profile
	}
	if keep("allowed_hosts") {
		l.AllowedHosts = prev.AllowedHosts
	}
	if keep("allowed_origins") {
		l.AllowedOrigins = prev.AllowedOrigins
	}
	if keep("auth") {
		l.Auth = prev.Auth
	}
	if keep("default_agent") {
		l.DefaultAgent = prev.DefaultAgent
	}
	if keep("hook_timeout_seconds") && prev.HookTimeout != 0 {
		l.HookTimeout = prev.HookTimeout
	}
	if keep("default_mode") && prev.DefaultMode != "" {
		l.DefaultMode = prev.DefaultMode
	}
	if keep("session_upload") && prev.SessionUpload != "" {
		l.SessionUpload = prev.SessionUpload
	}
	out.Changes = launchDiff(prev, *l, func(key string) string { return string(r.Sources[key]) })
	return out, nil
}

// launchDiff lists the settings that differ between two launches, in the
// config's key order.
func launchDiff(a, b home.Launch, source func(key string) string) []launchChange {
	var out []launchChange
	add := func(key, from, to string) {
		if from != to {
			out = append(out, launchChange{Key: key, From: from, To: to, Source: source(key)})
		}
	}
	list := func(xs []string) string { return strings.Join(xs, ",") }
	add(config.KeyConfigFile, a.ConfigFile, b.ConfigFile)
	add("listen", a.Listen, b.Listen)
	add("profile", a.Profile, b.Profile)
	if !slices.Equal(a.AllowedHosts, b.AllowedHosts) {
		add("allowed_hosts", list(a.AllowedHosts), list(b.AllowedHosts))
	}
	if !slices.Equal(a.AllowedOrigins, b.AllowedOrigins) {
		add("allowed_origins", list(a.AllowedOrigins), list(b.AllowedOrigins))
	}
	add("auth", fmt.Sprint(a.Auth), fmt.Sprint(b.Auth))
	add("default_agent", a.DefaultAgent, b.DefaultAgent)
	add("hook_timeout_seconds", fmt.Sprint(a.HookTimeout), fmt.Sprint(b.HookTimeout))
	add("default_mode", a.DefaultMode, b.DefaultMode)
	add("session_upload", a.SessionUpload, b.SessionUpload)
	return out
}

// describeChange is one change as a person reads it.
func describeChange(c launchChange) string {
	from, to := c.From, c.To
	if from == "" {
		from = `""`
	}
	if to == "" {
		to = `""`
	}
	by := ""
	switch c.Source {
	case string(config.SourceFlag):
		by = " (--" + config.FlagName(c.Key) + ")"
	case string(config.SourceEnv):
		by = " (" + config.EnvName(c.Key) + ")"
	case string(config.SourceFile):
		by = " (config file)"
	case "pair":
		by = " (paired for the relay)"
	}
	return fmt.Sprintf("%s %s -> %s%s", c.Key, from, to, by)
}

// reportLaunchChanges tells the user which saved settings a command changes.
func reportLaunchChanges(w io.Writer, dir home.Dir, changes []launchChange) {
	if len(changes) == 0 {
		return
	}
	parts := make([]string, len(changes))
	for i, c := range changes {
		parts[i] = describeChange(c)
	}
	fmt.Fprintf(w, "reeve: launch settings changed: %s; saved in %s for restart, run, pair and the service\n", strings.Join(parts, "; "), dir.LaunchFile())
}
