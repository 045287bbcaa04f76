package store

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"
)

func webhookFixture(t *testing.T, s *DB) (ws string, now time.Time) {
	t.Helper()
	ctx := context.Background()
	now = time.Now().UTC().Truncate(time.Millisecond)
	u, _, err := s.EnsureUser(ctx, "owner@example.com")
	if err != nil {
		t.Fatal(err)
	}
	ws = newID()
	if err := s.CreateWorkspace(ctx, Workspace{ID: ws, Name: "w", PolicyMode: "open_access", CreatedAt: now, UpdatedAt: now}, u.ID); err != nil {
		t.Fatal(err)
	}
	return ws, now
}

func addEndpoint(t *testing.T, s *DB, ws string, attrs map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(attrs)
	r := Record{WorkspaceID: ws, Collection: WebhookEndpointCollection, Attributes: b, CreatedBy: "user:1", CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := s.CreateRecord(context.Background(), &r, AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// An audited change that names events writes one message per subscribed
// endpoint in its own transaction; a change that fails writes none.
func TestWebhookEmitInTheChangesTransaction(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s := e.open(t)
		ctx := context.Background()
		ws, now := webhookFixture(t, s)
		all := addEndpoint(t, s, ws, map[string]any{"events": []string{"*"}})
		installs := addEndpoint(t, s, ws, map[string]any{"events": []string{"install.paired"}})
		off := addEndpoint(t, s, ws, map[string]any{"events": []string{"*"}, "disabled": true})
		in := Install{ID: newID(), WorkspaceID: ws, Name: "m", TokenHash: "h1", CreatedBy: "user:1", CreatedAt: now}
		audit := AuditEntry{WorkspaceID: ws, Actor: "user:1", Action: "install.create", Target: in.ID, CreatedAt: now,
			Emit: []OutboundEvent{{Kind: "install.paired", Data: map[string]any{"install_id": in.ID}}}}
		if err := s.CreateInstall(ctx, in, audit); err != nil {
			t.Fatal(err)
		}
		// The same token hash again fails the insert: its message must not exist.
		dup := Install{ID: newID(), WorkspaceID: ws, Name: "m2", TokenHash: "h1", CreatedBy: "user:1", CreatedAt: now}
		if err := s.CreateInstall(ctx, dup, AuditEntry{WorkspaceID: ws, Action: "install.create", Emit: []OutboundEvent{{Kind: "install.paired", Data: dup.ID}}}); err == nil {
			t.Fatal("duplicate token hash accepted")
		}
		for ep, want := range map[string]int{all: 1, installs: 1, off: 0} {
			ms, err := s.WebhookMessages(ctx, ws, ep, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != want {
				t.Fatalf("endpoint %s has %d messages, want %d", ep, len(ms), want)
			}
			if want == 1 {
				var env struct {
					Type string         `json:"type"`
					Data map[string]any `json:"data"`
				}
				if err := json.Unmarshal(ms[0].Payload, &env); err != nil || env.Type != "install.paired" || env.Data["install_id"] != in.ID {
					t.Fatalf("payload %s (%v)", ms[0].Payload, err)
				}
			}
		}
	})
}

// Concurrent dispatchers never both hold a message; an attempt on a lost
// lease is refused; retry, dead-letter and re-queue move the state.
func TestWebhookClaimAndFinish(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s := e.open(t)
		ctx := context.Background()
		ws, now := webhookFixture(t, s)
		ep := addEndpoint(t, s, ws, map[string]any{"events": []string{"*"}})
		const n = 40
		for i := 0; i < n; i++ {
			if _, err := s.EnqueueWebhook(ctx, ws, ep, OutboundEvent{Kind: "ping", Data: i}, now); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		seen := map[string]string{}
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(owner string) {
				defer wg.Done()
				for {
					got, err := s.ClaimWebhooks(ctx, owner, now, time.Minute, 3)
					if err != nil {
						t.Error(err)
						return
					}
					if len(got) == 0 {
						return
					}
					mu.Lock()
					for _, m := range got {
						if prev, dup := seen[m.ID]; dup {
							t.Errorf("message %s claimed by %s and %s", m.ID, prev, owner)
						}
						seen[m.ID] = owner
					}
					mu.Unlock()
				}
			}(string(rune('a' + w)))
		}
		wg.Wait()
		if len(seen) != n {
			t.Fatalf("claimed %d of %d", len(seen), n)
		}
		ms, err := s.WebhookMessages(ctx, ws, ep, 1)
		if err != nil {
			t.Fatal(err)
		}
		m := ms[0]
		owner := seen[m.ID]
		att := WebhookAttempt{MessageID: m.ID, WorkspaceID: ws, EndpointID: ep, Kind: m.Kind, Attempt: 1, StatusCode: 500, Latency: 12 * time.Millisecond, Outcome: "retry", Error: "HTTP 500", AttemptedAt: now}
		if err := s.FinishWebhookAttempt(ctx, "someone-else", att, now.Add(time.Second)); !errors.Is(err, ErrConflict) {
			t.Fatalf("finish on a lease not held: %v", err)
		}
		if err := s.FinishWebhookAttempt(ctx, owner, att, now.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		// Not due yet, then due; the lease of the others still holds.
		if got, _ := s.ClaimWebhooks(ctx, "x", now, time.Minute, 100); len(got) != 0 {
			t.Fatalf("claimed %d before due", len(got))
		}
		got, err := s.ClaimWebhooks(ctx, "x", now.Add(time.Second), time.Minute, 100)
		if err != nil || len(got) != 1 || got[0].ID != m.ID || got[0].Attempts != 1 {
			t.Fatalf("claim after due: %v, %d claimed", err, len(got))
		}
		att.Attempt, att.Outcome = 2, WebhookDead
		if err := s.FinishWebhookAttempt(ctx, "x", att, now); err != nil {
			t.Fatal(err)
		}
		// Leases expire: the 39 others are claimable after the minute.
		if got, _ := s.ClaimWebhooks(ctx, "y", now.Add(2*time.Minute), time.Hour, 100); len(got) != n-1 {
			t.Fatalf("after lease expiry claimed %d, want %d", len(got), n-1)
		}
		atts, err := s.WebhookAttempts(ctx, ws, ep, ListOptions{})
		if err != nil || len(atts) != 2 || atts[0].StatusCode != 500 || atts[0].Latency != 12*time.Millisecond || atts[1].Outcome != WebhookDead {
			t.Fatalf("attempts %v %+v", err, atts)
		}
		if n, err := s.RetryDeadWebhooks(ctx, ws, ep, now.Add(3*time.Minute)); err != nil || n != 1 {
			t.Fatalf("retry dead: %d %v", n, err)
		}
		if got, _ := s.ClaimWebhooks(ctx, "z", now.Add(3*time.Minute), time.Minute, 100); len(got) != 1 || got[0].ID != m.ID {
			t.Fatalf("re-queued message not claimable: %d claimed", len(got))
		}
	})
}

// The throttle counts per workspace, source and window, across concurrent
// requests, and forgets old windows.
func TestThrottleHit(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s := e.open(t)
		ctx := context.Background()
		w0 := time.Unix(1_800_000_000, 0)
		var wg sync.WaitGroup
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.ThrottleHit(ctx, "ws", "chat", w0); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if n, err := s.ThrottleHit(ctx, "ws", "chat", w0); err != nil || n != 51 {
			t.Fatalf("hits %d %v, want 51", n, err)
		}
		if n, _ := s.ThrottleHit(ctx, "ws", "tracker", w0); n != 1 {
			t.Fatalf("other source %d", n)
		}
		if n, _ := s.ThrottleHit(ctx, "ws", "chat", w0.Add(time.Minute)); n != 1 {
			t.Fatalf("next window %d", n)
		}
		var rows int
		if err := s.read.QueryRow(`SELECT count(*) FROM webhook_throttle WHERE source = 'chat'`).Scan(&rows); err != nil || rows != 1 {
			t.Fatalf("old windows kept: %d %v", rows, err)
		}
	})
}

// A ledger entry that steps over the warn fraction or the cap emits
// budget.threshold_crossed in its own transaction; 100 racing entries
// cross each threshold exactly once.
func TestBudgetThresholdCrossed(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s := e.open(t)
		ctx := context.Background()
		ws := "01BUDGETTHRESHOLD0000000WS"
		ledgerWorkspace(t, s, ws, `{"hard_cap_usd":"10.00","warn_at_fraction":0.8}`)
		ep := addEndpoint(t, s, ws, map[string]any{"events": []string{"budget.threshold_crossed"}})
		var wg sync.WaitGroup
		for i := range 120 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// $0.10 each: the 80th crosses $8, the 100th reaches $10,
				// the rest are refused by the cap.
				_, err := s.RecordUsage(ctx, usageEntry(ws, "k"+strconv.Itoa(i), 100_000_000), AuditEntry{})
				if err != nil && !errors.Is(err, ErrHardCap) {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		ms, err := s.WebhookMessages(ctx, ws, ep, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := map[float64]int{}
		for _, m := range ms {
			var env struct {
				Data struct {
					Threshold float64 `json:"threshold"`
					Spent     string  `json:"spent_usd"`
				} `json:"data"`
			}
			if err := json.Unmarshal(m.Payload, &env); err != nil {
				t.Fatal(err)
			}
			got[env.Data.Threshold]++
		}
		if len(ms) != 2 || got[0.8] != 1 || got[1] != 1 {
			t.Fatalf("threshold events: %v (%d messages)", got, len(ms))
		}
	})
}
