package sdk

import (
	"strings"
	"unicode/utf8"
)

// ProjectAccess is a project's .reeve/access.yaml as it governs the
// project's sessions. The daemon reads the file (hookbridge/policy) and
// caps a remote client's session role with it; the session sync carries
// it with each session, so the control plane caps the same role with the
// same rule. The rule is defined here, once, for both sides.
type ProjectAccess struct {
	// DefaultRole is the project role of a user the file does not list;
	// "" is viewer (an unset default lets anyone look, nothing more: the
	// file exists to say who does more).
	DefaultRole string                `json:"default_role,omitempty"`
	Members     []ProjectAccessMember `json:"members,omitempty"`
	// Invalid, when set, says why the file does not validate; a broken
	// file refuses everyone rather than guess.
	Invalid string `json:"invalid,omitempty"`
}

// ProjectAccessMember is one listing of the file: a user by email or a
// team (a share group, as in an access token's teams) and its role.
type ProjectAccessMember struct {
	User string `json:"user,omitempty"`
	Team string `json:"team,omitempty"`
	Role string `json:"role"`
}

// Project access roles (access.yaml), cumulative.
const (
	ProjectNone     = "none"
	ProjectViewer   = "viewer"
	ProjectOperator = "operator"
	ProjectApprover = "approver"
	ProjectAdmin    = "admin"
)

// ProjectRank orders project roles; 0 for none or an unknown role.
func ProjectRank(role string) int {
	switch role {
	case ProjectViewer:
		return 1
	case ProjectOperator:
		return 2
	case ProjectApprover:
		return 3
	case ProjectAdmin:
		return 4
	}
	return 0
}

// ProjectRole is the project role the file gives a user, by email
// (case-insensitive) or by a team they are in: the highest listing wins,
// and an unlisted user has the default role. An invalid file gives none.
func (a *ProjectAccess) ProjectRole(email string, teams []string) string {
	if a.Invalid != "" {
		return ProjectNone
	}
	best, listed := ProjectNone, false
	for _, m := range a.Members {
		hit := m.User != "" && email != "" && strings.EqualFold(m.User, email)
		for _, t := range teams {
			hit = hit || (m.Team != "" && m.Team == t)
		}
		if hit {
			listed = true
			if ProjectRank(m.Role) > ProjectRank(best) {
				best = m.Role
			}
		}
	}
	if listed {
		return best
	}
	if a.DefaultRole == "" {
		return ProjectViewer
	}
	return a.DefaultRole
}

// SessionRole is the most a user may be on the project's sessions: the
// project role as a session role (viewer → viewer, operator → steerer,
// approver → approver, admin → owner; anything else → none).
func (a *ProjectAccess) SessionRole(email string, teams []string) string {
	switch a.ProjectRole(email, teams) {
	case ProjectViewer:
		return SessionViewer
	case ProjectOperator:
		return SessionSteerer
	case ProjectApprover:
		return SessionApprover
	case ProjectAdmin:
		return SessionOwner
	}
	return SessionNone
}

// CapSessionRole is role capped by the file for the user: the lower of
// the two. A cap to nothing is SessionNone.
func (a *ProjectAccess) CapSessionRole(role, email string, teams []string) string {
	if c := a.SessionRole(email, teams); SessionRank(c) < SessionRank(role) {
		return c
	}
	return role
}

// Limits of a ProjectAccess in a sync request (the request's schema).
const (
	MaxProjectAccessMembers = 1000
	MaxProjectAccessName    = 320  // a member's user or team
	MaxProjectAccessInvalid = 4096 // the reason of an invalid file
)

// Bounded is a, or, when a does not fit the sync request's limits, an
// invalid rule that says so: a file too large to publish refuses on the
// control plane (as a broken one does) rather than stop the session's
// sync or open it.
func (a *ProjectAccess) Bounded() *ProjectAccess {
	if a == nil {
		return nil
	}
	why := ""
	switch {
	case len(a.Invalid) > MaxProjectAccessInvalid:
		return &ProjectAccess{Invalid: truncate(a.Invalid, MaxProjectAccessInvalid)}
	case len(a.Members) > MaxProjectAccessMembers:
		why = "lists more than 1000 members"
	default:
		for _, m := range a.Members {
			if len(m.User) > MaxProjectAccessName || len(m.Team) > MaxProjectAccessName {
				why = "names a user or team longer than 320 bytes"
				break
			}
		}
	}
	if why == "" {
		return a
	}
	return &ProjectAccess{Invalid: ".reeve/access.yaml " + why + ", more than the control plane takes"}
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
