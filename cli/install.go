package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/hookbridge/hookprog"
	"reeve.dev/reeve/internal/atomicfile"
)

// reeve install: the local runtime files in the home: the hook program
// copy, shell completions and man pages. Agent hooks, skills and MCP
// servers are not installed (spec 4.13): the daemon hands hooks to each
// governed session itself.

type installOptions struct {
	daemonCmd
	json bool
	// root is the command tree whose completions and man pages are written.
	root *cobra.Command
	// hookProgram installs the hook program copy; default hookprog.Install.
	hookProgram func(home string) (hookprog.Program, error)
}

// installedFile is one file install looked after.
type installedFile struct {
	Kind   string `json:"kind"` // hook-program, completion, man-page
	Path   string `json:"path"`
	Action string `json:"action"` // written, unchanged, removed
	Detail string `json:"detail,omitempty"`
}

type installReport struct {
	Home  string          `json:"home"`
	Files []installedFile `json:"files"`
	// Next says how to use what was installed.
	Next []string `json:"next"`
}

func newInstallCmd(env *Env, root *cobra.Command) *cobra.Command {
	opts := &installOptions{root: root}
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install the local runtime files: hook program, shell completions, man pages",
		Long: `Install reeve's local runtime files into the daemon home: the copy of the
reeve program that agents' hooks run (bin/), shell completions for bash, zsh
and fish (share/completions/) and the man pages (share/man/man1/). It does not
install agent hooks, skills or MCP servers. Running it again rewrites only
what changed, and it reports each file.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			return runInstall(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the report as JSON")
	return cmd
}

func (o *installOptions) completionDir() string {
	return filepath.Join(string(o.home), "share", "completions")
}
func (o *installOptions) manDir() string {
	return filepath.Join(string(o.home), "share", "man", "man1")
}

func runInstall(_ context.Context, o *installOptions) error {
	if err := o.home.Prepare(); err != nil {
		return withExit(ExitFailure, err)
	}
	rep := installReport{Home: string(o.home)}
	install := o.hookProgram
	if install == nil {
		install = hookprog.Install
	}
	before, _ := hookprog.Installed(string(o.home))
	p, err := install(string(o.home))
	if err != nil {
		return withExit(ExitFailure, err)
	}
	action := "written"
	if slices.Contains(before, p.Path) {
		action = "unchanged"
	}
	rep.Files = append(rep.Files, installedFile{Kind: "hook-program", Path: p.Path, Action: action, Detail: "sha256 " + p.Digest})

	files, err := o.generated()
	if err != nil {
		return withExit(ExitFailure, err)
	}
	for _, f := range files {
		done, err := writeIfChanged(f.Path, f.content)
		if err != nil {
			return withExit(ExitFailure, err)
		}
		rep.Files = append(rep.Files, installedFile{Kind: f.Kind, Path: f.Path, Action: done})
	}
	// Man pages of commands that no longer exist would linger.
	if entries, err := os.ReadDir(o.manDir()); err == nil {
		for _, e := range entries {
			p := filepath.Join(o.manDir(), e.Name())
			if strings.HasPrefix(e.Name(), "reeve") && strings.HasSuffix(e.Name(), ".1") && !slices.ContainsFunc(files, func(f genFile) bool { return f.Path == p }) {
				if os.Remove(p) == nil {
					rep.Files = append(rep.Files, installedFile{Kind: "man-page", Path: p, Action: "removed"})
				}
			}
		}
	}
	rep.Next = []string{
		"bash: add `source " + filepath.Join(o.completionDir(), "reeve.bash") + "` to ~/.bashrc",
		"zsh: add `fpath=(" + o.completionDir() + " $fpath)` before compinit in ~/.zshrc",
		"fish: `ln -s " + filepath.Join(o.completionDir(), "reeve.fish") + " ~/.config/fish/completions/reeve.fish`",
		"man: add " + filepath.Dir(o.manDir()) + " to MANPATH (then `man reeve`)",
	}
	if o.json {
		return writeJSON(o.env.Out, rep)
	}
	for _, f := range rep.Files {
		line := fmt.Sprintf("%-9s %-12s %s", f.Action, f.Kind, f.Path)
		if f.Detail != "" {
			line += " (" + f.Detail + ")"
		}
		fmt.Fprintln(o.env.Out, line)
	}
	for _, n := range rep.Next {
		fmt.Fprintln(o.env.Err, "reeve: "+n)
	}
	return nil
}

type genFile struct {
	Kind    string
	Path    string
	content []byte
}

// manDate is the date man pages carry: fixed, so that regenerating them
// from the same binary writes the same bytes.
var manDate = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// generated renders the completions and man pages of the command tree.
func (o *installOptions) generated() ([]genFile, error) {
	var out []genFile
	comp := []struct {
		name string
		gen  func(*bytes.Buffer) error
	}{
		{"reeve.bash", func(b *bytes.Buffer) error { return o.root.GenBashCompletionV2(b, true) }},
		{"_reeve", func(b *bytes.Buffer) error { return o.root.GenZshCompletion(b) }},
		{"reeve.fish", func(b *bytes.Buffer) error { return o.root.GenFishCompletion(b, true) }},
	}
	for _, c := range comp {
		var b bytes.Buffer
		if err := c.gen(&b); err != nil {
			return nil, fmt.Errorf("completion %s: %w", c.name, err)
		}
		out = append(out, genFile{Kind: "completion", Path: filepath.Join(o.completionDir(), c.name), content: b.Bytes()})
	}
	var walk func(*cobra.Command) error
	walk = func(c *cobra.Command) error {
		if !c.IsAvailableCommand() && c != o.root || c.IsAdditionalHelpTopicCommand() {
			return nil
		}
		for _, sub := range c.Commands() {
			if err := walk(sub); err != nil {
				return err
			}
		}
		var b bytes.Buffer
		writeMan(&b, c, manDate)
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
		out = append(out, genFile{Kind: "man-page", Path: filepath.Join(o.manDir(), name), content: b.Bytes()})
		return nil
	}
	if err := walk(o.root); err != nil {
		return nil, err
	}
	return out, nil
}

// writeIfChanged writes content unless the file already holds it; the
// files are not secret, so readable by the user's shells (0644 in the
// home, which stays 0700).
func writeIfChanged(path string, content []byte) (string, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, content) {
		return "unchanged", nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	if err := atomicfile.WriteFile(path, content, 0o644); err != nil {
		return "", err
	}
	return "written", nil
}
