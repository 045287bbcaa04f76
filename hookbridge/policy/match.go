package policy

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// commandGlob turns a command pattern into an anchored regexp: * matches
// any run of characters (spaces and slashes included), ? one character, and
// a backslash makes the next character literal. Brackets are literal, as
// they are common in commands.
func commandGlob(pattern string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 < len(pattern) {
				i++
				b.WriteString(regexp.QuoteMeta(pattern[i : i+1]))
			} else {
				b.WriteString(`\\`)
			}
		default:
			b.WriteString(regexp.QuoteMeta(pattern[i : i+1]))
		}
	}
	b.WriteString(`)$`)
	return regexp.MustCompile(b.String())
}

// pathGlob is a compiled path pattern: slash-separated segments, each a
// path.Match pattern or "**" (any number of segments, zero included).
// Absolute patterns match a target's absolute path; relative ones match its
// path relative to the working directory, and only inside it.
type pathGlob struct {
	abs  bool
	segs []string
}

func compilePathGlob(pattern string) (pathGlob, error) {
	p := filepath.ToSlash(pattern)
	if p == "~" || strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return pathGlob{}, fmt.Errorf("path pattern %q: cannot expand ~: %v", pattern, err)
		}
		p = filepath.ToSlash(home) + p[1:]
	}
	g := pathGlob{abs: strings.HasPrefix(p, "/")}
	// A trailing slash names a directory and everything under it.
	if strings.HasSuffix(p, "/") {
		p += "**"
	}
	for _, s := range strings.Split(strings.Trim(p, "/"), "/") {
		switch s {
		case "", ".":
			continue
		case "..":
			return pathGlob{}, fmt.Errorf("path pattern %q: .. is not allowed; relative patterns match inside the working directory, use an absolute pattern for other places", pattern)
		}
		if strings.Contains(s, "**") && s != "**" {
			return pathGlob{}, fmt.Errorf("path pattern %q: ** must be a whole path segment, as in a/**/b", pattern)
		}
		if _, err := path.Match(s, ""); err != nil {
			return pathGlob{}, fmt.Errorf("path pattern %q: %v", pattern, err)
		}
		if s == "**" && len(g.segs) > 0 && g.segs[len(g.segs)-1] == "**" {
			continue // a/**/**/b is a/**/b; collapsing keeps matching linear
		}
		g.segs = append(g.segs, s)
	}
	return g, nil
}

func (g pathGlob) match(t target) bool {
	if g.abs {
		return matchSegs(g.segs, splitPath(t.abs))
	}
	if t.outside {
		return false
	}
	return matchSegs(g.segs, splitPath(t.rel))
}

func splitPath(p string) []string {
	p = strings.Trim(filepath.ToSlash(p), "/")
	if p == "" || p == "." {
		return nil
	}
	return strings.Split(p, "/")
}

func matchSegs(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			rest := pat[1:]
			for i := 0; i <= len(name); i++ {
				if matchSegs(rest, name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}
