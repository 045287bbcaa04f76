package policy

import (
	"path/filepath"
	"regexp"
	"strings"
)

// This is not a shell parser. It knows enough of POSIX shell syntax (quotes,
// backslashes, the operators that separate commands, redirections, cd and
// sh -c) to split a command line into simple commands and to pick out the
// paths that are plainly written in it. What it cannot know it says so:
// command and process substitution make a line opaque, and words with
// expansions or wildcards are not taken as paths.

// shellScan is what parseShell learned from a command line.
type shellScan struct {
	segments []string    // simple commands, whitespace between words collapsed
	opaque   bool        // $( ), backticks, <( ), >( ), or nesting too deep
	paths    []shellPath // paths written in the line
}

// shellPath is a path written in a command, relative to dir: the directory
// the commands before it cd'ed into ("" for the starting one).
type shellPath struct{ dir, path string }

// word is one shell word: its text as written and its value after quote
// removal; known is false when the value depends on an expansion.
type word struct {
	raw, value string
	known      bool
	redirect   bool // the target of a redirection
	op         bool // a redirection operator, kept for the command's text
}

var shells = map[string]bool{"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true}

var dashC = regexp.MustCompile(`^-[a-zA-Z]*c[a-zA-Z]*$`)

// maxNesting bounds sh -c unwrapping.
const maxNesting = 4

func parseShell(line string) shellScan {
	var sc shellScan
	sc.scan(line, "", 0)
	return sc
}

// scan splits line into simple commands and records them; dir is the
// directory a cd before this line moved to, and the return value is the one
// after it ("\x00" when a cd went somewhere unknowable).
func (sc *shellScan) scan(line, dir string, depth int) string {
	if depth > maxNesting {
		sc.opaque = true
		return dir
	}
	for _, cmd := range splitCommands(line, &sc.opaque) {
		if len(cmd) == 0 {
			continue
		}
		words := cmd
		// Leading NAME=value assignments are not the command.
		for len(words) > 0 && !words[0].redirect && !words[0].op && isAssignment(words[0].raw) {
			words = words[1:]
		}
		if args := plainArgs(words); len(args) == 3 && shells[filepath.Base(args[0].value)] && dashC.MatchString(args[1].value) && args[2].known {
			// sh -c 'script': the script's commands are what runs.
			dir = sc.scan(args[2].value, dir, depth+1)
			continue
		}
		raws := make([]string, len(cmd))
		for i, w := range cmd {
			raws[i] = w.raw
		}
		sc.segments = append(sc.segments, strings.Join(raws, " "))
		dir = sc.collectPaths(words, dir)
	}
	return dir
}

// unknownDir marks a working directory a cd made unknowable.
const unknownDir = "\x00"

func (sc *shellScan) collectPaths(words []word, dir string) string {
	add := func(w word) {
		if !w.known || w.value == "" || dir == unknownDir && !filepath.IsAbs(w.value) && !strings.HasPrefix(w.value, "~") {
			return
		}
		d := dir
		if d == unknownDir {
			d = ""
		}
		sc.paths = append(sc.paths, shellPath{dir: d, path: w.value})
	}
	for _, w := range words {
		if w.redirect {
			add(w)
		}
	}
	args := plainArgs(words)
	if len(args) == 0 {
		return dir
	}
	if args[0].value == "cd" {
		switch {
		case len(args) == 1:
			return "~"
		case args[1].known && args[1].value != "-":
			add(args[1])
			if dir == unknownDir && !filepath.IsAbs(args[1].value) {
				return unknownDir
			}
			if dir == "" || filepath.IsAbs(args[1].value) || strings.HasPrefix(args[1].value, "~") {
				return args[1].value
			}
			return dir + string(filepath.Separator) + args[1].value
		default:
			return unknownDir
		}
	}
	for _, w := range args[1:] {
		v := w.value
		if strings.HasPrefix(v, "-") {
			continue
		}
		if strings.ContainsAny(v, "/.") || strings.HasPrefix(v, "~") {
			add(w)
		}
	}
	return dir
}

// plainArgs are the words that are not redirection targets.
func plainArgs(words []word) []word {
	out := make([]word, 0, len(words))
	for _, w := range words {
		if !w.redirect && !w.op {
			out = append(out, w)
		}
	}
	return out
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

func isAssignment(s string) bool { return assignment.MatchString(s) }

// splitCommands splits a line into simple commands, each a list of words,
// at unquoted ; & | && || newlines and parentheses. Backticks and $( also
// split (the command inside becomes a command of its own) and make the line
// opaque, as do <( and >(.
func splitCommands(line string, opaque *bool) [][]word {
	var (
		cmds         [][]word
		cur          []word
		w            word
		in           bool // inside a word
		redirectNext bool
	)
	endWord := func() {
		if in {
			w.redirect = redirectNext
			redirectNext = false
			cur = append(cur, w)
		}
		w, in = word{known: true}, false
	}
	addOp := func(op string) {
		cur = append(cur, word{raw: op, value: op, op: true})
	}
	endCmd := func() {
		endWord()
		redirectNext = false
		cmds = append(cmds, cur)
		cur = nil
	}
	w.known = true
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\':
			if i+1 < len(line) {
				if line[i+1] == '\n' { // line continuation
					i++
					continue
				}
				w.raw += line[i : i+2]
				w.value += line[i+1 : i+2]
				in = true
				i++
				continue
			}
			w.raw += `\`
			in = true
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				j = len(line) - i - 1
				*opaque = true // unterminated: the shell would refuse it
			}
			w.raw += line[i:min(i+j+2, len(line))]
			w.value += line[i+1 : i+1+j]
			in = true
			i += j + 1
		case c == '"':
			j := i + 1
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) {
					j++
					w.value += line[j : j+1]
					continue
				}
				if line[j] == '$' || line[j] == '`' {
					w.known = false
					if line[j] == '`' || j+1 < len(line) && line[j+1] == '(' {
						*opaque = true
					}
				}
				w.value += line[j : j+1]
			}
			if j >= len(line) {
				*opaque = true
			}
			w.raw += line[i:min(j+1, len(line))]
			in = true
			i = j
		case c == ' ' || c == '\t':
			endWord()
		case c == '\n' || c == ';' || c == '|' || c == '(' || c == ')' || c == '`':
			if c == '(' || c == '`' {
				if c == '`' || (in && strings.HasSuffix(w.raw, "$")) {
					*opaque = true
				}
			}
			if c == '(' && in && strings.HasSuffix(w.raw, "$") {
				w.raw = strings.TrimSuffix(w.raw, "$")
				w.value = strings.TrimSuffix(w.value, "$")
				if w.raw == "" {
					in = false
				}
			}
			endCmd()
		case c == '&':
			if i+1 < len(line) && line[i+1] == '>' { // &> file
				endWord()
				start := i
				i++
				if i+1 < len(line) && line[i+1] == '>' {
					i++
				}
				addOp(line[start : i+1])
				redirectNext = true
				continue
			}
			endCmd()
		case c == '<' || c == '>':
			if i+1 < len(line) && line[i+1] == '(' {
				*opaque = true // process substitution
				endCmd()
				i++
				continue
			}
			start := i
			// A file descriptor number right before the operator is part of it.
			if in && isDigits(w.raw) {
				start -= len(w.raw)
				w, in = word{known: true}, false
			} else {
				endWord()
			}
			for i+1 < len(line) && (line[i+1] == '>' || line[i+1] == '<' || line[i+1] == '|') {
				i++
			}
			if i+1 < len(line) && line[i+1] == '&' { // >&2, <&-: a descriptor, not a file
				i++
				for i+1 < len(line) && (isDigits(line[i+1:i+2]) || line[i+1] == '-') {
					i++
				}
				addOp(line[start : i+1])
				continue
			}
			addOp(line[start : i+1])
			redirectNext = true
		default:
			if c == '$' || c == '*' || c == '?' || c == '[' || c == '{' {
				w.known = false
			}
			w.raw += line[i : i+1]
			w.value += line[i : i+1]
			in = true
		}
	}
	endCmd()
	return cmds
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
