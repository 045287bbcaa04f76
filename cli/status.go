package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
)

type statusOptions struct {
	daemonCmd
	json         bool
	checkUpdates bool
}

// Daemon states reported by `reeve status`.
const (
	stateRunning      = "running"
	stateStopped      = "stopped"
	stateUnresponsive = "unresponsive"
)

// daemonStatus is the --json shape of `reeve status`. Lifecycle (are the
// processes alive) and reachability (does the API answer) are reported
// separately; state combines them.
type daemonStatus struct {
	State        string        `json:"state"`
	Home         string        `json:"home"`
	Lifecycle    lifecycleInfo `json:"lifecycle"`
	Reachability reachInfo     `json:"reachability"`
	Health       *wire.Health  `json:"health,omitempty"`
	// Updates is set by --check-updates.
	Updates *updateCheck `json:"updates,omitempty"`
}

type lifecycleInfo struct {
	SupervisorAlive bool `json:"supervisor_alive"`
	SupervisorPID   int  `json:"supervisor_pid,omitempty"`
	WorkerAlive     bool `json:"worker_alive"`
	WorkerPID       int  `json:"worker_pid,omitempty"`
}

type reachInfo struct {
	Network   string `json:"network,omitempty"`
	Address   string `json:"address,omitempty"`
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
}

func newStatusCmd(env *Env) *cobra.Command {
	opts := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Report whether the daemon is running, stopped or unresponsive",
		Long:  "Report the daemon's state: running (health answers), stopped (no live supervisor) or unresponsive (alive, but health does not answer within 2s). Exit code 0, 3 or 9 respectively.",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			return runStatus(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	cmd.Flags().BoolVar(&opts.checkUpdates, "check-updates", false, "also ask the Go module proxy (GOPROXY) for the newest version")
	return cmd
}

func runStatus(ctx context.Context, opts *statusOptions) error {
	st, err := probeDaemon(ctx, &opts.daemonCmd)
	if err != nil {
		return withExit(ExitFailure, err)
	}
	if opts.checkUpdates {
		c, _ := checkUpdate(ctx, opts.env)
		st.Updates = &c
	}
	if opts.json {
		if err := writeJSON(opts.env.Out, st); err != nil {
			return err
		}
	} else {
		printStatus(opts.env, st)
		if u := st.Updates; u != nil {
			switch {
			case u.Error != "":
				fmt.Fprintf(opts.env.Out, "update check failed: %s\n", u.Error)
			case u.Available:
				fmt.Fprintf(opts.env.Out, "update available: %s (current %s); run `%s`\n", u.Latest, u.Current, opts.reeve("update"))
			default:
				fmt.Fprintf(opts.env.Out, "up to date: %s (newest %s)\n", u.Current, u.Latest)
			}
		}
	}
	switch st.State {
	case stateStopped:
		return silentExit(ExitNotRunning)
	case stateUnresponsive:
		return silentExit(ExitUnhealthy)
	}
	return nil
}

// probeDaemon combines the supervisor lock, the pidfiles and a bounded
// /health call into one state.
func probeDaemon(ctx context.Context, d *daemonCmd) (daemonStatus, error) {
	dir := d.home
	st := daemonStatus{State: stateStopped, Home: string(dir)}
	locked, err := dir.Locked()
	if err != nil {
		return st, err
	}
	if sup, err := home.ReadPID(dir.SupervisorPIDFile()); err == nil {
		st.Lifecycle.SupervisorPID = sup.PID
	}
	if wk, err := home.ReadPID(dir.WorkerPIDFile()); err == nil {
		st.Lifecycle.WorkerPID = wk.PID
		st.Lifecycle.WorkerAlive = locked && pidAlive(wk.PID)
	}
	st.Lifecycle.SupervisorAlive = locked
	if !locked {
		return st, nil
	}
	ep, err := dir.ReadEndpoint()
	if errors.Is(err, fs.ErrNotExist) {
		st.State = stateUnresponsive
		st.Reachability.Error = "the worker has not recorded an endpoint (starting, or restarting after a crash)"
		return st, nil
	}
	if err != nil {
		return st, err
	}
	st.Reachability.Network, st.Reachability.Address = ep.Network, ep.Address
	hctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	c, err := d.connect(hctx)
	if err != nil {
		return st, err
	}
	defer c.Close()
	h, err := c.Health(hctx)
	if err != nil {
		st.State = stateUnresponsive
		st.Reachability.Error = err.Error()
		return st, nil
	}
	st.State = stateRunning
	st.Reachability.Reachable = true
	st.Health = &h
	return st, nil
}

func printStatus(env *Env, st daemonStatus) {
	switch st.State {
	case stateStopped:
		fmt.Fprintf(env.Out, "stopped (home %s)\n", st.Home)
	case stateUnresponsive:
		fmt.Fprintf(env.Out, "unresponsive: supervisor pid %d is alive but health does not answer: %s\n", st.Lifecycle.SupervisorPID, st.Reachability.Error)
	default:
		h := st.Health
		fmt.Fprintf(env.Out, "running: %s, supervisor pid %d, worker pid %d, up %s, %d active sessions, version %s\n",
			describeEndpoint(st.Reachability.Network, st.Reachability.Address), h.SupervisorPID, h.WorkerPID,
			(time.Duration(h.UptimeSeconds) * time.Second).String(), h.Sessions, h.Version)
	}
}

// pidAlive reports whether a process with pid exists and has not exited
// (a zombie has exited; only its exit status is waiting to be collected).
func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no procfs: trust kill(0)
	}
	// The state follows the parenthesised command name, which may itself
	// contain spaces or parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}
