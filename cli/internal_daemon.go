package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/supervisor"
	"reeve.dev/reeve/daemon/wire"
)

// The daemon's own processes are started from this same executable through
// two hidden commands: `start` runs daemon-supervisor, which runs
// daemon-worker.

type supervisorCmdOptions struct {
	env  *Env
	home string
}

func newSupervisorCmd(env *Env) *cobra.Command {
	opts := &supervisorCmdOptions{env: env}
	cmd := &cobra.Command{
		Use:    "daemon-supervisor",
		Short:  "Run the daemon supervisor (started by `reeve start`)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exe, err := env.Executable()
			if err != nil {
				return withExit(ExitFailure, err)
			}
			dir := home.Dir(opts.home)
			// The settings of the start that spawned this supervisor; the
			// worker must not inherit them.
			var launch *home.Launch
			if v := env.Getenv(envLaunch); v != "" {
				launch = &home.Launch{}
				if err := json.Unmarshal([]byte(v), launch); err != nil {
					return withExit(ExitFailure, fmt.Errorf("%s: %w", envLaunch, err))
				}
			}
			os.Unsetenv(envLaunch)
			err = supervisor.Run(cmd.Context(), supervisor.Options{
				Home: dir, Executable: exe, WorkerArgs: workerArgs(dir),
				Log: env.Err, Status: statusPipe(env), Launch: launch,
			})
			return withExit(ExitFailure, err)
		},
	}
	cmd.Flags().StringVar(&opts.home, "home", "", "daemon home")
	cmd.MarkFlagRequired("home")
	return cmd
}

type workerCmdOptions struct {
	env      *Env
	home     string
	programs Programs
}

func newWorkerCmd(env *Env, programs Programs) *cobra.Command {
	opts := &workerCmdOptions{env: env, programs: programs}
	cmd := &cobra.Command{
		Use:    "daemon-worker",
		Short:  "Run the daemon worker (started by the supervisor)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			supPID, _ := strconv.Atoi(env.Getenv("REEVE_SUPERVISOR_PID"))
			status := statusPipe(env)
			// These describe this process's plumbing; the agents it starts
			// must not inherit them.
			os.Unsetenv("REEVE_SUPERVISOR_PID")
			os.Unsetenv("REEVE_STATUS_FD")
			err := opts.programs.Worker(cmd.Context(), WorkerOptions{
				Home: opts.home, SupervisorPID: supPID, Stdin: env.In, Status: status, Log: env.Err,
			})
			if err != nil && opts.programs.WorkerFatal != nil && opts.programs.WorkerFatal(err) {
				return &ExitError{Code: wire.WorkerExitFatal, Err: err}
			}
			return withExit(ExitFailure, err)
		},
	}
	cmd.Flags().StringVar(&opts.home, "home", "", "daemon home")
	cmd.MarkFlagRequired("home")
	return cmd
}

// statusPipe returns the readiness pipe `start` passed to a background
// supervisor, or nil when there is none.
func statusPipe(env *Env) io.Writer {
	fd, err := strconv.Atoi(env.Getenv("REEVE_STATUS_FD"))
	if err != nil || fd < 3 {
		return nil
	}
	if f := os.NewFile(uintptr(fd), "status"); f != nil {
		return f
	}
	return nil
}
