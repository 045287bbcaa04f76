package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Many workspaces created at once for one owner all succeed: creating one
// guards no invariant that concurrent creations could break, so none of
// them may fail as a lost serialization race.
func TestConcurrentWorkspaceCreation(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s := e.open(t)
		ctx := context.Background()
		u, _, err := s.EnsureUser(ctx, "owner@example.com")
		if err != nil {
			t.Fatal(err)
		}
		const writers, each = 32, 8
		var failed atomic.Int64
		var first atomic.Value
		var wg sync.WaitGroup
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < each; i++ {
					now := time.Now()
					err := s.CreateWorkspace(ctx, Workspace{ID: fmt.Sprintf("w%d-%d", w, i), Name: "w", PolicyMode: "open_access", CreatedAt: now, UpdatedAt: now}, u.ID)
					if err != nil {
						failed.Add(1)
						first.CompareAndSwap(nil, err)
					}
				}
			}(w)
		}
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Fatalf("%d of %d creations failed; first: %v", n, writers*each, first.Load())
		}
		ms, err := s.Memberships(ctx, u.ID)
		if err != nil || len(ms) != writers*each {
			t.Fatalf("memberships: %d, %v", len(ms), err)
		}
	})
}
