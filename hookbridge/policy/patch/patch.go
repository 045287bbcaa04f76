// Package patch reads the files a patch touches, without applying it:
// Codex's apply_patch envelope ("*** Begin Patch" ... "*** End Patch")
// and unified diffs (diff -u, git diff). A policy checks each file against
// its path rules, so a patch that does not parse cannot be checked, and
// Parse says why.
package patch

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Op is what a patch does to a file.
type Op string

// The operations.
const (
	Add    Op = "add"
	Delete Op = "delete"
	Update Op = "update"
	Move   Op = "move" // the new name of a moved or renamed file
)

// File is one file a patch touches.
type File struct {
	Path string
	Op   Op
}

// MaxFiles bounds the files one patch may name.
const MaxFiles = 10000

// Parse reads a patch in either format.
func Parse(text string) ([]File, error) {
	trimmed := strings.TrimLeft(text, " \t\r\n")
	if strings.HasPrefix(trimmed, beginPatch) {
		return ParseEnvelope(text)
	}
	return ParseUnified(text)
}

// IsEnvelope reports whether text starts as an apply_patch envelope.
func IsEnvelope(text string) bool {
	return strings.HasPrefix(strings.TrimLeft(text, " \t\r\n"), beginPatch)
}

const (
	beginPatch = "*** Begin Patch"
	endPatch   = "*** End Patch"
	addFile    = "*** Add File: "
	deleteFile = "*** Delete File: "
	updateFile = "*** Update File: "
	moveTo     = "*** Move to: "
	endOfFile  = "*** End of File"
)

// ParseEnvelope reads Codex's apply_patch format:
//
//	*** Begin Patch
//	*** Add File: path      then lines starting with +
//	*** Delete File: path
//	*** Update File: path   optionally *** Move to: path, then hunks
//	*** End Patch
//
// A hunk is "@@" (with optional context text) followed by lines starting
// with a space, + or -, and optionally *** End of File.
func ParseEnvelope(text string) ([]File, error) {
	lines := strings.Split(strings.ReplaceAll(strings.TrimSpace(text), "\r\n", "\n"), "\n")
	if len(lines) < 2 || strings.TrimSpace(lines[0]) != beginPatch {
		return nil, errors.New("patch: the first line must be *** Begin Patch")
	}
	if strings.TrimSpace(lines[len(lines)-1]) != endPatch {
		return nil, errors.New("patch: the last line must be *** End Patch")
	}
	var files []File
	add := func(line int, p string, op Op) error {
		p = strings.TrimSpace(p)
		if p == "" {
			return fmt.Errorf("patch line %d: no file name", line+1)
		}
		if len(files) >= MaxFiles {
			return fmt.Errorf("patch: more than %d files", MaxFiles)
		}
		files = append(files, File{Path: p, Op: op})
		return nil
	}
	const (
		none = iota
		adding
		updating
	)
	mode := none
	hunks := 0
	endFile := func(i int) error {
		if mode == updating && hunks == 0 {
			return fmt.Errorf("patch line %d: *** Update File without a change", i+1)
		}
		return nil
	}
	body := lines[1 : len(lines)-1]
	for j, line := range body {
		i := j + 1
		switch {
		case strings.HasPrefix(line, addFile):
			if err := endFile(i); err != nil {
				return nil, err
			}
			mode = adding
			if err := add(i, line[len(addFile):], Add); err != nil {
				return nil, err
			}
		case strings.HasPrefix(line, deleteFile):
			if err := endFile(i); err != nil {
				return nil, err
			}
			mode = none
			if err := add(i, line[len(deleteFile):], Delete); err != nil {
				return nil, err
			}
		case strings.HasPrefix(line, updateFile):
			if err := endFile(i); err != nil {
				return nil, err
			}
			mode, hunks = updating, 0
			if err := add(i, line[len(updateFile):], Update); err != nil {
				return nil, err
			}
		case strings.HasPrefix(line, moveTo):
			if mode != updating || hunks > 0 || len(files) == 0 || files[len(files)-1].Op != Update {
				return nil, fmt.Errorf("patch line %d: *** Move to must follow *** Update File", i+1)
			}
			if err := add(i, line[len(moveTo):], Move); err != nil {
				return nil, err
			}
		case mode == adding && strings.HasPrefix(line, "+"):
		case mode == updating && (strings.HasPrefix(line, "@@") || line == endOfFile):
			hunks++
		case mode == updating && hunks > 0 && (line == "" || line[0] == ' ' || line[0] == '+' || line[0] == '-'):
		case mode == updating && hunks == 0 && line != "" && (line[0] == ' ' || line[0] == '+' || line[0] == '-'):
			// Codex accepts a first hunk without its @@ line.
			hunks++
		case strings.TrimSpace(line) == "" && mode != updating:
		default:
			return nil, fmt.Errorf("patch line %d: unexpected %q", i+1, clip(line))
		}
	}
	if err := endFile(len(lines) - 1); err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("patch: it names no file")
	}
	return files, nil
}

// ParseUnified reads a unified diff: "--- old" and "+++ new" headers (with
// git's "diff --git", rename and copy lines), each followed by hunks whose
// line counts must match their "@@ -a,b +c,d @@" headers. /dev/null on
// one side makes the file added or deleted; git's a/ and b/ prefixes are
// removed.
func ParseUnified(text string) ([]File, error) {
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	var files []File
	add := func(p string, op Op) error {
		if len(files) >= MaxFiles {
			return fmt.Errorf("patch: more than %d files", MaxFiles)
		}
		files = append(files, File{Path: p, Op: op})
		return nil
	}
	gitPrefixes := false
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case strings.HasPrefix(line, "diff --git "):
			gitPrefixes = true
		case strings.HasPrefix(line, "rename from ") || strings.HasPrefix(line, "copy from "):
			_, p, _ := strings.Cut(line, " from ")
			op := Delete
			if strings.HasPrefix(line, "copy") {
				op = Update // read, not changed; still a path the patch names
			}
			if err := add(p, op); err != nil {
				return nil, err
			}
		case strings.HasPrefix(line, "rename to ") || strings.HasPrefix(line, "copy to "):
			_, p, _ := strings.Cut(line, " to ")
			if err := add(p, Move); err != nil {
				return nil, err
			}
		case strings.HasPrefix(line, "--- "):
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "+++ ") {
				return nil, fmt.Errorf("patch line %d: --- without a +++ line after it", i+1)
			}
			oldPath := headerPath(line[4:], gitPrefixes, "a/")
			newPath := headerPath(lines[i+1][4:], gitPrefixes, "b/")
			i++
			var err error
			switch {
			case oldPath == "" && newPath == "":
				return nil, fmt.Errorf("patch line %d: no file name", i)
			case oldPath == "":
				err = add(newPath, Add)
			case newPath == "":
				err = add(oldPath, Delete)
			case oldPath == newPath:
				err = add(newPath, Update)
			default:
				if err = add(oldPath, Delete); err == nil {
					err = add(newPath, Move)
				}
			}
			if err != nil {
				return nil, err
			}
			// The hunks.
			for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "@@ ") {
				i++
				oldN, newN, err := hunkHeader(lines[i])
				if err != nil {
					return nil, fmt.Errorf("patch line %d: %w", i+1, err)
				}
				for oldN > 0 || newN > 0 {
					i++
					if i >= len(lines) {
						return nil, fmt.Errorf("patch: the hunk ends before its header says")
					}
					l := lines[i]
					switch {
					case l == "" || l[0] == ' ':
						oldN--
						newN--
					case l[0] == '-':
						oldN--
					case l[0] == '+':
						newN--
					case l[0] == '\\':
					default:
						return nil, fmt.Errorf("patch line %d: the hunk ends before its header says", i+1)
					}
					if oldN < 0 || newN < 0 {
						return nil, fmt.Errorf("patch line %d: the hunk is longer than its header says", i+1)
					}
				}
				for i+1 < len(lines) && strings.HasPrefix(lines[i+1], `\`) {
					i++ // \ No newline at end of file
				}
				if i+1 < len(lines) && lines[i+1] != "" && strings.IndexByte(" +-", lines[i+1][0]) >= 0 && !strings.HasPrefix(lines[i+1], "--- ") {
					return nil, fmt.Errorf("patch line %d: the hunk is longer than its header says", i+2)
				}
			}
		case strings.HasPrefix(line, "@@ "):
			return nil, fmt.Errorf("patch line %d: a hunk without --- and +++ headers", i+1)
		}
	}
	if len(files) == 0 {
		return nil, errors.New("patch: not a patch (no *** Begin Patch, and no --- / +++ file headers)")
	}
	return files, nil
}

// headerPath is the file of a --- or +++ line: up to a tab (a timestamp
// may follow), unquoted when git quoted it, "" for /dev/null.
func headerPath(s string, git bool, prefix string) string {
	if t, _, ok := strings.Cut(s, "\t"); ok {
		s = t
	}
	s = strings.TrimRight(s, " ")
	if strings.HasPrefix(s, `"`) {
		if u, err := strconv.Unquote(s); err == nil {
			s = u
		}
	}
	if s == "/dev/null" {
		return ""
	}
	if git || strings.HasPrefix(s, prefix) {
		s = strings.TrimPrefix(s, prefix)
	}
	return s
}

// hunkHeader reads "@@ -a[,b] +c[,d] @@": the line counts b and d.
func hunkHeader(line string) (int, int, error) {
	rest := strings.TrimPrefix(line, "@@ ")
	spec, _, ok := strings.Cut(rest, " @@")
	if !ok {
		return 0, 0, errors.New("bad hunk header")
	}
	oldSpec, newSpec, ok := strings.Cut(spec, " ")
	if !ok || !strings.HasPrefix(oldSpec, "-") || !strings.HasPrefix(newSpec, "+") {
		return 0, 0, errors.New("bad hunk header")
	}
	count := func(s string) (int, error) {
		_, n, has := strings.Cut(s[1:], ",")
		if !has {
			return 1, nil
		}
		v, err := strconv.Atoi(n)
		if err != nil || v < 0 || v > 1<<24 {
			return 0, errors.New("bad hunk header")
		}
		return v, nil
	}
	o, err := count(oldSpec)
	if err != nil {
		return 0, 0, err
	}
	n, err := count(newSpec)
	return o, n, err
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
