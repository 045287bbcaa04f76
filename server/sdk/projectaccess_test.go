package sdk

import "testing"

func TestProjectAccessSessionRole(t *testing.T) {
	file := &ProjectAccess{DefaultRole: ProjectNone, Members: []ProjectAccessMember{
		{User: "Alice@Example.com", Role: ProjectOperator},
		{Team: "platform", Role: ProjectApprover},
		{User: "bob@example.com", Role: ProjectViewer},
		{Team: "sre", Role: ProjectAdmin},
	}}
	for _, c := range []struct {
		a            *ProjectAccess
		email        string
		teams        []string
		want, capped string // capped: an owner's role after the cap
	}{
		{file, "alice@example.com", nil, SessionSteerer, SessionSteerer},
		{file, "bob@example.com", []string{"platform"}, SessionApprover, SessionApprover}, // the highest listing wins
		{file, "carol@example.com", []string{"sre"}, SessionOwner, SessionOwner},
		{file, "carol@example.com", []string{"other"}, SessionNone, SessionNone}, // unlisted: default none
		{file, "", nil, SessionNone, SessionNone},
		{&ProjectAccess{}, "x@example.com", nil, SessionViewer, SessionViewer}, // default unset: viewer
		{&ProjectAccess{DefaultRole: ProjectApprover}, "x@example.com", nil, SessionApprover, SessionApprover},
		{&ProjectAccess{DefaultRole: ProjectAdmin, Invalid: "broken"}, "x@example.com", nil, SessionNone, SessionNone}, // invalid refuses
		{&ProjectAccess{Members: []ProjectAccessMember{{User: "x@example.com", Role: "superuser"}}}, "x@example.com", nil, SessionNone, SessionNone},
	} {
		if got := c.a.SessionRole(c.email, c.teams); got != c.want {
			t.Errorf("%+v for %s %v: %q, want %q", c.a, c.email, c.teams, got, c.want)
		}
		if got := c.a.CapSessionRole(SessionOwner, c.email, c.teams); got != c.capped {
			t.Errorf("cap of owner %+v for %s: %q, want %q", c.a, c.email, got, c.capped)
		}
		// A cap never raises.
		if got := c.a.CapSessionRole(SessionViewer, c.email, c.teams); SessionRank(got) > SessionRank(SessionViewer) {
			t.Errorf("cap raised viewer to %q", got)
		}
	}
}

// A rule too large for the sync request refuses rather than stop the sync.
func TestProjectAccessBounded(t *testing.T) {
	small := &ProjectAccess{Members: []ProjectAccessMember{{User: "a@example.com", Role: ProjectAdmin}}}
	if small.Bounded() != small || (*ProjectAccess)(nil).Bounded() != nil {
		t.Fatal("a rule within the limits changed")
	}
	many := &ProjectAccess{DefaultRole: ProjectAdmin}
	for range MaxProjectAccessMembers + 1 {
		many.Members = append(many.Members, ProjectAccessMember{User: "a@example.com", Role: ProjectAdmin})
	}
	long := &ProjectAccess{DefaultRole: ProjectAdmin, Members: []ProjectAccessMember{{Team: string(make([]byte, MaxProjectAccessName+1)), Role: ProjectAdmin}}}
	reason := &ProjectAccess{Invalid: "é" + string(make([]byte, MaxProjectAccessInvalid))}
	for _, a := range []*ProjectAccess{many, long, reason} {
		b := a.Bounded()
		if b.Invalid == "" || len(b.Invalid) > MaxProjectAccessInvalid || b.SessionRole("a@example.com", nil) != SessionNone {
			t.Errorf("bounded %d members: %d bytes of reason, role %q", len(a.Members), len(b.Invalid), b.SessionRole("a@example.com", nil))
		}
	}
}
