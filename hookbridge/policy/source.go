package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Source is where a session's policy comes from: the project directory the
// session was started from (the developer's checkout, never the agent's
// working copy), and whether a policy file was there then. A session keeps
// its source for its whole life, so unregistering or re-adding the
// directory changes nothing about how it is governed.
type Source struct {
	Project string `json:"project"`
	// Required records that the policy file existed when the session
	// started: if it is gone later, that is a failure to load the policy,
	// which denies, not the empty policy, which would leave every decision
	// to the session's mode.
	Required bool `json:"required,omitempty"`
}

// SourceOf is the source of a session about to start in project. A policy
// file that cannot even be looked at counts as present, so its later
// absence denies.
func SourceOf(project string) Source {
	_, err := os.Lstat(filepath.Join(project, Dir, File))
	return Source{Project: project, Required: !errors.Is(err, fs.ErrNotExist)}
}

// The rules named by decisions that come from a failure to load a policy.
const (
	RuleNoSource   = "no-policy-source"
	RuleUnreadable = "unreadable-policy"
	RuleInvalid    = "invalid-policy"
	RuleMissing    = "missing-policy"
)

// Decide reads the source's policy afresh, so that an edit takes effect at
// the next tool use, and evaluates req by it. Every failure to load the
// policy is a deny that says why: a policy that cannot be read must not
// let through the tools it was written to stop.
func (s Source) Decide(req Request) Decision {
	if s.Project == "" {
		return Decision{Action: Deny, Rule: RuleNoSource, Reason: "reeve does not know which project policy governs this session, so it denies every tool use"}
	}
	p, problems, err := Load(s.Project)
	switch {
	case err != nil:
		return Decision{Action: Deny, Rule: RuleUnreadable, Reason: "reeve cannot read the project policy: " + err.Error()}
	case len(problems) > 0:
		return Decision{Action: Deny, Rule: RuleInvalid, Reason: fmt.Sprintf("the project policy has %d problem(s), so reeve denies every tool use until it is fixed (see `reeve check`): %s", len(problems), problems[0])}
	case s.Required && p.File == "":
		return Decision{Action: Deny, Rule: RuleMissing, Reason: fmt.Sprintf("the project policy %s governed this session when it started and is gone now, so reeve denies every tool use (restore it, or start a new session)", filepath.Join(s.Project, Dir, File))}
	}
	return p.Evaluate(req)
}
