package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"reeve.dev/reeve/internal/docschema"
)

// Access is a project's .reeve/access.yaml, read to decide (on the
// daemon, for remote clients) what a user may do with the project's
// sessions. `reeve check` validates the same file with ValidateAccess.
type Access struct {
	File        string
	DefaultRole string // none, viewer, operator, approver, admin
	members     []accessMember
}

type accessMember struct {
	User string `json:"user"`
	Team string `json:"team"`
	Role string `json:"role"`
}

// Project access roles, cumulative.
const (
	AccessNone     = "none"
	AccessViewer   = "viewer"
	AccessOperator = "operator"
	AccessApprover = "approver"
	AccessAdmin    = "admin"
)

// LoadAccess reads dir/.reeve/access.yaml; nil, nil when the project has
// none. A file that does not validate is an error that names its first
// problems: access is then refused rather than guessed.
func LoadAccess(dir string) (*Access, error) {
	file := filepath.Join(dir, ".reeve", "access.yaml")
	data, problems, err := readDocument(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	if len(problems) == 0 {
		problems = ValidateAccess(file, data)
	}
	if len(problems) > 0 {
		msg := make([]string, 0, 3)
		for i, p := range problems {
			if i == 3 {
				msg = append(msg, fmt.Sprintf("and %d more", len(problems)-3))
				break
			}
			msg = append(msg, p.String())
		}
		return nil, fmt.Errorf("%s is not valid (reeve check): %s", file, strings.Join(msg, "; "))
	}
	var doc struct {
		DefaultRole string         `json:"default_role"`
		Members     []accessMember `json:"members"`
	}
	if err := decodeYAML(file, data, &doc); err != nil {
		return nil, err
	}
	a := &Access{File: file, DefaultRole: doc.DefaultRole, members: doc.Members}
	if a.DefaultRole == "" {
		// Unset, a member the file does not list may look, nothing more:
		// the file exists to say who does more.
		a.DefaultRole = AccessViewer
	}
	return a, nil
}

// decodeYAML reads a validated document into v through its JSON form.
func decodeYAML(file string, data []byte, v any) error {
	d, problems := docschema.ParseYAML(file, data)
	if len(problems) > 0 {
		return fmt.Errorf("%s: %s", file, problems[0].String())
	}
	b, err := json.Marshal(d.Value)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// RoleFor is the role the file gives a user, by email (case-insensitive)
// or by a team they are in; the highest listing wins, and an unlisted user
// has the default role.
func (a *Access) RoleFor(email string, teams []string) string {
	best, listed := AccessNone, false
	for _, m := range a.members {
		hit := m.User != "" && email != "" && strings.EqualFold(m.User, email)
		for _, t := range teams {
			hit = hit || (m.Team != "" && m.Team == t)
		}
		if hit {
			listed = true
			if AccessRank(m.Role) > AccessRank(best) {
				best = m.Role
			}
		}
	}
	if !listed {
		return a.DefaultRole
	}
	return best
}

// AccessRank orders project roles; 0 for none or an unknown role.
func AccessRank(role string) int {
	switch role {
	case AccessViewer:
		return 1
	case AccessOperator:
		return 2
	case AccessApprover:
		return 3
	case AccessAdmin:
		return 4
	}
	return 0
}
