package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/wire"
)

type pairUnlockOptions struct {
	daemonCmd
	ttl  int
	json bool
}

// newPairUnlockCmd is `reeve pair unlock`: the machine-side act that opens
// a paired daemon to remote control through the relay for a while.
func newPairUnlockCmd(env *Env) *cobra.Command {
	opts := &pairUnlockOptions{}
	cmd := &cobra.Command{
		Use:   "unlock [--ttl SECONDS]",
		Short: "Let remote clients control this machine's daemon through the relay for a while",
		Long: "Remote control of a paired daemon (profile relay) is locked by default: a remote client gets a refusal.\n" +
			"unlock opens it for --ttl seconds (clamped to 300..3600; default 1800). Remote sessions opened meanwhile are\n" +
			"closed when the unlock ends, unless it is renewed. It only works from this machine (loopback or the unix socket).",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			return runPairUnlock(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.ttl, "ttl", wire.UnlockTTLDefault, fmt.Sprintf("seconds the unlock lasts (clamped to %d..%d)", wire.UnlockTTLMin, wire.UnlockTTLMax))
	f.BoolVar(&opts.json, "json", false, "print the remote-control state as JSON")
	return cmd
}

func runPairUnlock(ctx context.Context, opts *pairUnlockOptions) error {
	if opts.ttl < 0 {
		return exitf(ExitUsage, "--ttl must not be negative")
	}
	c, err := opts.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := c.UnlockRemote(ctx, opts.ttl)
	var ae *controlclient.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return exitf(ExitNotFound, "this daemon has no relay link: pair it (`%s`) and start it with --profile relay", opts.reeve("pair"))
	}
	if err != nil {
		return opts.apiExit(err)
	}
	if opts.json {
		return writeJSON(opts.env.Out, st)
	}
	if clamped := wire.ClampUnlockTTL(opts.ttl); clamped != opts.ttl {
		fmt.Fprintf(opts.env.Err, "reeve: --ttl %d is outside %d..%d; using %d\n", opts.ttl, wire.UnlockTTLMin, wire.UnlockTTLMax, clamped)
	}
	fmt.Fprintf(opts.env.Err, "reeve: remote control unlocked until %s (relay link: %s)\n", st.UnlockedUntil.Local().Format(time.DateTime), st.Link)
	fmt.Fprintln(opts.env.Out, st.UnlockedUntil.UTC().Format(time.RFC3339))
	return nil
}

// attachPairUnlock adds unlock under the root's pair command, creating a
// bare pair group when there is none yet, and leaving a pair command that
// already has unlock alone.
func attachPairUnlock(root *cobra.Command, env *Env) {
	for _, c := range root.Commands() {
		if c.Name() != "pair" {
			continue
		}
		for _, sub := range c.Commands() {
			if sub.Name() == "unlock" {
				return
			}
		}
		c.AddCommand(newPairUnlockCmd(env))
		return
	}
	root.AddCommand(newGroupCmd("pair", "Pair this machine with a control plane", newPairUnlockCmd(env)))
}
