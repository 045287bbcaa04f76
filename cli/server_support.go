package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// ServerSupportOperators is the --json shape of `reeve server support`.
type ServerSupportOperators struct {
	Changed   bool                    `json:"changed"` // false: the user already had (grant) the role
	Operators []ServerSupportOperator `json:"operators"`
}

// ServerSupportOperator is one holder of the support operator role.
type ServerSupportOperator struct {
	UserID    int64     `json:"user_id"`
	Email     string    `json:"email"`
	GrantedBy string    `json:"granted_by"`
	GrantedAt time.Time `json:"granted_at"`
}

func newServerSupportCmd(e *Env) *cobra.Command {
	cmd := newGroupCmd("support", "Grant, revoke and list the server-level support operator role")
	cmd.AddCommand(newServerSupportSub(e, "grant", "Make a user (created if new) a support operator: they may then request scoped, expiring access to a workspace, which its owners or admins approve"),
		newServerSupportSub(e, "revoke", "Take the support operator role from a user: every support access of theirs ends at once"),
		newServerSupportSub(e, "list", "List the support operators"))
	return cmd
}

func newServerSupportSub(e *Env, action, short string) *cobra.Command {
	o := &serverDBOptions{env: e}
	use, args := action+" EMAIL", usageArgs(cobra.ExactArgs(1))
	if action == "list" {
		use, args = action, noArgs
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, a []string) error {
			email := ""
			if len(a) == 1 {
				email = strings.TrimSpace(a[0])
				if !strings.Contains(email, "@") {
					return exitf(ExitUsage, "%q is not an email address", a[0])
				}
			}
			return runServerSupport(cmd.Context(), o, action, email)
		},
	}
	serverDBFlags(cmd, e, o)
	cmd.Flags().BoolVar(&o.json, "json", false, "print the result as JSON")
	return cmd
}

func runServerSupport(ctx context.Context, o *serverDBOptions, action, email string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.env.Programs.Server.SupportOperators == nil {
		return exitf(ExitFailure, "this build of reeve has no control plane")
	}
	res, err := o.env.Programs.Server.SupportOperators(ctx, o.request(), action, email)
	if errors.Is(err, ErrServerNotFound) {
		return withExit(ExitNotFound, err)
	}
	if err != nil {
		return dbError(err)
	}
	if o.json {
		return writeJSON(o.env.Out, res)
	}
	switch {
	case action == "grant" && res.Changed:
		fmt.Fprintf(o.env.Err, "%s is now a support operator\n", email)
	case action == "grant":
		fmt.Fprintf(o.env.Err, "%s was already a support operator\n", email)
	case action == "revoke":
		fmt.Fprintf(o.env.Err, "%s is no longer a support operator\n", email)
	}
	for _, op := range res.Operators {
		if _, err := fmt.Fprintf(o.env.Out, "%s\t%s\t%s\n", op.Email, op.GrantedAt.UTC().Format(time.RFC3339), op.GrantedBy); err != nil {
			return err
		}
	}
	return nil
}
