package cli

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/internal/syncbuf"
)

// bareHintAllowed are the string literals of cli/ that spell a reeve
// command line without homeFlag.reeve, each for a reason that no home of
// this command applies: keyed by a part of the literal that only it has.
var bareHintAllowed = map[string]string{
	// Run on another device, whose home this command cannot know.
	"run:\n  reeve context device-enroll-approve":                  "on another device",
	"another device of yours: reeve context device-enroll-approve": "on another device",
	"on it run: reeve context device-enroll-accept":                "on the approved device",
	"what `reeve context status` shows on their machine":           "on another person's machine",
	"once they run `reeve context init`":                           "on another person's machine",
	// Commands that read no daemon home: a --home would change nothing.
	"see `reeve server relay-credential`": "the server reads its data directory",
	"run `reeve check %s`":                "check reads the project, not the home",
	"listed in `reeve ls --help`":         "help is the same in every home",
	// Not command lines at all.
	"reeve server listening on":              "a log line",
	"reeve relay listening on":               "a log line",
	"written by `reeve setup`":               "the header of the config file",
	"\"reeve session id\"":                   "a flag's description",
	"`reeve start --foreground --home HOME`": "help text of service install, passed to its builder",
}

// A reeve command line in a string literal of cli/ outside the helper, or
// a command told without its "reeve" ("run sync-pull"), is a hint that,
// pasted or completed after a --home command, reaches another home's
// daemon. Help text (Short, Long, Example) is written before any home is
// resolved and is not scanned.
func TestNoBareHints(t *testing.T) {
	var names []string
	for _, c := range topCommands {
		names = append(names, regexp.QuoteMeta(c.name))
	}
	names = append(names, "install")
	// "reeve " then a command or a flag, or a quoted "reeve %s"; "reeve: "
	// and "reeve worker: " are message prefixes, "reeve %s" alone a
	// version.
	hint := regexp.MustCompile("`reeve %|" + `\breeve (?:--[a-z]|(?:` + strings.Join(names, "|") + `)(?:[\s` + "`" + `)"'.,;]|$))`)
	// A command told without "reeve": a hyphenated subcommand or a top
	// command with a flag after "run", "with", "or" and the like.
	var subs []string
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			if c.HasParent() && strings.Contains(s.Name(), "-") {
				subs = append(subs, regexp.QuoteMeta(s.Name()))
			}
			walk(s)
		}
	}
	walk(newRoot(&Env{Programs: testPrograms()}, ""))
	if len(subs) < 10 {
		t.Fatalf("the tree has only the subcommands %q", subs)
	}
	fragment := regexp.MustCompile(`\b(?:run|with|use|see|try|or)\s+` + "`?" + `(?:(?:` + strings.Join(subs, "|") + `)\b|(?:` + strings.Join(names, "|") + `) --)`)

	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				// The helper itself spells "reeve --home".
				if n.Name.Name == "reeve" && n.Recv != nil && len(n.Recv.List) == 1 {
					if id, ok := n.Recv.List[0].Type.(*ast.Ident); ok && id.Name == "homeFlag" {
						return false
					}
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && isHelpField(k.Name) {
					return false
				}
			case *ast.AssignStmt:
				if len(n.Lhs) == 1 {
					if s, ok := n.Lhs[0].(*ast.SelectorExpr); ok && isHelpField(s.Sel.Name) {
						return false
					}
				}
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(n.Value)
				if err != nil {
					t.Fatalf("%s: %v", fset.Position(n.Pos()), err)
				}
				if !hint.MatchString(s) && !fragment.MatchString(s) {
					return true
				}
				for part := range bareHintAllowed {
					if strings.Contains(s, part) || strings.Contains(n.Value, part) {
						used[part] = true
						return true
					}
				}
				t.Errorf("%s: a bare reeve command line; spell it with homeFlag.reeve: %s", fset.Position(n.Pos()), n.Value)
			}
			return true
		})
	}
	for part := range bareHintAllowed {
		if !used[part] {
			t.Errorf("bareHintAllowed has %q, which no literal holds any more: drop it", part)
		}
	}
}

// isHelpField reports whether a cobra.Command field holds help text.
func isHelpField(name string) bool {
	return name == "Short" || name == "Long" || name == "Example"
}

// Hints printed by a command given --home name that home, quoted for the
// shell, and pasted into sh as printed reach it; with the home from
// REEVE_HOME they stay bare. The cases cover a daemon that does not run
// (the error made in Env.Connect), one that does not answer (apiExit),
// the empty list, and the context vault's pair-first and init hints.
func TestHintsReachTheSameHome(t *testing.T) {
	h := filepath.Join(t.TempDir(), "it's my home")
	if err := os.MkdirAll(h, 0o700); err != nil {
		t.Fatal(err)
	}
	var reached []home.Dir
	fake := &fakeDaemon{t: t,
		dirs:   func() ([]wire.Directory, error) { return nil, nil },
		health: func() (wire.Health, error) { return wire.Health{Status: "ok"}, nil },
	}
	slow := &fakeDaemon{t: t, dirs: func() ([]wire.Directory, error) { return nil, context.DeadlineExceeded }}
	// The daemon's own refusals suggest commands too; it cannot know the
	// client's --home, so the command line names it as it prints them.
	refusing := &fakeDaemon{t: t,
		prompt: func(wire.PromptRequest) error {
			return &wire.AckError{Code: wire.CodeBusy, Message: "session S1 is running a turn; send the prompt when it has ended (see `reeve wait S1`)"}
		},
		addDir: func(string) (wire.AddDirectoryResponse, error) {
			return wire.AddDirectoryResponse{}, &controlclient.APIError{Status: 409, Code: "conflict", Message: "stop them first (`reeve session stop S1`)"}
		},
	}
	type result struct {
		code     int
		out, err string
	}
	execute := func(d *fakeDaemon, env map[string]string, args ...string) result {
		t.Helper()
		var out, errb syncbuf.Buffer
		e := &Env{In: strings.NewReader(""), Out: &out, Err: &errb, Getenv: func(k string) string { return env[k] }, Programs: testPrograms()}
		if d != nil {
			e.Connect = func(_ context.Context, dir home.Dir) (Daemon, error) {
				reached = append(reached, dir)
				return d, nil
			}
		}
		code := Execute(context.Background(), e, args)
		return result{code, out.String(), errb.String()}
	}
	flag := map[string]string{}
	fromEnv := map[string]string{"REEVE_HOME": h}
	q := shellWord(h)
	for _, c := range []struct {
		name   string
		d      *fakeDaemon // nil: the real Env.Connect
		args   []string
		code   int
		stdout bool
		hint   string // with HOME for the home's flag
	}{
		{"no daemon", nil, []string{"list"}, ExitNotRunning, false, "(start one with `reeve HOME start`)"},
		{"no answer", slow, []string{"list"}, ExitUnhealthy, false, "; see `reeve HOME status`"},
		{"empty list", fake, []string{"list"}, ExitOK, false, "(add one with `reeve HOME add PATH`)"},
		{"not registered", fake, []string{"remove", h}, ExitNotFound, false, "(see `reeve HOME list`)"},
		{"pair first", nil, []string{"context", "init"}, ExitUsage, false, "run `reeve HOME pair --server URL` first"},
		{"no device", nil, []string{"context", "status"}, ExitOK, true, "no device: run `reeve HOME context init`"},
		{"daemon's ack", refusing, []string{"send", "S1", "--prompt", "more"}, ExitConflict, false, "(see `reeve HOME wait S1`)"},
		{"daemon's API error", refusing, []string{"add", h}, ExitConflict, false, "stop them first (`reeve HOME session stop S1`)"},
	} {
		r := execute(c.d, flag, append([]string{"--home", h}, c.args...)...)
		printed := r.err
		if c.stdout {
			printed = r.out
		}
		want := strings.ReplaceAll(c.hint, "HOME", "--home "+q)
		if r.code != c.code || !strings.Contains(printed, want) {
			t.Errorf("%s with --home: exit %d, want %d and %q in:\n%s%s", c.name, r.code, c.code, want, r.out, r.err)
		}
		// Pasted into a shell as printed, the hint's words give the home.
		cmdline := want[strings.Index(want, "`")+1:]
		cmdline = cmdline[:strings.Index(cmdline, "`")]
		if argv := shellArgs(t, cmdline); len(argv) < 3 || argv[0] != "reeve" || argv[1] != "--home" || argv[2] != h {
			t.Errorf("%s: %q is, to sh, %q", c.name, cmdline, argv)
		}
		r = execute(c.d, fromEnv, c.args...)
		printed = r.err
		if c.stdout {
			printed = r.out
		}
		if want := strings.ReplaceAll(c.hint, "HOME ", ""); r.code != c.code || !strings.Contains(printed, want) {
			t.Errorf("%s with REEVE_HOME: exit %d, want %d and %q in:\n%s%s", c.name, r.code, c.code, want, r.out, r.err)
		}
	}

	// One hint run as sh parses it reaches the home it was printed for.
	r := execute(fake, flag, "--home", h, "remove", h)
	i := strings.Index(r.err, "`reeve ")
	if i < 0 {
		t.Fatalf("no hint in %q", r.err)
	}
	cmdline := r.err[i+1:]
	cmdline = cmdline[:strings.Index(cmdline, "`")]
	reached = nil
	if r := execute(fake, nil, shellArgs(t, cmdline)[1:]...); r.code != ExitOK || len(reached) != 1 || reached[0] != home.Dir(h) {
		t.Fatalf("%s: exit %d, reached %q, not %s\n%s", cmdline, r.code, reached, h, r.err)
	}
}

// shellArgs is the argv that sh makes of cmdline.
func shellArgs(t *testing.T, cmdline string) []string {
	t.Helper()
	out, err := exec.Command("sh", "-c", `reeve() { printf '%s\0' reeve "$@"; }; `+cmdline).Output()
	if err != nil {
		t.Fatalf("sh -c %q: %v", cmdline, err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

// setup's next steps name the home that a bare command would miss: one
// given by --home, also when it is the default and REEVE_HOME names
// another, and none when REEVE_HOME names it.
func TestSetupNextStepsNameTheHome(t *testing.T) {
	state := t.TempDir()
	def := filepath.Join(state, "reeve") // the default home, from XDG_STATE_HOME
	other := filepath.Join(t.TempDir(), "it's another")
	for _, c := range []struct {
		name  string
		env   map[string]string
		args  []string
		named string // the home the steps name, "" for none
	}{
		{"--home", map[string]string{"XDG_STATE_HOME": state}, []string{"--home", other}, other},
		{"REEVE_HOME", map[string]string{"XDG_STATE_HOME": state, "REEVE_HOME": other}, nil, ""},
		{"the default", map[string]string{"XDG_STATE_HOME": state}, nil, ""},
		{"--home the default, REEVE_HOME another", map[string]string{"XDG_STATE_HOME": state, "REEVE_HOME": other}, []string{"--home", def}, def},
	} {
		var out, errb syncbuf.Buffer
		e := &Env{In: strings.NewReader(""), Out: &out, Err: &errb, Getenv: func(k string) string { return c.env[k] }, Programs: testPrograms()}
		if code := Execute(context.Background(), e, append(c.args, "setup", "--yes", "--json")); code != ExitOK {
			t.Fatalf("%s: exit %d\n%s", c.name, code, errb.String())
		}
		var rep struct{ Next []string }
		if err := json.Unmarshal([]byte(out.String()), &rep); err != nil || len(rep.Next) == 0 {
			t.Fatalf("%s: %v %s", c.name, err, out.String())
		}
		want := "reeve start"
		if c.named != "" {
			want = "reeve --home " + shellWord(c.named) + " start"
		}
		if rep.Next[0] != want {
			t.Errorf("%s: next %q, want %q first", c.name, rep.Next, want)
		}
		if c.named != "" {
			if argv := shellArgs(t, rep.Next[0]); len(argv) != 4 || argv[2] != c.named {
				t.Errorf("%s: %q is, to sh, %q", c.name, rep.Next[0], argv)
			}
		}
	}
}
