package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// The governance directory of a project: which directory a path belongs
// to, and whether its .reeve files are valid and will be shared.

// ProjectReport is what CheckProject finds in a project's governance
// directory; it is also the stable --json shape of `reeve check`.
type ProjectReport struct {
	Project  string        `json:"project"`
	Dir      string        `json:"dir"` // the .reeve directory
	Files    []CheckedFile `json:"files"`
	Valid    bool          `json:"valid"`
	Problems []Problem     `json:"problems"`
	Warnings []string      `json:"warnings"`
}

// CheckedFile is one governance file and the schema it was checked
// against.
type CheckedFile struct {
	File   string `json:"file"`
	Schema string `json:"schema"` // policy.v1, routes.v1, access.v1
}

// ErrNoProject is a project directory that does not exist.
var ErrNoProject = errors.New("project directory does not exist")

// CheckProject validates the governance files of the project at project:
// .reeve/policy.yaml, .reeve/routes/*.yaml and, when present,
// .reeve/access.yaml, against their v1 schemas, with route names unique
// across files. It warns when there is no policy, and when git ignores
// the files, since then nobody else gets them. An error is a failure to
// read, not a problem found.
func CheckProject(project string) (ProjectReport, error) {
	if fi, err := os.Stat(project); err != nil || !fi.IsDir() {
		return ProjectReport{}, fmt.Errorf("%w: %s", ErrNoProject, project)
	}
	gov := filepath.Join(project, Dir)
	rep := ProjectReport{Project: project, Dir: gov, Files: []CheckedFile{}, Problems: []Problem{}, Warnings: []string{}}

	policyFile := filepath.Join(gov, File)
	problems, err := ValidatePolicyFile(policyFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s does not exist: no policy rules, every tool use is left to the session's mode", policyFile))
	case err != nil:
		return rep, err
	default:
		rep.Files = append(rep.Files, CheckedFile{File: policyFile, Schema: "policy.v1"})
		rep.Problems = append(rep.Problems, problems...)
	}

	routeFiles, err := filepath.Glob(filepath.Join(gov, "routes", "*.yaml"))
	if err != nil {
		return rep, err
	}
	sort.Strings(routeFiles)
	defined := map[string]Route{}
	for _, f := range routeFiles {
		data, problems, err := readDocument(f)
		if err != nil {
			return rep, fmt.Errorf("read routes: %w", err)
		}
		rep.Files = append(rep.Files, CheckedFile{File: f, Schema: "routes.v1"})
		rep.Problems = append(rep.Problems, problems...)
		if len(problems) > 0 {
			continue
		}
		problems, routes := ValidateRoutes(f, data)
		rep.Problems = append(rep.Problems, problems...)
		for _, r := range routes {
			if first, dup := defined[r.Name]; dup && first.File != r.File {
				rep.Problems = append(rep.Problems, Problem{File: r.File, Line: r.Line, Message: fmt.Sprintf("route %q is already defined at %s:%d", r.Name, first.File, first.Line)})
				continue
			}
			defined[r.Name] = r
		}
	}

	accessFile := filepath.Join(gov, "access.yaml")
	if data, problems, err := readDocument(accessFile); err == nil {
		rep.Files = append(rep.Files, CheckedFile{File: accessFile, Schema: "access.v1"})
		rep.Problems = append(rep.Problems, problems...)
		if len(problems) == 0 {
			rep.Problems = append(rep.Problems, ValidateAccess(accessFile, data)...)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return rep, fmt.Errorf("read access: %w", err)
	}

	if w := gitIgnoredWarning(project, gov, rep.Files); w != "" {
		rep.Warnings = append(rep.Warnings, w)
	}
	rep.Valid = len(rep.Problems) == 0
	return rep, nil
}

// gitIgnoredWarning asks git whether the .reeve directory, or a file
// checked in it, is ignored: an ignored policy is never committed, so
// teammates and CI run without it. Outside a git work tree, or without
// git, it says nothing.
func gitIgnoredWarning(project, gov string, files []CheckedFile) string {
	rel := []string{Dir + "/"}
	for _, f := range files {
		if r, err := filepath.Rel(project, f.File); err == nil {
			rel = append(rel, filepath.ToSlash(r))
		}
	}
	cmd := exec.Command("git", append([]string{"-C", project, "check-ignore", "--verbose", "--"}, rel...)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		// Exit 1: nothing ignored; 128: not a repository; or no git at all.
		return ""
	}
	// --verbose prints "source:line:pattern<TAB>path" per ignored path.
	first, _, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
	src, path, _ := strings.Cut(first, "\t")
	return fmt.Sprintf("%s is ignored by git (%s matches %s): the policy will not be committed, so teammates and CI will not have it", gov, src, path)
}

// FindProject is the project a path belongs to: the nearest directory at
// or above path that holds a .reeve directory, looking no higher than the
// git work tree's root (which is the answer when no .reeve is found) and
// never taking home, whose ~/.reeve is the daemon's own home, not a
// project. Without either, it is path's own directory.
func FindProject(path, home string) string {
	start := path
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		start = filepath.Dir(path)
	}
	for dir := start; ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(filepath.Join(dir, Dir)); err == nil && fi.IsDir() && dir != home {
			return dir
		}
		if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
			return dir
		}
		if parent := filepath.Dir(dir); parent == dir {
			return start
		}
	}
}
