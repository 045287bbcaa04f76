package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/hookbridge/policy"
)

func newGuardCmd(env *Env) *cobra.Command {
	return newGroupCmd("guard", "Ask the project policy about an agent's access", newGuardCheckCmd(env))
}

type guardCheckOptions struct {
	env     *Env
	path    string
	project string
	tool    string
	json    bool
}

// guardReport is the stable --json shape of `reeve guard check`.
type guardReport struct {
	Path    string        `json:"path"`
	Project string        `json:"project"`
	Policy  string        `json:"policy"` // the policy file, "" when the project has none
	Tool    string        `json:"tool,omitempty"`
	Action  policy.Action `json:"action"` // allow, deny, ask, or "" (no rule)
	Rule    string        `json:"rule,omitempty"`
	Reason  string        `json:"reason"`
	Allowed bool          `json:"allowed"` // the policy lets it through without a human (allow or no rule)
}

func newGuardCheckCmd(env *Env) *cobra.Command {
	opts := &guardCheckOptions{env: env}
	cmd := &cobra.Command{
		Use:   "check --path FILE",
		Short: "Report whether the project policy lets an agent touch a path, and why",
		Long: "Report whether the project policy (.reeve/policy.yaml) lets an agent touch FILE, and which\n" +
			"rule decided. The project is the nearest directory above FILE holding .reeve, up to the\n" +
			"git work tree's root (which is the project when there is no .reeve),\n" +
			"or --project; relative paths in the policy are taken from it. Without --tool the answer\n" +
			"is for the most restricted file tool; with --tool it is for that tool using FILE.\n\n" +
			"Exit status: 0 allowed, or no rule (the session's mode decides); 6 denied, or ask (a\n" +
			"human must approve; the output says which); 8 the policy has problems.",
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error { return runGuardCheck(opts) },
	}
	cmd.Flags().StringVar(&opts.path, "path", "", "file or directory an agent would touch")
	cmd.Flags().StringVar(&opts.project, "project", "", "project directory (default: found from --path)")
	cmd.Flags().StringVar(&opts.tool, "tool", "", "tool name to check for, e.g. Read or Write (default: any file tool)")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	_ = cmd.MarkFlagRequired("path")
	return cmd
}

func runGuardCheck(opts *guardCheckOptions) error {
	// Not filepath.Abs: it would apply ".." lexically, before the policy
	// resolves the symbolic links in front of it.
	abs := opts.path
	if !filepath.IsAbs(abs) {
		wd, err := os.Getwd()
		if err != nil {
			return withExit(ExitFailure, err)
		}
		abs = wd + string(filepath.Separator) + abs
	}
	project := opts.project
	if project == "" {
		home, _ := os.UserHomeDir()
		if h := getenv(opts.env, "HOME"); h != "" {
			home = h
		}
		project = policy.FindProject(filepath.Clean(abs), home)
	} else if fi, err := os.Stat(project); err != nil || !fi.IsDir() {
		return exitf(ExitNotFound, "project directory %s does not exist", project)
	}
	project, err := filepath.Abs(project)
	if err != nil {
		return withExit(ExitUsage, err)
	}
	pol, problems, err := policy.Load(project)
	if err != nil {
		return withExit(ExitFailure, err)
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(opts.env.Err, p.String())
		}
		return exitf(ExitInvalid, "the policy of %s has %d problem(s); run `reeve check %s`", project, len(problems), shellWord(project))
	}

	var d policy.Decision
	if opts.tool != "" {
		input, _ := json.Marshal(map[string]string{"file_path": abs})
		d = pol.Evaluate(policy.Request{Tool: opts.tool, Input: input, Workdir: project})
	} else {
		d = pol.CheckPath(abs, project)
	}
	rep := guardReport{Path: opts.path, Project: project, Policy: pol.File, Tool: opts.tool, Action: d.Action, Rule: d.Rule, Reason: d.Reason,
		Allowed: d.Action == policy.Allow || d.Action == policy.None}
	if d.Action == policy.None {
		rep.Reason = "no rule: the session's mode decides (detect asks a human, bypass allows)"
	}

	if opts.json {
		if err := writeJSON(opts.env.Out, rep); err != nil {
			return err
		}
	} else {
		var line string
		switch d.Action {
		case policy.Allow:
			line = fmt.Sprintf("allowed: %s (rule %s: %s)", opts.path, d.Rule, d.Reason)
		case policy.Deny:
			line = fmt.Sprintf("denied: %s (rule %s: %s)", opts.path, d.Rule, d.Reason)
		case policy.Ask:
			line = fmt.Sprintf("ask: %s needs a human's approval (rule %s: %s)", opts.path, d.Rule, d.Reason)
		default:
			line = fmt.Sprintf("%s: %s", opts.path, rep.Reason)
		}
		if _, err := fmt.Fprintln(opts.env.Out, line); err != nil {
			return err
		}
	}
	if !rep.Allowed {
		return silentExit(ExitDenied)
	}
	return nil
}

func getenv(env *Env, key string) string {
	if env.Getenv == nil {
		return os.Getenv(key)
	}
	return env.Getenv(key)
}
