package api_test

import (
	"context"
	"testing"
	"time"

	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store"
)

func TestAuditRetentionPrunesAndNumbersAreNeverErased(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	o := s.NewUser("o@example.com")
	other := s.NewUser("other@example.com")
	ctx := context.Background()
	now := time.Now().UTC()
	for _, w := range []string{o.Workspace, other.Workspace} {
		for _, age := range []int{400, 150, 101, 99, 1} {
			e := store.AuditEntry{ID: "old-" + w + "-" + itoa(int64(age)), WorkspaceID: w, Actor: "test", Action: "test.entry", Target: itoa(int64(age)), CreatedAt: now.Add(-time.Duration(age) * 24 * time.Hour)}
			if err := s.Store().AppendAudit(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func(w, tok string) (old, recent int) {
		a := expect(t, do(t, s, "GET", "/api/workspaces/"+w+"/audit?limit=1000", tok, nil), 200, "audit")
		for _, e := range a.JSON["data"].([]any) {
			m := e.(map[string]any)
			if m["action"] != "test.entry" {
				continue
			}
			if m["target"] == "400" || m["target"] == "150" || m["target"] == "101" {
				old++
			} else {
				recent++
			}
		}
		return
	}
	patch := func(body string) answer {
		return do(t, s, "PATCH", "/api/workspaces/"+o.Workspace, o.Token, body)
	}
	// 1e2 and 100.0 mean 100.
	for _, form := range []string{`1e2`, `100.0`, `100`} {
		a := expect(t, patch(`{"audit_retention_days":`+form+`}`), 200, form)
		if dataOf(a)["audit_retention_days"] != float64(100) {
			t.Fatalf("%s stored as %v", form, dataOf(a)["audit_retention_days"])
		}
	}
	if old, recent := count(o.Workspace, o.Token); old != 0 || recent != 2 {
		t.Fatalf("after retention 100: %d old, %d recent entries", old, recent)
	}
	// Another workspace without retention keeps everything.
	if old, recent := count(other.Workspace, other.Token); old != 3 || recent != 2 {
		t.Fatalf("other workspace: %d old, %d recent", old, recent)
	}
	// Fractions, out-of-range and huge numbers are refused; the stored
	// value stays.
	for _, bad := range []string{`100.5`, `0`, `-3`, `1e400`, `36501`, `"100"`} {
		expect(t, patch(`{"audit_retention_days":`+bad+`}`), 422, bad)
	}
	w, err := s.Store().Workspace(ctx, o.Workspace)
	if err != nil || w.AuditRetentionDays == nil || *w.AuditRetentionDays != 100 {
		t.Fatalf("stored retention %v %v", w.AuditRetentionDays, err)
	}
	// The sweep finds entries that aged past retention later.
	if err := s.Store().AppendAudit(ctx, store.AuditEntry{ID: "late", WorkspaceID: o.Workspace, Actor: "test", Action: "test.entry", Target: "150", CreatedAt: now.Add(-150 * 24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	n, err := s.Store().PruneAudit(ctx, now)
	if err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	// null clears it.
	a := expect(t, patch(`{"audit_retention_days":null}`), 200, "clear")
	if dataOf(a)["audit_retention_days"] != nil {
		t.Fatalf("not cleared: %s", a.Body)
	}
}
