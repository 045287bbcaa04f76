package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkLedger: ledger records per second with the hard cap enforced
// (every record is admitted against its period's cap in the transaction
// that appends it), on one contended workspace and spread over 100, on
// SQLite and PostgreSQL side by side. The baseline in the same run is a
// plain record-engine insert (no admission, no period totals) on the same
// engine.
//
//	go test ./server/store -run '^$' -bench BenchmarkLedger -benchtime 2000x
func BenchmarkLedger(b *testing.B) {
	for _, eng := range []string{EngineSQLite, EnginePostgres} {
		for _, spread := range []int{1, 100} {
			for _, kind := range []string{"ledger", "baseline-insert"} {
				b.Run(fmt.Sprintf("%s/%s/workspaces=%d", eng, kind, spread), func(b *testing.B) {
					e := sqliteEngine(b)
					if eng == EnginePostgres {
						e = postgresEngine(b)
					}
					s := e.open(b)
					ctx := context.Background()
					wss := make([]string, spread)
					for i := range wss {
						wss[i] = fmt.Sprintf("01BENCH%019d", i)
						now := time.Now()
						u, _, err := s.EnsureUser(ctx, fmt.Sprintf("b%d@example.com", i))
						if err != nil {
							b.Fatal(err)
						}
						if err := s.CreateWorkspace(ctx, Workspace{ID: wss[i], Name: "b", PolicyMode: "open_access", BudgetPolicy: json.RawMessage(`{"hard_cap_usd":"1000000"}`), CreatedAt: now, UpdatedAt: now}, u.ID); err != nil {
							b.Fatal(err)
						}
					}
					var n atomic.Int64
					run := time.Now().UnixNano()
					b.SetParallelism(8) // 8×GOMAXPROCS writers
					b.ResetTimer()
					start := time.Now()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							i := n.Add(1)
							ws := wss[int(i)%spread]
							key := fmt.Sprintf("%d-%d", run, i)
							var err error
							if kind == "ledger" {
								_, err = s.RecordUsage(ctx, &LedgerEntry{WorkspaceID: ws, IdempotencyKey: key, BodyHash: key, Cost: 1000, Attributes: json.RawMessage(`{}`), CreatedBy: "bench", CreatedAt: time.Now()}, AuditEntry{})
							} else {
								now := time.Now()
								err = s.CreateRecord(ctx, &Record{WorkspaceID: ws, Collection: "bench", NaturalKey: key, Attributes: json.RawMessage(`{}`), CreatedBy: "bench", CreatedAt: now, UpdatedAt: now}, AuditEntry{})
							}
							if err != nil {
								b.Error(err)
								return
							}
						}
					})
					b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "records/s")
				})
			}
		}
	}
}
