package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// BenchmarkDeleteDefinitionCheck: the look for unfinished runs naming a
// definition that a delete makes, over a workspace history of 50,000
// finished runs and 100 unfinished ones (one naming it), with the
// statuses listed (what DeleteWorkflowDefinition runs) and, in the same
// run, as "NOT IN" the finished ones (the baseline, which reads the
// history).
//
//	go test ./server/store -run XXX -bench DeleteDefinitionCheck -benchtime 200x
func BenchmarkDeleteDefinitionCheck(b *testing.B) {
	for _, e := range []func(testing.TB) engine{sqliteEngine, postgresEngine} {
		s := e(b).open(b)
		seedRunHistory(b, s, 50_000, 100)
		ctx := context.Background()
		now := time.Now().UTC()
		def := newID()
		r := WorkflowRun{ID: newID(), WorkspaceID: "ws", Status: "queued", Agent: "shell", Tags: []string{}, MaxAttempts: 1,
			Spec: json.RawMessage(`{"workflow_definition_id":"` + def + `"}`), CreatedBy: "user:1", CreatedAt: now, UpdatedAt: now}
		// Written directly: CreateRun would want the definition to exist.
		if err := s.execSimple(ctx, func(tx *Tx) error {
			_, err := tx.Exec(`INSERT INTO workflow_runs (id, workspace_id, status, spec, created_by, created_at, updated_at) VALUES (?,?,?,?,?,?,?)`,
				r.ID, r.WorkspaceID, r.Status, string(r.Spec), r.CreatedBy, ts(now), ts(now))
			return err
		}); err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct{ name, predicate string }{
			{"listed", unfinishedRuns},
			{"not-in-finished", `status NOT IN ('succeeded', 'failed', 'cancelled')`},
		} {
			b.Run(s.Engine()+"/"+c.name, func(b *testing.B) {
				for b.Loop() {
					var got []string
					if err := s.execSimple(ctx, func(tx *Tx) (err error) {
						got, err = runsNaming(tx, c.predicate, "ws", def)
						return err
					}); err != nil || len(got) != 1 || got[0] != r.ID {
						b.Fatalf("%v %v", got, err)
					}
				}
			})
		}
	}
}
