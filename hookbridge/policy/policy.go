// Package policy reads a project's governance files under .reeve/ and
// decides an agent's tool use by the project policy (.reeve/policy.yaml),
// before the session's operator mode or a human is consulted. It also holds
// the versioned JSON Schemas of the policy, routes and access files.
//
// A policy has three rule lists. Evaluation looks at deny, then ask, then
// allow, and within a list takes the first rule that matches; so deny beats
// ask beats allow whatever the order in the file. No matching rule leaves
// the decision to the session's mode. docs/governance.md has the format.
package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"reeve.dev/reeve/internal/docschema"
)

// Action is what a policy decided.
type Action string

// The actions, in precedence order; None means no rule matched.
const (
	Deny  Action = "deny"
	Ask   Action = "ask"
	Allow Action = "allow"
	None  Action = ""
)

// Dir is the project's governance directory, and File the policy in it.
const (
	Dir  = ".reeve"
	File = "policy.yaml"
)

// Request is one tool use an agent asks for, as its PreToolUse hook reports
// it.
type Request struct {
	Tool  string          // tool_name, e.g. Bash, Write, exec_command
	Input json.RawMessage // tool_input
	// Workdir is the session's working directory (its worktree): relative
	// path patterns are anchored at it, and what is not under it is
	// outside. Empty means the process's directory.
	Workdir string
	// Cwd is where the tool runs, as the agent reports it (a hook's cwd);
	// relative paths in the input, and the commands of a shell tool, start
	// there. Empty means Workdir.
	Cwd string
}

// Decision is the outcome of Evaluate or CheckPath.
type Decision struct {
	Action Action `json:"action"`           // "" when no rule matched
	Rule   string `json:"rule,omitempty"`   // the rule's name, else its place, e.g. "deny[2]"
	Reason string `json:"reason,omitempty"` // the rule's reason, else a generated one naming the rule
}

// Policy is a parsed, valid policy. The zero value (and a nil *Policy) has
// no rules.
type Policy struct {
	File  string // where it was read from; "" for the empty policy
	rules [3][]*rule
}

// classes is the evaluation order, which is also the precedence.
var classes = [3]Action{Deny, Ask, Allow}

// Empty reports whether the policy has no rules at all.
func (p *Policy) Empty() bool {
	return p == nil || len(p.rules[0])+len(p.rules[1])+len(p.rules[2]) == 0
}

// Load reads <dir>/.reeve/policy.yaml. A missing file is the empty policy.
// A file with problems (syntax, schema or patterns) yields a nil policy and
// every problem, located; callers must not run agents unguarded on it. The
// error is for a file that exists but cannot be read.
func Load(dir string) (*Policy, []Problem, error) {
	file := filepath.Join(dir, Dir, File)
	data, problems, err := readDocument(file)
	if errors.Is(err, fs.ErrNotExist) {
		return &Policy{}, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read policy: %w", err)
	}
	if len(problems) > 0 {
		return nil, problems, nil
	}
	p, problems := Parse(file, data)
	return p, problems, nil
}

// readDocument reads a governance file with docschema's bounds. A file that
// is too large or not a regular file is a problem of the file, reported
// like its other problems; the error is for one that cannot be read.
func readDocument(file string) ([]byte, []Problem, error) {
	data, err := docschema.ReadFile(file)
	switch {
	case errors.Is(err, docschema.ErrTooLarge), errors.Is(err, docschema.ErrNotRegular):
		return nil, []Problem{{File: file, Message: "reeve refuses to read it: " + strings.TrimPrefix(err.Error(), file+": ")}}, nil
	case err != nil:
		return nil, nil, err
	}
	return data, nil, nil
}

// ruleDoc is a rule as written; the schema has already checked its shape.
type ruleDoc struct {
	Name           string   `json:"name"`
	Reason         string   `json:"reason"`
	Tools          []string `json:"tools"`
	Commands       []string `json:"commands"`
	CommandRegex   []string `json:"command_regex"`
	Paths          []string `json:"paths"`
	OutsideWorkdir *bool    `json:"outside_workdir"`
}

// Parse parses and validates a policy document (YAML or JSON); file is used
// in problems. On problems the policy is nil.
func Parse(file string, data []byte) (*Policy, []Problem) {
	d, problems := docschema.ParseYAML(file, data)
	if len(problems) > 0 {
		return nil, problems
	}
	if problems := policySchema.Validate(d, nil); len(problems) > 0 {
		return nil, problems
	}
	raw, err := json.Marshal(d.Value)
	if err != nil {
		return nil, []Problem{{File: file, Message: "policy: " + err.Error()}}
	}
	var lists struct{ Deny, Ask, Allow []ruleDoc }
	if err := json.Unmarshal(raw, &lists); err != nil {
		return nil, []Problem{{File: file, Message: "policy: " + err.Error()}}
	}
	byClass := [3][]ruleDoc{lists.Deny, lists.Ask, lists.Allow}
	p := &Policy{File: file}
	names := map[string]string{}
	for ci, class := range classes {
		for i, rd := range byClass[ci] {
			ptr := fmt.Sprintf("/%s/%d", class, i)
			r, rp := compileRule(d, ptr, class, i, rd)
			problems = append(problems, rp...)
			if rd.Name != "" {
				if first, dup := names[rd.Name]; dup {
					problems = append(problems, d.Problem(ptr+"/name", fmt.Sprintf("rule name %q is already used by %s", rd.Name, first)))
				} else {
					names[rd.Name] = ptr
				}
			}
			if r != nil {
				p.rules[ci] = append(p.rules[ci], r)
			}
		}
	}
	if len(problems) > 0 {
		docschema.Sort(problems)
		return nil, problems
	}
	return p, nil
}

// rule is a compiled rule. A nil condition is not set and matches.
type rule struct {
	id, reason string
	tools      []string
	commands   []*regexp.Regexp // globs and regexes alike, anchored
	hasCommand bool
	paths      []pathGlob
	outside    *bool
}

func compileRule(d *docschema.Document, ptr string, class Action, index int, rd ruleDoc) (*rule, []Problem) {
	var problems []Problem
	r := &rule{id: rd.Name, reason: rd.Reason, tools: rd.Tools, outside: rd.OutsideWorkdir}
	if r.id == "" {
		r.id = fmt.Sprintf("%s[%d]", class, index)
	}
	if r.reason == "" {
		r.reason = fmt.Sprintf("%s by project policy rule %s", map[Action]string{Deny: "denied", Ask: "needs approval", Allow: "allowed"}[class], r.id)
	}
	if len(rd.Tools) == 0 && len(rd.Commands) == 0 && len(rd.CommandRegex) == 0 && len(rd.Paths) == 0 && rd.OutsideWorkdir == nil {
		problems = append(problems, d.Problem(ptr, "a rule needs at least one condition: tools, commands, command_regex, paths or outside_workdir (use tools: [\"*\"] to match every tool)"))
	}
	for i, t := range rd.Tools {
		if _, err := filepath.Match(t, ""); err != nil {
			problems = append(problems, d.Problem(fmt.Sprintf("%s/tools/%d", ptr, i), fmt.Sprintf("bad tool pattern %q: %v", t, err)))
		}
	}
	for _, c := range rd.Commands {
		r.commands = append(r.commands, commandGlob(c))
	}
	for i, expr := range rd.CommandRegex {
		re, err := regexp.Compile(`^(?s:` + expr + `)$`)
		if err != nil {
			problems = append(problems, d.Problem(fmt.Sprintf("%s/command_regex/%d", ptr, i), fmt.Sprintf("bad regular expression: %v", err)))
			continue
		}
		r.commands = append(r.commands, re)
	}
	r.hasCommand = len(rd.Commands)+len(rd.CommandRegex) > 0
	for i, pat := range rd.Paths {
		g, err := compilePathGlob(pat)
		if err != nil {
			problems = append(problems, d.Problem(fmt.Sprintf("%s/paths/%d", ptr, i), err.Error()))
			continue
		}
		r.paths = append(r.paths, g)
	}
	if len(problems) > 0 {
		return nil, problems
	}
	return r, nil
}

// The rules named by decisions that come from the request rather than
// from a rule of the policy.
const (
	// RuleBadInput denies a request whose input cannot be read: not a
	// JSON object, a patch that does not parse, a command over
	// MaxCommand.
	RuleBadInput = "bad-input"
	// RuleOpaque asks a human about a shell command whose commands cannot
	// all be known without running it.
	RuleOpaque = "opaque-command"
)

// Evaluate decides a tool use: the first matching deny rule, else the first
// matching ask rule, else the first matching allow rule, else None. Two
// decisions come before and after the rules: a request whose input cannot
// be read is denied (RuleBadInput), even by the empty policy; and a shell
// command that cannot be read statically (a command name from an
// expansion, eval, a shell reading a pipe) is never allowed: when no deny
// or ask rule matched, it is Ask (RuleOpaque).
func (p *Policy) Evaluate(req Request) Decision {
	f := extract(req)
	if f.bad != "" {
		return Decision{Action: Deny, Rule: RuleBadInput, Reason: f.bad}
	}
	if p.Empty() {
		return Decision{}
	}
	d := p.decide(func(class Action, r *rule) bool { return r.matches(f, class == Allow) })
	if len(f.opaque) > 0 && (d.Action == Allow || d.Action == None) {
		return Decision{Action: Ask, Rule: RuleOpaque, Reason: "reeve cannot tell what this command runs without running it (" + f.opaque[0] + "), so a human decides"}
	}
	return d
}

// CheckPath decides whether an agent may touch path at all, for `reeve
// guard check`, answering for the most restricted file tool: it considers
// the rules with a path condition and no command condition; a deny or ask
// rule counts whatever tools it lists, an allow rule only when it lists no
// tools or "*". Relative paths are taken from workdir.
func (p *Policy) CheckPath(path, workdir string) Decision {
	if p.Empty() {
		return Decision{}
	}
	f := facts{paths: []target{resolveTarget(absWorkdir(workdir), path)}}
	return p.decide(func(class Action, r *rule) bool {
		if r.hasCommand || (r.paths == nil && r.outside == nil) {
			return false
		}
		if class == Allow && len(r.tools) > 0 && !slices.Contains(r.tools, "*") {
			return false
		}
		return r.matchPaths(f, class == Allow)
	})
}

func (p *Policy) decide(match func(Action, *rule) bool) Decision {
	for ci, class := range classes {
		for _, r := range p.rules[ci] {
			if match(class, r) {
				return Decision{Action: class, Rule: r.id, Reason: r.reason}
			}
		}
	}
	return Decision{}
}

// matches applies every condition the rule sets. strict is for allow rules:
// there a condition must hold for everything the request does (every simple
// command, every path), and a request whose extent is not fully known
// (opaque shell constructs, shell paths) never matches a command or path
// condition. Deny and ask rules match when any part matches.
func (r *rule) matches(f facts, strict bool) bool {
	if len(r.tools) > 0 && !matchTool(r.tools, f.tool) {
		return false
	}
	if r.hasCommand && !r.matchCommands(f, strict) {
		return false
	}
	if r.paths != nil || r.outside != nil {
		return r.matchPaths(f, strict)
	}
	return true
}

func matchTool(patterns []string, tool string) bool {
	// Tool names are not paths: * must match a "/" too.
	tool = strings.ReplaceAll(tool, "/", "\x00")
	for _, p := range patterns {
		if ok, _ := filepath.Match(strings.ReplaceAll(p, "/", "\x00"), tool); ok {
			return true
		}
	}
	return false
}

func (r *rule) anyCommand(s string) bool {
	for _, re := range r.commands {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

func (r *rule) matchCommands(f facts, strict bool) bool {
	if !f.shell {
		return false
	}
	if strict {
		// Every command that runs must be allowed, each by the text that
		// says which program it is.
		if len(f.opaque) > 0 || len(f.cmds) == 0 {
			return false
		}
		for _, c := range f.cmds {
			if c.transparent {
				continue
			}
			if c.unallowable || !r.anyCommand(c.allow) {
				return false
			}
		}
		return true
	}
	if r.anyCommand(f.line) {
		return true
	}
	for _, c := range f.cmds {
		if r.anyCommand(c.text) || r.anyCommand(c.written) {
			return true
		}
	}
	return false
}

func (r *rule) matchPaths(f facts, strict bool) bool {
	if strict && (f.shell || len(f.paths) == 0) {
		return false
	}
	one := func(t target) bool {
		if r.outside != nil && t.outside != *r.outside {
			return false
		}
		if r.paths == nil {
			return true
		}
		for _, g := range r.paths {
			if g.match(t) {
				return true
			}
		}
		return false
	}
	for _, t := range f.paths {
		if strict && !one(t) {
			return false
		}
		if !strict && one(t) {
			return true
		}
	}
	return strict
}
