package api_test

import (
	"encoding/json"
	"testing"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// TestRunListsCarrySyncedSession: a page of runs links each run whose
// worker's daemon session has been published to that session record, as
// a single read does; a run whose session is not synced, or that has
// none, links to nothing.
func TestRunListsCarrySyncedSession(t *testing.T) {
	e := newWFEnv(t, servertest.Options{})
	ws := e.u.Workspace
	in, err := e.u.Client.CreateInstall(e.ctx, ws, "worker-box")
	if err != nil {
		t.Fatal(err)
	}
	daemonSessions := []string{"01ARZ3NDEKTSV4RRFFQ69G5FA1", "01ARZ3NDEKTSV4RRFFQ69G5FA2", "01ARZ3NDEKTSV4RRFFQ69G5FA3"}
	var runs []sdk.WorkflowRun
	for _, ds := range daemonSessions {
		runs = append(runs, e.queue(t, sdk.WorkflowRunCreateRequest{}))
		l := e.claim(t, e.runner, 5)
		if _, err := e.runner.ReportLeaseState(e.ctx, l.ID, sdk.LeaseStateRequest{Fence: l.Fence, State: sdk.RunRunning, SessionID: ds}); err != nil {
			t.Fatal(err)
		}
	}
	unclaimed := e.queue(t, sdk.WorkflowRunCreateRequest{})
	now := time.Now().UTC()
	for _, ds := range []string{daemonSessions[0], daemonSessions[2]} { // the second is never synced
		if _, err := e.s.Client(in.IssueToken).SyncSession(e.ctx, sdk.SyncRequest{
			Session: sdk.SyncSession{ID: ds, Agent: "shell", Status: "running", CreatedAt: now, UpdatedAt: now},
			Events:  []sdk.SyncEvent{},
		}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{unclaimed.ID: ""}
	for i, r := range runs {
		one, err := e.u.Client.GetWorkflowRun(e.ctx, ws, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if (i == 1) != (one.SyncedSessionID == "") {
			t.Fatalf("run %d single read: synced %q", i, one.SyncedSessionID)
		}
		want[r.ID] = one.SyncedSessionID
	}
	if want[runs[0].ID] == want[runs[2].ID] {
		t.Fatalf("two runs link to one session record: %v", want)
	}
	// Pages of two: the links hold across pages.
	got := map[string]string{}
	for after := ""; ; {
		q := "/api/workflow-runs?limit=2"
		if after != "" {
			q += "&after=" + after
		}
		res := expect(t, do(t, e.s, "GET", q, e.u.Token, nil), 200, "list")
		var page sdk.WorkflowRunCollectionResponse
		if err := json.Unmarshal(res.Body, &page); err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Data {
			got[r.ID] = r.SyncedSessionID
		}
		if page.Meta.NextAfter == 0 {
			break
		}
		after = itoa(page.Meta.NextAfter)
	}
	if len(got) != len(want) {
		t.Fatalf("listed %d runs, want %d", len(got), len(want))
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("run %s: listed synced_session_id %q, single read %q", id, got[id], w)
		}
	}
	// Filtered by status, the same.
	res := expect(t, do(t, e.s, "GET", "/api/workflow-runs?status=running", e.u.Token, nil), 200, "list running")
	var running sdk.WorkflowRunCollectionResponse
	if err := json.Unmarshal(res.Body, &running); err != nil {
		t.Fatal(err)
	}
	if len(running.Data) != 3 {
		t.Fatalf("running: %d runs", len(running.Data))
	}
	for _, r := range running.Data {
		if r.SyncedSessionID != want[r.ID] {
			t.Errorf("running run %s: %q, want %q", r.ID, r.SyncedSessionID, want[r.ID])
		}
	}
}
