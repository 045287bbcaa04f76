package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// The support operator role on both engines: grant is idempotent (also
// when 50 grants race), revoke of a non-holder is ErrNotFound, list joins
// the user's email.
func TestSupportOperators(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s := e.open(t)
		u, _, err := s.EnsureUser(ctx, "op@support.example")
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := s.IsSupportOperator(ctx, u.ID); err != nil || ok {
			t.Fatalf("before grant: %v %v", ok, err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		added := 0
		for range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := s.GrantSupportOperator(ctx, u.ID, "operator", time.Now())
				if err != nil {
					t.Errorf("grant: %v", err)
				}
				if ok {
					mu.Lock()
					added++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if added != 1 {
			t.Fatalf("%d racing grants reported adding the role, want 1", added)
		}
		if ok, err := s.IsSupportOperator(ctx, u.ID); err != nil || !ok {
			t.Fatalf("after grant: %v %v", ok, err)
		}
		ops, err := s.ListSupportOperators(ctx)
		if err != nil || len(ops) != 1 || ops[0].Email != "op@support.example" || ops[0].GrantedBy != "operator" || ops[0].GrantedAt.IsZero() {
			t.Fatalf("list: %+v %v", ops, err)
		}
		if err := s.RevokeSupportOperator(ctx, u.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeSupportOperator(ctx, u.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("revoke twice: %v", err)
		}
		if ok, _ := s.IsSupportOperator(ctx, u.ID); ok {
			t.Fatal("still an operator after revoke")
		}
		if ops, err := s.ListSupportOperators(ctx); err != nil || len(ops) != 0 {
			t.Fatalf("list after revoke: %+v %v", ops, err)
		}
	})
}
