package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
)

type stopOptions struct {
	daemonCmd
	force   bool
	timeout int
	json    bool
	yes     bool
}

// stopResult is the --json shape of `reeve stop`.
type stopResult struct {
	State         string  `json:"state"` // "stopped"
	SupervisorPID int     `json:"supervisor_pid"`
	Forced        bool    `json:"forced"`
	Seconds       float64 `json:"seconds"`
}

func newStopCmd(env *Env) *cobra.Command {
	opts := &stopOptions{}
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Stop the daemon gracefully",
		Long: `Stop the daemon gracefully and wait until it has. Running sessions are
interrupted: stop names them first and, on a terminal, asks before it goes
on (--yes does not ask; declining exits 5).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			return runStop(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.force, "force", false, "send SIGKILL to the daemon's process group instead of stopping gracefully")
	cmd.Flags().IntVar(&opts.timeout, "timeout", 15, "seconds to wait for the daemon to stop")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the result as JSON")
	cmd.Flags().BoolVarP(&opts.yes, "yes", "y", false, "do not ask before interrupting running sessions")
	return cmd
}

func runStop(ctx context.Context, opts *stopOptions) error {
	if opts.timeout <= 0 {
		return exitf(ExitUsage, "--timeout must be a positive number of seconds, got %d", opts.timeout)
	}
	running := opts.interrupted(ctx, "stopping the daemon")
	if len(running) > 0 && !opts.yes && inTerminal(opts.env.In) {
		if !confirm(opts.env, "reeve: stop the daemon and interrupt them? [y/N] ") {
			return exitf(ExitConflict, "not stopped: %d sessions are running (pass --yes to stop anyway)", len(running))
		}
	}
	res, err := opts.stopDaemon(ctx, opts.force, time.Duration(opts.timeout)*time.Second)
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(opts.env.Out, res)
	}
	how := "stopped"
	if res.Forced {
		how = "killed"
	}
	fmt.Fprintf(opts.env.Err, "reeve: daemon %s (supervisor pid %d)\n", how, res.SupervisorPID)
	return nil
}

// interrupted lists, on stderr, the sessions the running daemon would
// interrupt by doing what; a daemon that does not answer lists nothing,
// saying so.
func (d *daemonCmd) interrupted(ctx context.Context, doing string) []wire.SessionInfo {
	if locked, err := d.home.Locked(); err != nil || !locked {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, p, err := d.protocol(ctx)
	if err != nil {
		fmt.Fprintf(d.env.Err, "reeve: cannot list the running sessions (%v)\n", err)
		return nil
	}
	defer c.Close()
	res, _, err := p.List(ctx, wire.ListRequest{Scope: wire.ScopeActive})
	if err != nil {
		fmt.Fprintf(d.env.Err, "reeve: cannot list the running sessions (%v)\n", err)
		return nil
	}
	if len(res.Sessions) == 0 {
		return nil
	}
	noun := "sessions"
	if len(res.Sessions) == 1 {
		noun = "session"
	}
	fmt.Fprintf(d.env.Err, "reeve: %s interrupts %d running %s:\n", doing, len(res.Sessions), noun)
	for _, s := range res.Sessions {
		fmt.Fprintf(d.env.Err, "reeve:   %s  %s  %s  %s\n", s.ID, s.Agent, s.Status, clip(oneLine(s.Prompt), 60))
	}
	return res.Sessions
}

// confirm asks a yes-or-no question on the terminal; only yes is yes.
func confirm(env *Env, question string) bool {
	fmt.Fprint(env.Err, question)
	line, _ := bufio.NewReader(env.In).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// stopDaemon ends the daemon running from d's home and waits until its
// lock is released, which is the proof that the supervisor is gone.
func (d *daemonCmd) stopDaemon(ctx context.Context, force bool, timeout time.Duration) (stopResult, error) {
	dir := d.home
	locked, err := dir.Locked()
	if err != nil {
		return stopResult{}, withExit(ExitFailure, err)
	}
	pidf, perr := home.ReadPID(dir.SupervisorPIDFile())
	if !locked {
		if perr == nil {
			dir.RemoveRuntimeFiles() // left by a daemon that died without cleaning up
		}
		return stopResult{}, exitf(ExitNotRunning, "no daemon is running from %s", dir)
	}
	if perr != nil {
		if errors.Is(perr, fs.ErrNotExist) {
			return stopResult{}, exitf(ExitFailure, "a supervisor holds %s but its pidfile is missing; stop it by hand", dir)
		}
		return stopResult{}, withExit(ExitFailure, perr)
	}
	began := time.Now()
	res := stopResult{State: "stopped", SupervisorPID: pidf.PID, Forced: force}
	if force {
		pgid := pidf.PGID
		if pgid <= 1 {
			pgid = pidf.PID
		}
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return res, withExit(ExitFailure, fmt.Errorf("kill process group %d: %w", pgid, err))
		}
		// The worker can be outside the group when the supervisor was run in
		// the foreground of a shell job; kill it by pid too.
		if w, err := home.ReadPID(dir.WorkerPIDFile()); err == nil {
			syscall.Kill(w.PID, syscall.SIGKILL)
		}
	} else if err := syscall.Kill(pidf.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return res, withExit(ExitFailure, fmt.Errorf("signal supervisor %d: %w", pidf.PID, err))
	}
	if err := d.waitUnlocked(ctx, timeout); err != nil {
		return res, err
	}
	// The lock drops as the supervisor exits; wait out the last moment so
	// that "stopped" means the process is gone.
	waitGone(pidf.PID, time.Until(began.Add(timeout)))
	if force {
		removeStaleSocket(dir)
		dir.RemoveRuntimeFiles()
	}
	res.Seconds = time.Since(began).Seconds()
	return res, nil
}

func (d *daemonCmd) waitUnlocked(ctx context.Context, timeout time.Duration) error {
	env, dir := d.env, d.home
	deadline := time.Now().Add(timeout)
	nextNote := time.Now().Add(2 * time.Second)
	for {
		locked, err := dir.Locked()
		if err != nil {
			return withExit(ExitFailure, err)
		}
		if !locked {
			return nil
		}
		if time.Now().After(deadline) {
			return exitf(ExitTimeout, "the daemon did not stop within %s; try `%s`", timeout, d.reeve("stop --force"))
		}
		if time.Now().After(nextNote) {
			fmt.Fprintln(env.Err, "reeve: waiting for the daemon to stop...")
			nextNote = time.Now().Add(2 * time.Second)
		}
		select {
		case <-ctx.Done():
			return withExit(ExitFailure, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// removeStaleSocket deletes the unix socket of a killed worker, which had no
// chance to remove it.
func removeStaleSocket(dir home.Dir) {
	if ep, err := dir.ReadEndpoint(); err == nil && ep.Network == "unix" {
		os.Remove(ep.Address)
	}
}

// waitGone waits until pid no longer runs (a zombie awaiting its reaper
// counts as gone) or the time is up.
func waitGone(pid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for pidAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}
