package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"reeve.dev/reeve/server/api"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

func bodyName(r api.Route) string {
	if r.Body == nil {
		return "-"
	}
	return fmt.Sprintf("%s/%v", r.Body.Schema, r.Body.Required)
}

// Every spelling of one operation (workspace alias, placeholder twin) has
// one gate: the same auth, role and body; and an item's writes need at
// least the role that creates items of its collection.
func TestOneGatePerOperation(t *testing.T) {
	// Routes with other credentials are other operations (a daemon mints
	// a pairing code publicly, a browser through its workspace).
	groups := map[string][]api.Route{}
	for _, r := range api.Routes() {
		k := api.OperationKey(r) + " as " + string(r.Auth)
		groups[k] = append(groups[k], r)
	}
	twins := 0
	for key, rs := range groups {
		if len(rs) < 2 {
			continue
		}
		first := rs[0]
		for _, r := range rs[1:] {
			if r.MinRole != first.MinRole || r.Auth != first.Auth || bodyName(r) != bodyName(first) {
				t.Errorf("%s: %s %s (role %q, auth %s, body %s) and %s %s (role %q, auth %s, body %s) differ",
					key, first.Method, first.Path, first.MinRole, first.Auth, bodyName(first), r.Method, r.Path, r.MinRole, r.Auth, bodyName(r))
			}
		}
		// Typed and placeholder spellings share a handler: the placeholder
		// is bound as the typed operation's twin (or alias).
		var typed *api.Route
		for i := range rs {
			if !rs[i].Placeholder && !rs[i].IsAlias() {
				typed = &rs[i]
			}
		}
		if typed == nil {
			continue
		}
		for _, r := range rs {
			if r.Placeholder && !r.IsAlias() {
				if r.TwinOf != typed.OperationID {
					t.Errorf("%s %s does not run %s", r.Method, r.Path, typed.OperationID)
				}
				twins++
			}
		}
	}
	if twins < 20 {
		t.Fatalf("only %d twins found", twins)
	}
	// Writes on an item need at least the role that creates the items.
	createRole := map[string]string{}
	for _, r := range api.Routes() {
		if r.Method == "POST" && !strings.HasSuffix(r.Path, "}") {
			createRole[strings.TrimPrefix(api.OperationKey(r), "POST ")] = r.MinRole
		}
	}
	rank := map[string]int{"": 1, "member": 1, "admin": 2, "owner": 3}
	for _, r := range api.Routes() {
		// Unscoped routes find their workspace in the record and check
		// the role there (pairing approval).
		if r.Method == "GET" || r.Auth != api.AuthUser || r.Scope == api.ScopeNone {
			continue
		}
		coll := strings.TrimPrefix(api.OperationKey(r), r.Method+" ")
		segs := strings.Split(coll, "/")
		// The collection an item route lives in: up to its first {param}.
		for i, s := range segs {
			if strings.HasPrefix(s, "{") {
				coll = strings.Join(segs[:i], "/")
				break
			}
		}
		if need, ok := createRole[coll]; ok && coll != strings.TrimPrefix(api.OperationKey(r), r.Method+" ") && rank[r.MinRole] < rank[need] {
			t.Errorf("%s %s needs role %q but creating %s needs %q", r.Method, r.Path, r.MinRole, coll, need)
		}
	}
}

// The example: a member cannot create a provider key through the
// placeholder spelling either, and an admin gets the typed behaviour there
// (the secret is never stored).
func TestTwinRoutesShareBehaviour(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("o@example.com")
	member := s.AddMember(owner.Workspace, "m@example.com", sdk.RoleMember)
	body := `{"provider":"provider_a","mode":"managed_byok","secret":"sk-live-abcdef"}`
	for _, p := range []string{"/api/provider-keys", "/api/resources/" + owner.Workspace + "/provider-keys", "/api/workspaces/" + owner.Workspace + "/provider-keys"} {
		expect(t, do(t, s, "POST", p, member.Token, body, api.WorkspaceHeader, owner.Workspace), 403, "member "+p)
		a := expect(t, do(t, s, "POST", p, owner.Token, body, api.WorkspaceHeader, owner.Workspace), 201, "owner "+p)
		if strings.Contains(string(a.Body), "sk-live") {
			t.Fatalf("%s echoes the secret: %s", p, a.Body)
		}
		expect(t, do(t, s, "POST", p, owner.Token, `{"provider":"provider_a","mode":"managed_byok","hidden":"sk-live"}`, api.WorkspaceHeader, owner.Workspace), 422, "unknown field "+p)
	}
	for _, p := range []string{"/api/billing/customer/reconcile", "/api/resources/" + owner.Workspace + "/billing/customer/reconcile"} {
		expect(t, do(t, s, "POST", p, member.Token, nil, api.WorkspaceHeader, owner.Workspace), 403, "member "+p)
		expect(t, do(t, s, "POST", p, owner.Token, nil, api.WorkspaceHeader, owner.Workspace), 200, "owner "+p)
	}
	// The placeholder session spelling creates the same resource, with
	// the same validation.
	expect(t, do(t, s, "POST", "/api/sessions", member.Token, `{"title":"x"}`, api.WorkspaceHeader, owner.Workspace), 422, "session without source_kind")
	made := expect(t, do(t, s, "POST", "/api/sessions", member.Token, `{"title":"x","source_kind":"cli","visibility_scope":"private"}`, api.WorkspaceHeader, owner.Workspace), 201, "session via /api/sessions")
	id := dataOf(made)["id"].(string)
	expect(t, do(t, s, "GET", "/api/resources/"+owner.Workspace+"/sessions/"+id, member.Token, nil), 200, "typed get of a placeholder-made session")
	list, err := owner.Client.ListRecords(context.Background(), "/api/resources/"+owner.Workspace+"/sessions")
	if err != nil || len(list) != 1 {
		t.Fatalf("sessions %v %v", list, err)
	}
}
