package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestWorkflowDefinitions(t *testing.T) { eachEngine(t, testWorkflowDefinitions) }

func testWorkflowDefinitions(t *testing.T, e engine) {
	s := e.open(t)
	f := newWFFix(t, s)
	other := newWFFix(t, s)
	ver := func(yaml string) WorkflowDefinitionVersion {
		return WorkflowDefinitionVersion{ID: newID(), YAML: yaml, Digest: "sha256:" + yaml, CreatedBy: "user:1", CreatedAt: f.now}
	}
	d := WorkflowDefinition{ID: newID(), WorkspaceID: f.ws, Name: "fix-flaky", Description: "d", CreatedBy: "user:1", CreatedAt: f.now, UpdatedAt: f.now}
	v1 := ver("a")
	if err := s.CreateWorkflowDefinition(f.ctx, &d, &v1, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if d.LatestVersion != 1 || v1.Version != 1 || v1.DefinitionID != d.ID || v1.WorkspaceID != f.ws {
		t.Fatalf("created: %+v %+v", d, v1)
	}
	// A name is unique within a workspace, not across workspaces.
	dup := WorkflowDefinition{ID: newID(), WorkspaceID: f.ws, Name: "fix-flaky", CreatedBy: "user:1", CreatedAt: f.now, UpdatedAt: f.now}
	dv := ver("b")
	if err := s.CreateWorkflowDefinition(f.ctx, &dup, &dv, AuditEntry{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("duplicate name: %v", err)
	}
	if _, err := s.WorkflowDefinitionVersion(f.ctx, f.ws, dv.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused definition's version was written: %v", err)
	}
	od := WorkflowDefinition{ID: newID(), WorkspaceID: other.ws, Name: "fix-flaky", CreatedBy: "user:2", CreatedAt: f.now, UpdatedAt: f.now}
	ov := ver("a")
	if err := s.CreateWorkflowDefinition(f.ctx, &od, &ov, AuditEntry{}); err != nil {
		t.Fatalf("same name in another workspace: %v", err)
	}
	// Versions number on; the same YAML again is the latest version.
	v2, created, err := s.AddWorkflowDefinitionVersion(f.ctx, f.ws, d.ID, ver("b"), AuditEntry{})
	if err != nil || !created || v2.Version != 2 {
		t.Fatalf("v2: %+v %v %v", v2, created, err)
	}
	again, created, err := s.AddWorkflowDefinitionVersion(f.ctx, f.ws, d.ID, ver("b"), AuditEntry{})
	if err != nil || created || again.ID != v2.ID {
		t.Fatalf("same yaml again: %+v %v %v", again, created, err)
	}
	// Concurrent additions each get their own number.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for try := 0; ; try++ {
				_, _, err := s.AddWorkflowDefinitionVersion(f.ctx, f.ws, d.ID, ver(fmt.Sprint("c", i)), AuditEntry{})
				if errors.Is(err, ErrUnavailable) && try < 20 {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				errs <- err
				return
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	vs, err := s.WorkflowDefinitionVersions(f.ctx, f.ws, d.ID)
	if err != nil || len(vs) != 10 {
		t.Fatalf("versions: %d %v", len(vs), err)
	}
	for i, v := range vs {
		if v.Version != int64(i+1) {
			t.Fatalf("version %d numbered %d", i+1, v.Version)
		}
	}
	got, err := s.WorkflowDefinition(f.ctx, f.ws, d.ID)
	if err != nil || got.LatestVersion != 10 || got.Name != "fix-flaky" || got.Description != "d" {
		t.Fatalf("definition: %+v %v", got, err)
	}
	latest, err := s.LatestWorkflowDefinitionVersion(f.ctx, f.ws, d.ID)
	if err != nil || latest.Version != 10 || latest.ID != vs[9].ID {
		t.Fatalf("latest: %+v %v", latest, err)
	}
	if v, err := s.WorkflowDefinitionVersion(f.ctx, f.ws, v1.ID); err != nil || v.YAML != "a" || v.Digest != "sha256:a" || v.Version != 1 {
		t.Fatalf("v1: %+v %v", v, err)
	}
	// Nothing crosses workspaces.
	if _, err := s.WorkflowDefinition(f.ctx, other.ws, d.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("definition from another workspace: %v", err)
	}
	if _, err := s.WorkflowDefinitionVersion(f.ctx, other.ws, v1.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("version from another workspace: %v", err)
	}
	if _, err := s.LatestWorkflowDefinitionVersion(f.ctx, other.ws, d.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("latest from another workspace: %v", err)
	}
	if _, _, err := s.AddWorkflowDefinitionVersion(f.ctx, other.ws, d.ID, ver("x"), AuditEntry{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("add to another workspace's definition: %v", err)
	}
	if list, err := s.WorkflowDefinitions(f.ctx, f.ws); err != nil || len(list) != 1 || list[0].ID != d.ID {
		t.Fatalf("list: %+v %v", list, err)
	}
}

// TestWorkflowRunnerPools: a run naming a pool goes only to that pool's
// claimers, and a pooled claimer takes only its pool's runs.
func TestWorkflowRunnerPools(t *testing.T) { eachEngine(t, testWorkflowRunnerPools) }

func testWorkflowRunnerPools(t *testing.T, e engine) {
	s := e.open(t)
	f := newWFFix(t, s)
	gpu := f.run(t, func(r *WorkflowRun) { r.RunnerPool = "gpu" })
	plain := f.run(t, nil)
	if _, err := s.ClaimRun(f.ctx, ClaimFilter{WorkspaceID: f.ws, ExecutorID: "E1", RunnerPool: "arm"}, f.grant(time.Minute)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another pool claimed: %v", err)
	}
	r, err := s.ClaimRun(f.ctx, ClaimFilter{WorkspaceID: f.ws, ExecutorID: "E1"}, f.grant(time.Minute))
	if err != nil || r.ID != plain.ID {
		t.Fatalf("the default pool took %s (%v), want %s", r.ID, err, plain.ID)
	}
	r, err = s.ClaimRun(f.ctx, ClaimFilter{WorkspaceID: f.ws, ExecutorID: "E1", RunnerPool: "gpu"}, f.grant(time.Minute))
	if err != nil || r.ID != gpu.ID || r.RunnerPool != "gpu" {
		t.Fatalf("the gpu pool took %+v (%v)", r, err)
	}
	if ws, err := s.RunWorkspace(f.ctx, gpu.ID); err != nil || ws != f.ws {
		t.Fatalf("run workspace: %q %v", ws, err)
	}
	if _, err := s.RunWorkspace(f.ctx, newID()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown run's workspace: %v", err)
	}
}

// TestDeleteWorkflowDefinition: a definition goes with its versions, but
// not while a run that has not finished names it; another workspace's
// definition is not found; a run cannot be written naming a deleted one;
// and a delete racing run creation never leaves an unfinished run naming
// a deleted definition.
func TestDeleteWorkflowDefinition(t *testing.T) { eachEngine(t, testDeleteWorkflowDefinition) }

func testDeleteWorkflowDefinition(t *testing.T, e engine) {
	s := e.open(t)
	f := newWFFix(t, s)
	other := newWFFix(t, s)
	define := func(ws, name string) (WorkflowDefinition, WorkflowDefinitionVersion) {
		t.Helper()
		d := WorkflowDefinition{ID: newID(), WorkspaceID: ws, Name: name, CreatedBy: "user:1", CreatedAt: f.now, UpdatedAt: f.now}
		v := WorkflowDefinitionVersion{ID: newID(), YAML: name, Digest: "sha256:" + name, CreatedBy: "user:1", CreatedAt: f.now}
		if err := s.CreateWorkflowDefinition(f.ctx, &d, &v, AuditEntry{}); err != nil {
			t.Fatal(err)
		}
		return d, v
	}
	naming := func(d WorkflowDefinition) func(*WorkflowRun) {
		return func(r *WorkflowRun) {
			r.Spec = json.RawMessage(`{"prompt":"p","workflow_definition_id":"` + d.ID + `"}`)
		}
	}
	d, v1 := define(f.ws, "nightly")
	if _, _, err := s.AddWorkflowDefinitionVersion(f.ctx, f.ws, d.ID, WorkflowDefinitionVersion{ID: newID(), YAML: "b", Digest: "sha256:b", CreatedBy: "user:1", CreatedAt: f.now}, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	od, _ := define(other.ws, "nightly")
	if _, err := s.DeleteWorkflowDefinition(f.ctx, other.ws, d.ID, AuditEntry{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete from another workspace: %v", err)
	}
	if _, err := s.DeleteWorkflowDefinition(f.ctx, f.ws, newID(), AuditEntry{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete an unknown definition: %v", err)
	}

	// A queued run and a draft hold it; a run whose prompt merely quotes
	// the id does not. Each refusal names the runs and changes nothing.
	queued := f.run(t, naming(d))
	draft := f.run(t, func(r *WorkflowRun) { naming(d)(r); r.Status = "draft" })
	f.run(t, func(r *WorkflowRun) { r.Spec = json.RawMessage(`{"prompt":"see ` + d.ID + `"}`) })
	_, err := s.DeleteWorkflowDefinition(f.ctx, f.ws, d.ID, AuditEntry{})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), queued.ID) || !strings.Contains(err.Error(), draft.ID) {
		t.Fatalf("delete under unfinished runs: %v", err)
	}
	if vs, err := s.WorkflowDefinitionVersions(f.ctx, f.ws, d.ID); err != nil || len(vs) != 2 {
		t.Fatalf("a refused delete removed versions: %d %v", len(vs), err)
	}
	for _, id := range []string{queued.ID, draft.ID} {
		if _, err := s.UpdateRun(f.ctx, f.ws, id, func(r *WorkflowRun) ([]RunEvent, error) {
			r.Status, r.FinishedAt = "cancelled", &f.now
			return nil, nil
		}, AuditEntry{}); err != nil {
			t.Fatal(err)
		}
	}
	audit := AuditEntry{ID: newID(), WorkspaceID: f.ws, Actor: "user:1", Action: "workflow_definition.delete", Target: "workflow-definitions/" + d.ID, Detail: json.RawMessage(`{}`), CreatedAt: f.now}
	got, err := s.DeleteWorkflowDefinition(f.ctx, f.ws, d.ID, audit)
	if err != nil || got.ID != d.ID || got.Name != "nightly" || got.LatestVersion != 2 {
		t.Fatalf("delete once the runs finished: %+v %v", got, err)
	}
	if _, err := s.WorkflowDefinition(f.ctx, f.ws, d.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted definition still read: %v", err)
	}
	if _, err := s.WorkflowDefinitionVersion(f.ctx, f.ws, v1.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted definition's version still read: %v", err)
	}
	if _, err := s.DeleteWorkflowDefinition(f.ctx, f.ws, d.ID, AuditEntry{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if _, err := s.WorkflowDefinition(f.ctx, other.ws, od.ID); err != nil {
		t.Fatalf("the other workspace's definition of the same name went too: %v", err)
	}
	// The name is free again.
	define(f.ws, "nightly")
	// A run naming the deleted definition is not written.
	r := WorkflowRun{ID: newID(), WorkspaceID: f.ws, Status: "queued", Agent: "shell", Tags: []string{}, MaxAttempts: 1, CreatedBy: "user:1", CreatedAt: f.now, UpdatedAt: f.now}
	naming(d)(&r)
	if err := s.CreateRun(f.ctx, &r, nil, AuditEntry{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a run naming a deleted definition: %v", err)
	}
	if _, err := s.Run(f.ctx, f.ws, r.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused run was written: %v", err)
	}

	// The race: runs are created while the definition is deleted. Either
	// the delete is refused (a run came first) or every run after it is
	// refused; never a deleted definition with an unfinished run.
	for round := range 5 {
		rd, _ := define(f.ws, fmt.Sprint("race-", round))
		var wg sync.WaitGroup
		var delErr error
		created := make(chan string, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := WorkflowRun{ID: newID(), WorkspaceID: f.ws, Status: "queued", Agent: "shell", Tags: []string{}, MaxAttempts: 1, CreatedBy: "user:1", CreatedAt: f.now, UpdatedAt: f.now}
				naming(rd)(&r)
				for try := 0; ; try++ {
					err := s.CreateRun(f.ctx, &r, nil, AuditEntry{})
					if errors.Is(err, ErrUnavailable) && try < 20 {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					if err == nil {
						created <- r.ID
					} else if !errors.Is(err, ErrNotFound) {
						t.Errorf("create run: %v", err)
					}
					return
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for try := 0; ; try++ {
				_, delErr = s.DeleteWorkflowDefinition(f.ctx, f.ws, rd.ID, AuditEntry{})
				if errors.Is(delErr, ErrUnavailable) && try < 20 {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				return
			}
		}()
		wg.Wait()
		close(created)
		n := len(created)
		_, gone := s.WorkflowDefinition(f.ctx, f.ws, rd.ID)
		switch {
		case delErr == nil && n > 0:
			// Runs written before the delete would have refused it; so
			// these came after it, and must not exist.
			t.Fatalf("round %d: the definition was deleted and %d unfinished runs name it", round, n)
		case delErr == nil && !errors.Is(gone, ErrNotFound):
			t.Fatalf("round %d: the delete answered nil but the definition is there: %v", round, gone)
		case delErr != nil && (!errors.Is(delErr, ErrConflict) || n == 0 || gone != nil):
			t.Fatalf("round %d: delete %v with %d runs, definition read %v", round, delErr, n, gone)
		}
	}
}
