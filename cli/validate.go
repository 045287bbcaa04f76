package cli

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/config"
)

type validateOptions struct {
	env *Env
	// path is the file to check: --path, else the one the daemon would
	// read, resolved before the command runs.
	path string
	json bool
}

// validateReport is the stable --json shape of `reeve validate`.
type validateReport struct {
	File     string           `json:"file"`
	Schema   string           `json:"schema"`
	Valid    bool             `json:"valid"`
	Problems []config.Problem `json:"problems"`
}

func newValidateCmd(env *Env) *cobra.Command {
	opts := &validateOptions{env: env}
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check a daemon config file against the v1 schema and report each error with its location",
		Long: "Check a daemon config file against the v1 JSON Schema (" + config.SchemaV1Path + ")\n" +
			"and the rules on its values, and print every problem as file:line:column: pointer: message.\n\n" +
			"Without --path it checks the file the daemon would read: $REEVE_CONFIG, else <home>/config.yaml.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.path == "" {
				_, _, file, _, err := config.Locate(config.LoadOptions{Flags: cmd.Flags(), Getenv: env.Getenv})
				if err != nil {
					return configExit(err)
				}
				opts.path = file
			}
			return runValidate(opts)
		},
	}
	cmd.Flags().StringVar(&opts.path, "path", "", "config file to check (YAML or JSON, by extension)")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runValidate(opts *validateOptions) error {
	path := opts.path
	problems, err := config.ValidateFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return exitf(ExitNotFound, "config file %s does not exist", path)
	}
	if err != nil {
		return withExit(ExitFailure, err)
	}

	if opts.json {
		rep := validateReport{File: path, Schema: "v1", Valid: len(problems) == 0, Problems: problems}
		if rep.Problems == nil {
			rep.Problems = []config.Problem{}
		}
		if err := writeJSON(opts.env.Out, rep); err != nil {
			return err
		}
	} else if len(problems) == 0 {
		if _, err := fmt.Fprintf(opts.env.Out, "%s: valid (config schema v1)\n", path); err != nil {
			return err
		}
	} else {
		for _, p := range problems {
			if _, err := fmt.Fprintln(opts.env.Out, p.String()); err != nil {
				return err
			}
		}
		noun := "problems"
		if len(problems) == 1 {
			noun = "problem"
		}
		fmt.Fprintf(opts.env.Err, "reeve: %s: %d %s\n", path, len(problems), noun)
	}
	if len(problems) > 0 {
		return silentExit(ExitInvalid)
	}
	return nil
}
