package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"reeve.dev/reeve/hookbridge/policy/cmdline"
	"reeve.dev/reeve/hookbridge/policy/patch"
)

// shellTools are the tool names whose input is a shell command line:
// Claude Code's and Codex's hook tool "Bash", Codex's model tool
// "exec_command" (and "shell", "local_shell") and its event item
// "command_execution", and Gemini CLI's "run_shell_command".
var shellTools = map[string]bool{"Bash": true, "exec_command": true, "command_execution": true, "shell": true, "local_shell": true, "run_shell_command": true}

// patchTools are the tool names whose input is a patch (Codex's
// apply_patch, as a function or a freeform tool).
var patchTools = map[string]bool{"apply_patch": true}

// searchTools search the working directory when their input names no path.
var searchTools = map[string]bool{"Glob": true, "Grep": true, "LS": true}

// MaxCommand bounds the command line a policy reads. Real commands,
// here-documents included, are far smaller; a larger one is denied rather
// than read.
const MaxCommand = 256 << 10

// facts is what a rule can see of a request.
type facts struct {
	tool  string
	shell bool
	line  string // the whole command line, trimmed
	cmds  []cmdFact
	// opaque says why the commands of the line cannot all be known; such
	// a request is never allowed.
	opaque []string
	// bad is why the input cannot be read at all; such a request is
	// denied.
	bad   string
	paths []target
}

// target is one path a request touches.
type target struct {
	abs     string // absolute, cleaned, symbolic links resolved where they exist
	rel     string // relative to the working directory, slash-separated; "" for the directory itself
	outside bool
}

// cmdFact is one command of a shell line, as patterns see it.
type cmdFact struct {
	text    string // the program's name and the arguments: what deny and ask match
	written string // with the command word as written (/bin/rm, ./go)
	// allow is what an allow pattern must match: text when the name says
	// which program runs (found through the default $PATH, or a system
	// directory), else written, so a script the agent wrote and named
	// "go" is not allowed as go.
	allow       string
	unallowable bool
	// transparent wrappers (env, nice, sh -c, xargs, ...) only run the
	// command listed after them, which allow rules must match; they need
	// no allow of their own. sudo and doas are not transparent.
	transparent bool
}

// systemDirs are where a command given by its path is taken for its name.
var systemDirs = map[string]bool{"/bin": true, "/usr/bin": true, "/sbin": true, "/usr/sbin": true, "/usr/local/bin": true, "/usr/local/sbin": true}

var transparentWrappers = map[string]bool{
	"command": true, "builtin": true, "exec": true, "env": true, "nice": true, "nohup": true, "setsid": true,
	"time": true, "timeout": true, "stdbuf": true, "ionice": true, "xargs": true,
	"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "mksh": true, "ash": true,
}

func extract(req Request) facts {
	f := facts{tool: req.Tool}
	root := absWorkdir(req.Workdir)
	base := root
	if req.Cwd != "" {
		base = resolveTarget(root, req.Cwd).abs
	}
	var in map[string]json.RawMessage
	if len(bytes.TrimSpace(req.Input)) > 0 {
		if err := json.Unmarshal(req.Input, &in); err != nil {
			f.bad = "reeve cannot read the tool input: it is not a JSON object"
			return f
		}
	}

	switch {
	case patchTools[req.Tool]:
		text, ok := patchInput(in)
		if !ok {
			f.bad = "reeve cannot read the patch: the input holds no patch text"
			return f
		}
		f.addPatch(root, base, "apply_patch", text)
		return f
	case shellTools[req.Tool]:
		f.shell = true
		line, ok := commandInput(in)
		if !ok {
			f.bad = "reeve cannot read the command: it is not a string or a list of strings"
			return f
		}
		if len(line) > MaxCommand {
			f.bad = fmt.Sprintf("reeve does not check commands over %d KiB, so it denies this one (%d KiB)", MaxCommand>>10, len(line)>>10)
			return f
		}
		// Codex's workdir, Gemini CLI's dir_path.
		for _, key := range []string{"workdir", "dir_path"} {
			w, present := in[key]
			if !present {
				continue
			}
			var s string
			if json.Unmarshal(w, &s) != nil {
				f.bad = "reeve cannot read the tool input: " + key + " is not a string"
				return f
			}
			if s != "" {
				base = resolveTarget(root, under(base, s)).abs
			}
		}
		if base != root {
			// Where the command runs is a path it touches.
			f.paths = append(f.paths, resolveTarget(root, base))
		}
		f.line = strings.TrimSpace(line)
		if patch.IsEnvelope(f.line) {
			// Codex sends apply_patch through its shell tool too.
			f.addPatch(root, base, "apply_patch", f.line)
			return f
		}
		f.addShell(root, base)
		return f
	}
	named := false
	for _, key := range []string{"file_path", "notebook_path", "path"} {
		if s := stringOrList(in[key]); s != "" && !isList(in[key]) {
			f.paths = append(f.paths, resolveTarget(root, under(base, s)))
			named = true
		}
	}
	if !named && searchTools[req.Tool] {
		f.paths = append(f.paths, resolveTarget(root, base))
	}
	return f
}

// commandInput is a shell tool's command: "command" or "cmd", a string or
// an argv list (Codex), which is quoted into a line so that the shell
// reading it sees the same words.
func commandInput(in map[string]json.RawMessage) (string, bool) {
	raw, ok := in["command"]
	if !ok {
		raw, ok = in["cmd"]
	}
	if !ok {
		return "", true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var argv []string
	if json.Unmarshal(raw, &argv) == nil {
		return cmdline.JoinArgv(argv), true
	}
	return "", false
}

// patchInput is an apply_patch tool's patch: "input" (freeform), "patch"
// or "command", a string, or an argv list ending with the patch.
func patchInput(in map[string]json.RawMessage) (string, bool) {
	for _, key := range []string{"input", "patch", "command", "cmd"} {
		raw, ok := in[key]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s, true
		}
		var argv []string
		if json.Unmarshal(raw, &argv) == nil && len(argv) > 0 {
			return argv[len(argv)-1], true
		}
		return "", false
	}
	return "", false
}

// addPatch checks a patch's files as paths the request writes; a patch
// that does not parse makes the request bad.
func (f *facts) addPatch(root, dir, program, text string) {
	if len(text) > MaxCommand {
		f.bad = fmt.Sprintf("reeve does not check patches over %d KiB, so it denies this one", MaxCommand>>10)
		return
	}
	files, err := patch.Parse(text)
	if err != nil {
		f.bad = fmt.Sprintf("reeve cannot read the patch given to %s, so it denies it: %v", program, err)
		return
	}
	for _, file := range files {
		f.paths = append(f.paths, resolveTarget(root, under(dir, file.Path)))
	}
}

// addShell reads the command line: its commands, the paths it names and
// the patches it applies.
func (f *facts) addShell(root, base string) {
	res, err := cmdline.Parse(f.line)
	if err != nil {
		f.opaque = append(f.opaque, "the shell cannot parse it: "+err.Error())
		return
	}
	f.opaque = append(f.opaque, res.Opaque...)
	dirOf := func(dir string, unknown bool) (string, bool) {
		if unknown {
			return "", false
		}
		return under(base, dir), true
	}
	addPath := func(dir string, unknown bool, p string) {
		if p == "" || p == "{}" || streams[p] || strings.HasPrefix(p, "/dev/fd/") {
			return
		}
		if filepath.IsAbs(p) || p == "~" || strings.HasPrefix(p, "~/") {
			f.paths = append(f.paths, resolveTarget(root, p))
			return
		}
		if d, ok := dirOf(dir, unknown); ok {
			f.paths = append(f.paths, resolveTarget(root, under(d, p)))
		}
	}
	for _, p := range res.Paths {
		addPath(p.Dir, p.DirUnknown, p.Path)
	}
	for _, pt := range res.Patches {
		d, ok := dirOf(pt.Dir, false)
		if !ok {
			d = base
		}
		f.addPatch(root, d, pt.Program, pt.Text)
	}
	for _, c := range res.Commands {
		cf := cmdFact{text: c.Text(), written: c.WrittenText()}
		switch {
		case c.PathLookup || systemDirs[filepath.Dir(c.Word)]:
			cf.allow = cf.text
		case strings.ContainsRune(c.Word, '/'):
			cf.allow = cf.written
		default:
			// A name looked up in a PATH the line changed may be any
			// program: no allow pattern can vouch for it.
			cf.unallowable = true
		}
		cf.transparent = c.Wrapper && transparentWrappers[c.Name]
		f.cmds = append(f.cmds, cf)
		if c.Wrapper {
			continue // its arguments are the wrapped command's, read there
		}
		for _, a := range c.Args {
			if !a.Known {
				continue
			}
			v := a.Value
			if strings.HasPrefix(v, "-") {
				// --file=/etc/x names a path after its =.
				_, after, ok := strings.Cut(v, "=")
				if !ok || !strings.HasPrefix(v, "--") || !looksLikePath(after) {
					continue
				}
				v = after
			}
			if looksLikePath(v) || existsUnder(base, c.Dir, c.DirUnknown, v) {
				addPath(c.Dir, c.DirUnknown, v)
			}
		}
	}
}

// streams are the device files that commands use as the ends of their
// standard streams (2>/dev/null); they touch no file, so path rules,
// outside_workdir among them, do not see them.
var streams = map[string]bool{"/dev/null": true, "/dev/stdin": true, "/dev/stdout": true, "/dev/stderr": true, "/dev/tty": true}

// looksLikePath: an argument with a slash, or starting with . or ~, is
// taken for a path whether or not it exists.
func looksLikePath(s string) bool {
	return strings.ContainsRune(s, '/') || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "~")
}

// existsUnder reports whether a bare word names an existing file where the
// command runs (rm -rf secrets).
func existsUnder(base, dir string, unknown bool, name string) bool {
	if unknown || len(name) > 255 {
		return false
	}
	_, err := os.Lstat(filepath.Join(under(base, dir), name))
	return err == nil
}

// under is p taken relative to dir, unless p is absolute or starts at the
// home directory. It does not clean: ".." must meet the real directories.
func under(dir, p string) string {
	if p == "" {
		return dir
	}
	if filepath.IsAbs(p) || p == "~" || strings.HasPrefix(p, "~/") {
		return p
	}
	return dir + string(filepath.Separator) + p
}

func isList(raw json.RawMessage) bool {
	return len(raw) > 0 && raw[0] == '['
}

// stringOrList reads a JSON string, or a list of strings joined by spaces
// (Codex sends some commands as argv); anything else is "".
func stringOrList(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return strings.Join(list, " ")
	}
	return ""
}

// absWorkdir makes the working directory absolute and resolves its
// symbolic links, so paths compare with it as the file system sees them.
func absWorkdir(wd string) string {
	if wd == "" {
		wd = "."
	}
	abs, err := filepath.Abs(wd)
	if err != nil {
		abs = filepath.Clean(wd)
	}
	return resolveLinks(abs)
}

// resolveTarget places p (absolute, or relative to wd, itself resolved) in
// the file system and relative to wd. ".." is applied after the symbolic
// links before it are resolved, as the kernel does, so neither traversal
// nor a link out of the directory can make an outside path look inside.
func resolveTarget(wd, p string) target {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			p = home + p[1:]
		}
	}
	var abs string
	switch {
	case !filepath.IsAbs(p):
		// wd is resolved already: walk only what follows it.
		abs = resolveLinksFrom(wd, p)
	case strings.HasPrefix(p, wd+string(filepath.Separator)):
		abs = resolveLinksFrom(wd, p[len(wd)+1:])
	default:
		abs = resolveLinks(p)
	}
	t := target{abs: abs}
	rel, err := filepath.Rel(wd, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		t.outside = true
		return t
	}
	if rel == "." {
		rel = ""
	}
	t.rel = filepath.ToSlash(rel)
	return t
}

// maxLinks bounds symbolic-link resolution, as the kernel's ELOOP does.
const maxLinks = 40

// resolveLinks walks an absolute path one element at a time, resolving
// every symbolic link that exists; once an element does not exist the rest
// is taken lexically (a file about to be written does not exist yet).
func resolveLinks(p string) string {
	return resolveLinksFrom(string(filepath.Separator), p)
}

// resolveLinksFrom resolves p taken from cur, a directory whose own links
// are resolved already.
func resolveLinksFrom(cur, p string) string {
	parts := strings.Split(filepath.ToSlash(p), "/")
	exists, links := true, 0
	for i := 0; i < len(parts); i++ {
		el := parts[i]
		switch el {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, el)
		if !exists {
			cur = next
			continue
		}
		fi, err := os.Lstat(next)
		if err != nil {
			exists = false
			cur = next
			continue
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		links++
		dest, err := os.Readlink(next)
		if err != nil || links > maxLinks {
			exists = false
			cur = next
			continue
		}
		if filepath.IsAbs(dest) {
			cur = string(filepath.Separator)
		}
		// Splice the link's target in front of the remaining elements.
		rest := append(strings.Split(filepath.ToSlash(dest), "/"), parts[i+1:]...)
		parts = rest
		i = -1
	}
	return cur
}
