package store

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A shared bucket counts every take once, however many take at once
// (PostgreSQL: from two stores, as two replicas would), refills with
// time, and a look takes nothing.
func TestTakeBucket(t *testing.T) { eachEngine(t, testTakeBucket) }

func testTakeBucket(t *testing.T, e engine) {
	ctx := context.Background()
	a := e.open(t)
	b := a
	if e.name == EnginePostgres {
		b = e.open(t)
	}
	now := time.Unix(1_800_000_000, 0)
	if got, err := a.TakeBucket(ctx, "fails", "1.2.3.4", 1.0/60, 10, 0, now); err != nil || got != 10 {
		t.Fatalf("look at a new bucket: %v %v", got, err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			st := a
			if i%2 == 1 {
				st = b
			}
			if _, err := st.TakeBucket(ctx, "fails", "1.2.3.4", 1.0/60, 10, 1, now); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if got, _ := b.TakeBucket(ctx, "fails", "1.2.3.4", 1.0/60, 10, 0, now); got != 0 {
		t.Fatalf("after 40 takes of a 10 bucket: %v", got)
	}
	if got, _ := a.TakeBucket(ctx, "fails", "5.6.7.8", 1.0/60, 10, 0, now); got != 10 {
		t.Fatalf("another key: %v", got)
	}
	if got, _ := a.TakeBucket(ctx, "other", "1.2.3.4", 1.0/60, 10, 0, now); got != 10 {
		t.Fatalf("another name: %v", got)
	}
	// Three minutes refill three tokens; taking one leaves two.
	later := now.Add(3 * time.Minute)
	if got, err := a.TakeBucket(ctx, "fails", "1.2.3.4", 1.0/60, 10, 1, later); err != nil || got < 2.99 || got > 3.01 {
		t.Fatalf("after 3 minutes: %v %v", got, err)
	}
	if got, _ := a.TakeBucket(ctx, "fails", "1.2.3.4", 1.0/60, 10, 0, later); got < 1.99 || got > 2.01 {
		t.Fatalf("after a take: %v", got)
	}
	// A refund gives a token back, never above the burst.
	if _, err := a.TakeBucket(ctx, "fails", "1.2.3.4", 1.0/60, 10, -1, later); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.TakeBucket(ctx, "fails", "1.2.3.4", 1.0/60, 10, 0, later); got < 2.99 || got > 3.01 {
		t.Fatalf("after a refund: %v", got)
	}
	if _, err := a.TakeBucket(ctx, "fails", "9.9.9.9", 1.0/60, 10, -5, later); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.TakeBucket(ctx, "fails", "9.9.9.9", 1.0/60, 10, 0, later); got != 10 {
		t.Fatalf("refund above the burst: %v", got)
	}
	if n, err := a.PruneBuckets(ctx, later.Add(time.Second)); err != nil || n != 2 {
		t.Fatalf("prune: %d %v", n, err)
	}
	if got, _ := a.TakeBucket(ctx, "fails", "1.2.3.4", 1.0/60, 10, 0, later); got != 10 {
		t.Fatalf("a pruned bucket is full again: %v", got)
	}
}
