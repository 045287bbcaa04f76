package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reeve.dev/reeve/server/host"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/webhooks"
	"reeve.dev/reeve/server/webhooksig"
)

// BenchmarkInboundDeliveries: signed code-host deliveries through the
// whole ingestion path (throttle counter, size limit, signature, JSON,
// dedupe, event record, routing against a synced routes file), 64
// clients, SQLite; beside it, in the same run, GET /api/health (a database
// ping, no auth) and a replayed delivery (verified, then deduplicated).
func BenchmarkInboundDeliveries(b *testing.B) {
	s := servertest.Start(b, servertest.Options{WebhookRate: 1 << 30})
	u := s.NewUser("bench@example.com")
	const secret = "bench-code-host-secret-000"
	a := do(b, s, "POST", "/api/integration-webhooks", u.Token, map[string]any{"direction": "inbound", "provider": "code-host", "secret": secret}, "X-Reeve-Workspace", u.Workspace)
	if a.Status != 201 {
		b.Fatalf("source: %s", a.Body)
	}
	body := []byte(`{"action":"created","issue":{"number":1,"title":"t","body":"b","labels":[{"name":"docs"}]},"comment":{"body":"looks good"},"repository":{"full_name":"o/r"}}`)
	sig := webhooksig.SignCodeHost([]byte(secret), body)
	url := s.URL + "/api/webhooks/code-host/events?workspace=" + u.Workspace
	post := func(delivery string) *http.Request {
		r, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Hub-Signature-256", sig)
		r.Header.Set("X-GitHub-Delivery", delivery)
		r.Header.Set("X-GitHub-Event", "issue_comment")
		return r
	}
	b.Run("health", func(b *testing.B) {
		runParallel(b, func() *http.Request { r, _ := http.NewRequest("GET", s.URL+"/api/health", nil); return r }, 200)
	})
	var n atomic.Int64
	b.Run("verified", func(b *testing.B) {
		runParallel(b, func() *http.Request { return post(fmt.Sprintf("bench-%d", n.Add(1))) }, 201)
	})
	b.Run("replay", func(b *testing.B) {
		runParallel(b, func() *http.Request { return post("bench-1") }, 200)
	})
}

// fastReceiver answers every POST 204 and counts them.
func fastReceiver(b *testing.B) (*httptest.Server, *atomic.Int64) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	return srv, &got
}

// BenchmarkOutboundDeliveries: messages already in the outbox delivered to
// a fast loopback receiver by the dispatcher (claim, sign, POST, record the
// attempt), against the same number of signed POSTs sent straight to the
// receiver by as many goroutines as the dispatcher runs (8).
func BenchmarkOutboundDeliveries(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		srv, _ := fastReceiver(b)
		key, _ := webhooksig.ParseStandardSecret(webhooksig.NewStandardSecret())
		payload := []byte(`{"type":"webhook.ping","timestamp":"2026-11-24T00:00:00Z","data":{}}`)
		hc := benchHTTPClient()
		var next atomic.Int64
		b.ResetTimer()
		start := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(b.N) {
					id := fmt.Sprintf("msg_%d", next.Load())
					ts, sig := webhooksig.SignStandard(id, time.Now(), payload, key)
					r, _ := http.NewRequest("POST", srv.URL, bytes.NewReader(payload))
					r.Header.Set(webhooksig.HeaderID, id)
					r.Header.Set(webhooksig.HeaderTimestamp, ts)
					r.Header.Set(webhooksig.HeaderSignature, sig)
					resp, err := hc.Do(r)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
	})
	b.Run("dispatcher", func(b *testing.B) {
		srv, got := fastReceiver(b)
		o := servertest.Options{Webhooks: webhooks.Options{Targets: webhooks.TargetPolicy{AllowPrivate: true}, Poll: 5 * time.Millisecond}}
		s := servertest.Start(b, o)
		u := s.NewUser("bench@example.com")
		a := do(b, s, "POST", "/api/integration-webhooks", u.Token, map[string]any{"url": srv.URL, "events": []string{"*"}}, "X-Reeve-Workspace", u.Workspace)
		if a.Status != 201 {
			b.Fatalf("endpoint: %s", a.Body)
		}
		ep := dataOf(a)["id"].(string)
		// Fill the outbox while no dispatcher runs, then time the drain
		// from a fresh start on the same data directory.
		s.Stop()
		st, err := host.OpenStore(context.Background(), host.Options{DataDir: s.DataDir})
		if err != nil {
			b.Fatal(err)
		}
		in := st.(store.Integrations)
		var wg sync.WaitGroup
		var next atomic.Int64
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
					if _, err := in.EnqueueWebhook(context.Background(), u.Workspace, ep, store.OutboundEvent{Kind: "webhook.ping", Data: map[string]any{"i": i}}, time.Now()); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		st.Close()
		o.DataDir = s.DataDir
		b.ResetTimer()
		start := time.Now()
		servertest.Start(b, o)
		deadline := time.Now().Add(5 * time.Minute)
		for got.Load() < int64(b.N) && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
		b.StopTimer()
		if got.Load() < int64(b.N) {
			b.Fatalf("delivered %d of %d", got.Load(), b.N)
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
	})
}

// BenchmarkOutboxLatency: what writing the outbox in the transaction adds
// to the request that causes an event. POST .../installs (a machine
// registered: an install row and its audit entry) with no endpoint, and
// with two endpoints subscribed to install.paired (two outbox rows in the
// same transaction), 64 clients, p99 of each in the same run.
func BenchmarkOutboxLatency(b *testing.B) {
	srv, _ := fastReceiver(b)
	s := servertest.Start(b, servertest.Options{Webhooks: webhooks.Options{Targets: webhooks.TargetPolicy{AllowPrivate: true}}})
	u := s.NewUser("bench@example.com")
	other := s.NewUser("bench2@example.com")
	for i := 0; i < 2; i++ {
		if a := do(b, s, "POST", "/api/integration-webhooks", other.Token, map[string]any{"url": srv.URL, "events": []string{"install.paired"}}, "X-Reeve-Workspace", other.Workspace); a.Status != 201 {
			b.Fatalf("endpoint: %s", a.Body)
		}
	}
	req := func(ws, tok string) func() *http.Request {
		return func() *http.Request {
			r, _ := http.NewRequest("POST", s.URL+"/api/workspaces/"+ws+"/installs", strings.NewReader(`{"name":"m"}`))
			r.Header.Set("Authorization", "Bearer "+tok)
			r.Header.Set("Content-Type", "application/json")
			return r
		}
	}
	b.Run("no-endpoint", func(b *testing.B) { runParallel(b, req(u.Workspace, u.Token), 201) })
	b.Run("two-endpoints", func(b *testing.B) { runParallel(b, req(other.Workspace, other.Token), 201) })
}
