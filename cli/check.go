package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/hookbridge/policy"
)

type checkOptions struct {
	env  *Env
	dir  string
	json bool
}

func newCheckCmd(env *Env) *cobra.Command {
	opts := &checkOptions{env: env}
	cmd := &cobra.Command{
		Use:   "check [PATH]",
		Short: "Validate the project's .reeve policy, routes and access files",
		Long: "Validate the governance files of the project at PATH (default .): .reeve/policy.yaml,\n" +
			".reeve/routes/*.yaml and, when present, .reeve/access.yaml, against their v1 JSON Schemas\n" +
			"(" + policy.SchemaDir + "), and print every problem as file:line:column: pointer: message.\n" +
			"It warns when .reeve is ignored by git, since then nobody else sees the policy.\n\n" +
			"Exit status: 0 valid, 8 problems found, 4 PATH does not exist.",
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			opts.dir = "."
			if len(args) == 1 {
				opts.dir = args[0]
			}
			return runCheck(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runCheck(opts *checkOptions) error {
	rep, err := policy.CheckProject(opts.dir)
	if errors.Is(err, policy.ErrNoProject) {
		return exitf(ExitNotFound, "project directory %s does not exist", opts.dir)
	}
	if err != nil {
		return withExit(ExitFailure, err)
	}
	gov := rep.Dir

	if opts.json {
		if err := writeJSON(opts.env.Out, rep); err != nil {
			return err
		}
	} else {
		for _, p := range rep.Problems {
			if _, err := fmt.Fprintln(opts.env.Out, p.String()); err != nil {
				return err
			}
		}
		if rep.Valid {
			if _, err := fmt.Fprintf(opts.env.Out, "%s: valid (%s)\n", gov, describeChecked(rep.Files)); err != nil {
				return err
			}
		}
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(opts.env.Err, "reeve: warning: %s\n", w)
	}
	if !rep.Valid {
		if !opts.json {
			noun := "problems"
			if len(rep.Problems) == 1 {
				noun = "problem"
			}
			fmt.Fprintf(opts.env.Err, "reeve: %s: %d %s\n", gov, len(rep.Problems), noun)
		}
		return silentExit(ExitInvalid)
	}
	return nil
}

func describeChecked(files []policy.CheckedFile) string {
	if len(files) == 0 {
		return "no governance files"
	}
	counts := map[string]int{}
	var order []string
	for _, f := range files {
		if counts[f.Schema] == 0 {
			order = append(order, f.Schema)
		}
		counts[f.Schema]++
	}
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%d %s", counts[s], s)
	}
	return strings.Join(parts, ", ")
}
