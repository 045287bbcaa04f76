package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/autostart"
)

// reeve service install|uninstall|status: the auto-start unit of the
// platform's service manager (daemon/autostart).

type serviceOptions struct {
	daemonCmd
	system  bool
	user    string
	root    string
	name    string
	print   bool
	noStart bool
	json    bool
}

func newServiceCmd(env *Env) *cobra.Command {
	mk := func(use, short, long string, run func(context.Context, *serviceOptions) error, flags func(*cobra.Command, *serviceOptions)) *cobra.Command {
		opts := &serviceOptions{}
		cmd := &cobra.Command{
			Use: use, Short: short, Long: long, Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if err := opts.bind(cmd, env); err != nil {
					return err
				}
				return run(cmd.Context(), opts)
			},
		}
		f := cmd.Flags()
		f.BoolVar(&opts.system, "system", false, "a system unit, started at boot (needs root), instead of the user's, started at login")
		f.StringVar(&opts.root, "root", "", "work on the unit under this directory instead of the live system (an image being built)")
		f.StringVar(&opts.name, "name", "reeve", "unit name (one per daemon home)")
		if flags != nil {
			flags(cmd, opts)
		}
		return cmd
	}
	install := mk("install", "Install the auto-start unit and start it",
		`Install the unit that makes the platform's service manager start the daemon:
a systemd user unit on Linux (--system for a system unit), a launchd agent on
macOS. The unit runs `+"`reeve start --foreground --home HOME`"+`, so the daemon
starts with the launch settings saved in the home, restarts on failure and
logs to the journal. Installing again changes nothing; --print writes the
unit to stdout instead, for a person to place.`,
		runServiceInstall, func(cmd *cobra.Command, o *serviceOptions) {
			f := cmd.Flags()
			f.StringVar(&o.user, "user", "", "with --system: the user the daemon runs as (default the current one)")
			f.BoolVar(&o.print, "print", false, "write the unit to stdout and install nothing")
			f.BoolVar(&o.noStart, "no-start", false, "enable the unit without starting it now")
			f.BoolVar(&o.json, "json", false, "print the report as JSON")
		})
	uninstall := mk("uninstall", "Stop, disable and remove the auto-start unit", "", runServiceUninstall, func(cmd *cobra.Command, o *serviceOptions) {
		cmd.Flags().BoolVar(&o.json, "json", false, "print the report as JSON")
	})
	status := mk("status", "Report whether the auto-start unit is installed, enabled and running", "", runServiceStatus, func(cmd *cobra.Command, o *serviceOptions) {
		cmd.Flags().BoolVar(&o.json, "json", false, "print as JSON")
	})
	return newGroupCmd("service", "Manage the auto-start unit of the platform's service manager", install, uninstall, status)
}

func (o *serviceOptions) autostart() (autostart.Options, error) {
	exe, err := o.env.Executable()
	if err != nil {
		return autostart.Options{}, withExit(ExitFailure, fmt.Errorf("locate the reeve executable: %w", err))
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	a := autostart.Options{
		Executable: absPath(exe), Home: absPath(string(o.home)), Name: o.name,
		System: o.system, UserName: o.user, Root: o.root,
	}
	if o.root != "" {
		a.Root = absPath(o.root)
	}
	if o.user != "" && !o.system {
		return a, exitf(ExitUsage, "--user names the user of a system unit; pass --system too")
	}
	if o.system && a.UserName == "" {
		a.UserName = o.env.Getenv("USER")
	}
	return a, nil
}

// serviceExit maps the autostart errors to exit codes.
func serviceExit(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, autostart.ErrNoManager), errors.Is(err, autostart.ErrUnsupported):
		return withExit(ExitNotRunning, err)
	case errors.Is(err, autostart.ErrPermission):
		return withExit(ExitDenied, err)
	}
	return withExit(ExitFailure, err)
}

func runServiceInstall(ctx context.Context, o *serviceOptions) error {
	a, err := o.autostart()
	if err != nil {
		return err
	}
	if o.print {
		u, err := autostart.Render(a)
		if err != nil {
			return serviceExit(err)
		}
		fmt.Fprintf(o.env.Err, "reeve: %s unit for %s (install nothing); place it at %s\n", u.Platform, a.Home, u.Path)
		fmt.Fprint(o.env.Out, u.Content)
		return nil
	}
	// A daemon started by hand holds the home: the unit is enabled for
	// the next login or boot, not started over it.
	start := !o.noStart && a.Root == ""
	if locked, _ := o.home.Locked(); start && locked {
		start = false
		fmt.Fprintf(o.env.Err, "reeve: a daemon is already running from %s; the unit starts it from the next login (to hand it over now: `%s`, then start the unit)\n", o.home, o.reeve("stop"))
	}
	rep, err := autostart.Install(ctx, a, start)
	if err != nil {
		return serviceExit(err)
	}
	if o.json {
		return writeJSON(o.env.Out, rep)
	}
	for _, s := range rep.Steps {
		fmt.Fprintf(o.env.Out, "%s\n", s)
	}
	if a.Root == "" {
		fmt.Fprintf(o.env.Err, "reeve: the daemon starts with the launch settings saved in %s; `%s` flags change them\n", o.home.LaunchFile(), o.reeve("start"))
	}
	return nil
}

func runServiceUninstall(ctx context.Context, o *serviceOptions) error {
	a, err := o.autostart()
	if err != nil {
		return err
	}
	rep, err := autostart.Uninstall(ctx, a)
	if err != nil {
		return serviceExit(err)
	}
	if o.json {
		return writeJSON(o.env.Out, rep)
	}
	for _, s := range rep.Steps {
		fmt.Fprintf(o.env.Out, "%s\n", s)
	}
	return nil
}

func runServiceStatus(ctx context.Context, o *serviceOptions) error {
	a, err := o.autostart()
	if err != nil {
		return err
	}
	st, err := autostart.StatusOf(ctx, a)
	if err != nil && st.Unit == "" {
		return serviceExit(err)
	}
	if o.json {
		if werr := writeJSON(o.env.Out, st); werr != nil {
			return werr
		}
	} else {
		state := "not installed"
		if st.Installed {
			state = fmt.Sprintf("installed, %s, %s", yesNo(st.Enabled, "enabled", "disabled"), yesNo(st.Running, "running", "not running"))
			if !st.Current {
				state += " (written for another executable or home: run `" + o.reeve("service install") + "` again)"
			}
		}
		fmt.Fprintf(o.env.Out, "%s %s unit %s: %s\n", st.Scope, st.Platform, st.Unit, state)
		fmt.Fprintf(o.env.Out, "  file %s\n", st.Path)
		fmt.Fprintf(o.env.Out, "  service manager %s\n", st.Manager)
	}
	if err != nil {
		return serviceExit(err)
	}
	return nil
}

func yesNo(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}
