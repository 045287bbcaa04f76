package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkBacklog: the queries of one /metrics scrape over a run history
// of 50,000 finished runs and 100 unfinished ones, with the partial index
// of the unfinished runs (migration 0013) and, in the same run, without it
// (the baseline: the count then reads the history).
//
//	go test ./server/store -run XXX -bench Backlog -benchtime 200x
func BenchmarkBacklog(b *testing.B) {
	for _, e := range []func(testing.TB) engine{sqliteEngine, postgresEngine} {
		s := e(b).open(b)
		seedRunHistory(b, s, 50_000, 100)
		ctx := context.Background()
		for _, indexed := range []bool{true, false} {
			name := s.Engine() + "/indexed"
			if !indexed {
				name = s.Engine() + "/no-index"
				if err := s.execSimple(ctx, func(tx *Tx) error {
					_, err := tx.Exec(`DROP INDEX workflow_runs_unfinished`)
					return err
				}); err != nil {
					b.Fatal(err)
				}
				if s.engine == EnginePostgres {
					if _, err := s.read.ExecContext(ctx, `ANALYZE workflow_runs`); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					bl, err := s.Backlog(ctx, time.Now())
					if err != nil || bl.Runs["queued"] != 100 {
						b.Fatalf("%v %v", bl.Runs, err)
					}
				}
			})
		}
	}
}

// seedRunHistory writes finished runs and queued ones into one workspace,
// many to a statement.
func seedRunHistory(b *testing.B, s *DB, finished, queued int) {
	b.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	const perStatement = 500
	err := s.execSimple(ctx, func(tx *Tx) error {
		for done := 0; done < finished+queued; {
			n := min(perStatement, finished+queued-done)
			var args []any
			for i := range n {
				status := []string{"succeeded", "failed", "cancelled"}[(done+i)%3]
				if done+i >= finished {
					status = "queued"
				}
				args = append(args, fmt.Sprintf("run-%07d", done+i), "ws", status, "user:1", now, now)
			}
			q := `INSERT INTO workflow_runs (id, workspace_id, status, created_by, created_at, updated_at) VALUES (?,?,?,?,?,?)` + strings.Repeat(`,(?,?,?,?,?,?)`, n-1)
			if _, err := tx.Exec(q, args...); err != nil {
				return err
			}
			done += n
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if s.engine == EnginePostgres {
		if _, err := s.read.ExecContext(ctx, `ANALYZE workflow_runs`); err != nil {
			b.Fatal(err)
		}
	}
}
