// Package cmdline reads a shell command line the way the shell will run it,
// without running it: every simple command it runs (in pipelines, lists,
// subshells, functions, command and process substitutions), with the
// programs that wrappers run resolved (command, builtin, exec, env, nice,
// nohup, setsid, timeout, stdbuf, ionice, time, sudo, doas, xargs, find
// -exec, and sh -c or bash -c, recursively), the directory each runs in
// (after cd), the files it redirects to, and the here-documents given to
// patch programs. What cannot be known without running the line (a command
// word built from an expansion, eval, a shell reading its script from a
// pipe) is reported as opaque, with the reason; a caller must never allow
// such a line on the strength of the commands it can see.
//
// It parses with mvdan.cc/sh/v3/syntax in bash mode.
package cmdline

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Word is one argument of a command.
type Word struct {
	Value string // after quote removal; meaningful when Known
	Known bool   // false when the word depends on an expansion or a glob
	Src   string // as written
}

// Text is the word as a command pattern sees it: its value, quoted for a
// shell where needed, or the source when the value is not known.
func (w Word) Text() string {
	if !w.Known {
		return w.Src
	}
	return quote(w.Value)
}

// Command is one simple command the line runs.
type Command struct {
	// Name is the program run: the command word with a path reduced to
	// its base name, so /bin/rm and rm are both "rm".
	Name string
	// Word is the command word as written, after quote removal (/bin/rm,
	// ./go, rm).
	Word string
	// Args are the words after the command word, redirections excluded.
	Args []Word
	// Dir is the directory the command runs in, relative to where the line
	// starts ("" for the start itself) or absolute; meaningless when
	// DirUnknown (a cd to somewhere only known at run time).
	Dir        string
	DirUnknown bool
	// Via names the wrapper that runs the command (sudo, env, xargs,
	// find -exec, sh -c, trap, ...); "" for a command written directly.
	Via string
	// Wrapper marks a command whose job is to run the command listed
	// after it (command, env, nice, xargs, sh -c, ...). The wrapped
	// command is a Command of its own.
	Wrapper bool
	// Implied marks a command that is not written but is what another one
	// does: find -delete removes files, so it implies rm.
	Implied bool
	// PathLookup is true when the program is found through $PATH as the
	// shell starts with it: the command word names no directory and no
	// PATH assignment came before. Only then does Name say which program
	// runs; otherwise it may be any file the agent wrote.
	PathLookup bool
}

// Text is the command as patterns see it: Name and the arguments.
func (c Command) Text() string { return c.text(c.Name) }

// WrittenText is the command with its command word as written.
func (c Command) WrittenText() string { return c.text(quote(c.Word)) }

func (c Command) text(head string) string {
	var b strings.Builder
	b.WriteString(head)
	for _, a := range c.Args {
		b.WriteByte(' ')
		b.WriteString(a.Text())
	}
	return b.String()
}

// Path is a file a redirection or a cd names.
type Path struct {
	Dir        string // as Command.Dir
	DirUnknown bool
	Path       string
	Write      bool // >, >>, &>, <>, >|
	Cd         bool // the target of cd or pushd (or env -C, sudo -D)
}

// Result is what Parse learned of a line.
type Result struct {
	Commands []Command
	Paths    []Path
	// Patches are the here-documents given to patch programs (Codex's
	// apply_patch, git apply, patch), for the caller to check the files
	// they touch.
	Patches []Patch
	// Opaque lists why the line's commands cannot all be known; empty when
	// they can.
	Opaque []string
}

// Patch is a patch text given to a program on its standard input.
type Patch struct {
	Program string // apply_patch, git apply, patch
	Dir     string
	Text    string
}

// MaxDepth bounds nested sh -c, eval-free wrappers and substitutions.
const MaxDepth = 16

// Parse reads a command line. An error is a syntax error: the shell would
// refuse the line too.
func Parse(line string) (Result, error) {
	var r Result
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(line), "")
	if err != nil {
		return r, fmt.Errorf("parse command: %w", err)
	}
	w := walker{res: &r}
	if strings.ContainsRune(line, '\r') {
		// The parser takes a carriage return for a blank, bash for a
		// character of the word: "rm\r" is another program to bash.
		w.opaque("a carriage return, which bash reads as part of a word")
	}
	w.stmts(line, f.Stmts, &state{})
	return r, nil
}

// state is what the commands before a point changed for the ones after.
type state struct {
	dir         string
	dirUnknown  bool
	pathChanged bool
	depth       int
	via         string
}

// sub is the state of a subshell: it starts from the parent's, and what
// it changes stays inside.
func (s *state) sub() *state {
	c := *s
	c.via = ""
	return &c
}

type walker struct{ res *Result }

func (w *walker) opaque(format string, args ...any) {
	w.res.Opaque = append(w.res.Opaque, fmt.Sprintf(format, args...))
}

func (w *walker) stmts(src string, list []*syntax.Stmt, st *state) {
	for _, s := range list {
		w.stmt(src, s, st)
	}
}

func (w *walker) stmt(src string, s *syntax.Stmt, st *state) {
	if st.depth > MaxDepth {
		w.opaque("nested too deeply to read")
		return
	}
	if s.Background {
		st = st.sub()
	}
	switch c := s.Cmd.(type) {
	case nil:
	case *syntax.CallExpr:
		w.call(src, c, s.Redirs, st)
		return // call handles the redirections itself
	case *syntax.Subshell:
		w.stmts(src, c.Stmts, st.sub())
	case *syntax.Block:
		w.stmts(src, c.Stmts, st)
	case *syntax.BinaryCmd:
		if c.Op == syntax.Pipe || c.Op == syntax.PipeAll {
			// Each side of a pipe runs in a subshell of its own.
			w.stmt(src, c.X, st.sub())
			w.stmt(src, c.Y, st.sub())
		} else {
			w.stmt(src, c.X, st)
			w.stmt(src, c.Y, st)
		}
	case *syntax.IfClause:
		for ic := c; ic != nil; ic = ic.Else {
			w.stmts(src, ic.Cond, st)
			w.stmts(src, ic.Then, st)
		}
	case *syntax.WhileClause:
		w.stmts(src, c.Cond, st)
		w.stmts(src, c.Do, st)
	case *syntax.ForClause:
		w.substs(src, c.Loop, st)
		w.stmts(src, c.Do, st)
	case *syntax.CaseClause:
		w.substs(src, c.Word, st)
		for _, it := range c.Items {
			for _, p := range it.Patterns {
				w.substs(src, p, st)
			}
			w.stmts(src, it.Stmts, st)
		}
	case *syntax.FuncDecl:
		// The body runs when the function is called, maybe many times:
		// its commands count as commands of the line.
		w.stmt(src, c.Body, st.sub())
	case *syntax.TimeClause:
		if c.Stmt != nil {
			w.stmt(src, c.Stmt, st)
		}
	case *syntax.CoprocClause:
		w.stmt(src, c.Stmt, st.sub())
	case *syntax.DeclClause:
		name := ""
		if c.Variant != nil {
			name = c.Variant.Value
		}
		cmd := Command{Name: name, Word: name, Dir: st.dir, DirUnknown: st.dirUnknown, Via: st.via, PathLookup: false}
		for _, a := range c.Args {
			if a.Name != nil && a.Name.Value == "PATH" {
				st.pathChanged = true
			}
			cmd.Args = append(cmd.Args, w.assignWord(src, a))
			w.substs(src, a, st)
		}
		w.res.Commands = append(w.res.Commands, cmd)
	default:
		// [[ ]], (( )), let: no program runs, but substitutions inside do.
		w.substs(src, c, st)
	}
	w.redirects(src, s.Redirs, st)
}

// substs finds the command and process substitutions under node and reads
// their commands, each in a subshell.
func (w *walker) substs(src string, node syntax.Node, st *state) {
	if node == nil {
		return
	}
	syntax.Walk(node, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CmdSubst:
			sub := st.sub()
			sub.depth++
			w.stmts(src, n.Stmts, sub)
			return false
		case *syntax.ProcSubst:
			sub := st.sub()
			sub.depth++
			w.stmts(src, n.Stmts, sub)
			return false
		}
		return true
	})
}

func (w *walker) assignWord(src string, a *syntax.Assign) Word {
	s := srcOf(src, a)
	if a.Value == nil || a.Array != nil || a.Index != nil {
		return Word{Src: s}
	}
	v, ok := literal(a.Value)
	if !ok || a.Name == nil {
		return Word{Src: s}
	}
	return Word{Value: a.Name.Value + "=" + v, Known: true, Src: s}
}

func (w *walker) redirects(src string, rs []*syntax.Redirect, st *state) {
	for _, r := range rs {
		if r.Word != nil {
			w.substs(src, r.Word, st)
		}
		if r.Hdoc != nil {
			w.substs(src, r.Hdoc, st)
		}
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
			continue
		}
		if r.Word == nil {
			continue
		}
		v, ok := literal(r.Word)
		if !ok {
			continue
		}
		write := true
		switch r.Op {
		case syntax.RdrIn:
			write = false
		case syntax.DplIn, syntax.DplOut:
			// <&2, >&-: a descriptor; >&file (bash) is a file.
			if v == "-" || isDigits(v) {
				continue
			}
			write = r.Op == syntax.DplOut
		}
		w.res.Paths = append(w.res.Paths, Path{Dir: st.dir, DirUnknown: st.dirUnknown, Path: v, Write: write})
	}
}

// heredoc is the literal here-document of a statement, if it has one.
func heredoc(rs []*syntax.Redirect) (string, bool, bool) {
	for _, r := range rs {
		if (r.Op == syntax.Hdoc || r.Op == syntax.DashHdoc) && r.Hdoc != nil {
			v, ok := literalHeredoc(r)
			return v, ok, true
		}
		if r.Op == syntax.WordHdoc && r.Word != nil {
			v, ok := literal(r.Word)
			return v, ok, true
		}
	}
	return "", false, false
}

func (w *walker) call(src string, c *syntax.CallExpr, redirs []*syntax.Redirect, st *state) {
	for _, a := range c.Assigns {
		w.substs(src, a, st)
	}
	for _, a := range c.Args {
		w.substs(src, a, st)
	}
	w.redirects(src, redirs, st)
	if len(c.Args) == 0 {
		// Assignments alone change the shell's own variables.
		for _, a := range c.Assigns {
			if a.Name != nil && a.Name.Value == "PATH" {
				st.pathChanged = true
			}
		}
		return
	}
	pathChanged := st.pathChanged
	for _, a := range c.Assigns {
		if a.Name != nil && a.Name.Value == "PATH" {
			pathChanged = true
		}
	}
	words := make([]Word, len(c.Args))
	for i, a := range c.Args {
		v, ok := literal(a)
		words[i] = Word{Value: v, Known: ok, Src: srcOf(src, a)}
	}
	w.run(words, redirs, st, pathChanged)
}

// run records the command words runs, and the commands it runs in turn.
func (w *walker) run(words []Word, redirs []*syntax.Redirect, st *state, pathChanged bool) {
	if len(words) == 0 {
		return
	}
	head := words[0]
	if !head.Known {
		w.opaque("the command name %s is only known when the line runs", head.Src)
		return
	}
	name := head.Value
	if strings.HasPrefix(name, "~") && !strings.ContainsRune(name, '/') {
		// ~ or ~user: a home directory, known only where the line runs.
		w.opaque("the command name %s is a home directory, only known when the line runs", head.Src)
		return
	}
	if strings.ContainsRune(name, '/') {
		name = path.Base(name)
	}
	cmd := Command{
		Name: name, Word: head.Value, Args: words[1:], Dir: st.dir, DirUnknown: st.dirUnknown, Via: st.via,
		PathLookup: !strings.ContainsRune(head.Value, '/') && !pathChanged,
	}
	idx := len(w.res.Commands)
	w.res.Commands = append(w.res.Commands, cmd)
	wrapped := w.unwrap(name, words[1:], redirs, st, pathChanged)
	if wrapped {
		w.res.Commands[idx].Wrapper = true
	}
	if text, ok, has := heredoc(redirs); has && isPatchProgram(name, words[1:]) {
		if !ok {
			w.opaque("the patch given to %s is only known when the line runs", name)
		} else {
			prog := name
			if name == "git" {
				prog = "git apply"
			}
			w.res.Patches = append(w.res.Patches, Patch{Program: prog, Dir: st.dir, Text: text})
		}
	} else if !has && (name == "apply_patch" || name == "applypatch") && len(words) == 2 && words[1].Known {
		// apply_patch 'patch' as an argument.
		w.res.Patches = append(w.res.Patches, Patch{Program: name, Dir: st.dir, Text: words[1].Value})
	}
}

func isPatchProgram(name string, args []Word) bool {
	switch name {
	case "apply_patch", "applypatch", "patch":
		return true
	case "git":
		for _, a := range args {
			if a.Known && !strings.HasPrefix(a.Value, "-") {
				return a.Value == "apply"
			}
		}
	}
	return false
}

// inner runs args as a command of its own, via the wrapper name.
func (w *walker) inner(via string, args []Word, redirs []*syntax.Redirect, st *state, pathChanged bool) {
	sub := *st
	sub.via = via
	sub.depth++
	if sub.depth > MaxDepth {
		w.opaque("wrappers nested too deeply to read")
		return
	}
	w.run(args, redirs, &sub, pathChanged)
}

// script reads text as a shell script run by via (sh -c, trap, ...).
func (w *walker) script(via string, text string, st *state) {
	if st.depth+1 > MaxDepth {
		w.opaque("scripts nested too deeply to read")
		return
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(text), "")
	if err != nil {
		w.opaque("the script given to %s does not parse: %v", via, err)
		return
	}
	sub := *st
	sub.via = via
	sub.depth++
	w.stmts(text, f.Stmts, &sub)
}

// unwrap handles the programs that run another command, and cd. It
// reports whether name is a wrapper.
func (w *walker) unwrap(name string, args []Word, redirs []*syntax.Redirect, st *state, pathChanged bool) bool {
	switch name {
	case "cd", "pushd":
		w.cd(args, st)
	case "popd":
		st.dirUnknown = true
	case "command":
		rest, opts, ok := options(args, "")
		if !ok {
			w.opaque("command with an option only known at run time")
			return true
		}
		if strings.ContainsAny(opts, "vV") {
			return false // command -v only looks the name up
		}
		w.inner(name, rest, redirs, st, pathChanged)
		return true
	case "builtin", "nohup", "setsid":
		rest, _, ok := options(args, "")
		if !ok {
			w.opaque("%s with an option only known at run time", name)
			return true
		}
		w.inner(name, rest, redirs, st, pathChanged)
		return true
	case "exec":
		rest, _, ok := options(args, "a")
		if !ok {
			w.opaque("exec with an option only known at run time")
			return true
		}
		w.inner(name, rest, redirs, st, pathChanged)
		return true
	case "nice":
		rest, _, ok := options(args, "n", "--adjustment")
		if !ok {
			w.opaque("nice with an option only known at run time")
			return true
		}
		w.inner(name, rest, redirs, st, pathChanged)
		return true
	case "time":
		rest, _, ok := options(args, "fo", "--format", "--output")
		if !ok {
			w.opaque("time with an option only known at run time")
			return true
		}
		w.inner(name, rest, redirs, st, pathChanged)
		return true
	case "ionice":
		rest, _, ok := options(args, "cnpPu", "--class", "--classdata", "--pid", "--pgid", "--uid")
		if !ok {
			w.opaque("ionice with an option only known at run time")
			return true
		}
		w.inner(name, rest, redirs, st, pathChanged)
		return true
	case "stdbuf":
		rest, _, ok := options(args, "ioe", "--input", "--output", "--error")
		if !ok {
			w.opaque("stdbuf with an option only known at run time")
			return true
		}
		w.inner(name, rest, redirs, st, pathChanged)
		return true
	case "timeout":
		rest, _, ok := options(args, "sk", "--signal", "--kill-after")
		if !ok || len(rest) == 0 {
			if !ok {
				w.opaque("timeout with an option only known at run time")
			}
			return true
		}
		w.inner(name, rest[1:], redirs, st, pathChanged) // rest[0] is the duration
		return true
	case "env":
		return w.env(args, redirs, st, pathChanged)
	case "sudo", "doas":
		return w.sudo(name, args, redirs, st, pathChanged)
	case "xargs":
		return w.xargs(args, redirs, st, pathChanged)
	case "find":
		w.find(args, st, pathChanged)
	case "eval":
		w.opaque("eval runs a string only known when the line runs")
		return true
	case "trap":
		if len(args) > 0 && args[0].Known && !strings.HasPrefix(args[0].Value, "-") {
			w.script("trap", args[0].Value, st)
		} else if len(args) > 0 && !args[0].Known {
			w.opaque("trap with an action only known at run time")
		}
	case "alias":
		if len(args) > 0 {
			w.opaque("alias defines commands by name")
		}
	}
	if shells[name] {
		return w.shell(name, args, redirs, st)
	}
	return false
}

var shells = map[string]bool{"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "mksh": true, "ash": true, "busybox-sh": true}

// shell handles sh -c 'script', sh script.sh and a shell reading its
// script from standard input.
func (w *walker) shell(name string, args []Word, redirs []*syntax.Redirect, st *state) bool {
	dashC := false
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !a.Known {
			w.opaque("%s with an argument only known at run time: %s", name, a.Src)
			return true
		}
		if a.Value == "--" || a.Value == "-" {
			i++
			break
		}
		if !strings.HasPrefix(a.Value, "-") && !strings.HasPrefix(a.Value, "+") {
			break
		}
		if a.Value == "-o" || a.Value == "+o" || a.Value == "-O" || a.Value == "+O" || a.Value == "--rcfile" || a.Value == "--init-file" {
			i++ // takes an argument
			continue
		}
		if !strings.HasPrefix(a.Value, "--") && strings.ContainsRune(a.Value, 'c') {
			dashC = true
		}
	}
	if dashC {
		if i >= len(args) {
			w.opaque("%s -c without a script", name)
			return true
		}
		if !args[i].Known {
			w.opaque("the script given to %s -c is only known when the line runs", name)
			return true
		}
		w.script(name+" -c", args[i].Value, st)
		return true
	}
	if i < len(args) {
		return false // a script file: the program is the shell
	}
	// No -c and no script file: the shell reads its script from stdin.
	if text, ok, has := heredoc(redirs); has {
		if !ok {
			w.opaque("the script given to %s is only known when the line runs", name)
			return true
		}
		w.script(name, text, st)
		return true
	}
	w.opaque("%s reads its script from standard input, which is only known when the line runs", name)
	return true
}

func (w *walker) cd(args []Word, st *state) {
	rest, _, ok := options(args, "")
	if !ok {
		st.dirUnknown = true
		return
	}
	if len(rest) == 0 {
		st.dir, st.dirUnknown = "~", false
		return
	}
	t := rest[0]
	if !t.Known || t.Value == "-" {
		st.dirUnknown = true
		return
	}
	w.res.Paths = append(w.res.Paths, Path{Dir: st.dir, DirUnknown: st.dirUnknown, Path: t.Value, Cd: true})
	st.dir = join(st.dir, t.Value)
	if isAbs(t.Value) {
		st.dirUnknown = false
	}
}

func isAbs(p string) bool { return strings.HasPrefix(p, "/") || p == "~" || strings.HasPrefix(p, "~/") }

// join is p taken from dir, without cleaning: ".." must meet the real
// directories, which only the caller can look at.
func join(dir, p string) string {
	if dir == "" || isAbs(p) {
		return p
	}
	return dir + "/" + p
}

func (w *walker) env(args []Word, redirs []*syntax.Redirect, st *state, pathChanged bool) bool {
	sub := *st
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !a.Known {
			w.opaque("env with an argument only known at run time: %s", a.Src)
			return true
		}
		v := a.Value
		switch {
		case v == "--":
			i++
			goto done
		case v == "--split-string" || strings.HasPrefix(v, "--split-string=") || !strings.HasPrefix(v, "--") && strings.HasPrefix(v, "-") && strings.ContainsRune(v, 'S'):
			w.opaque("env -S splits a string into a command only at run time")
			return true
		case v == "--chdir":
			if i+1 >= len(args) || !args[i+1].Known {
				sub.dirUnknown = true
			} else {
				w.res.Paths = append(w.res.Paths, Path{Dir: sub.dir, DirUnknown: sub.dirUnknown, Path: args[i+1].Value, Cd: true})
				sub.dir = join(sub.dir, args[i+1].Value)
			}
			i++
		case strings.HasPrefix(v, "--chdir="):
			d := strings.TrimPrefix(v, "--chdir=")
			w.res.Paths = append(w.res.Paths, Path{Dir: sub.dir, DirUnknown: sub.dirUnknown, Path: d, Cd: true})
			sub.dir = join(sub.dir, d)
		case v == "--unset":
			i++
		case strings.HasPrefix(v, "-") && !strings.HasPrefix(v, "--"):
			// A cluster such as -iu NAME or -C/dir: u and C take the rest
			// of the cluster, or the next word.
			for j := 1; j < len(v); j++ {
				if v[j] != 'u' && v[j] != 'C' {
					continue
				}
				arg, known := v[j+1:], true
				if arg == "" {
					i++
					if i >= len(args) {
						break
					}
					arg, known = args[i].Value, args[i].Known
				}
				if v[j] == 'C' {
					if !known {
						sub.dirUnknown = true
					} else {
						w.res.Paths = append(w.res.Paths, Path{Dir: sub.dir, DirUnknown: sub.dirUnknown, Path: arg, Cd: true})
						sub.dir = join(sub.dir, arg)
					}
				}
				break
			}
		case strings.HasPrefix(v, "-"):
		case strings.Contains(v, "="):
			if strings.HasPrefix(v, "PATH=") {
				pathChanged = true
			}
		default:
			goto done
		}
	}
done:
	if i >= len(args) {
		return false // env alone prints the environment
	}
	w.inner("env", args[i:], redirs, &sub, pathChanged)
	return true
}

func (w *walker) sudo(name string, args []Word, redirs []*syntax.Redirect, st *state, pathChanged bool) bool {
	sub := *st
	withArg := "ugCDhprtUTR"
	if name == "doas" {
		withArg = "uC"
	}
	shell := false
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !a.Known {
			w.opaque("%s with an argument only known at run time: %s", name, a.Src)
			return true
		}
		v := a.Value
		if v == "--" {
			i++
			break
		}
		if !strings.HasPrefix(v, "-") || v == "-" {
			break
		}
		if strings.HasPrefix(v, "--") {
			if strings.HasPrefix(v, "--chdir=") {
				sub.dirUnknown = true // relative to the target user's view
			}
			if v == "--shell" || v == "--login" {
				shell = true
			}
			if !strings.Contains(v, "=") && (v == "--user" || v == "--group" || v == "--chdir" || v == "--prompt" || v == "--host" || v == "--close-from" || v == "--role" || v == "--type" || v == "--other-user" || v == "--command-timeout" || v == "--chroot") {
				i++
			}
			continue
		}
		// A cluster of one-letter options; one that takes an argument
		// takes the rest of the cluster, or the next word.
		for j := 1; j < len(v); j++ {
			if v[j] == 's' || v[j] == 'i' {
				shell = true
			}
			if v[j] == 'e' && name == "sudo" {
				w.opaque("sudo -e edits files as another user")
			}
			if strings.IndexByte(withArg, v[j]) >= 0 {
				if j == len(v)-1 {
					i++
				}
				if v[j] == 'D' || v[j] == 'R' {
					sub.dirUnknown = true
				}
				break
			}
		}
	}
	rest := args[min(i, len(args)):]
	if len(rest) == 0 {
		if shell {
			w.opaque("%s starts an interactive shell", name)
		}
		return true
	}
	if shell {
		// sudo -s CMD runs CMD through the target user's shell, as -c.
		var parts []string
		for _, a := range rest {
			parts = append(parts, a.Value)
		}
		w.script(name+" -s", strings.Join(parts, " "), &sub)
		return true
	}
	w.inner(name, rest, redirs, &sub, pathChanged)
	return true
}

func (w *walker) xargs(args []Word, redirs []*syntax.Redirect, st *state, pathChanged bool) bool {
	replace := ""
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !a.Known {
			w.opaque("xargs with an argument only known at run time: %s", a.Src)
			return true
		}
		v := a.Value
		if v == "--" {
			i++
			break
		}
		if !strings.HasPrefix(v, "-") || v == "-" {
			break
		}
		switch {
		case v == "--replace":
			if i+1 < len(args) {
				replace = args[i+1].Value
			}
			i++
		case strings.HasPrefix(v, "--replace="):
			replace = strings.TrimPrefix(v, "--replace=")
		case strings.HasPrefix(v, "--"):
			if !strings.Contains(v, "=") && (v == "--arg-file" || v == "--delimiter" || v == "--max-args" || v == "--max-procs" || v == "--max-lines" || v == "--max-chars" || v == "--eof" || v == "--process-slot-var") {
				i++
			}
		default:
			// A cluster such as -0rn 1 or -I{}: a, E, d, n, P, L, s and I
			// take the rest of the cluster, or the next word; i and l
			// take only an attached one.
			for j := 1; j < len(v); j++ {
				c := v[j]
				if c == 'i' {
					replace = "{}"
					if j+1 < len(v) {
						replace = v[j+1:]
					}
					break
				}
				if c == 'l' {
					break
				}
				if strings.IndexByte("aEdnPLsI", c) < 0 {
					continue
				}
				arg := v[j+1:]
				if arg == "" && i+1 < len(args) {
					i++
					arg = args[i].Value
				}
				if c == 'I' {
					replace = arg
				}
				break
			}
		}
	}
	rest := args[min(i, len(args)):]
	if len(rest) == 0 {
		rest = []Word{{Value: "echo", Known: true, Src: "echo"}}
	} else {
		rest = append([]Word(nil), rest...)
	}
	if replace == "" {
		// The words read from the input are appended; {} stands for them.
		rest = append(rest, Word{Value: "{}", Known: true, Src: "{}"})
	}
	w.inner("xargs", rest, nil, st, pathChanged)
	return true
}

// find runs the commands of -exec, -execdir, -ok and -okdir, and -delete
// removes what it finds (it implies rm).
func (w *walker) find(args []Word, st *state, pathChanged bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !a.Known {
			continue
		}
		switch a.Value {
		case "-delete":
			w.res.Commands = append(w.res.Commands, Command{
				Name: "rm", Word: "rm", Args: []Word{{Value: "{}", Known: true, Src: "{}"}},
				Dir: st.dir, DirUnknown: st.dirUnknown, Via: "find -delete", Implied: true, PathLookup: true,
			})
		case "-exec", "-execdir", "-ok", "-okdir":
			j := i + 1
			for ; j < len(args); j++ {
				if args[j].Known && (args[j].Value == ";" || args[j].Value == "+") {
					break
				}
			}
			sub := *st
			if a.Value == "-execdir" || a.Value == "-okdir" {
				sub.dirUnknown = true // the directory of each file found
			}
			w.inner("find "+a.Value, args[i+1:j], nil, &sub, pathChanged)
			i = j
		}
	}
}

// options skips the leading options of a command, of which those in
// withArg take the next word (or the rest of their cluster). ok is false
// when an option is only known at run time.
func options(args []Word, withArg string, longWithArg ...string) (rest []Word, opts string, ok bool) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !a.Known {
			return nil, opts, false
		}
		v := a.Value
		if v == "--" {
			i++
			break
		}
		if !strings.HasPrefix(v, "-") || v == "-" {
			break
		}
		if strings.HasPrefix(v, "--") {
			for _, l := range longWithArg {
				if v == l {
					i++ // --kill-after 5: the value is the next word
				}
			}
			continue
		}
		if isDigits(v[1:]) {
			continue // nice -5
		}
		for j := 1; j < len(v); j++ {
			opts += v[j : j+1]
			if strings.IndexByte(withArg, v[j]) >= 0 {
				if j == len(v)-1 {
					i++
				}
				break
			}
		}
	}
	return args[min(i, len(args)):], opts, true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func srcOf(src string, n syntax.Node) string {
	start, end := int(n.Pos().Offset()), int(n.End().Offset())
	if start < 0 || end > len(src) || start > end {
		return ""
	}
	return src[start:end]
}
