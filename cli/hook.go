package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/hookbridge"
)

// maxHookInput bounds what a hook reads from the agent.
const maxHookInput = 8 << 20

type hookOptions struct {
	env     *Env
	event   string
	home    string
	session string
	timeout int
}

// newHookCmd is the command agents' hooks run. It is hidden: people do not
// call it, agents do, with the settings reeve writes for each session.
func newHookCmd(env *Env) *cobra.Command {
	opts := &hookOptions{env: env}
	cmd := &cobra.Command{
		Use:    "hook EVENT --home HOME --session SID",
		Short:  "Report an agent's hook event to the daemon and print its decision",
		Hidden: true,
		Args:   usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.event = args[0]
			return runHook(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.home, "home", "", "daemon home")
	cmd.Flags().StringVar(&opts.session, "session", "", "reeve session id")
	cmd.Flags().IntVar(&opts.timeout, "timeout", 630, "seconds from start to answer (reading the input included) before denying")
	cmd.MarkFlagRequired("home")
	cmd.MarkFlagRequired("session")
	return cmd
}

// runHook never fails open: for PreToolUse every path that does not end in
// the daemon's allow prints a deny, with a reason the agent can show, and
// a PermissionRequest that cannot reach the daemon is denied too.
func runHook(ctx context.Context, opts *hookOptions) error {
	decide := hookbridge.Decides(opts.event)
	deny := func(reason string) error {
		switch {
		case decide:
			_, err := opts.env.Out.Write(hookbridge.DecisionOutput(opts.event, hookbridge.Deny, reason))
			return err
		case opts.event == "PermissionRequest":
			// The second layer: when reeve cannot be reached, the
			// permission prompt is answered no before it goes anywhere.
			_, err := opts.env.Out.Write(hookbridge.PermissionRequestOutput(reason))
			return err
		}
		fmt.Fprintln(opts.env.Err, "reeve hook:", reason)
		return nil
	}
	// The timeout bounds everything from start to answer: an agent that
	// never closes stdin gets its deny on time too.
	timeout := time.Duration(opts.timeout) * time.Second
	if timeout <= 0 {
		timeout = 630 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	late := func() error {
		return deny(fmt.Sprintf("reeve got no decision within %s, so the tool use is denied", timeout))
	}
	type read struct {
		b   []byte
		err error
	}
	got := make(chan read, 1)
	go func() {
		// Left blocked on a stdin that never ends when the deadline wins;
		// the command returns and the process exits.
		b, err := io.ReadAll(io.LimitReader(opts.env.In, maxHookInput+1))
		got <- read{b, err}
	}()
	var payload []byte
	select {
	case <-ctx.Done():
		return late()
	case r := <-got:
		if r.err != nil {
			return deny("reeve could not read the hook input: " + r.err.Error())
		}
		payload = r.b
	}
	if len(payload) > maxHookInput {
		return deny("reeve refused a hook input over 8 MiB")
	}
	if _, err := hookbridge.ParseInput(payload); err != nil {
		return deny("reeve could not read the hook input: " + err.Error())
	}
	left := time.Until(deadlineOf(ctx))
	if left <= 0 {
		return late()
	}
	c, _, err := controlclient.FromHome(home.Dir(opts.home), left)
	if errors.Is(err, fs.ErrNotExist) {
		return deny("the reeve daemon is not running, so nobody can approve this tool use")
	}
	if err != nil {
		if ctx.Err() != nil {
			return late()
		}
		return deny("reeve cannot reach its daemon: " + err.Error())
	}
	ans, err := c.Hook(ctx, opts.session, payload)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return late()
		}
		return deny("reeve denied the tool use: " + err.Error())
	}
	if !decide {
		return nil
	}
	reason := ans.Reason
	if ans.DecidedBy != "" {
		reason = fmt.Sprintf("%s (decided by %s)", reason, ans.DecidedBy)
	}
	_, err = opts.env.Out.Write(hookbridge.DecisionOutput(opts.event, ans.Decision, reason))
	return err
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
