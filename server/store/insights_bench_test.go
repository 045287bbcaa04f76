package store

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkInsightSignals: what one detection run reads of a workspace
// (the permission decisions, their audit entries, the sessions and the
// failed runs of the last 7 days) when it holds a long history: 40,000
// synced events and their audit entries older than the window, 400 in it.
// The baseline in the same run reads one page of 100 records.
//
//	go test ./server/store -run '^$' -bench BenchmarkInsightSignals
func BenchmarkInsightSignals(b *testing.B) {
	for _, eng := range []string{EngineSQLite, EnginePostgres} {
		b.Run(eng, func(b *testing.B) {
			e := sqliteEngine(b)
			if eng == EnginePostgres {
				e = postgresEngine(b)
			}
			s := e.open(b)
			ctx := context.Background()
			now := time.Now().UTC()
			seed := func(n int, at time.Time) {
				err := s.exec(ctx, func(tx *Tx) error {
					for i := range n {
						sid := fmt.Sprintf("S%03d", i%200)
						kind := "agent-message"
						if i%10 == 0 {
							kind = "permission-decision"
						}
						attrs := fmt.Sprintf(`{"data":{"decision":"deny","tool":"Bash"},"kind":%q,"seq":%d}`, kind, i)
						if _, err := tx.Exec(`INSERT INTO records (id, workspace_id, collection, natural_key, attributes, created_by, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?)`,
							newID(), "wsB", "sessions/"+sid+"/events", fmt.Sprint(at.UnixNano(), "-", i), attrs, "bench", ts(at), ts(at)); err != nil {
							return err
						}
						if _, err := tx.Exec(sqlInsertAudit, newID(), "wsB", "bench", "session."+kind, "sessions/"+sid, fmt.Sprintf(`{"seq":%d}`, i), ts(at)); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			for r := range 4 {
				seed(10000, now.Add(-time.Duration(30+r)*24*time.Hour))
			}
			seed(400, now.Add(-time.Hour))
			since := now.Add(-7 * 24 * time.Hour)
			b.Run("detection-reads", func(b *testing.B) {
				for b.Loop() {
					recs, err := s.PermissionDecisions(ctx, "wsB", since, 2000)
					if err != nil || len(recs) != 40 {
						b.Fatalf("%d decisions, %v", len(recs), err)
					}
					if _, err := s.PermissionDecisionAudit(ctx, "wsB", since, 2000); err != nil {
						b.Fatal(err)
					}
					if _, err := s.SessionsUpdatedSince(ctx, "wsB", since, 2000); err != nil {
						b.Fatal(err)
					}
					if _, err := s.FailedRunsSince(ctx, "wsB", since, 2000); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("baseline-page-of-100", func(b *testing.B) {
				for b.Loop() {
					if _, err := s.Records(ctx, "wsB", "sessions/S001/events", ListOptions{Limit: 100}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
