package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/hookbridge/policy"
)

type checkOptions struct {
	env  *Env
	dir  string
	json bool
}

// checkReport is the stable --json shape of `reeve check`.
type checkReport struct {
	Project  string           `json:"project"`
	Dir      string           `json:"dir"` // the .reeve directory
	Files    []checkedFile    `json:"files"`
	Valid    bool             `json:"valid"`
	Problems []policy.Problem `json:"problems"`
	Warnings []string         `json:"warnings"`
}

type checkedFile struct {
	File   string `json:"file"`
	Schema string `json:"schema"` // policy.v1, routes.v1, access.v1
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
	if fi, err := os.Stat(opts.dir); err != nil || !fi.IsDir() {
		return exitf(ExitNotFound, "project directory %s does not exist", opts.dir)
	}
	gov := filepath.Join(opts.dir, policy.Dir)
	rep := checkReport{Project: opts.dir, Dir: gov, Files: []checkedFile{}, Problems: []policy.Problem{}, Warnings: []string{}}

	policyFile := filepath.Join(gov, policy.File)
	problems, err := policy.ValidatePolicyFile(policyFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s does not exist: no policy rules, every tool use is left to the session's mode", policyFile))
	case err != nil:
		return withExit(ExitFailure, err)
	default:
		rep.Files = append(rep.Files, checkedFile{File: policyFile, Schema: "policy.v1"})
		rep.Problems = append(rep.Problems, problems...)
	}

	routeFiles, err := filepath.Glob(filepath.Join(gov, "routes", "*.yaml"))
	if err != nil {
		return withExit(ExitFailure, err)
	}
	sort.Strings(routeFiles)
	defined := map[string]policy.Route{}
	for _, f := range routeFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return withExit(ExitFailure, fmt.Errorf("read routes: %w", err))
		}
		problems, routes := policy.ValidateRoutes(f, data)
		rep.Files = append(rep.Files, checkedFile{File: f, Schema: "routes.v1"})
		rep.Problems = append(rep.Problems, problems...)
		for _, r := range routes {
			if first, dup := defined[r.Name]; dup && first.File != r.File {
				rep.Problems = append(rep.Problems, policy.Problem{File: r.File, Line: r.Line, Message: fmt.Sprintf("route %q is already defined at %s:%d", r.Name, first.File, first.Line)})
				continue
			}
			defined[r.Name] = r
		}
	}

	accessFile := filepath.Join(gov, "access.yaml")
	if data, err := os.ReadFile(accessFile); err == nil {
		rep.Files = append(rep.Files, checkedFile{File: accessFile, Schema: "access.v1"})
		rep.Problems = append(rep.Problems, policy.ValidateAccess(accessFile, data)...)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return withExit(ExitFailure, fmt.Errorf("read access: %w", err))
	}

	if w := gitIgnoredWarning(opts.dir, gov, rep.Files); w != "" {
		rep.Warnings = append(rep.Warnings, w)
	}
	rep.Valid = len(rep.Problems) == 0

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

func describeChecked(files []checkedFile) string {
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

// gitIgnoredWarning asks git whether the .reeve directory, or a file checked
// in it, is ignored: an ignored policy is never committed, so teammates and
// CI run without it. Outside a git work tree, or without git, it says
// nothing.
func gitIgnoredWarning(project, gov string, files []checkedFile) string {
	rel := []string{policy.Dir + "/"}
	for _, f := range files {
		if r, err := filepath.Rel(project, f.File); err == nil {
			rel = append(rel, filepath.ToSlash(r))
		}
	}
	cmd := exec.Command("git", append([]string{"-C", project, "check-ignore", "--verbose", "--"}, rel...)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		// Exit 1: nothing ignored; 128: not a repository; or no git at all.
		return ""
	}
	// --verbose prints "source:line:pattern<TAB>path" per ignored path.
	first, _, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
	src, path, _ := strings.Cut(first, "\t")
	return fmt.Sprintf("%s is ignored by git (%s matches %s): the policy will not be committed, so teammates and CI will not have it", gov, src, path)
}
