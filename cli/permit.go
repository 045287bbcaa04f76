package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/hookbridge"
)

type permitListOptions struct {
	daemonCmd
	session string
	json    bool
}

type permitDecideOptions struct {
	daemonCmd
	decision  string
	requestID string
	reason    string
	remember  bool
	json      bool
}

func newPermitCmd(env *Env) *cobra.Command {
	ls := &permitListOptions{}
	lsCmd := &cobra.Command{
		Use:   "ls",
		Short: "List permission requests waiting for a decision",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ls.bind(cmd, env); err != nil {
				return err
			}
			return runPermitList(cmd.Context(), ls)
		},
	}
	lsCmd.Flags().StringVar(&ls.session, "session", "", "only requests of this session")
	lsCmd.Flags().BoolVar(&ls.json, "json", false, "print as JSON")
	return newGroupCmd("permit", "Decide agents' pending permission requests", lsCmd,
		newPermitDecideCmd(env, hookbridge.Allow), newPermitDecideCmd(env, hookbridge.Deny))
}

func newPermitDecideCmd(env *Env, decision string) *cobra.Command {
	opts := &permitDecideOptions{decision: decision}
	cmd := &cobra.Command{
		Use:   decision + " ID",
		Short: fmt.Sprintf("%s a pending permission request", map[string]string{hookbridge.Allow: "Allow", hookbridge.Deny: "Deny"}[decision]),
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			opts.requestID = args[0]
			return runPermitDecide(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.reason, "reason", "", "why; the agent is shown it")
	cmd.Flags().BoolVar(&opts.remember, "remember", false, "decide the same for this tool for the rest of the session")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the decision as JSON")
	return cmd
}

func runPermitList(ctx context.Context, opts *permitListOptions) error {
	c, err := opts.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	pending, err := c.Pending(ctx, opts.session)
	if err != nil {
		return opts.apiExit(err)
	}
	if opts.json {
		return writeJSON(opts.env.Out, wire.PermissionList{Pending: pending})
	}
	if len(pending) == 0 {
		fmt.Fprintln(opts.env.Err, "reeve: no permission requests are waiting")
		return nil
	}
	w := tabwriter.NewWriter(opts.env.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "REQUEST\tSESSION\tAGENT\tTOOL\tWAITING\tINPUT")
	for _, p := range pending {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.SessionID, p.Agent, p.Tool, since(p.CreatedAt), clip(string(p.Input), 80))
	}
	return w.Flush()
}

func runPermitDecide(ctx context.Context, opts *permitDecideOptions) error {
	c, p, err := opts.protocol(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	d, err := p.RespondPermission(ctx, wire.RespondPermissionRequest{RequestID: opts.requestID, Decision: opts.decision, Reason: opts.reason, Remember: opts.remember})
	if err != nil {
		return opts.ackExit(err)
	}
	if opts.json {
		return writeJSON(opts.env.Out, d)
	}
	scope := ""
	if d.Remember {
		scope = ", and for " + d.Tool + " for the rest of the session"
	}
	fmt.Fprintf(opts.env.Err, "reeve: %s %s (%s in session %s)%s\n", pastTense(d.Decision), d.RequestID, d.Tool, d.SessionID, scope)
	return nil
}

func pastTense(decision string) string {
	if decision == hookbridge.Allow {
		return "allowed"
	}
	return "denied"
}

type agentModeOptions struct {
	daemonCmd
	sessionID string
	mode      string
	json      bool
}

func newAgentCmd(env *Env) *cobra.Command {
	opts := &agentModeOptions{}
	mode := &cobra.Command{
		Use:   "mode SID [detect|bypass]",
		Short: "Read or set a session's operator mode: detect asks a human, bypass allows and records",
		Args:  usageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			opts.sessionID, opts.mode = args[0], ""
			if len(args) == 2 {
				opts.mode = args[1]
			}
			return runAgentMode(cmd.Context(), opts)
		},
	}
	mode.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return newGroupCmd("agent", "Operator controls of a session's agent", mode)
}

func runAgentMode(ctx context.Context, opts *agentModeOptions) error {
	if opts.mode != "" && !hookbridge.ValidMode(opts.mode) {
		return exitf(ExitUsage, "mode must be detect or bypass, not %q", opts.mode)
	}
	c, p, err := opts.protocol(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if opts.mode != "" {
		if err := p.SetMode(ctx, wire.SetModeRequest{SessionID: opts.sessionID, Mode: opts.mode}); err != nil {
			return opts.ackExit(err)
		}
	}
	stop := opts.env.waitingFor("reading the mode of session " + opts.sessionID)
	m, err := c.Manifest(ctx, opts.sessionID)
	stop()
	if err != nil {
		return opts.apiExit(err)
	}
	if opts.json {
		return writeJSON(opts.env.Out, map[string]string{"session_id": m.SessionID, "mode": m.PermissionMode})
	}
	fmt.Fprintln(opts.env.Out, m.PermissionMode)
	return nil
}
