package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/hookbridge/contract"
)

// reeve contract resolve: the effective contract of a project (its .reeve/
// policy, routes and access files, including those written by
// `reeve team-resource sync`) and where each value came from
// (hookbridge/contract).

type contractOptions struct {
	env  *Env
	path string
	json bool
}

func newContractCmd(env *Env) *cobra.Command {
	opts := &contractOptions{env: env}
	resolve := &cobra.Command{
		Use:   "resolve",
		Short: "Print a project's effective contract (policy, routes, access) and where each value came from",
		Long: `Print the effective contract of a project: the rules of .reeve/policy.yaml,
the routes of .reeve/routes/*.yaml and the members of .reeve/access.yaml, the
files written by 'reeve team-resource sync' included, each value with its file
and line. Each file is listed with its SHA-256 and origin: team-resource (last
committed by a team-resource sync, with the bundle's resource and version),
project (committed otherwise) or local (untracked or edited since).

--path is the project directory (default the current one) or a single file in
its .reeve/ directory. A path that does not exist exits 4; a contract with
problems prints each as file:line:column: pointer: message and exits 8.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runContractResolve(cmd.Context(), opts)
		},
	}
	resolve.Flags().StringVar(&opts.path, "path", ".", "project directory, or one governance file under its .reeve/")
	resolve.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	cmd := &cobra.Command{Use: "contract", Short: "The project's governance contract", Args: noArgs}
	cmd.AddCommand(resolve)
	return cmd
}

func runContractResolve(ctx context.Context, opts *contractOptions) error {
	res, err := contract.Resolve(ctx, contract.Options{Path: opts.path})
	if errors.Is(err, contract.ErrNoProject) {
		return exitf(ExitNotFound, "%w", err)
	}
	if err != nil {
		return withExit(ExitUsage, err)
	}
	if opts.json {
		if err := writeJSON(opts.env.Out, res); err != nil {
			return err
		}
	} else if res.Valid {
		if err := printContract(opts.env, res); err != nil {
			return err
		}
	} else {
		for _, p := range res.Problems {
			if _, err := fmt.Fprintln(opts.env.Out, p.String()); err != nil {
				return err
			}
		}
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(opts.env.Err, "reeve: warning: %s\n", w)
	}
	if !res.Valid {
		fmt.Fprintf(opts.env.Err, "reeve: %s: the contract has %d problem(s)\n", res.Dir, len(res.Problems))
		return silentExit(ExitInvalid)
	}
	return nil
}

func printContract(env *Env, res contract.Result) error {
	w := env.Out
	fmt.Fprintf(w, "project %s\n\nsources:\n", res.Project)
	for _, s := range res.Sources {
		from := s.Origin
		if s.Commit != "" {
			from += " " + shortHash(s.Commit)
		}
		if s.Bundle != "" {
			from += " (bundle " + s.Bundle + ")"
		}
		fmt.Fprintf(w, "  %s  %s  %s\n", s.File, s.Schema, from)
	}
	fmt.Fprintln(w, "\nvalues:")
	if len(res.Values) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, v := range res.Values {
		if _, err := fmt.Fprintf(w, "  %s  %s:%d\n", v.Key, v.File, v.Line); err != nil {
			return err
		}
	}
	return nil
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
