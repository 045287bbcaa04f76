// Command reeve runs coding agents under governance: the local daemon, its
// command line, and the hosted control plane (`reeve server`).
package main

import (
	"context"
	"os"

	"reeve.dev/reeve/cli"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/runtime"
)

func main() {
	// The worker's internals are wired in here rather than imported by cli,
	// which keeps the command layer free of daemon business logic.
	os.Exit(cli.Main(cli.Programs{
		Worker: func(ctx context.Context, o cli.WorkerOptions) error {
			return runtime.Run(ctx, runtime.Options{
				Home: home.Dir(o.Home), SupervisorPID: o.SupervisorPID,
				Stdin: o.Stdin, Status: o.Status, Log: o.Log,
			})
		},
		WorkerFatal: runtime.IsFatal,
	}))
}
