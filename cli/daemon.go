package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/config"
	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
)

// WorkerOptions is what the hidden worker command hands to the daemon worker.
type WorkerOptions struct {
	Home          string
	SupervisorPID int
	Stdin         io.Reader
	Status        io.Writer
	Log           io.Writer
}

// Programs are the long-running parts the binary hosts. main wires them in,
// so that cli stays free of the daemon worker's internals.
type Programs struct {
	// Worker runs the daemon worker process until ctx ends.
	Worker func(ctx context.Context, opts WorkerOptions) error
	// WorkerFatal reports whether a Worker error is a start-up failure that
	// a restart cannot fix.
	WorkerFatal func(error) bool
	// Server is the hosted control plane.
	Server ServerPrograms
	// Relay is a stand-alone relay instance (`reeve relay`).
	Relay RelayPrograms
}

// healthTimeout is how long status waits for /health before it calls a live
// daemon unresponsive.
const healthTimeout = 2 * time.Second

// addHomeFlag registers --home, the daemon home every daemon command works on.
func addHomeFlag(cmd *cobra.Command) {
	cmd.PersistentFlags().String("home", "", "daemon home directory (default $REEVE_HOME, else a per-user directory)")
}

// homeDir resolves the daemon home from --home, then REEVE_HOME, then the
// per-user default. Only start reads the config file; every other command
// needs nothing but the home to find the daemon.
func homeDir(cmd *cobra.Command, env *Env) (home.Dir, error) {
	h, _, _, _, err := config.Locate(config.LoadOptions{Flags: cmd.Flags(), Getenv: env.Getenv})
	if err != nil {
		return "", exitf(ExitUsage, "find the daemon home: %v (pass --home)", err)
	}
	return home.Dir(h), nil
}

// connect builds a client for the daemon running from the resolved home.
func connect(cmd *cobra.Command, env *Env) (*controlclient.Client, home.Dir, error) {
	dir, err := homeDir(cmd, env)
	if err != nil {
		return nil, "", err
	}
	c, _, err := controlclient.FromHome(dir, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, dir, exitf(ExitNotRunning, "no daemon is running from %s (start one with `reeve start`)", dir)
	}
	if err != nil {
		return nil, dir, withExit(ExitFailure, err)
	}
	return c, dir, nil
}

// apiExit maps a local API failure to the exit code the README documents.
func apiExit(err error) error {
	if err == nil {
		return nil
	}
	var ae *controlclient.APIError
	switch {
	case errors.As(err, &ae):
		switch ae.Status {
		case http.StatusUnauthorized, http.StatusForbidden:
			return withExit(ExitDenied, err)
		case http.StatusNotFound:
			return withExit(ExitNotFound, err)
		case http.StatusBadRequest, http.StatusUnprocessableEntity:
			return withExit(ExitUsage, err)
		case http.StatusConflict:
			return withExit(ExitConflict, err)
		}
	case errors.Is(err, controlclient.ErrUnreachable):
		return &ExitError{Code: ExitNotRunning, Err: fmt.Errorf("%w (is the daemon running? see `reeve status`)", err)}
	}
	return withExit(ExitFailure, err)
}
