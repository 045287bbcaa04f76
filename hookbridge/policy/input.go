package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// shellTools are the tool names whose input is a shell command line:
// Claude Code's and Codex's hook tool "Bash", Codex's model tool
// "exec_command" and its event item "command_execution".
var shellTools = map[string]bool{"Bash": true, "exec_command": true, "command_execution": true}

// searchTools search the working directory when their input names no path.
var searchTools = map[string]bool{"Glob": true, "Grep": true, "LS": true}

// facts is what a rule can see of a request.
type facts struct {
	tool     string
	shell    bool
	line     string   // the whole command line, trimmed
	segments []string // its simple commands, normalized
	opaque   bool     // the line has parts whose commands cannot be known
	paths    []target
}

// target is one path a request touches.
type target struct {
	abs     string // absolute, cleaned, symbolic links resolved where they exist
	rel     string // relative to the working directory, slash-separated; "" for the directory itself
	outside bool
}

func extract(req Request) facts {
	f := facts{tool: req.Tool}
	wd := absWorkdir(req.Workdir)
	var in map[string]json.RawMessage
	_ = json.Unmarshal(req.Input, &in) // a non-object input has no fields to see

	if shellTools[req.Tool] {
		f.shell = true
		line := stringOrList(in["command"])
		if line == "" {
			line = stringOrList(in["cmd"])
		}
		base := wd
		if w := stringOrList(in["workdir"]); w != "" {
			base = resolveTarget(wd, w).abs
			f.paths = append(f.paths, resolveTarget(wd, w))
		}
		f.line = strings.TrimSpace(line)
		sc := parseShell(f.line)
		f.segments, f.opaque = sc.segments, sc.opaque
		for _, p := range sc.paths {
			f.paths = append(f.paths, resolveTarget(wd, under(under(base, p.dir), p.path)))
		}
		return f
	}
	named := false
	for _, key := range []string{"file_path", "notebook_path", "path"} {
		if s := stringOrList(in[key]); s != "" && !isList(in[key]) {
			f.paths = append(f.paths, resolveTarget(wd, s))
			named = true
		}
	}
	if !named && searchTools[req.Tool] {
		f.paths = append(f.paths, resolveTarget(wd, "."))
	}
	return f
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
	if !filepath.IsAbs(p) {
		p = wd + string(filepath.Separator) + p
	}
	abs := resolveLinks(p)
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
	parts := strings.Split(filepath.ToSlash(p), "/")
	cur := string(filepath.Separator)
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
