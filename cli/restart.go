package cli

import (
	"context"
	"errors"
	"io/fs"
	"time"

	"github.com/spf13/cobra"
)

type restartOptions struct {
	env        *Env
	cmd        *cobra.Command
	timeout    int
	foreground bool
}

func newRestartCmd(env *Env) *cobra.Command {
	opts := &restartOptions{env: env}
	cmd := &cobra.Command{
		Use:   "restart",
		Short: "Stop the daemon, then start it with the persisted launch configuration",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { opts.cmd = cmd; return runRestart(cmd.Context(), opts) },
	}
	cmd.Flags().IntVar(&opts.timeout, "timeout", 15, "seconds to wait for the running daemon to stop")
	cmd.Flags().BoolVar(&opts.foreground, "foreground", false, "run the restarted daemon in the foreground")
	return cmd
}

func runRestart(ctx context.Context, opts *restartOptions) error {
	if opts.timeout <= 0 {
		return exitf(ExitUsage, "--timeout must be a positive number of seconds, got %d", opts.timeout)
	}
	dir, err := homeDir(opts.cmd, opts.env)
	if err != nil {
		return err
	}
	launch, err := dir.ReadLaunch()
	if errors.Is(err, fs.ErrNotExist) {
		return exitf(ExitNotRunning, "no launch configuration in %s: the daemon was never started from there (use `reeve start`)", dir)
	}
	if err != nil {
		return withExit(ExitFailure, err)
	}
	if _, err := stopDaemon(ctx, opts.env, dir, false, time.Duration(opts.timeout)*time.Second); err != nil && exitCode(err) != ExitNotRunning {
		return err
	}
	return startDaemon(ctx, opts.env, launch, opts.foreground)
}
