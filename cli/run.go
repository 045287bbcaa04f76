package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/config"
	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
)

type runOptions struct {
	env     *Env
	cmd     *cobra.Command
	dir     string
	prompt  string
	agent   string
	model   string
	mode    string
	wait    bool
	attach  bool
	timeout int
	json    bool
}

func newRunCmd(env *Env) *cobra.Command {
	opts := &runOptions{env: env}
	cmd := &cobra.Command{
		Use:   "run [DIR] --prompt TEXT",
		Short: "Start an agent session in a directory (default: the current one)",
		Long: `Start an agent session. DIR is registered with the daemon if it is not yet,
and a daemon is started if none is running. Without --agent the configured
default_agent is used, else the first installed of claude and codex, else shell.

Prints the session id. --attach streams the session's events until it ends;
--wait waits silently. With either, the exit code is 0 when the session
completed and 10 when it failed, was killed or was interrupted.`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.cmd, opts.dir = cmd, "."
			if len(args) == 1 {
				opts.dir = args[0]
			}
			return runRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.prompt, "prompt", "", "the prompt (required)")
	f.StringVar(&opts.agent, "agent", "", "agent id: claude, codex, shell, or a custom agent")
	f.StringVar(&opts.model, "model", "", "model id passed to the agent")
	f.StringVar(&opts.mode, "mode", "", "operator mode: detect (a human decides tool uses; the default) or bypass (allow and record)")
	f.BoolVar(&opts.wait, "wait", false, "wait until the session ends")
	f.BoolVar(&opts.attach, "attach", false, "stream the session's events until it ends")
	f.IntVar(&opts.timeout, "timeout", 0, "with --wait or --attach: give up waiting after SECONDS (the session keeps running)")
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
	c, err := ensureDaemon(ctx, opts.cmd, opts.env)
	if err != nil {
		return err
	}
	added, err := c.AddDirectory(ctx, absPath(opts.dir))
	if err != nil {
		return apiExit(err)
	}
	k, err := c.Dial(ctx)
	if err != nil {
		return apiExit(err)
	}
	defer k.Close()
	si, err := k.Launch(ctx, wire.LaunchRequest{Directory: added.Directory.ID, Prompt: opts.prompt, Agent: opts.agent, Model: opts.model, Mode: opts.mode})
	if err != nil {
		return ackExit(err)
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
	if err := k.Subscribe(wctx, si.ID, 0); err != nil {
		return timeoutExit(wctx, ackExit(err), "session "+si.ID)
	}
	end, err := streamSession(wctx, opts.env, k, si.ID, streamOptions{json: opts.json && opts.attach, quiet: !opts.attach})
	if err != nil {
		return timeoutExit(wctx, err, "session "+si.ID)
	}
	return finishWait(wctx, opts.env, c, end, opts.json && !opts.attach)
}

// finishWait reports how a waited-for session ended and sets the exit code.
func finishWait(ctx context.Context, env *Env, c *controlclient.Client, end wire.SessionEnded, asJSON bool) error {
	if asJSON {
		si, err := c.Session(ctx, end.SessionID)
		if err != nil {
			return apiExit(err)
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

// ensureDaemon returns a client for the running daemon, starting one in
// the background first when none runs.
func ensureDaemon(ctx context.Context, cmd *cobra.Command, env *Env) (*controlclient.Client, error) {
	dir, err := homeDir(cmd, env)
	if err != nil {
		return nil, err
	}
	if locked, _ := dir.Locked(); !locked {
		fmt.Fprintf(env.Err, "reeve: no daemon is running from %s; starting one\n", dir)
		resolved, err := config.Load(config.LoadOptions{Flags: cmd.Flags(), Getenv: env.Getenv})
		if err != nil {
			return nil, configExit(err)
		}
		if err := startDaemon(ctx, env, launchFrom(resolved), false); err != nil && exitCode(err) != ExitConflict {
			return nil, err
		}
	}
	c, _, err := controlclient.FromHome(dir, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, exitf(ExitNotRunning, "the daemon from %s has not recorded an endpoint yet; see `reeve status`", dir)
	}
	if err != nil {
		return nil, withExit(ExitFailure, err)
	}
	return c, nil
}

// launchFrom turns resolved settings into a launch configuration.
func launchFrom(r *config.Resolved) home.Launch {
	s := r.Settings
	return home.Launch{
		Home: s.Home, ConfigFile: r.File, Listen: s.Listen, Profile: s.Profile,
		AllowedHosts: s.AllowedHosts, AllowedOrigins: s.AllowedOrigins, Auth: s.Auth,
		DefaultAgent: s.DefaultAgent, HookTimeout: s.HookTimeoutSeconds, DefaultMode: s.DefaultMode,
	}
}

func decodeBase64(s string) string {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return ""
	}
	return string(b)
}
