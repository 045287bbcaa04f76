package cmdline

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mvdan.cc/sh/v3/syntax"
)

// The differential oracle: bash itself, tracing (set -x) every simple
// command it runs. A script of the corpus (testdata/fuzz/FuzzOracle) or a
// mutation of it runs under bash in an empty directory, as the unprivileged
// user nobody, with no program reachable (PATH is empty and
// command_not_found_handle does nothing) and the builtins that could reach
// outside (cd, exec, eval, source, enable, hash, ...) replaced by no-ops;
// so only echo-like builtins run and nothing outside the directory is
// touched. Every command bash traced must be among the commands Parse
// found: the parser may see more (both branches of an if, the commands of
// wrappers bash could not run) but never less. A line Parse calls opaque
// or cannot parse is exempt: the policy asks a human about it.

const oraclePrelude = `ulimit -u 64 -t 2 -f 64 -v 400000 2>/dev/null
PATH=/nonexistent
command_not_found_handle() { :; }
cd() { :; }; pushd() { :; }; popd() { :; }; exec() { :; }; eval() { :; }; source() { :; }; .() { :; }
builtin() { :; }; command() { :; }; enable() { :; }; unset() { :; }; set() { :; }; shopt() { :; }
trap() { :; }; exit() { :; }; logout() { :; }; suspend() { :; }; fc() { :; }; history() { :; }
hash() { :; }; alias() { :; }; kill() { :; }; ulimit() { :; }; disown() { :; }; wait() { :; }
fg() { :; }; bg() { :; }; umask() { :; }; mapfile() { :; }; readarray() { :; }
`

// oracleUser is nobody: the scripts run without any privilege.
const oracleUser = 65534

var traceLine = regexp.MustCompile(`^\++` + regexp.QuoteMeta(traceMark) + ` (.*)$`)

const traceMark = "\x01oracle\x01"

// bashTrace runs script under bash and returns the argv of every simple
// command it traced; ok is false when the run was cut short (time, or
// bash refused the script).
func bashTrace(t testing.TB, bash, script string) ([][]string, bool) {
	dir, err := os.MkdirTemp("", "reeve-oracle-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	trace, err := os.CreateTemp("", "reeve-trace-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(trace.Name())
	defer trace.Close()
	if err := trace.Chmod(0o666); err != nil {
		t.Fatal(err)
	}
	full := "set -x\n" + oraclePrelude + ": reeve-oracle-begin\n" + script
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// bash -c, as agents run their commands (a script read from stdin
	// differs at its very end: a last backslash is dropped).
	cmd := exec.CommandContext(ctx, bash, "--norc", "--noprofile", "-c", full)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/nonexistent", "HOME=" + dir, "BASH_XTRACEFD=3", "PS4=+" + traceMark + " ", "LC_ALL=C"}
	cmd.ExtraFiles = []*os.File{trace}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Credential: &syscall.Credential{Uid: oracleUser, Gid: oracleUser},
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		return nil, false
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run bash: %v", err)
	}
	if strings.Contains(stderr.String(), "syntax error") {
		return nil, false
	}
	out, err := os.ReadFile(trace.Name())
	if err != nil {
		t.Fatal(err)
	}
	var cmds [][]string
	begun := false
	for _, line := range strings.Split(string(out), "\n") {
		m := traceLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if !begun {
			begun = m[1] == ": reeve-oracle-begin"
			continue
		}
		if argv, ok := traceArgv(m[1]); ok {
			cmds = append(cmds, argv)
		}
	}
	return cmds, begun
}

// traceArgv reads one trace line back into words. Lines that are not a
// simple command with arguments (assignments, [[ ]], for headers, lines
// cut by a newline inside a word) are skipped.
func traceArgv(line string) ([]string, bool) {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(line), "")
	if err != nil || len(f.Stmts) != 1 {
		return nil, false
	}
	call, ok := f.Stmts[0].Cmd.(*syntax.CallExpr)
	if !ok || len(call.Args) == 0 || len(call.Assigns) > 0 || len(f.Stmts[0].Redirs) > 0 {
		return nil, false
	}
	var argv []string
	for _, w := range call.Args {
		v, ok := literal(w)
		if !ok {
			return nil, false
		}
		argv = append(argv, v)
	}
	// The prelude's no-op bodies.
	if argv[0] == ":" || argv[0] == "return" {
		return nil, false
	}
	return argv, true
}

// covered reports whether Parse found the command bash ran.
func covered(r Result, argv []string) bool {
	name := argv[0]
	if strings.ContainsRune(name, '/') {
		name = path.Base(name)
	}
	for _, c := range r.Commands {
		if c.Name != name {
			continue
		}
		exact := len(c.Args) == len(argv)-1
		for i, a := range c.Args {
			if !a.Known {
				return true // bash saw the expansion's value; the parser its source
			}
			if exact && a.Value != argv[i+1] {
				exact = false
			}
		}
		if exact {
			return true
		}
	}
	return false
}

func oracleBash(t testing.TB) string {
	if os.Geteuid() != 0 {
		t.Skip("the oracle runs bash as nobody, which needs root")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	return bash
}

// checkOracle compares the parser with bash on one script; it reports
// whether there was something to compare.
func checkOracle(t *testing.T, bash, script string) bool {
	if len(script) > 4096 || strings.ContainsRune(script, 0) || strings.Contains(script, traceMark) {
		return false
	}
	r, err := Parse(script)
	if err != nil || len(r.Opaque) > 0 {
		return false // asked about, never allowed: nothing to compare
	}
	ran, ok := bashTrace(t, bash, script)
	if !ok {
		return false
	}
	for _, argv := range ran {
		if !covered(r, argv) {
			var found []string
			for _, c := range r.Commands {
				found = append(found, c.Text())
			}
			t.Fatalf("bash ran %q, which the parser did not find in %q; it found %q", argv, script, found)
		}
	}
	return true
}

// Most of the corpus is compared, not skipped: a prelude bash refuses, or
// a trace that is not read, would otherwise pass every seed.
func TestOracleCorpus(t *testing.T) {
	bash := oracleBash(t)
	files, err := filepath.Glob("testdata/fuzz/FuzzOracle/*")
	if err != nil || len(files) < 20 {
		t.Fatalf("corpus: %d files, %v", len(files), err)
	}
	compared := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		_, lit, ok := strings.Cut(string(b), "\nstring(")
		if !ok {
			t.Fatalf("%s: not a corpus file", file)
		}
		script, err := strconv.Unquote(strings.TrimSuffix(strings.TrimSpace(lit), ")"))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if checkOracle(t, bash, script) {
			compared++
		}
	}
	if compared < len(files)*2/3 {
		t.Fatalf("only %d of %d corpus scripts were compared with bash", compared, len(files))
	}
	t.Logf("%d of %d corpus scripts compared with bash", compared, len(files))
}

func FuzzOracle(f *testing.F) {
	bash := oracleBash(f)
	for _, s := range []string{
		"rm -rf build",
		"echo a; echo b && echo c || echo d",
		"f() { echo in f; }; f; f",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, script string) {
		checkOracle(t, bash, script)
	})
}

// The oracle can fail: a parser that missed commands would be caught.
func TestOracleCatchesAMiss(t *testing.T) {
	bash := oracleBash(t)
	ran, ok := bashTrace(t, bash, "echo a | tr a b; if true; then printf x; fi; g() { echo in-g; }; g")
	if !ok {
		t.Fatal("the trace did not run")
	}
	var names []string
	for _, argv := range ran {
		names = append(names, argv[0])
	}
	for _, want := range []string{"echo", "tr", "true", "printf", "g"} {
		if !slices.Contains(names, want) {
			t.Fatalf("bash traced %q, without %s", names, want)
		}
	}
	short := Result{Commands: []Command{{Name: "echo", Args: []Word{{Value: "a", Known: true}}}}}
	if covered(short, []string{"tr", "a", "b"}) {
		t.Fatal("a command the parser did not find counts as covered")
	}
	if covered(short, []string{"echo", "b"}) {
		t.Fatal("other arguments count as covered")
	}
	// Nothing outside the directory is touched: the redirect lands in it.
	if _, err := os.Stat("/reeve-oracle-escape"); err == nil {
		t.Fatal("a file outside was there before the test")
	}
	bashTrace(t, bash, "cd /; echo x > /reeve-oracle-escape; builtin cd /; echo y >> reeve-oracle-escape")
	if _, err := os.Stat("/reeve-oracle-escape"); err == nil {
		os.Remove("/reeve-oracle-escape")
		t.Fatal("the oracle's script wrote outside its directory")
	}
}
