package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store/storetest"
)

const benchClients = 64

// benchRun issues b.N requests from 64 clients, spread over the replicas'
// URLs, and reports req/s and the p99 latency.
func benchRun(b *testing.B, urls []string, newReq func(base string, i int64) *http.Request, want ...int) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 4 * benchClients, MaxIdleConnsPerHost: 2 * benchClients, IdleConnTimeout: time.Minute}}
	b.SetParallelism((benchClients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var mu sync.Mutex
	var lat []time.Duration
	var n, firsts atomic.Int64
	// Warm up every replica's pools and caches with the benchmark's own
	// concurrency, so cold connections are not what is measured.
	var wg sync.WaitGroup
	for w := 0; w < 2*benchClients*len(urls); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := n.Add(1)
			if res, err := hc.Do(newReq(urls[int(i)%len(urls)], i)); err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
	}
	wg.Wait()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		local := make([]time.Duration, 0, 1024)
		for pb.Next() {
			i := n.Add(1)
			t0 := time.Now()
			res, err := hc.Do(newReq(urls[int(i)%len(urls)], i))
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == want[0] {
				firsts.Add(1)
			}
			if !slices.Contains(want, res.StatusCode) {
				b.Errorf("status %d", res.StatusCode)
				return
			}
			local = append(local, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
	if len(want) > 1 {
		// Only the first wanted status counts as done (201: a ledger record).
		b.ReportMetric(float64(firsts.Load())/elapsed.Seconds(), fmt.Sprintf("%d/s", want[0]))
	}
	b.ReportMetric(0, "ns/op")
}

// benchSetup starts the configurations compared side by side: SQLite (one
// server), PostgreSQL with one replica and with two.
func benchSetups() []struct {
	name     string
	replicas int
	pg       bool
} {
	return []struct {
		name     string
		replicas int
		pg       bool
	}{{"sqlite", 1, false}, {"postgres-1-replica", 1, true}, {"postgres-2-replicas", 2, true}}
}

func startSetup(b *testing.B, replicas int, pg bool) []*servertest.Server {
	dir := filepath.Join(b.TempDir(), "data")
	o := servertest.Options{DataDir: dir}
	if pg {
		o.DatabaseURL = storetest.PostgresURL(b)
	}
	var out []*servertest.Server
	for i := 0; i < replicas; i++ {
		out = append(out, servertest.Start(b, o))
	}
	return out
}

func urlsOf(ss []*servertest.Server) []string {
	var u []string
	for _, s := range ss {
		u = append(u, s.URL)
	}
	return u
}

// BenchmarkEngines: authenticated GETs, durable creates and gateway ledger
// records under a hard cap, per second with 64 clients, on SQLite and on
// PostgreSQL with one and two replicas, in one run.
func BenchmarkEngines(b *testing.B) {
	for _, setup := range benchSetups() {
		b.Run("GET/"+setup.name, func(b *testing.B) {
			ss := startSetup(b, setup.replicas, setup.pg)
			u := ss[0].NewUser("bench@example.com")
			benchRun(b, urlsOf(ss), func(base string, _ int64) *http.Request {
				r, _ := http.NewRequest("GET", base+"/api/workspaces/"+u.Workspace, nil)
				r.Header.Set("Authorization", "Bearer "+u.Token)
				return r
			}, 200)
		})
	}
	for _, setup := range benchSetups() {
		b.Run("create/"+setup.name, func(b *testing.B) {
			ss := startSetup(b, setup.replicas, setup.pg)
			u := ss[0].NewUser("writer@example.com")
			// An install (a machine): its row with its hashed token and
			// the audit entry, committed before the 201.
			benchRun(b, urlsOf(ss), func(base string, i int64) *http.Request {
				r, _ := http.NewRequest("POST", base+"/api/workspaces/"+u.Workspace+"/installs", strings.NewReader(fmt.Sprintf(`{"name":"bench %d"}`, i)))
				r.Header.Set("Authorization", "Bearer "+u.Token)
				r.Header.Set("Content-Type", "application/json")
				return r
			}, 201)
		})
	}
	for _, setup := range benchSetups() {
		b.Run("ledger-under-cap/"+setup.name, func(b *testing.B) {
			ss := startSetup(b, setup.replicas, setup.pg)
			u := ss[0].NewUser("ledger@example.com")
			ctx := context.Background()
			in, err := u.Client.CreateInstall(ctx, u.Workspace, "gw")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := u.Client.UpdateWorkspace(ctx, u.Workspace, sdk.WorkspaceUpdateRequest{BudgetPolicy: json.RawMessage(`{"hard_cap_usd":"1000000000"}`)}); err != nil {
				b.Fatal(err)
			}
			path := "/api/runtime/internal/gateway/workspaces/" + u.Workspace + "/usage"
			run := fmt.Sprint(time.Now().UnixNano())
			benchRun(b, urlsOf(ss), func(base string, i int64) *http.Request {
				r, _ := http.NewRequest("POST", base+path, strings.NewReader(usageBody(fmt.Sprintf("%s-%d", run, i), "0.01")))
				r.Header.Set("Authorization", "Bearer "+in.IssueToken)
				r.Header.Set("Content-Type", "application/json")
				return r
			}, 201, 429)
		})
	}
}
