package api_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestWorkflowDefinitions: definitions are stored with immutable,
// numbered versions; their YAML is checked on the way in; runs and
// preflight resolve a definition or a version to its YAML and digest.
func TestWorkflowDefinitions(t *testing.T) {
	e := newWFEnv(t, servertest.Options{}, "linux")
	ctx, ws := e.ctx, e.u.Workspace
	base := "/api/resources/" + ws + "/workflow-definitions"
	v1YAML := "name: fix-flaky\nagent: shell\nprompt: run v1\ntags: [linux]\n"
	// Bad YAML: 422 definition_invalid with the issues, nothing stored.
	for _, c := range []struct{ name, body, want string }{
		{"malformed", `{"name":"x","yaml":"agent: [shell\nprompt: x"}`, "does not parse"},
		{"unknown key", `{"name":"x","yaml":"agent: shell\nstepz: 1"}`, "stepz"},
		{"not a mapping", `{"name":"x","yaml":"just words"}`, "does not parse"},
		{"blank", `{"name":"x","yaml":"   \n"}`, "empty"},
		{"attempts out of range", `{"name":"x","yaml":"agent: shell\nmax_attempts: 99"}`, "max_attempts"},
		{"bad pool", `{"name":"x","yaml":"agent: shell\nrunner_pool: \"no spaces\""}`, "runner_pool"},
		{"no name anywhere", `{"yaml":"agent: shell\nprompt: x"}`, "name the definition"},
	} {
		a := expect(t, do(t, e.s, "POST", base, e.u.Token, c.body), 422, c.name)
		if a.errCode() != sdk.CodeDefinitionInvalid || !strings.Contains(string(a.Body), c.want) || !strings.Contains(string(a.Body), `"issues":[`) {
			t.Errorf("%s: %s", c.name, a.Body)
		}
	}
	expect(t, do(t, e.s, "POST", base, e.u.Token, `{"name":"x"}`), 422, "no yaml")
	if list, err := e.u.Client.ListWorkflowDefinitions(ctx, ws); err != nil || len(list) != 0 {
		t.Fatalf("refused definitions were stored: %+v %v", list, err)
	}
	// Create: the name comes from the YAML; version 1 with its digest.
	d, err := e.u.Client.CreateWorkflowDefinition(ctx, ws, sdk.WorkflowDefinitionCreateRequest{YAML: v1YAML})
	if err != nil || d.Name != "fix-flaky" || d.LatestVersion != 1 || d.Digest != digestOf(v1YAML) || d.YAML != v1YAML || len(d.Versions) != 1 {
		t.Fatalf("create: %+v %v", d, err)
	}
	v1 := d.LatestVersionID
	_, err = e.u.Client.CreateWorkflowDefinition(ctx, ws, sdk.WorkflowDefinitionCreateRequest{Name: "fix-flaky", YAML: "agent: shell\nprompt: y\n"})
	wantCode(t, err, 409, sdk.CodeConflict)
	// Versions: a new YAML is version 2; the same again answers version 2.
	v2YAML := strings.Replace(v1YAML, "run v1", "run v2", 1)
	v2, created, err := e.u.Client.AddWorkflowDefinitionVersion(ctx, ws, d.ID, v2YAML)
	if err != nil || !created || v2.Version != 2 || v2.Digest != digestOf(v2YAML) || v2.YAML != v2YAML {
		t.Fatalf("v2: %+v %v %v", v2, created, err)
	}
	if again, created, err := e.u.Client.AddWorkflowDefinitionVersion(ctx, ws, d.ID, v2YAML); err != nil || created || again.ID != v2.ID {
		t.Fatalf("same yaml again: %+v %v %v", again, created, err)
	}
	a := expect(t, do(t, e.s, "POST", base+"/"+d.ID+"/versions", e.u.Token, `{"yaml":"agent: [x"}`), 422, "bad version")
	if a.errCode() != sdk.CodeDefinitionInvalid {
		t.Fatalf("%s", a.Body)
	}
	got, err := e.u.Client.GetWorkflowDefinition(ctx, ws, d.ID)
	if err != nil || got.LatestVersion != 2 || got.LatestVersionID != v2.ID || got.YAML != v2YAML || len(got.Versions) != 2 || got.Versions[0].ID != v1 || got.Versions[0].YAML != "" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if v, err := e.u.Client.GetWorkflowDefinitionVersion(ctx, ws, d.ID, v1); err != nil || v.YAML != v1YAML || v.Version != 1 {
		t.Fatalf("get v1: %+v %v", v, err)
	}
	// The alias spelling reads the same thing.
	alias := expect(t, do(t, e.s, "GET", "/api/workspaces/"+ws+"/workflow-definitions/"+d.ID, e.u.Token, nil), 200, "alias")
	if dataOf(alias)["latest_version_id"] != v2.ID {
		t.Fatalf("alias: %s", alias.Body)
	}
	other, _ := e.u.Client.CreateWorkflowDefinition(ctx, ws, sdk.WorkflowDefinitionCreateRequest{Name: "other", YAML: "agent: shell\nprompt: o\n"})
	expect(t, do(t, e.s, "GET", base+"/"+other.ID+"/versions/"+v1, e.u.Token, nil), 404, "a version under another definition")
	expect(t, do(t, e.s, "GET", base+"/01ARZ3NDEKTSV4RRFFQ69G5FAV", e.u.Token, nil), 404, "unknown definition")
	// Another workspace sees none of it.
	b := e.s.NewUser("b@example.com")
	expect(t, do(t, e.s, "GET", base+"/"+d.ID, b.Token, nil), 403, "stranger on the path")
	expect(t, do(t, e.s, "GET", "/api/resources/"+b.Workspace+"/workflow-definitions/"+d.ID, b.Token, nil), 404, "stranger in its own workspace")
	expect(t, do(t, e.s, "POST", "/api/resources/"+b.Workspace+"/workflow-definitions/"+d.ID+"/versions", b.Token, `{"yaml":"agent: shell"}`), 404, "stranger adding a version")
	expect(t, do(t, e.s, "POST", "/api/workflow-runs", b.Token, `{"workflow_definition_id":"`+d.ID+`"}`), 422, "stranger running it")
	expect(t, do(t, e.s, "GET", base, e.ex.Credential, nil), 403, "runner credential")

	// Preflight and runs resolve the definition.
	pf := "/api/resources/" + ws + "/workflow-runs/preflight"
	expect(t, do(t, e.s, "POST", pf, e.u.Token, `{"workflow_definition_id":"`+d.ID+`"}`), 200, "preflight by definition")
	for _, c := range []struct{ name, body, code string }{
		{"unknown definition", `{"workflow_definition_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}`, "workflow_definition_unknown"},
		{"integer id", `{"workflow_definition_id":7}`, "workflow_definition_unknown"},
		{"unknown version", `{"workflow_version_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}`, "workflow_version_unknown"},
		{"version of another definition", `{"workflow_definition_id":"` + other.ID + `","workflow_version_id":"` + v1 + `"}`, "workflow_version_mismatch"},
		{"stale digest", `{"workflow_definition_id":"` + d.ID + `","workflow_digest":"` + digestOf(v1YAML) + `"}`, "workflow_digest_mismatch"},
		{"other yaml", `{"workflow_definition_id":"` + d.ID + `","yaml_snapshot":"agent: shell\nprompt: z"}`, "definition_conflict"},
		{"unknown integration event", `{"workflow_definition_id":"` + d.ID + `","integration_event_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}`, "integration_event_unknown"},
		{"workflow route", `{"workflow_definition_id":"` + d.ID + `","workflow_route_id":3}`, "workflow_route_unknown"},
		{"execution profile", `{"workflow_definition_id":"` + d.ID + `","workflow_execution_profile_version_id":"p1"}`, "workflow_execution_profile_unknown"},
		{"inline digest", `{"yaml_snapshot":"agent: shell\nprompt: z","workflow_digest":"sha256:00"}`, "workflow_digest_mismatch"},
	} {
		a := expect(t, do(t, e.s, "POST", pf, e.u.Token, c.body), 422, c.name)
		if !strings.Contains(string(a.Body), `"code":"`+c.code+`"`) {
			t.Errorf("%s: %s", c.name, a.Body)
		}
		expect(t, do(t, e.s, "POST", "/api/workflow-runs", e.u.Token, strings.Replace(c.body, `:7}`, `:"7"}`, 1)), 422, "create: "+c.name)
	}
	if runs, _ := e.u.Client.ListWorkflowRuns(ctx, ws, ""); len(runs) != 0 {
		t.Fatalf("refused requests created runs: %+v", runs)
	}
	// By definition: the latest version. By version: that one, whatever
	// came since. The request's fields still override the YAML's.
	latest, err := e.u.Client.CreateWorkflowRun(ctx, ws, sdk.WorkflowRunCreateRequest{DefinitionID: d.ID, WorkflowDigest: digestOf(v2YAML)})
	if err != nil || latest.VersionID != v2.ID || latest.Digest != digestOf(v2YAML) || latest.Prompt != "run v2" || latest.Definition != v2YAML || latest.DefinitionID != d.ID {
		t.Fatalf("run by definition: %+v %v", latest, err)
	}
	pinned, err := e.u.Client.CreateWorkflowRun(ctx, ws, sdk.WorkflowRunCreateRequest{VersionID: v1, Model: "m-override"})
	if err != nil || pinned.VersionID != v1 || pinned.DefinitionID != d.ID || pinned.Prompt != "run v1" || pinned.Model != "m-override" || pinned.Digest != digestOf(v1YAML) {
		t.Fatalf("run by version: %+v %v", pinned, err)
	}
	inline, err := e.u.Client.CreateWorkflowRun(ctx, ws, sdk.WorkflowRunCreateRequest{YAMLSnapshot: "agent: shell\nprompt: inline\n"})
	if err != nil || inline.Digest != digestOf("agent: shell\nprompt: inline\n") || inline.VersionID != "" {
		t.Fatalf("inline run: %+v %v", inline, err)
	}
	// The worker gets the version's prompt; a rerun runs the same version
	// even after the definition moved on.
	l := e.claim(t, e.runner, 5)
	if l.RunID != latest.ID || l.Run.Prompt != "run v2" || l.Run.Digest != digestOf(v2YAML) {
		t.Fatalf("claimed: %+v", l.Run)
	}
	if _, err := e.runner.CompleteLease(ctx, l.ID, sdk.LeaseCompleteRequest{Fence: l.Fence, Status: sdk.RunSucceeded}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.u.Client.AddWorkflowDefinitionVersion(ctx, ws, d.ID, strings.Replace(v1YAML, "run v1", "run v3", 1)); err != nil {
		t.Fatal(err)
	}
	re := expect(t, do(t, e.s, "POST", "/api/workflow-runs/"+latest.ID+"/rerun", e.u.Token, nil), 201, "rerun")
	var rr sdk.WorkflowRun
	b2, _ := json.Marshal(dataOf(re))
	_ = json.Unmarshal(b2, &rr)
	if rr.VersionID != v2.ID || rr.Prompt != "run v2" || rr.Digest != digestOf(v2YAML) || rr.RerunOf != latest.ID {
		t.Fatalf("rerun: %s", re.Body)
	}
	// The run's history names what it ran.
	evs := expect(t, do(t, e.s, "POST", "/api/workflow-runs/"+pinned.ID+"/events", e.u.Token, `{}`), 200, "events")
	if !strings.Contains(string(evs.Body), `"workflow_version_id":"`+v1+`"`) || !strings.Contains(string(evs.Body), digestOf(v1YAML)) {
		t.Fatalf("history: %s", evs.Body)
	}
}

// TestWorkflowRunnerPools: a run naming a runner pool is claimed only by
// a worker polling for that pool; a pooled worker takes only its pool's
// runs.
func TestWorkflowRunnerPools(t *testing.T) {
	e := newWFEnv(t, servertest.Options{}, "linux")
	ctx := e.ctx
	gpu := e.queue(t, sdk.WorkflowRunCreateRequest{RunnerPool: "gpu"})
	fromYAML := e.queue(t, sdk.WorkflowRunCreateRequest{YAMLSnapshot: "agent: shell\nprompt: p\nrunner_pool: gpu\n"})
	if gpu.RunnerPool != "gpu" || fromYAML.RunnerPool != "gpu" {
		t.Fatalf("pools: %q %q", gpu.RunnerPool, fromYAML.RunnerPool)
	}
	expect(t, do(t, e.s, "POST", "/api/workflow-runs", e.u.Token, `{"agent":"shell","prompt":"x","runner_pool":"no spaces"}`), 422, "bad pool")
	// The default pool and another pool see nothing.
	for _, pool := range []string{"", "arm"} {
		if _, ok, err := e.runner.ClaimLease(ctx, sdk.WorkerClaimRequest{RunnerPool: pool, WaitSeconds: 0}); ok || err != nil {
			t.Fatalf("pool %q claimed a gpu run: %v %v", pool, ok, err)
		}
	}
	plain := e.queue(t, sdk.WorkflowRunCreateRequest{})
	if _, ok, err := e.runner.ClaimLease(ctx, sdk.WorkerClaimRequest{RunnerPool: "gpu", WaitSeconds: 0}); !ok || err != nil {
		t.Fatalf("gpu pool: %v %v", ok, err)
	}
	if l, ok, err := e.runner.ClaimLease(ctx, sdk.WorkerClaimRequest{RunnerPool: "gpu", WaitSeconds: 0}); !ok || err != nil || l.RunID != fromYAML.ID {
		t.Fatalf("gpu pool, second: %+v %v %v", l.RunID, ok, err)
	}
	if _, ok, _ := e.runner.ClaimLease(ctx, sdk.WorkerClaimRequest{RunnerPool: "gpu", WaitSeconds: 0}); ok {
		t.Fatal("the gpu pool took a run of the default pool")
	}
	if l, ok, err := e.runner.ClaimLease(ctx, sdk.WorkerClaimRequest{WaitSeconds: 0}); !ok || err != nil || l.RunID != plain.ID {
		t.Fatalf("default pool: %v %v", ok, err)
	}
	expect(t, do(t, e.s, "POST", "/api/runtime/worker/claim", e.ex.Credential, `{"runner_pool":"a b","wait_seconds":0}`), 422, "bad pool in a claim")
}

// TestRunAttemptKeepsItsSession: a run queued from a session stays linked
// to it (linked_session_id) when the worker reports its own daemon
// session, and a rerun is linked to the same session.
func TestRunAttemptKeepsItsSession(t *testing.T) {
	e := newWFEnv(t, servertest.Options{})
	ws := e.u.Workspace
	sess := expect(t, do(t, e.s, "POST", "/api/resources/"+ws+"/sessions", e.u.Token, `{"title":"fix","source_kind":"manual"}`), 201, "session")
	sid := dataOf(sess)["id"].(string)
	att, err := e.u.Client.QueueSessionRunAttempt(e.ctx, ws, sid, sdk.WorkflowRunCreateRequest{Agent: "shell", Prompt: "again"})
	if err != nil || att.SessionID != sid || att.LinkedSessionID != sid {
		t.Fatalf("attempt: %+v %v", att, err)
	}
	l := e.claim(t, e.runner, 5)
	if _, err := e.runner.ReportLeaseState(e.ctx, l.ID, sdk.LeaseStateRequest{Fence: l.Fence, State: sdk.RunRunning, SessionID: "daemon-sess-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.runner.CompleteLease(e.ctx, l.ID, sdk.LeaseCompleteRequest{Fence: l.Fence, Status: sdk.RunSucceeded, SessionID: "daemon-sess-1"}); err != nil {
		t.Fatal(err)
	}
	got, err := e.u.Client.GetWorkflowRun(e.ctx, ws, att.ID)
	if err != nil || got.SessionID != "daemon-sess-1" || got.LinkedSessionID != sid || got.SyncedSessionID != "" {
		t.Fatalf("after the worker: %+v %v", got, err)
	}
	re := expect(t, do(t, e.s, "POST", "/api/workflow-runs/"+att.ID+"/rerun", e.u.Token, nil), 201, "rerun")
	if d := dataOf(re); d["session_id"] != sid || d["linked_session_id"] != sid {
		t.Fatalf("rerun: %s", re.Body)
	}
}

// TestReadApprovalNode: the node a worker raised is readable where it is
// decided, by members of the run's workspace only.
func TestReadApprovalNode(t *testing.T) {
	e := newWFEnv(t, servertest.Options{})
	run := e.queue(t, sdk.WorkflowRunCreateRequest{})
	l := e.claim(t, e.runner, 5)
	if _, err := e.runner.RaiseLeaseApproval(e.ctx, l.ID, sdk.LeaseApprovalRequest{Fence: l.Fence, NodeKey: "perm-1", Tool: "Bash", Summary: "rm -rf build", Input: map[string]any{"command": "rm -rf build"}}); err != nil {
		t.Fatal(err)
	}
	p := "/api/workflow-runs/" + run.ID + "/approvals/perm-1"
	a := expect(t, do(t, e.s, "GET", p, e.u.Token, nil), 200, "read the node")
	if d := dataOf(a); d["state"] != "pending" || d["tool"] != "Bash" || d["summary"] != "rm -rf build" {
		t.Fatalf("%s", a.Body)
	}
	expect(t, do(t, e.s, "GET", "/api/workflow-runs/"+run.ID+"/approvals/nope", e.u.Token, nil), 404, "unknown node")
	b := e.s.NewUser("b@example.com")
	expect(t, do(t, e.s, "GET", p, b.Token, nil), 404, "another workspace's run")
	expect(t, do(t, e.s, "GET", p, e.ex.Credential, nil), 403, "runner credential")
	expect(t, do(t, e.s, "POST", p, e.u.Token, `{"decision":"approve"}`), 200, "decide")
	if d := dataOf(expect(t, do(t, e.s, "GET", p, e.u.Token, nil), 200, "read decided")); d["state"] != "approved" {
		t.Fatalf("%v", d)
	}
}

// TestDeleteWorkflowDefinition: a definition's creator or a workspace
// admin may delete it, another member may not (403), and nobody while a run that has not finished
// names it (409 naming the run); the delete is audited, a stranger's is
// 404 in their workspace and 403 in ours, and a finished run keeps its
// YAML after the definition is gone.
func TestDeleteWorkflowDefinition(t *testing.T) {
	e := newWFEnv(t, servertest.Options{}, "linux")
	ctx, ws := e.ctx, e.u.Workspace
	member := e.s.AddMember(ws, "member@example.com", sdk.RoleMember)
	base := "/api/resources/" + ws + "/workflow-definitions"
	yaml := "name: nightly\nagent: shell\nprompt: nightly run\ntags: [linux]\n"
	d, err := member.Client.CreateWorkflowDefinition(ctx, ws, sdk.WorkflowDefinitionCreateRequest{YAML: yaml})
	if err != nil {
		t.Fatal(err)
	}
	run, err := e.u.Client.CreateWorkflowRun(ctx, ws, sdk.WorkflowRunCreateRequest{DefinitionID: d.ID})
	if err != nil {
		t.Fatal(err)
	}
	b := e.s.NewUser("b@example.com")
	expect(t, do(t, e.s, "DELETE", base+"/"+d.ID, b.Token, nil), 403, "stranger on our path")
	expect(t, do(t, e.s, "DELETE", "/api/resources/"+b.Workspace+"/workflow-definitions/"+d.ID, b.Token, nil), 404, "stranger in their own workspace")
	expect(t, do(t, e.s, "DELETE", base+"/"+d.ID, e.ex.Credential, nil), 403, "runner credential")
	expect(t, do(t, e.s, "DELETE", base+"/01ARZ3NDEKTSV4RRFFQ69G5FAV", member.Token, nil), 404, "unknown definition")
	other := e.s.AddMember(ws, "other@example.com", sdk.RoleMember)
	refused := expect(t, do(t, e.s, "DELETE", base+"/"+d.ID, other.Token, nil), 403, "another member")
	if !strings.Contains(string(refused.Body), "creator") {
		t.Fatalf("403 body: %s", refused.Body)
	}
	busy := expect(t, do(t, e.s, "DELETE", base+"/"+d.ID, member.Token, nil), 409, "a queued run names it")
	if busy.errCode() != sdk.CodeConflict || !strings.Contains(string(busy.Body), run.ID) {
		t.Fatalf("409 body: %s", busy.Body)
	}
	if _, err := e.u.Client.GetWorkflowDefinition(ctx, ws, d.ID); err != nil {
		t.Fatalf("a refused delete removed the definition: %v", err)
	}
	// The run finishes; then the delete goes through, on the alias too.
	l := e.claim(t, e.runner, 5)
	if _, err := e.runner.CompleteLease(ctx, l.ID, sdk.LeaseCompleteRequest{Fence: l.Fence, Status: sdk.RunSucceeded}); err != nil {
		t.Fatal(err)
	}
	gone := expect(t, do(t, e.s, "DELETE", "/api/workspaces/"+ws+"/workflow-definitions/"+d.ID, member.Token, nil), 200, "delete")
	if g := dataOf(gone); g["id"] != d.ID || g["name"] != "nightly" || g["digest"] != digestOf(yaml) {
		t.Fatalf("deleted: %s", gone.Body)
	}
	expect(t, do(t, e.s, "GET", base+"/"+d.ID, member.Token, nil), 404, "read after delete")
	expect(t, do(t, e.s, "GET", base+"/"+d.ID+"/versions/"+d.LatestVersionID, member.Token, nil), 404, "version after delete")
	expect(t, do(t, e.s, "DELETE", base+"/"+d.ID, member.Token, nil), 404, "delete twice")
	if got, err := e.u.Client.GetWorkflowRun(ctx, ws, run.ID); err != nil || got.Definition != yaml || got.Digest != digestOf(yaml) {
		t.Fatalf("the finished run lost its YAML: %+v %v", got, err)
	}
	// A new run naming it is refused like any unknown definition.
	expect(t, do(t, e.s, "POST", "/api/workflow-runs", e.u.Token, `{"workflow_definition_id":"`+d.ID+`"}`), 422, "run a deleted definition")
	audit := expect(t, do(t, e.s, "GET", "/api/workspaces/"+ws+"/audit?limit=500", e.u.Token, nil), 200, "audit")
	if !strings.Contains(string(audit.Body), `"workflow_definition.delete"`) || !strings.Contains(string(audit.Body), "workflow-definitions/"+d.ID) {
		t.Fatalf("the delete is not audited: %s", audit.Body)
	}
	// The name is free again. A workspace admin deletes a member's
	// definition; another member still may not.
	again, err := member.Client.CreateWorkflowDefinition(ctx, ws, sdk.WorkflowDefinitionCreateRequest{YAML: yaml})
	if err != nil {
		t.Fatalf("create the name again: %v", err)
	}
	expect(t, do(t, e.s, "DELETE", base+"/"+again.ID, other.Token, nil), 403, "another member, again")
	admin := e.s.AddMember(ws, "admin@example.com", sdk.RoleAdmin)
	expect(t, do(t, e.s, "DELETE", base+"/"+again.ID, admin.Token, nil), 200, "an admin deletes a member's definition")
}
