package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/config"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
)

type runOptions struct {
	daemonCmd
	// launch is the configuration of a daemon this command has to start,
	// resolved from its flags, the environment and the config file before
	// it runs; launchErr says why there is none (it matters only when a
	// daemon must be started).
	launch    home.Launch
	launchErr error
	// ignored are settings given now that differ from the persisted
	// launch: run starts with the persisted one and says so.
	ignored []launchChange
	dir     string
	prompt  string
	agent   string
	model   string
	mode    string
	wait    bool
	attach  bool
	noInput bool
	timeout int
	json    bool
}

func newRunCmd(env *Env) *cobra.Command {
	opts := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run [DIR] --prompt TEXT",
		Short: "Start an agent session in a directory (default: the current one)",
		Long: `Start an agent session. DIR is registered with the daemon if it is not yet,
and a daemon is started if none is running. Without --agent the configured
default_agent is used, else the first installed of claude, codex and gemini, else shell.

Prints the session id. --attach streams the session's events until it ends;
--wait waits silently. With either, the exit code is 0 when the session
completed and 10 when it failed, was killed or was interrupted. While the
session waits for a permission decision they say so on stderr, with the
commands that give it; --attach on a terminal also offers to give it with
one key (y allows, n denies, s leaves it for later), unless --no-input.`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			if r, err := resolveLaunch(cmd.Flags(), env.Getenv); err != nil {
				opts.launchErr = configExit(err)
			} else {
				opts.launch, opts.ignored = r.Launch, r.Changes
				if r.Persisted != nil {
					opts.launch = *r.Persisted
				}
			}
			opts.dir = "."
			if len(args) == 1 {
				opts.dir = args[0]
			}
			return runRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.prompt, "prompt", "", "the prompt (required)")
	f.StringVar(&opts.agent, "agent", "", "agent id: claude, codex, gemini, shell, or a custom agent")
	f.StringVar(&opts.model, "model", "", "model id passed to the agent")
	f.StringVar(&opts.mode, "mode", "", "operator mode: detect (a human decides tool uses; the default) or bypass (allow and record)")
	f.BoolVar(&opts.wait, "wait", false, "wait until the session ends")
	f.BoolVar(&opts.attach, "attach", false, "stream the session's events until it ends")
	f.BoolVar(&opts.noInput, "no-input", false, "with --attach on a terminal: do not offer to decide permission requests with a key")
	f.IntVar(&opts.timeout, "timeout", 0, "with --wait or --attach (required): give up waiting after SECONDS (the session keeps running)")
	f.BoolVar(&opts.json, "json", false, "print JSON: the session, or with --attach one frame per line")
	f.String("config", "", "config file used if a daemon has to be started")
	cmd.MarkFlagRequired("prompt")
	return cmd
}

func runRun(ctx context.Context, opts *runOptions) error {
	if opts.prompt == "" {
		return exitf(ExitUsage, "--prompt must not be empty")
	}
	if opts.timeout < 0 {
		return exitf(ExitUsage, "--timeout must not be negative")
	}
	if opts.timeout > 0 && !opts.wait && !opts.attach {
		// Without either, run returns once the session started: a
		// --timeout would bound nothing, and a script relying on it
		// would not wait at all.
		return exitf(ExitUsage, "--timeout bounds a wait: add --wait or --attach")
	}
	dir, err := existingDir(opts.dir)
	if err != nil {
		return err
	}
	if err := opts.ensureDaemon(ctx); err != nil {
		return err
	}
	c, err := opts.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	added, err := c.AddDirectory(ctx, dir)
	if err != nil {
		return opts.apiExit(err)
	}
	p, err := c.Protocol(ctx)
	if err != nil {
		return opts.apiExit(err)
	}
	si, err := p.Launch(ctx, wire.LaunchRequest{Directory: added.Directory.ID, Prompt: opts.prompt, Agent: opts.agent, Model: opts.model, Mode: opts.mode})
	if err != nil {
		return opts.ackExit(err)
	}
	fmt.Fprintf(opts.env.Err, "reeve: session %s started: agent %s in %s\n", si.ID, si.Agent, si.Workdir)
	if !opts.wait && !opts.attach {
		if opts.json {
			return writeJSON(opts.env.Out, si)
		}
		fmt.Fprintln(opts.env.Out, si.ID)
		return nil
	}
	wctx, cancel := withTimeout(ctx, opts.timeout)
	defer cancel()
	end, err := opts.followSession(wctx, c, si.ID, 0, followOptions{
		json: opts.json && opts.attach, quiet: !opts.attach, ask: opts.attach && !opts.noInput && !opts.json,
	})
	if err != nil {
		return err
	}
	return opts.finishWait(wctx, c, end, opts.json && !opts.attach)
}

// existingDir is the absolute path of a directory that must exist: a
// missing one is not found (exit 4), a file a usage error.
func existingDir(p string) (string, error) {
	abs := absPath(p)
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", exitf(ExitNotFound, "directory %s does not exist", p)
	case err != nil:
		return "", withExit(ExitFailure, err)
	case !fi.IsDir():
		return "", exitf(ExitUsage, "%s is not a directory", p)
	}
	return abs, nil
}

// finishWait reports how a waited-for session ended and sets the exit code.
func (d *daemonCmd) finishWait(ctx context.Context, c Daemon, end wire.SessionEnded, asJSON bool) error {
	env := d.env
	if asJSON {
		si, err := c.Session(ctx, end.SessionID)
		if err != nil {
			return d.apiExit(err)
		}
		if err := writeJSON(env.Out, si); err != nil {
			return err
		}
	}
	msg := fmt.Sprintf("reeve: session %s %s", end.SessionID, end.Status)
	if end.Reason != "" {
		msg += ": " + end.Reason
	}
	fmt.Fprintln(env.Err, msg)
	return sessionExit(end.Status)
}

// ensureDaemon starts a daemon in the background when none runs from the
// home, with the configuration the command's flags, the environment and
// the config file give.
func (o *runOptions) ensureDaemon(ctx context.Context) error {
	if locked, _ := o.home.Locked(); locked {
		return nil
	}
	fmt.Fprintf(o.env.Err, "reeve: no daemon is running from %s; starting one\n", o.home)
	if o.launchErr != nil {
		return o.launchErr
	}
	if len(o.ignored) > 0 {
		parts := make([]string, len(o.ignored))
		for i, c := range o.ignored {
			parts[i] = describeChange(c)
		}
		fmt.Fprintf(o.env.Err, "reeve: starting with the saved launch settings of %s; not applied: %s (use `%s` to change them)\n", o.home.LaunchFile(), strings.Join(parts, "; "), o.reeve("start"))
	}
	inUse := "set listen in the config file (--config FILE) or REEVE_LISTEN to a free port, or start the daemon yourself with `" + o.reeve("start --listen ADDR") + "`"
	if err := o.startDaemon(ctx, o.launch, false, inUse); err != nil && !errors.Is(err, errAlreadyRunning) {
		return err
	}
	return nil
}

// launchFrom turns resolved settings into a launch configuration.
func launchFrom(r *config.Resolved) home.Launch {
	s := r.Settings
	return home.Launch{
		Home: s.Home, ConfigFile: r.File, Listen: s.Listen, Profile: s.Profile,
		AllowedHosts: s.AllowedHosts, AllowedOrigins: s.AllowedOrigins, Auth: s.Auth,
		DefaultAgent: s.DefaultAgent, HookTimeout: s.HookTimeoutSeconds, DefaultMode: s.DefaultMode,
		SessionUpload: s.SessionUpload,
	}
}
