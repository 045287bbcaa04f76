// Package contract resolves the effective contract of a project: the
// policy, routes and access files of its .reeve/ governance directory,
// including the files written there by `reeve team-resource sync`, merged
// into one set of values, each with the file and line it came from and,
// when git knows it, the commit (and for synced files the bundle) that
// brought the file.
package contract

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"reeve.dev/reeve/hookbridge/policy"
	"reeve.dev/reeve/internal/docschema"
)

// ErrNoProject is a project directory or contract file that does not exist.
var ErrNoProject = errors.New("does not exist")

// syncSubject is how teamsync's default commit message begins; a file
// last committed by such a commit came from the workspace's team resources.
const syncSubject = "Sync team resources"

// Options say which contract to resolve.
type Options struct {
	// Path is the project directory, or one governance file in its .reeve/
	// directory (then only that file is resolved).
	Path string
	// Git is the git binary; default "git". Without git, provenance has no
	// commits.
	Git string
}

// Source is one file the contract was read from.
type Source struct {
	File   string `json:"file"`
	Schema string `json:"schema"` // policy.v1, routes.v1, access.v1
	SHA256 string `json:"sha256"`
	// Origin is "team-resource" for a file last committed by a team-resource
	// sync, "project" for any other committed file, "local" for one git
	// does not track or that differs from its commit.
	Origin  string `json:"origin"`
	Commit  string `json:"commit,omitempty"`
	Subject string `json:"subject,omitempty"`
	Bundle  string `json:"bundle,omitempty"` // "<resource> <version>" of a synced file
}

// Value is one value of the effective contract.
type Value struct {
	Key   string `json:"key"` // e.g. policy.deny.no-rm, routes.review, access.members.alice
	Value any    `json:"value"`
	File  string `json:"file"`
	Line  int    `json:"line"`
}

// Result is the effective contract; its JSON is the stable --json shape of
// `reeve contract resolve`.
type Result struct {
	Project  string              `json:"project"`
	Dir      string              `json:"dir"`
	Sources  []Source            `json:"sources"`
	Values   []Value             `json:"values"`
	Valid    bool                `json:"valid"`
	Problems []docschema.Problem `json:"problems"`
	Warnings []string            `json:"warnings"`
}

// Resolve reads and validates the contract with the existing policy checks
// (policy.CheckProject) and, when it is valid, lists its values. Problems
// are in the result (Valid false, no values); the error is for a path that
// does not exist (ErrNoProject) or a file that cannot be read.
func Resolve(ctx context.Context, o Options) (Result, error) {
	path, err := filepath.Abs(o.Path)
	if err != nil {
		return Result{}, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return Result{}, fmt.Errorf("%s %w", path, ErrNoProject)
	}
	project, only := path, ""
	if !fi.IsDir() {
		only = path
		project = filepath.Dir(path)
		for filepath.Base(project) != policy.Dir {
			if parent := filepath.Dir(project); parent != project {
				project = parent
				continue
			}
			return Result{}, fmt.Errorf("%s is not in a %s directory", path, policy.Dir)
		}
		project = filepath.Dir(project)
	}
	rep, err := policy.CheckProject(project)
	if err != nil {
		return Result{}, err
	}
	res := Result{Project: rep.Project, Dir: rep.Dir, Sources: []Source{}, Values: []Value{}, Problems: []docschema.Problem{}, Warnings: rep.Warnings}
	found := false
	for _, f := range rep.Files {
		if only != "" && f.File != only {
			continue
		}
		found = true
		src, data, err := o.source(ctx, project, f)
		if err != nil {
			return Result{}, err
		}
		res.Sources = append(res.Sources, src)
		if d, problems := docschema.ParseYAML(f.File, data); len(problems) == 0 {
			res.Values = append(res.Values, values(d, f.Schema)...)
		}
	}
	if only != "" && !found {
		return Result{}, fmt.Errorf("%s is not a governance file (.reeve/policy.yaml, .reeve/routes/*.yaml, .reeve/access.yaml)", only)
	}
	for _, p := range rep.Problems {
		// A route defined in two files is a problem of the whole contract,
		// so it stays even when one file is asked for.
		if only == "" || p.File == only || strings.Contains(p.Message, "already defined at "+only+":") {
			res.Problems = append(res.Problems, p)
		}
	}
	res.Valid = len(res.Problems) == 0
	if !res.Valid {
		res.Values = []Value{}
	}
	return res, nil
}

// source reads one checked file (with docschema's bounds) and asks git
// where it came from.
func (o Options) source(ctx context.Context, project string, f policy.CheckedFile) (Source, []byte, error) {
	src := Source{File: f.File, Schema: f.Schema, Origin: "local"}
	data, err := docschema.ReadFile(f.File)
	if err != nil {
		// Too large or not regular: CheckProject reported it as a problem.
		if errors.Is(err, docschema.ErrTooLarge) || errors.Is(err, docschema.ErrNotRegular) {
			return src, nil, nil
		}
		return src, nil, err
	}
	sum := sha256.Sum256(data)
	src.SHA256 = hex.EncodeToString(sum[:])
	rel, err := filepath.Rel(project, f.File)
	if err != nil {
		return src, data, nil
	}
	out, err := o.git(ctx, project, "log", "-1", "--format=%H%x00%s", "--", rel)
	if err != nil || out == "" {
		return src, data, nil // not a repository, no git, or never committed
	}
	src.Commit, src.Subject, _ = strings.Cut(out, "\x00")
	src.Origin = "project"
	if rest, ok := strings.CutPrefix(src.Subject, syncSubject); ok {
		src.Origin = "team-resource"
		if open, close := strings.Index(rest, "("), strings.LastIndex(rest, ")"); open >= 0 && close > open {
			src.Bundle = strings.TrimSpace(rest[open+1 : close])
		}
	}
	// Edited since the commit: the values are local, whatever the commit was.
	if _, err := o.git(ctx, project, "diff", "--quiet", "HEAD", "--", rel); err != nil {
		src.Origin = "local"
	}
	return src, data, nil
}

func (o Options) git(ctx context.Context, dir string, args ...string) (string, error) {
	bin := o.Git
	if bin == "" {
		bin = "git"
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"-C", dir}, args...)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return "", err
	}
	return strings.TrimSpace(out.String()), nil
}

// values lists the values of one valid document under the keys of the
// merged contract: policy rules by class and name (else index), routes by
// name, access members by user or team and the default role.
func values(d *docschema.Document, schema string) []Value {
	top, _ := d.Value.(map[string]any)
	var out []Value
	add := func(key, ptr string, v any) {
		out = append(out, Value{Key: key, Value: v, File: d.File, Line: d.Pos(ptr).Line})
	}
	list := func(name string, keyOf func(m map[string]any, i int) string) {
		items, _ := top[name].([]any)
		for i, it := range items {
			m, _ := it.(map[string]any)
			add(keyOf(m, i), fmt.Sprintf("/%s/%d", name, i), it)
		}
	}
	switch schema {
	case "policy.v1":
		for _, class := range []string{"deny", "ask", "allow"} {
			list(class, func(m map[string]any, i int) string {
				if n, ok := m["name"].(string); ok && n != "" {
					return "policy." + class + "." + n
				}
				return fmt.Sprintf("policy.%s[%d]", class, i)
			})
		}
	case "routes.v1":
		list("routes", func(m map[string]any, i int) string {
			n, _ := m["name"].(string)
			return "routes." + n
		})
	case "access.v1":
		if v, ok := top["default_role"]; ok {
			add("access.default_role", "/default_role", v)
		}
		list("members", func(m map[string]any, i int) string {
			if u, ok := m["user"].(string); ok {
				return "access.members.user:" + u
			}
			if t, ok := m["team"].(string); ok {
				return "access.members.team:" + t
			}
			return fmt.Sprintf("access.members[%d]", i)
		})
	}
	return out
}
