package api_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// Benchmarks of the worker runtime (figures in docs/workers.md).

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func benchEnv(b *testing.B) *wfEnv {
	b.Helper()
	s := servertest.Start(b, servertest.Options{})
	u := s.NewUser("bench@example.com")
	ctx := context.Background()
	ex, err := u.Client.CreateManagedExecutor(ctx, u.Workspace, sdk.ManagedExecutorCreateRequest{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return &wfEnv{s: s, u: u, ex: ex, runner: s.Client(ex.Credential), ctx: ctx}
}

func benchQueue(b *testing.B, e *wfEnv) sdk.WorkflowRun {
	r, err := e.u.Client.CreateWorkflowRun(e.ctx, e.u.Workspace, sdk.WorkflowRunCreateRequest{Agent: "shell", Prompt: "true"})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkClaimWhilePolling: 50 workers long-poll; a run is queued; how
// long until one of them holds it (p50/p99). The baseline, in the same
// run, is a claim of a run queued before the request (no waiting).
func BenchmarkClaimWhilePolling(b *testing.B) {
	e := benchEnv(b)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	got := make(chan time.Time, 64)
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := e.s.Client(e.ex.Credential)
			for ctx.Err() == nil {
				l, ok, err := c.ClaimLease(ctx, sdk.WorkerClaimRequest{WaitSeconds: 20})
				if err != nil || !ok {
					continue
				}
				got <- time.Now()
				_, _ = c.CompleteLease(context.Background(), l.ID, sdk.LeaseCompleteRequest{Fence: l.Fence, Status: sdk.RunSucceeded})
			}
		}()
	}
	time.Sleep(time.Second) // the pollers are waiting
	var polled, direct []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		benchQueue(b, e)
		polled = append(polled, (<-got).Sub(start))
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	// Baseline: the run is queued first, then one claim request.
	for i := 0; i < max(b.N, 20); i++ {
		benchQueue(b, e)
		start := time.Now()
		l, ok, err := e.runner.ClaimLease(e.ctx, sdk.WorkerClaimRequest{WaitSeconds: 0})
		if err != nil || !ok {
			b.Fatalf("direct claim: %v %v", ok, err)
		}
		direct = append(direct, time.Since(start))
		_, _ = e.runner.CompleteLease(e.ctx, l.ID, sdk.LeaseCompleteRequest{Fence: l.Fence, Status: sdk.RunSucceeded})
	}
	b.ReportMetric(float64(percentile(polled, 0.5).Microseconds()), "p50-µs")
	b.ReportMetric(float64(percentile(polled, 0.99).Microseconds()), "p99-µs")
	b.ReportMetric(float64(percentile(direct, 0.5).Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(percentile(direct, 0.99).Microseconds()), "direct-p99-µs")
}

// BenchmarkLeasesPerSecond: 16 workers claim and complete queued runs as
// fast as they can. The baseline is how fast the same server creates
// runs (the queueing side), measured in the same benchmark.
func BenchmarkLeasesPerSecond(b *testing.B) {
	e := benchEnv(b)
	n := max(b.N, 200)
	start := time.Now()
	for i := 0; i < n; i++ {
		benchQueue(b, e)
	}
	createRate := float64(n) / time.Since(start).Seconds()
	b.ResetTimer()
	start = time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := e.s.Client(e.ex.Credential)
			for {
				l, ok, err := c.ClaimLease(e.ctx, sdk.WorkerClaimRequest{WaitSeconds: 0})
				if err != nil {
					b.Error(err)
					return
				}
				if !ok {
					return
				}
				if _, err := c.CompleteLease(e.ctx, l.ID, sdk.LeaseCompleteRequest{Fence: l.Fence, Status: sdk.RunSucceeded}); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				done++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	if done != n {
		b.Fatalf("%d leases for %d runs", done, n)
	}
	b.ReportMetric(float64(done)/el.Seconds(), "leases/s")
	b.ReportMetric(createRate, "creates/s")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIdlePollers: 1,000 simulated workers (raw connections that
// send one claim with wait_seconds 60 and read nothing) long-poll an
// empty queue. Reported: the process's CPU per second and heap per
// worker, against the same server with no pollers (the baseline) over
// the same window. The server runs in this process; the simulated
// clients are bare sockets, so their own cost is a file descriptor.
func BenchmarkIdlePollers(b *testing.B) {
	const workers = 1000
	window := 10 * time.Second
	e := benchEnv(b)
	u, _ := url.Parse(e.s.URL)
	measure := func() (cpuPerSec float64, heap uint64, goroutines int) {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		c0 := cpuTime()
		time.Sleep(window)
		return float64(cpuTime()-c0) / float64(time.Millisecond) / window.Seconds(), m.HeapInuse, runtime.NumGoroutine()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		baseCPU, baseHeap, baseG := measure()
		body := `{"wait_seconds":60}`
		req := fmt.Sprintf("POST /api/runtime/worker/claim HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", u.Host, e.ex.Credential, len(body), body)
		conns := make([]net.Conn, 0, workers)
		for w := 0; w < workers; w++ {
			c, err := net.Dial("tcp", u.Host)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Write([]byte(req)); err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
		}
		time.Sleep(2 * time.Second) // every claim is parked
		cpu, heap, g := measure()
		for _, c := range conns {
			c.Close()
		}
		b.ReportMetric(baseCPU, "base-cpu-ms/s")
		b.ReportMetric(cpu, "cpu-ms/s")
		b.ReportMetric((cpu-baseCPU)/workers*1000, "cpu-µs/s/worker")
		b.ReportMetric(float64(int64(heap)-int64(baseHeap))/workers, "heap-B/worker")
		b.ReportMetric(float64(g-baseG)/workers, "goroutines/worker")
	}
}
