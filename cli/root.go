// Package cli holds every cobra command of the reeve binary: flag parsing,
// human and --json output, and exit codes. It carries no business logic; it
// calls the daemon's local API, the server SDK or a package below.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/internal/version"
)

// Env is what every command receives instead of reaching for globals: its
// streams, its environment and the path of the running executable.
type Env struct {
	In     io.Reader
	Out    io.Writer // data
	Err    io.Writer // status and progress
	Getenv func(string) string
	// Executable returns the path of the reeve binary, used to start the
	// supervisor and the worker from the same executable.
	Executable func() (string, error)
	// Programs are the long-running parts wired in by main.
	Programs Programs
	// Connect reaches the daemon running from a home; default the one the
	// home's endpoint names (tests inject fakes).
	Connect func(ctx context.Context, dir home.Dir) (Daemon, error)
	// watchSignals, set by Main, derives the context a command runs with:
	// cancelled on interrupt or SIGTERM.
	watchSignals func(context.Context) context.Context
	// progressDelay, when set, replaces both progressDelay and
	// progressEvery (tests).
	progressDelay time.Duration
	// readyWithin, when set, replaces readyWithin (tests).
	readyWithin time.Duration
}

// processEnv is the Env of the real process.
func processEnv(p Programs) *Env {
	return &Env{
		In:         os.Stdin,
		Out:        os.Stdout,
		Err:        os.Stderr,
		Getenv:     os.Getenv,
		Executable: os.Executable,
		Programs:   p,
	}
}

// Main runs the command line with the process's arguments and streams, and
// returns the exit code. It is the one place exit codes are decided.
func Main(p Programs) int {
	env := processEnv(p)
	stop := func() {}
	env.watchSignals = func(ctx context.Context) context.Context {
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		return ctx
	}
	code := Execute(context.Background(), env, os.Args[1:])
	stop()
	return code
}

// Execute runs one command line against env and returns its exit code.
func Execute(ctx context.Context, env *Env, args []string) int {
	root := newRoot(env, branchOf(args))
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	// cobra checks required flags itself and returns a plain error.
	if strings.HasPrefix(err.Error(), "required flag(s)") {
		err = &ExitError{Code: ExitUsage, Err: err}
	}
	var silent errSilent
	if !errors.As(err, &silent) {
		fmt.Fprintf(env.Err, "reeve: %v\n", err)
	}
	return exitCode(err)
}

// NewRootCmd builds the whole command tree around env.
func NewRootCmd(env *Env) *cobra.Command { return newRoot(env, "") }

// topCommands are the top-level commands by name. Building the whole tree
// costs more than the rest of a short command's run (hundreds of flags and
// their maps), so Execute builds only the branch a command line names;
// TestTopCommandsNamed keeps the names true.
var topCommands = []struct {
	name  string
	build func(*Env) *cobra.Command
}{
	{"version", newVersionCmd},
	{"start", newStartCmd},
	{"stop", newStopCmd},
	{"restart", newRestartCmd},
	{"status", newStatusCmd},
	{"doctor", newDoctorCmd},
	{"add", newAddCmd},
	{"remove", newRemoveCmd},
	{"list", newListCmd},
	{"run", newRunCmd},
	{"send", newSendCmd},
	{"logs", newLogsCmd},
	{"attach", newAttachCmd},
	{"wait", newWaitCmd},
	{"ls", newLsCmd},
	{"session", newSessionCmd},
	{"permit", newPermitCmd},
	{"agent", newAgentCmd},
	{"worktree", newWorktreeCmd},
	{"hook", newHookCmd},
	{"daemon-supervisor", newSupervisorCmd},
	{"daemon-worker", func(env *Env) *cobra.Command { return newWorkerCmd(env, env.Programs) }},
	{"config", newConfigCmd},
	{"validate", newValidateCmd},
	{"check", newCheckCmd},
	{"guard", newGuardCmd},
	{"server", newServerCmd},
	{"relay", newRelayCmd},
	{"service", newServiceCmd},
	{"setup", newSetupCmd},
	{"update", newUpdateCmd},
	{"team-resource", newTeamResourceCmd},
	{"contract", newContractCmd},
	{"context", newContextCmd},   // reeve context ... (context*.go)
	{"evidence", newEvidenceCmd}, // reeve evidence verify (evidence.go)
	{"pair", newPairCmd},         // reeve pair, pair anchor, pair rotate-token (pair.go); pair unlock is attached below
	{"worker", newTeamWorkerCmd}, // reeve worker ... (worker.go)
	{"diagnostic", newDiagnosticCmd},
}

// newRoot builds the root command with every top-level command, or, when
// only names one of topCommands, with that one alone; "-" builds none (the
// root's own flags, such as --version).
func newRoot(env *Env, only string) *cobra.Command {
	if env.Connect == nil {
		env.Connect = connectHome(env)
	}
	root := &cobra.Command{
		Use:           "reeve",
		Short:         "Run coding agents under governance",
		Long:          "reeve runs coding agents in isolated worktrees under a local daemon, records every event, and asks a policy or a human before an agent uses a tool.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          noArgs,
		RunE:          runRoot,
	}
	root.SetIn(env.In)
	root.SetOut(env.Out)
	root.SetErr(env.Err)
	// --version is the root's own flag rather than cobra's (Command.Version),
	// which prints through a text/template parsed on every call: a tenth of
	// the instructions `reeve --version` spent after package init.
	root.Flags().BoolP("version", "v", false, "print the version")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &ExitError{Code: ExitUsage, Err: err}
	})
	root.CompletionOptions.DisableDefaultCmd = true
	addHomeFlag(root)
	for _, c := range topCommands {
		if only == "" || c.name == only {
			root.AddCommand(c.build(env))
		}
	}
	if only == "" {
		// install writes man pages and completions of the whole tree.
		root.AddCommand(newInstallCmd(env, root))
	}
	if only == "" || only == "pair" {
		attachPairUnlock(root, env) // reeve pair unlock (pair_unlock.go)
	}
	if env.watchSignals != nil {
		watchSignalsIn(root, env.watchSignals)
	}
	return root
}

// watchSignalsIn makes every command below root run with the context
// watch derives (cancelled on interrupt or SIGTERM). The watch starts only
// once a subcommand is about to run, not from the start: it costs
// goroutines and a thread (about 100k instructions) that --version and help
// need not pay. It wraps each command's own Run/RunE rather than sitting in
// the root's PersistentPreRun, which cobra skips as soon as a subcommand
// has a PersistentPreRun of its own; so no hook added later can drop it.
// It must run after the tree is complete.
func watchSignalsIn(root *cobra.Command, watch func(context.Context) context.Context) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			wrapRun(sub, watch)
			walk(sub)
		}
	}
	walk(root)
}

// wrapRun derives cmd's context with watch just before its action runs.
func wrapRun(cmd *cobra.Command, watch func(context.Context) context.Context) {
	switch run, runE := cmd.Run, cmd.RunE; {
	case runE != nil:
		cmd.RunE = func(c *cobra.Command, args []string) error {
			c.SetContext(watch(c.Context()))
			return runE(c, args)
		}
	case run != nil:
		cmd.Run = func(c *cobra.Command, args []string) {
			c.SetContext(watch(c.Context()))
			run(c, args)
		}
	}
}

// branchOf returns which part of the tree a command line needs: the name of
// a top-level command, "-" for the root alone (reeve --version), or "" for
// the whole tree (help, completion, install, an unknown command and its
// suggestions). It skips flags the way cobra's search for the command does
// (Command.Find): when it runs, the root's only flag is --home, so any flag
// written without "=", even --help, is taken to hold the next argument.
func branchOf(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return ""
		case strings.HasPrefix(a, "--") && !strings.Contains(a, "="),
			len(a) == 2 && a[0] == '-':
			i++ // the flag's value
			continue
		case strings.HasPrefix(a, "-"):
			continue
		}
		for _, c := range topCommands {
			if c.name == a {
				return a
			}
		}
		return ""
	}
	for _, a := range args {
		if a != "--version" && a != "-v" {
			return ""
		}
	}
	if len(args) == 0 {
		return ""
	}
	return "-"
}

// noArgs rejects positional arguments as a usage error; on the root it turns
// an unknown subcommand into exit code 2 with cobra's own message.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if !cmd.HasParent() {
		// The root's only action is --version; an argument beside it is
		// either a stray word or a mistyped command, and the message
		// says both.
		if v, _ := cmd.Flags().GetBool("version"); v {
			return exitf(ExitUsage, "--version takes no arguments, got %q (%q is not a command of %q; see %q)", args, args[0], cmd.CommandPath(), cmd.CommandPath()+" --help")
		}
	}
	if cmd.HasSubCommands() {
		return exitf(ExitUsage, "unknown command %q for %q (see %q)", args[0], cmd.CommandPath(), cmd.CommandPath()+" --help")
	}
	return exitf(ExitUsage, "%q takes no arguments, got %q", cmd.CommandPath(), args)
}

// usageArgs wraps a cobra argument validator so that its errors exit with the
// usage code.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		return withExit(ExitUsage, v(cmd, args))
	}
}

// runRoot prints the version for --version, else the help.
func runRoot(cmd *cobra.Command, args []string) error {
	if v, _ := cmd.Flags().GetBool("version"); v {
		_, err := fmt.Fprintf(cmd.OutOrStdout(), "reeve %s\n", version.Version)
		return err
	}
	return showHelp(cmd, args)
}

// showHelp is the action of group commands: with no subcommand they print
// their help; an unknown subcommand is caught by noArgs first.
func showHelp(cmd *cobra.Command, _ []string) error { return cmd.Help() }

// newGroupCmd builds a command that only holds subcommands.
func newGroupCmd(use, short string, children ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: noArgs, RunE: showHelp}
	cmd.AddCommand(children...)
	return cmd
}
