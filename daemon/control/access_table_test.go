package control

import (
	"testing"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/accesstoken"
)

// Every request type of the dispatch table declares the permission a
// remote client needs for it, with a real role wherever it has a scope.
func TestEveryRequestTypeDeclaresAPermission(t *testing.T) {
	table := fullTable()
	if len(table) < 15 {
		t.Fatalf("the full table has only %d request types", len(table))
	}
	for typ, e := range table {
		if !e.need.declared {
			t.Errorf("request type %q has no declared permission", typ)
			continue
		}
		if e.need.scope != scopeNone && sdk.SessionRank(e.need.role) == 0 {
			t.Errorf("request type %q needs %q, which is not a session role", typ, e.need.role)
		}
	}
}

// An undeclared permission refuses, rather than letting the request
// through.
func TestUndeclaredPermissionRefuses(t *testing.T) {
	s := newWSServer(Options{Sessions: &fakeSessions{}})
	c := &wsConn{srv: s, access: &connAccess{}}
	c.access.claims = &accesstoken.Claims{DefaultSessionRole: sdk.SessionOwner}
	if _, err := c.allowed("made-up", permission{}, "s1", "", ""); err == nil {
		t.Fatal("a request type without a declared permission was let through")
	}
	if _, err := c.allowed("list", need(sdk.SessionViewer, scopeMachine), "", "", ""); err != nil {
		t.Fatalf("an owner's list was refused: %v", err)
	}
}
