package cli

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
)

// TestTopCommandsNamed keeps the table Execute builds branches from true:
// each entry builds the command it is named after, and the whole tree has
// no top-level command the table does not know (but install, which needs
// the whole tree anyway).
func TestTopCommandsNamed(t *testing.T) {
	env := &Env{}
	known := map[string]bool{"install": true}
	for _, c := range topCommands {
		if got := c.build(env).Name(); got != c.name {
			t.Errorf("topCommands entry %q builds the command %q", c.name, got)
		}
		known[c.name] = true
	}
	for _, c := range NewRootCmd(env).Commands() {
		if !known[c.Name()] {
			t.Errorf("top-level command %q is not in topCommands: Execute would never build it alone", c.Name())
		}
	}
}

// TestBranchFindsTheSameCommand checks that the partial tree Execute builds
// for a command line resolves it to the same command, with the same
// arguments, as the whole tree.
func TestBranchFindsTheSameCommand(t *testing.T) {
	lines := []string{
		"", "--version", "-v", "--version -v", "--help", "-h", "help", "help status",
		"status", "status --json", "--home /tmp/h status", "--home=/tmp/h status", "-h status",
		"--help status", "--version status", "status --help", "stop --yes --force",
		"pair", "pair unlock", "pair anchor --help", "context", "worktree list --json",
		"hook claude pre-tool-use", "daemon-worker --supervisor-pid 1", "daemon-supervisor",
		"worker", "nosuch", "stauts", "-- status", "--json status", "install --help",
		"server token create --user a@example.com", "- status", "status extra args",
	}
	for _, line := range lines {
		args := strings.Fields(line)
		full, fullArgs, fullErr := NewRootCmd(&Env{}).Find(args)
		branch := branchOf(args)
		part, partArgs, partErr := newRoot(&Env{}, branch).Find(args)
		if (fullErr == nil) != (partErr == nil) {
			t.Errorf("%q (branch %q): whole tree err %v, partial tree err %v", line, branch, fullErr, partErr)
			continue
		}
		if fullErr != nil {
			continue
		}
		if full.CommandPath() != part.CommandPath() || strings.Join(fullArgs, " ") != strings.Join(partArgs, " ") {
			t.Errorf("%q (branch %q): whole tree finds %q %q, partial tree %q %q", line, branch, full.CommandPath(), fullArgs, part.CommandPath(), partArgs)
		}
		if full.Name() == "reeve" {
			// The root lists every command in its help: it must be whole
			// unless the line only asks for the version.
			if branch != "" && branch != "-" {
				t.Errorf("%q resolves to the root but builds only %q", line, branch)
			}
		}
	}
	if got := branchOf([]string{"status"}); got != "status" {
		t.Errorf("branchOf(status) = %q: status would build the whole tree", got)
	}
	if got := branchOf([]string{"--version"}); got != "-" {
		t.Errorf("branchOf(--version) = %q: --version would build the whole tree", got)
	}
}

// TestRootHelpListsEveryCommand runs the help and the version through
// Execute, as the process does.
func TestRootHelpListsEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {}, {"help"}} {
		var out bytes.Buffer
		env := &Env{Out: &out, Err: &out, In: strings.NewReader(""), Getenv: func(string) string { return "" }}
		if code := Execute(context.Background(), env, args); code != ExitOK {
			t.Fatalf("%v: exit %d\n%s", args, code, out.String())
		}
		var missing []string
		for _, c := range topCommands {
			if !strings.Contains(out.String(), "\n  "+c.name+" ") && c.name != "hook" && !strings.HasPrefix(c.name, "daemon-") {
				missing = append(missing, c.name)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("reeve %v does not list %v:\n%s", args, missing, out.String())
		}
	}
	var out bytes.Buffer
	env := &Env{Out: &out, Err: &out, In: strings.NewReader(""), Getenv: func(string) string { return "" }}
	if code := Execute(context.Background(), env, []string{"--version"}); code != ExitOK || !strings.HasPrefix(out.String(), "reeve ") {
		t.Fatalf("--version: exit %d, %q", code, out.String())
	}
}

// An argument beside --version is a usage error that names it, whatever
// side of the flag it stands on.
func TestVersionRefusesStrayArguments(t *testing.T) {
	for _, args := range [][]string{{"--version", "extra"}, {"extra", "--version"}, {"-v", "extra", "more"}} {
		var out, errb bytes.Buffer
		env := &Env{Out: &out, Err: &errb, In: strings.NewReader(""), Getenv: func(string) string { return "" }}
		code := Execute(context.Background(), env, args)
		if code != ExitUsage || out.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q", args, code, out.String())
		}
		if e := errb.String(); !strings.Contains(e, "--version takes no arguments") || !strings.Contains(e, `"extra"`) {
			t.Errorf("%v said %q", args, e)
		}
	}
}

type watchedKey struct{}

// Every command runs with the context the signal watch derives, even one
// whose own PersistentPreRun would have replaced a root hook.
func TestCommandsRunWithTheSignalWatch(t *testing.T) {
	watch := func(ctx context.Context) context.Context { return context.WithValue(ctx, watchedKey{}, true) }

	// Through Execute, as Main runs it: the daemon is reached with the
	// watched context.
	f := &fakeDaemon{
		dirs:   func() ([]wire.Directory, error) { return nil, nil },
		health: func() (wire.Health, error) { return wire.Health{}, nil },
	}
	f.t = t
	watched := false
	var out bytes.Buffer
	env := &Env{Out: &out, Err: &out, In: strings.NewReader(""), Getenv: func(string) string { return "" }, watchSignals: watch,
		Connect: func(ctx context.Context, _ home.Dir) (Daemon, error) {
			watched, _ = ctx.Value(watchedKey{}).(bool)
			return f, nil
		}}
	if code := Execute(context.Background(), env, []string{"--home", t.TempDir(), "list"}); code != ExitOK {
		t.Fatalf("list: exit %d\n%s", code, out.String())
	}
	if !watched {
		t.Error("list reached the daemon without the signal watch")
	}

	// A subcommand with its own persistent hook, nested under a group.
	var got bool
	leaf := &cobra.Command{Use: "leaf", RunE: func(cmd *cobra.Command, _ []string) error {
		got, _ = cmd.Context().Value(watchedKey{}).(bool)
		return nil
	}}
	group := &cobra.Command{Use: "group", PersistentPreRun: func(*cobra.Command, []string) {}}
	group.AddCommand(leaf)
	root := &cobra.Command{Use: "root", PersistentPreRun: func(*cobra.Command, []string) {}}
	root.AddCommand(group)
	watchSignalsIn(root, watch)
	root.SetArgs([]string{"group", "leaf"})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !got {
		t.Error("a command under a PersistentPreRun ran without the signal watch")
	}
}
