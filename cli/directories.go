package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/wire"
)

type addOptions struct {
	daemonCmd
	path string
	json bool
}

func newAddCmd(env *Env) *cobra.Command {
	opts := &addOptions{}
	cmd := &cobra.Command{
		Use:   "add PATH",
		Short: "Register a directory with the daemon",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			opts.path = args[0]
			return runAdd(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the directory as JSON")
	return cmd
}

func runAdd(ctx context.Context, opts *addOptions) error {
	dir, err := existingDir(opts.path)
	if err != nil {
		return err
	}
	c, err := opts.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := c.AddDirectory(ctx, dir)
	if err != nil {
		return opts.apiExit(err)
	}
	if opts.json {
		return writeJSON(opts.env.Out, res)
	}
	if res.Created {
		fmt.Fprintf(opts.env.Err, "reeve: registered %s\n", res.Directory.Path)
	} else {
		fmt.Fprintf(opts.env.Err, "reeve: %s was already registered\n", res.Directory.Path)
	}
	fmt.Fprintln(opts.env.Out, res.Directory.ID)
	return nil
}

type removeOptions struct {
	daemonCmd
	path string
	json bool
}

func newRemoveCmd(env *Env) *cobra.Command {
	opts := &removeOptions{}
	cmd := &cobra.Command{
		Use:   "remove PATH",
		Short: "Unregister a directory (by path or id)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			opts.path = args[0]
			return runRemove(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the removed directory as JSON")
	return cmd
}

func runRemove(ctx context.Context, opts *removeOptions) error {
	c, err := opts.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	dirs, err := c.ListDirectories(ctx)
	if err != nil {
		return opts.apiExit(err)
	}
	d, ok := findDirectory(dirs, opts.path)
	if !ok {
		return exitf(ExitNotFound, "%s is not a registered directory (see `%s`)", opts.path, opts.reeve("list"))
	}
	if err := c.RemoveDirectory(ctx, d.ID); err != nil {
		return opts.apiExit(err)
	}
	if opts.json {
		return writeJSON(opts.env.Out, d)
	}
	fmt.Fprintf(opts.env.Err, "reeve: unregistered %s\n", d.Path)
	return nil
}

// findDirectory matches an id, or a path however it is spelled (relative,
// through a symlink) against the canonical paths the daemon stores.
func findDirectory(dirs []wire.Directory, arg string) (wire.Directory, bool) {
	candidates := []string{arg, absPath(arg)}
	if real, err := filepath.EvalSymlinks(absPath(arg)); err == nil {
		candidates = append(candidates, real)
	}
	for _, d := range dirs {
		for _, c := range candidates {
			if d.ID == c || d.Path == c {
				return d, true
			}
		}
	}
	return wire.Directory{}, false
}

type listOptions struct {
	daemonCmd
	json bool
}

// directoryListing is the --json shape of `reeve list`.
type directoryListing struct {
	Directories    []wire.Directory `json:"directories"`
	ActiveSessions int              `json:"active_sessions"`
}

func newListCmd(env *Env) *cobra.Command {
	opts := &listOptions{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List registered directories and the number of active sessions",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			return runList(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runList(ctx context.Context, opts *listOptions) error {
	c, err := opts.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	dirs, err := c.ListDirectories(ctx)
	if err != nil {
		return opts.apiExit(err)
	}
	h, err := c.Health(ctx)
	if err != nil {
		return opts.apiExit(err)
	}
	if opts.json {
		return writeJSON(opts.env.Out, directoryListing{Directories: dirs, ActiveSessions: h.Sessions})
	}
	if len(dirs) == 0 {
		fmt.Fprintf(opts.env.Err, "reeve: no directories registered (add one with `%s`)\n", opts.reeve("add PATH"))
	} else {
		w := tabwriter.NewWriter(opts.env.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tPATH\tADDED")
		for _, d := range dirs {
			fmt.Fprintf(w, "%s\t%s\t%s\n", d.ID, d.Path, d.AddedAt.Local().Format("2006-01-02 15:04"))
		}
		w.Flush()
	}
	fmt.Fprintf(opts.env.Err, "reeve: %d active sessions\n", h.Sessions)
	return nil
}
