package store

import (
	"context"
	"testing"
	"time"
)

func TestPruneAuditKeepsTheRetentionWindow(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s := e.open(t)
		ctx := context.Background()
		now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
		u, _, err := s.EnsureUser(ctx, "p@example.com")
		if err != nil {
			t.Fatal(err)
		}
		days := int64(10)
		for _, id := range []string{"W1", "W2"} {
			ws := Workspace{ID: id, Name: id, PolicyMode: "open_access", CreatedAt: now, UpdatedAt: now}
			if id == "W1" {
				ws.AuditRetentionDays = &days
			}
			if err := s.CreateWorkspace(ctx, ws, u.ID); err != nil {
				t.Fatal(err)
			}
			// Ages straddle the cutoff, with and without fractions of a
			// second (stored timestamps have no fixed width).
			for i, age := range []time.Duration{11 * 24 * time.Hour, 10*24*time.Hour + time.Second + 500*time.Millisecond, 10*24*time.Hour - time.Second, time.Hour} {
				if err := s.AppendAudit(ctx, AuditEntry{ID: id + "-" + string(rune('a'+i)), WorkspaceID: id, Actor: "t", Action: "t", Target: "t", CreatedAt: now.Add(-age)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		n, err := s.PruneAudit(ctx, now)
		if err != nil || n != 2 {
			t.Fatalf("pruned %d, %v; want 2", n, err)
		}
		for id, want := range map[string]int{"W1": 2, "W2": 4} {
			es, err := s.Audit(ctx, id, ListOptions{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			for _, e := range es {
				if e.Actor == "t" {
					got++
				}
			}
			if got != want {
				t.Fatalf("%s keeps %d entries, want %d", id, got, want)
			}
		}
	})
}
