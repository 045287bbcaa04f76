package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"reeve.dev/reeve/daemon/autostart"
	"reeve.dev/reeve/daemon/config"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/internal/atomicfile"
)

// reeve setup: the first run. It writes the config file of the home
// (validated against the v1 schema) from defaults (--yes) or answers
// (--choose), and optionally installs the auto-start unit. Nothing is
// written until every answer is in, so an interrupted --choose leaves the
// previous config as it was.

type setupOptions struct {
	env    *Env
	cmd    *cobra.Command
	yes    bool
	choose bool
	json   bool
	// lookPath finds installed agents; default exec.LookPath.
	lookPath func(string) (string, error)
	// autostart installs the unit; default autostart.Install.
	autostart func(ctx context.Context, o autostart.Options, start bool) (autostart.Report, error)
}

// setupChoices are the answers, each defaulting to the current value.
type setupChoices struct {
	Home         string `json:"home"`
	Listen       string `json:"listen"`
	DefaultAgent string `json:"default_agent"`
	DefaultMode  string `json:"default_mode"`
	Server       string `json:"server,omitempty"`
	AutoStart    bool   `json:"auto_start"`
}

type setupReport struct {
	setupChoices
	ConfigFile    string   `json:"config_file"`
	ConfigChanged bool     `json:"config_changed"`
	AutoStartUnit string   `json:"auto_start_unit,omitempty"`
	Next          []string `json:"next"`
}

func newSetupCmd(env *Env) *cobra.Command {
	opts := &setupOptions{env: env}
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "First-run setup: write the config (--yes takes the defaults, --choose asks)",
		Long: `Set reeve up on this machine: the daemon home, the listen address, the
default agent (from those installed) and mode, optionally a server to pair
with and auto-start by the service manager. --yes takes the current values
(the defaults on a first run) without asking; --choose asks for each. The
config file is written only when every answer is in and only if it changes,
so running setup again changes nothing unless asked, and an interrupted
--choose leaves the previous config untouched.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.cmd = cmd
			return runSetup(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.yes, "yes", false, "accept the current values (the defaults on a first run) without asking")
	f.BoolVar(&opts.choose, "choose", false, "ask for each choice")
	f.BoolVar(&opts.json, "json", false, "print the outcome as JSON")
	return cmd
}

func runSetup(ctx context.Context, o *setupOptions) error {
	switch {
	case o.yes && o.choose:
		return exitf(ExitUsage, "--yes and --choose exclude each other")
	case !o.yes && !o.choose:
		return exitf(ExitUsage, "pass --yes to accept the defaults or --choose to answer each choice")
	}
	homePath, _, _, _, err := config.Locate(config.LoadOptions{Flags: o.cmd.Flags(), Getenv: o.env.Getenv})
	if err != nil {
		return exitf(ExitUsage, "find the daemon home: %v (pass --home)", err)
	}
	cur, err := o.current(homePath)
	if err != nil {
		return err
	}
	c := cur
	if o.choose {
		p := newPrompter(ctx, o.env)
		if c, err = o.ask(p, cur); err != nil {
			if errors.Is(err, errPromptEnded) || errors.Is(err, context.Canceled) {
				return exitf(ExitFailure, "setup interrupted; nothing was written")
			}
			return err
		}
	}
	return o.apply(ctx, c)
}

// current reads the values setup starts from: the home's config file over
// the defaults.
func (o *setupOptions) current(homePath string) (setupChoices, error) {
	r, err := config.Load(config.LoadOptions{Getenv: o.homeEnv(homePath)})
	if err != nil {
		return setupChoices{}, configExit(err)
	}
	s := r.Settings
	c := setupChoices{Home: homePath, Listen: s.Listen, DefaultAgent: s.DefaultAgent, DefaultMode: s.DefaultMode}
	if c.DefaultAgent == "" {
		c.DefaultAgent = o.agents()[0]
	}
	return c, nil
}

// homeEnv is the environment with REEVE_HOME set to homePath and the
// config file the home's own.
func (o *setupOptions) homeEnv(homePath string) func(string) string {
	return func(k string) string {
		switch k {
		case config.EnvName(config.KeyHome):
			return homePath
		case config.EnvName(config.KeyConfigFile):
			return ""
		}
		return o.env.Getenv(k)
	}
}

// agents lists the agents installed on this machine, in the order of
// preference of the default agent; shell is always there.
func (o *setupOptions) agents() []string {
	look := o.lookPath
	if look == nil {
		look = exec.LookPath
	}
	var out []string
	for _, a := range []string{"claude", "codex", "gemini"} {
		if _, err := look(a); err == nil {
			out = append(out, a)
		}
	}
	return append(out, "shell")
}

func (o *setupOptions) ask(p *prompter, cur setupChoices) (setupChoices, error) {
	c := cur
	var err error
	if c.Home, err = p.ask("Daemon home", cur.Home, func(s string) (string, error) {
		if !filepath.IsAbs(s) {
			return "", errors.New("give an absolute path")
		}
		return filepath.Clean(s), nil
	}); err != nil {
		return c, err
	}
	if c.Home != cur.Home {
		// The defaults of another home are its own config's.
		if cur, err = o.current(c.Home); err != nil {
			return c, err
		}
		c.Listen, c.DefaultAgent, c.DefaultMode = cur.Listen, cur.DefaultAgent, cur.DefaultMode
	}
	if c.Listen, err = p.ask("Listen address (host:port, port, or unix socket path)", c.Listen, func(s string) (string, error) {
		_, err := config.ParseListen(s)
		return s, err
	}); err != nil {
		return c, err
	}
	agents := o.agents()
	if !slices.Contains(agents, c.DefaultAgent) {
		agents = append(agents, c.DefaultAgent)
	}
	if c.DefaultAgent, err = p.ask("Default agent ("+strings.Join(agents, ", ")+")", c.DefaultAgent, oneOf(agents)); err != nil {
		return c, err
	}
	if c.DefaultMode, err = p.ask("Default mode (detect: a human decides tool uses; bypass: allow and record)", c.DefaultMode, oneOf(config.Modes)); err != nil {
		return c, err
	}
	if c.Server, err = p.ask("Server to pair with (URL, empty for none)", "", func(s string) (string, error) {
		if s != "" && !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") {
			return "", errors.New("give an http:// or https:// URL, or nothing")
		}
		return s, nil
	}); err != nil {
		return c, err
	}
	auto, err := p.ask("Start the daemon automatically at login? (y/n)", "n", oneOf([]string{"y", "n", "yes", "no"}))
	if err != nil {
		return c, err
	}
	c.AutoStart = strings.HasPrefix(auto, "y")
	return c, nil
}

func oneOf(allowed []string) func(string) (string, error) {
	return func(s string) (string, error) {
		if slices.Contains(allowed, s) {
			return s, nil
		}
		return "", fmt.Errorf("choose one of %s", strings.Join(allowed, ", "))
	}
}

// apply writes the config when it changes, installs the auto-start unit
// when asked, and says what comes next.
func (o *setupOptions) apply(ctx context.Context, c setupChoices) error {
	dir := home.Dir(c.Home)
	if err := dir.Prepare(); err != nil {
		return withExit(ExitFailure, err)
	}
	file := filepath.Join(c.Home, config.DefaultConfigName)
	changed, err := writeSetupConfig(file, c)
	if err != nil {
		return err
	}
	rep := setupReport{setupChoices: c, ConfigFile: file, ConfigChanged: changed}
	if changed {
		fmt.Fprintf(o.env.Err, "reeve: wrote %s (listen %s, default agent %s, default mode %s)\n", file, c.Listen, c.DefaultAgent, c.DefaultMode)
	} else {
		fmt.Fprintf(o.env.Err, "reeve: %s already holds these settings; nothing changed\n", file)
	}
	if c.AutoStart {
		exe, err := o.env.Executable()
		if err == nil {
			if r, e := filepath.EvalSymlinks(exe); e == nil {
				exe = r
			}
			install := o.autostart
			if install == nil {
				install = autostart.Install
			}
			var u autostart.Report
			u, err = install(ctx, autostart.Options{Executable: absPath(exe), Home: c.Home}, false)
			rep.AutoStartUnit = u.Unit.Path
		}
		if err != nil {
			fmt.Fprintf(o.env.Err, "reeve: auto-start not installed: %v\n", err)
		} else {
			fmt.Fprintf(o.env.Err, "reeve: auto-start unit installed at %s\n", rep.AutoStartUnit)
		}
	}
	// The next steps name the home when a bare command would reach
	// another: the one REEVE_HOME names, else the default. The home may
	// have been chosen at the prompt rather than by --home.
	var h homeFlag
	bare := o.env.Getenv("REEVE_HOME")
	if bare == "" {
		bare, _ = config.DefaultHome(o.env.Getenv, nil)
	}
	if bare != c.Home {
		h = homeFlag(c.Home)
	}
	if locked, _ := dir.Locked(); locked {
		if changed {
			rep.Next = append(rep.Next, h.reeve("restart")+"  (the running daemon applies the new config on restart)")
		}
	} else if rep.AutoStartUnit == "" {
		rep.Next = append(rep.Next, h.reeve("start"))
	}
	rep.Next = append(rep.Next, h.reeve("install")+"  (shell completions and man pages)")
	if c.Server != "" {
		rep.Next = append(rep.Next, h.reeve("pair --server "+shellWord(c.Server)))
	}
	rep.Next = append(rep.Next, h.reeve(`run --prompt "..."`))
	if o.json {
		return writeJSON(o.env.Out, rep)
	}
	fmt.Fprintln(o.env.Out, "next:")
	for _, n := range rep.Next {
		fmt.Fprintln(o.env.Out, "  "+n)
	}
	return nil
}

// writeSetupConfig sets the chosen keys in the config file, keeping its
// other keys, validates the result against the v1 schema before it
// replaces the file, and reports whether anything changed.
func writeSetupConfig(file string, c setupChoices) (bool, error) {
	doc := map[string]any{}
	old, err := os.ReadFile(file)
	switch {
	case err == nil:
		if err := yaml.Unmarshal(old, &doc); err != nil {
			return false, exitf(ExitInvalid, "%s is not valid YAML (%v); fix or remove it, then run setup again", file, err)
		}
		if doc == nil {
			doc = map[string]any{}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return false, withExit(ExitFailure, err)
	}
	want := map[string]any{"version": 1, "listen": c.Listen, "default_agent": c.DefaultAgent, "default_mode": c.DefaultMode}
	same := err == nil
	for k, v := range want {
		if fmt.Sprint(doc[k]) != fmt.Sprint(v) {
			same = false
		}
		doc[k] = v
	}
	if same {
		return false, nil
	}
	var b bytes.Buffer
	b.WriteString("# reeve daemon config (v1 schema); written by `reeve setup`.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return false, withExit(ExitFailure, err)
	}
	// Validate a candidate beside the file, then rename it over the file.
	tmp := strings.TrimSuffix(file, filepath.Ext(file)) + ".setup" + filepath.Ext(file)
	if err := atomicfile.WriteFile(tmp, b.Bytes(), atomicfile.PrivateFile); err != nil {
		return false, withExit(ExitFailure, err)
	}
	defer os.Remove(tmp)
	problems, err := config.ValidateFile(tmp)
	if err != nil {
		return false, withExit(ExitFailure, err)
	}
	if len(problems) > 0 {
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.String()
		}
		return false, exitf(ExitInvalid, "the config setup would write is invalid, nothing written:\n  %s", strings.Join(msgs, "\n  "))
	}
	if err := os.Rename(tmp, file); err != nil {
		return false, withExit(ExitFailure, err)
	}
	return true, nil
}

// prompter asks questions on the command's streams, one line per answer,
// and gives up when the context ends (Ctrl-C) or the input does.
type prompter struct {
	ctx   context.Context
	out   io.Writer
	lines chan string
}

var errPromptEnded = errors.New("input ended")

func newPrompter(ctx context.Context, env *Env) *prompter {
	p := &prompter{ctx: ctx, out: env.Err, lines: make(chan string)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(env.In)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return p
}

// ask shows a question with its default and returns the answer checked
// by check, asking again after a bad one.
func (p *prompter) ask(q, def string, check func(string) (string, error)) (string, error) {
	for {
		if def != "" {
			fmt.Fprintf(p.out, "%s [%s]: ", q, def)
		} else {
			fmt.Fprintf(p.out, "%s: ", q)
		}
		var line string
		select {
		case <-p.ctx.Done():
			fmt.Fprintln(p.out)
			return "", p.ctx.Err()
		case l, ok := <-p.lines:
			if !ok {
				fmt.Fprintln(p.out)
				return "", errPromptEnded
			}
			line = strings.TrimSpace(l)
		}
		if line == "" {
			line = def
		}
		v, err := check(line)
		if err == nil {
			return v, nil
		}
		fmt.Fprintf(p.out, "  %v\n", err)
	}
}
