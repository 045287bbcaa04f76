package api_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/server/api"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/store/storetest"
)

// operator creates a user holding the server-level support role, member of
// no workspace, with a token.
func operator(t *testing.T, s *servertest.Server, email string) (int64, string) {
	t.Helper()
	ctx := context.Background()
	u, _, err := s.Store().EnsureUser(ctx, email)
	if err != nil {
		t.Fatal(err)
	}
	grantSupport(t, s, u.ID)
	tok, _, err := api.MintUserToken(ctx, s.Store(), u.ID, store.TokenPersonal, "test", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return u.ID, tok
}

// grantSupport gives a user the server-level support role.
func grantSupport(t *testing.T, s *servertest.Server, userID int64) {
	t.Helper()
	if _, err := s.Store().(store.SupportOperators).GrantSupportOperator(context.Background(), userID, "test", time.Now()); err != nil {
		t.Fatal(err)
	}
}

func requestState(t *testing.T, a answer) (string, []any) {
	t.Helper()
	attrs, _ := dataOf(a)["attributes"].(map[string]any)
	st, _ := attrs["state"].(string)
	ds, _ := attrs["decisions"].([]any)
	return st, ds
}

func TestSupportAccessMatrix(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testSupportAccess(t, servertest.Options{}) })
	t.Run("postgres", func(t *testing.T) {
		testSupportAccess(t, servertest.Options{DatabaseURL: storetest.PostgresURL(t)})
	})
}

func testSupportAccess(t *testing.T, o servertest.Options) {
	s := servertest.Start(t, o)
	owner := s.NewUser("owner@example.com")
	admin := s.AddMember(owner.Workspace, "admin@example.com", "admin")
	member := s.AddMember(owner.Workspace, "member@example.com", "member")
	other := s.NewUser("other@example.com")
	opID, op := operator(t, s, "op@support.example")
	_, op2 := operator(t, s, "op2@support.example")
	sw := "/api/support/workspaces/" + owner.Workspace
	posture := "/api/resources/" + owner.Workspace + "/posture"
	sess := expect(t, do(t, s, "POST", "/api/resources/"+owner.Workspace+"/sessions", owner.Token, map[string]any{"title": "t", "source_kind": "cli"}), 201, "session")
	debug := "/api/resources/" + owner.Workspace + "/sessions/" + dataOf(sess)["id"].(string) + "/support-debug"

	// Only an operator creates requests; bad input is 422.
	body := map[string]any{"reason": "customer ticket 42", "requested_scopes": []string{"operational_status"}}
	expect(t, do(t, s, "POST", sw+"/access-requests", member.Token, body), 403, "plain member creates")
	expect(t, do(t, s, "POST", sw+"/access-requests", owner.Token, body), 403, "owner (no support role) creates")
	expect(t, do(t, s, "POST", sw+"/access-requests", op, map[string]any{"reason": " ", "requested_scopes": []string{}}), 422, "empty reason and scopes")
	expect(t, do(t, s, "POST", sw+"/access-requests", op, map[string]any{"reason": "x", "requested_scopes": []string{"run_read"}, "expires_in_minutes": 0}), 422, "zero expiry")
	expect(t, do(t, s, "POST", sw+"/access-requests", op, map[string]any{"reason": "x", "requested_scopes": []string{"root"}}), 422, "unknown scope")

	// Operator without approval: nothing.
	expect(t, do(t, s, "GET", posture, op, nil), 403, "operator without approval: posture")
	expect(t, do(t, s, "GET", sw+"/posture", op, nil), 403, "operator without approval: support posture")
	expect(t, do(t, s, "GET", debug, op, nil), 403, "operator without approval: support-debug")
	expect(t, do(t, s, "GET", "/api/resources/"+owner.Workspace+"/sessions", op, nil), 403, "operator on an ordinary route")

	req := expect(t, do(t, s, "POST", sw+"/access-requests", op, body), 201, "operator creates")
	rid := dataOf(req)["id"].(string)
	if st, _ := requestState(t, req); st != "pending" {
		t.Fatalf("new request state %q", st)
	}
	expect(t, do(t, s, "POST", sw+"/access-requests", op2, map[string]any{"reason": "other ticket", "requested_scopes": []string{"billing_read"}}), 201, "second operator creates")
	expect(t, do(t, s, "GET", posture, op, nil), 403, "pending request grants nothing")

	// The requester lists their own requests only; admins list all.
	if l := expect(t, do(t, s, "GET", sw+"/access-requests", op, nil), 200, "operator lists"); len(l.JSON["data"].([]any)) != 1 {
		t.Fatalf("operator sees %d requests, want only their own: %s", len(l.JSON["data"].([]any)), l.Body)
	}
	if l := expect(t, do(t, s, "GET", sw+"/access-requests", admin.Token, nil), 200, "admin lists"); len(l.JSON["data"].([]any)) != 2 {
		t.Fatalf("admin sees %d requests: %s", len(l.JSON["data"].([]any)), l.Body)
	}
	expect(t, do(t, s, "GET", sw+"/access-requests", member.Token, nil), 403, "plain member lists")

	// Only owners and admins decide.
	expect(t, do(t, s, "POST", sw+"/access-requests/"+rid+"/approve", op, map[string]any{}), 403, "operator approves own")
	expect(t, do(t, s, "POST", sw+"/access-requests/"+rid+"/approve", member.Token, map[string]any{}), 403, "member approves")
	expect(t, do(t, s, "POST", "/api/support/workspaces/"+other.Workspace+"/access-requests/"+rid+"/approve", other.Token, map[string]any{}), 404, "other workspace's owner approves")
	expect(t, do(t, s, "POST", sw+"/access-requests/NOPE/approve", admin.Token, map[string]any{}), 404, "unknown request")
	ap := expect(t, do(t, s, "POST", sw+"/access-requests/"+rid+"/approve", admin.Token, map[string]any{"decision_reason": "ok", "expires_in_minutes": 30}), 200, "admin approves")
	if st, ds := requestState(t, ap); st != "approved" || len(ds) != 1 {
		t.Fatalf("after approve: %s", ap.Body)
	}
	expect(t, do(t, s, "POST", sw+"/access-requests/"+rid+"/deny", owner.Token, map[string]any{}), 409, "deny an approved request")

	// Within scope only.
	p := expect(t, do(t, s, "GET", posture, op, nil), 200, "approved operator: posture")
	if _, ok := dataOf(p)["billing_status"]; ok {
		t.Fatalf("operator without billing_read sees billing fields: %s", p.Body)
	}
	if dataOf(p)["member_count"].(float64) != 3 {
		t.Fatalf("posture: %s", p.Body)
	}
	expect(t, do(t, s, "GET", sw+"/posture", op, nil), 200, "approved operator: support posture")
	expect(t, do(t, s, "GET", debug, op, nil), 403, "wrong scope: support-debug needs run_read")
	expect(t, do(t, s, "GET", "/api/resources/"+other.Workspace+"/posture", op, nil), 403, "other workspace")
	expect(t, do(t, s, "GET", posture, op2, nil), 403, "another operator rides no one's grant")
	expect(t, do(t, s, "GET", "/api/resources/"+owner.Workspace+"/sessions/"+dataOf(sess)["id"].(string), op, nil), 403, "approved operator on the session itself")

	// Revoke ends it, and the history keeps both decisions.
	rv := expect(t, do(t, s, "POST", sw+"/access-requests/"+rid+"/revoke", owner.Token, map[string]any{"decision_reason": "ticket closed"}), 200, "owner revokes")
	if st, ds := requestState(t, rv); st != "revoked" || len(ds) != 2 || ds[0].(map[string]any)["decision"] != "approved" || ds[1].(map[string]any)["decision"] != "revoked" {
		t.Fatalf("after revoke: %s", rv.Body)
	}
	expect(t, do(t, s, "GET", posture, op, nil), 403, "revoked")
	expect(t, do(t, s, "POST", sw+"/access-requests/"+rid+"/revoke", owner.Token, map[string]any{}), 409, "revoke twice")

	// 60 admins race to decide one request: exactly one decision lands.
	r2 := dataOf(expect(t, do(t, s, "POST", sw+"/access-requests", op, map[string]any{"reason": "race", "requested_scopes": []string{"run_read"}}), 201, "race request"))["id"].(string)
	var wg sync.WaitGroup
	codes := make(chan int, 60)
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			verb := "approve"
			if i%2 == 1 {
				verb = "deny"
			}
			codes <- do(t, s, "POST", sw+"/access-requests/"+r2+"/"+verb, admin.Token, map[string]any{}).Status
		}()
	}
	wg.Wait()
	close(codes)
	won := 0
	for c := range codes {
		switch c {
		case 200:
			won++
		case 409:
		default:
			t.Fatalf("racing decision answered %d", c)
		}
	}
	if won != 1 {
		t.Fatalf("%d racing decisions landed, want 1", won)
	}

	// Losing the role ends everything, even an approved request.
	if err := s.Store().(store.SupportOperators).RevokeSupportOperator(context.Background(), opID); err != nil {
		t.Fatal(err)
	}
	expect(t, do(t, s, "POST", sw+"/access-requests", op, body), 403, "former operator creates")
	expect(t, do(t, s, "GET", sw+"/access-requests", op, nil), 403, "former operator lists")
}

// TestSupportAccessExpires waits for an approval to lapse: nothing revokes
// it, yet posture and support-debug stop answering and the request reads
// as expired (a revoke then is 409).
func TestSupportAccessExpires(t *testing.T) {
	if testing.Short() && os.Getenv("REEVE_REQUIRE_POSTGRES") == "" {
		t.Skip("waits a minute for an expiry")
	}
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("owner@example.com")
	_, op := operator(t, s, "op@support.example")
	sw := "/api/support/workspaces/" + owner.Workspace
	sess := expect(t, do(t, s, "POST", "/api/resources/"+owner.Workspace+"/sessions", owner.Token, map[string]any{"title": "t", "source_kind": "cli"}), 201, "session")
	debug := "/api/resources/" + owner.Workspace + "/sessions/" + dataOf(sess)["id"].(string) + "/support-debug"
	rid := dataOf(expect(t, do(t, s, "POST", sw+"/access-requests", op, map[string]any{"reason": "ticket", "requested_scopes": []string{"operational_status", "run_read"}}), 201, "create"))["id"].(string)
	ap := expect(t, do(t, s, "POST", sw+"/access-requests/"+rid+"/approve", owner.Token, map[string]any{"expires_in_minutes": 1}), 200, "approve for one minute")
	exp, err := time.Parse(time.RFC3339Nano, dataOf(ap)["attributes"].(map[string]any)["expires_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, do(t, s, "GET", sw+"/posture", op, nil), 200, "posture while approved")
	d := expect(t, do(t, s, "GET", debug, op, nil), 200, "support-debug while approved")
	if dataOf(d)["redacted"] != true {
		t.Fatalf("support-debug: %s", d.Body)
	}
	time.Sleep(time.Until(exp) + time.Second)
	expect(t, do(t, s, "GET", sw+"/posture", op, nil), 403, "posture after expiry")
	expect(t, do(t, s, "GET", debug, op, nil), 403, "support-debug after expiry")
	l := expect(t, do(t, s, "GET", sw+"/access-requests", op, nil), 200, "list after expiry")
	if st := l.JSON["data"].([]any)[0].(map[string]any)["attributes"].(map[string]any)["state"]; st != "expired" {
		t.Fatalf("state after expiry %v", st)
	}
	expect(t, do(t, s, "POST", sw+"/access-requests/"+rid+"/revoke", owner.Token, map[string]any{}), 409, "revoke an expired approval")
}
