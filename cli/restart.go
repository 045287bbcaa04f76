package cli

import (
	"context"
	"errors"
	"io/fs"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/config"
)

type restartOptions struct {
	daemonCmd
	timeout    int
	foreground bool
	listen     string
	// inUse is how to pick another port when the saved one is taken, in
	// the terms of the command that restarts; "" is restart's own
	// --listen (update --yes restarts too, and has no --listen).
	inUse string
}

func newRestartCmd(env *Env) *cobra.Command {
	opts := &restartOptions{}
	cmd := &cobra.Command{
		Use:   "restart",
		Short: "Stop the daemon, then start it with the persisted launch configuration",
		Long: `Stop the daemon, then start it again with the launch configuration saved by
the last start. Running sessions are interrupted; restart names them first.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			return runRestart(cmd.Context(), opts)
		},
	}
	cmd.Flags().IntVar(&opts.timeout, "timeout", 15, "seconds to wait for the running daemon to stop")
	cmd.Flags().BoolVar(&opts.foreground, "foreground", false, "run the restarted daemon in the foreground")
	cmd.Flags().StringVar(&opts.listen, "listen", "", "listen on this address instead of the saved one (saved for later restarts)")
	return cmd
}

func runRestart(ctx context.Context, opts *restartOptions) error {
	if opts.timeout <= 0 {
		return exitf(ExitUsage, "--timeout must be a positive number of seconds, got %d", opts.timeout)
	}
	launch, err := opts.home.ReadLaunch()
	if errors.Is(err, fs.ErrNotExist) {
		return exitf(ExitNotRunning, "no launch configuration in %s: the daemon was never started from there (use `%s`)", opts.home, opts.reeve("start"))
	}
	if err != nil {
		return withExit(ExitFailure, err)
	}
	if opts.listen != "" {
		if _, err := config.ParseListen(opts.listen); err != nil {
			return withExit(ExitUsage, err)
		}
		if opts.listen != launch.Listen {
			reportLaunchChanges(opts.env.Err, opts.home, []launchChange{{Key: "listen", From: launch.Listen, To: opts.listen, Source: string(config.SourceFlag)}})
		}
		launch.Listen = opts.listen
	}
	opts.interrupted(ctx, "restarting the daemon")
	if _, err := opts.stopDaemon(ctx, false, time.Duration(opts.timeout)*time.Second); err != nil && exitCode(err) != ExitNotRunning {
		return err
	}
	inUse := opts.inUse
	if inUse == "" {
		inUse = "pass --listen with another port (it is saved for later restarts)"
	}
	return opts.startDaemon(ctx, launch, opts.foreground, inUse)
}
