package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/server/api"
	"reeve.dev/reeve/server/secrets"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/store/storetest"
)

// Each rule's insight resolves when its condition clears: the machine
// checks in, the cap is raised, the machine runs guarded, and (a week
// later, the periodic run) the denials and failures leave the window. A
// resolved insight is dismissed by system:insights with reason resolved,
// audited, and raised again when its condition returns.
func TestInsightsResolvedWhenCleared(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testInsightsResolved(t, servertest.Options{InsightInterval: -1}) })
	t.Run("postgres", func(t *testing.T) {
		testInsightsResolved(t, servertest.Options{InsightInterval: -1, DatabaseURL: storetest.PostgresURL(t)})
	})
}

func testInsightsResolved(t *testing.T, o servertest.Options) {
	w := newInsightWorld(t, o)
	s, ws, ri := w.s, w.owner.Workspace, w.ri
	ctx := context.Background()
	if got := insightsBy(t, expect(t, do(t, s, "POST", ri+"/detect", w.admin.Token, nil), 201, "detect")); len(got) != 5 {
		t.Fatalf("want 5 insights, got %v", got)
	}
	ids := map[string]string{}
	for k, i := range insightsBy(t, expect(t, do(t, s, "GET", ri, w.member.Token, nil), 200, "list")) {
		ids[k] = i["id"].(string)
	}
	// detectResolves detects and checks exactly the named insights are
	// resolved (and the rest still open).
	resolved := map[string]bool{}
	detectResolves := func(what string, keys ...string) {
		t.Helper()
		a := expect(t, do(t, s, "POST", ri+"/detect", w.admin.Token, nil), 200, what)
		if n := a.JSON["meta"].(map[string]any)["resolved"]; n != float64(len(keys)) {
			t.Fatalf("%s: meta.resolved is %v, want %d", what, n, len(keys))
		}
		for _, k := range keys {
			resolved[k] = true
		}
		checkResolved(t, w, ids, resolved, what)
	}

	if err := s.Store().TouchInstall(ctx, w.oldBox, time.Now()); err != nil {
		t.Fatal(err)
	}
	detectResolves("the old machine checked in", "install_stale install:"+w.oldBox)

	expect(t, do(t, s, "PATCH", "/api/workspaces/"+ws, w.owner.Token, `{"budget_policy":{"hard_cap_usd":"100.00"}}`), 200, "raise the cap")
	detectResolves("spend is under 80% of the raised cap", "budget_near_cap period:"+time.Now().UTC().Format("2006-01"))

	// The laptop syncs its session again, run guarded this time.
	syncSession(t, s, w.daemon, "s-unguarded", true)
	detectResolves("the machine runs guarded", "unguarded_session install:"+w.laptop)

	// The stale machine stops checking in again: raised again, though its
	// evidence (the install) is the one the resolved insight holds.
	if err := s.Store().TouchInstall(ctx, w.oldBox, time.Now().Add(-9*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if a := expect(t, do(t, s, "POST", ri+"/detect", w.admin.Token, nil), 201, "the old machine is stale again"); insightsBy(t, a)["install_stale install:"+w.oldBox]["id"] == ids["install_stale install:"+w.oldBox] {
		t.Fatalf("the stale machine was not raised anew: %s", a.Body)
	}

	// A week later the periodic run (its own clock) finds no denial and
	// no failed run in the window: those resolve too.
	ring, err := secrets.Parse(strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	later, err := api.New(api.Options{Store: s.Store(), Secrets: ring, Now: func() time.Time { return time.Now().Add(8 * 24 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := later.DetectAllInsights(ctx); err != nil {
		t.Fatal(err)
	}
	resolved["repeated_denials tool:Bash"], resolved["runs_failing workflow:nightly"] = true, true
	checkResolved(t, w, ids, resolved, "a week later")
	audit := expect(t, do(t, s, "GET", "/api/workspaces/"+ws+"/audit?limit=1000", w.owner.Token, nil), 200, "audit")
	for _, id := range ids {
		if !strings.Contains(string(audit.Body), id) {
			t.Fatalf("the audit log does not name resolved insight %s", id)
		}
	}
	if !strings.Contains(string(audit.Body), `"schedule"`) {
		t.Fatal("the periodic run that resolved insights is not audited")
	}
}

// checkResolved: the insights named in resolved are dismissed by the
// rules with reason resolved; the others of ids are open.
func checkResolved(t *testing.T, w *insightWorld, ids map[string]string, resolved map[string]bool, what string) {
	t.Helper()
	byID := map[string]map[string]any{}
	for _, x := range expect(t, do(t, w.s, "GET", w.ri+"?limit=1000", w.member.Token, nil), 200, "list").JSON["data"].([]any) {
		byID[x.(map[string]any)["id"].(string)] = x.(map[string]any)
	}
	for k, id := range ids {
		in := byID[id]
		switch {
		case in == nil:
			t.Fatalf("%s: insight %s gone", what, k)
		case resolved[k] && (in["status"] != store.InsightDismissed || in["status_changed_by"] != store.InsightResolver || in["status_reason"] != store.InsightResolved):
			t.Fatalf("%s: %s not resolved: %v", what, k, in)
		case !resolved[k] && in["status"] != store.InsightOpen:
			t.Fatalf("%s: %s is %v, want open", what, k, in["status"])
		}
	}
}
