package store

import (
	"errors"
	"fmt"
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
