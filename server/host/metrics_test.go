package host_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"reeve.dev/reeve/server/host"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store/storetest"
)

// families is one scrape, parsed by the Prometheus library's own text
// parser.
type families map[string]*dto.MetricFamily

func scrape(t *testing.T, url, token string) (int, families) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return res.StatusCode, nil
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("content type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("/metrics is not the Prometheus text format: %v", err)
	}
	return res.StatusCode, fams
}

// value is the sample of family name whose labels include want: a
// counter's or gauge's value, a histogram's count. ok is false when the
// family or the sample is missing.
func (f families) value(name string, want map[string]string) (v float64, ok bool) {
	fam := f[name]
next:
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch fam.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func (f families) must(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	v, ok := f.value(name, want)
	if !ok {
		t.Fatalf("no sample of %s with labels %v", name, want)
	}
	return v
}

// /metrics counts requests by route, times them, reports the relay, the
// pool, and the shared database's runs and leases, on either engine: a
// claimed lease shows in the lease gauge and leaves it when released.
func TestMetrics(t *testing.T) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			o := servertest.Options{DataDir: filepath.Join(t.TempDir(), "data")}
			if engine == "postgres" {
				o.DatabaseURL = storetest.PostgresURL(t)
			}
			s := servertest.Start(t, o)
			u := s.NewUser("m@example.com")
			ctx := context.Background()
			for i := 0; i < 3; i++ {
				if a := get(t, s.URL, "/api/workspaces/"+u.Workspace, u.Token); a.status != 200 {
					t.Fatalf("get: %d", a.status)
				}
			}
			get(t, s.URL, "/api/workspaces/"+u.Workspace, "nope")
			code, fams := scrape(t, s.URL, "")
			if code != 200 {
				t.Fatalf("scrape: %d", code)
			}
			route := "GET /api/workspaces/{workspace}"
			if n := fams.must(t, "reeve_http_requests_total", map[string]string{"route": route, "method": "GET", "code": "200"}); n != 3 {
				t.Fatalf("requests 200 on %s: %v", route, n)
			}
			if n := fams.must(t, "reeve_http_requests_total", map[string]string{"route": route, "code": "401"}); n != 1 {
				t.Fatalf("requests 401: %v", n)
			}
			if n := fams.must(t, "reeve_http_request_duration_seconds", map[string]string{"route": route, "method": "GET"}); n != 4 {
				t.Fatalf("latency samples: %v", n)
			}
			// One more request is one more on its route's counter.
			get(t, s.URL, "/api/workspaces/"+u.Workspace, u.Token)
			if _, again := scrape(t, s.URL, ""); again.must(t, "reeve_http_requests_total", map[string]string{"route": route, "code": "200"}) != 4 {
				t.Fatalf("a fourth request was not counted")
			}
			fams.must(t, "reeve_db_connections_open", map[string]string{"engine": engine})
			fams.must(t, "reeve_db_write_queue", map[string]string{"engine": engine})
			for _, role := range []string{"daemon", "client"} {
				fams.must(t, "reeve_relay_connections", map[string]string{"role": role})
			}
			fams.must(t, "reeve_relay_info", map[string]string{"instance_id": s.Host.Relay().InstanceID()})
			fams.must(t, "reeve_relay_disconnects_total", map[string]string{"reason": "slow"})
			// The client library's runtime and process collectors.
			for _, name := range []string{"go_goroutines", "go_info", "go_memstats_heap_alloc_bytes", "process_start_time_seconds", "process_resident_memory_bytes", "process_open_fds"} {
				if fams[name] == nil {
					t.Errorf("no %s", name)
				}
			}
			// The backlog: every state present, and the help of every
			// shared figure says not to sum it across replicas.
			if up := fams.must(t, "reeve_backlog_up", map[string]string{"engine": engine}); up != 1 {
				t.Fatalf("backlog up %v", up)
			}
			for _, st := range []string{"draft", "queued", "blocked", "leased", "running", "waiting-approval"} {
				if n := fams.must(t, "reeve_workflow_runs", map[string]string{"engine": engine, "status": st}); n != 0 {
					t.Fatalf("%s runs before any: %v", st, n)
				}
			}
			for _, st := range []string{"due", "scheduled", "delivering", "dead"} {
				fams.must(t, "reeve_webhook_outbox_messages", map[string]string{"engine": engine, "state": st})
			}
			for _, name := range []string{"reeve_workflow_runs", "reeve_workflow_leases", "reeve_webhook_outbox_messages", "reeve_webhook_outbox_oldest_due_seconds", "reeve_relay_bus_backlog_messages", "reeve_relay_bus_backlog_oldest_seconds"} {
				if !strings.Contains(fams[name].GetHelp(), "max, not sum") {
					t.Errorf("the help of %s does not say replicas share it: %q", name, fams[name].GetHelp())
				}
			}

			// A queued run, then claimed, then released.
			ex, err := u.Client.CreateManagedExecutor(ctx, u.Workspace, sdk.ManagedExecutorCreateRequest{Name: "ci", Agents: []string{"shell"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := u.Client.CreateWorkflowRun(ctx, u.Workspace, sdk.WorkflowRunCreateRequest{Agent: "shell", Prompt: "make test"}); err != nil {
				t.Fatal(err)
			}
			runsAndLeases := func() (queued, leased, live float64) {
				t.Helper()
				_, f := scrape(t, s.URL, "")
				return f.must(t, "reeve_workflow_runs", map[string]string{"status": "queued"}),
					f.must(t, "reeve_workflow_runs", map[string]string{"status": "leased"}),
					f.must(t, "reeve_workflow_leases", map[string]string{"engine": engine, "state": "live"})
			}
			if q, l, live := runsAndLeases(); q != 1 || l != 0 || live != 0 {
				t.Fatalf("queued: %v queued, %v leased, %v live leases", q, l, live)
			}
			runner := s.Client(ex.Credential)
			lease, ok, err := runner.ClaimLease(ctx, sdk.WorkerClaimRequest{Agents: []string{"shell"}, WaitSeconds: 0})
			if err != nil || !ok {
				t.Fatalf("claim: %v %v", ok, err)
			}
			if q, l, live := runsAndLeases(); q != 0 || l != 1 || live != 1 {
				t.Fatalf("claimed: %v queued, %v leased, %v live leases", q, l, live)
			}
			if _, err := runner.ReleaseLease(ctx, lease.ID, sdk.LeaseReleaseRequest{Fence: lease.Fence, Reason: "no such directory"}); err != nil {
				t.Fatal(err)
			}
			if q, l, live := runsAndLeases(); q != 1 || l != 0 || live != 0 {
				t.Fatalf("released: %v queued, %v leased, %v live leases", q, l, live)
			}

			if engine != "postgres" {
				return
			}
			// The database gone: the scrape still answers, with the backlog
			// marked down and this process's figures.
			restore := storetest.CutOff(t, o.DatabaseURL)
			defer restore()
			code, fams = scrape(t, s.URL, "")
			if code != 200 {
				t.Fatalf("scrape with the database cut off: %d", code)
			}
			if up := fams.must(t, "reeve_backlog_up", nil); up != 0 {
				t.Fatalf("backlog up with the database cut off: %v", up)
			}
			if fams["reeve_workflow_runs"] != nil {
				t.Fatalf("run counts without a database")
			}
			fams.must(t, "reeve_http_requests_total", map[string]string{"route": route})
		})
	}
}

// With a metrics token set, /metrics wants it.
func TestMetricsToken(t *testing.T) {
	t.Setenv(host.EnvMetricsToken, "s3cret-metrics")
	s := servertest.Start(t, servertest.Options{})
	if code, _ := scrape(t, s.URL, ""); code != 401 {
		t.Fatalf("without the token: %d", code)
	}
	if code, _ := scrape(t, s.URL, "wrong-metrics!"); code != 401 {
		t.Fatalf("with a wrong token: %d", code)
	}
	code, fams := scrape(t, s.URL, "s3cret-metrics")
	if code != 200 || fams["reeve_http_requests_total"] == nil {
		t.Fatalf("with the token: %d", code)
	}
}

// Two replicas on one database: the backlog is the database's, so both
// report the same figures, while request counts are each replica's own.
func TestMetricsAcrossReplicas(t *testing.T) {
	a, b := twoReplicas(t)
	u := a.NewUser("r@example.com")
	ctx := context.Background()
	ex, err := u.Client.CreateManagedExecutor(ctx, u.Workspace, sdk.ManagedExecutorCreateRequest{Name: "ci", Agents: []string{"shell"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := u.Client.CreateWorkflowRun(ctx, u.Workspace, sdk.WorkflowRunCreateRequest{Agent: "shell", Prompt: "make test"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := b.Client(ex.Credential).ClaimLease(ctx, sdk.WorkerClaimRequest{Agents: []string{"shell"}}); err != nil || !ok {
		t.Fatalf("claim on replica b: %v %v", ok, err)
	}
	create, claim := map[string]string{"route": "POST /api/workflow-runs", "code": "201"}, map[string]string{"route": "POST /api/runtime/worker/claim"}
	for name, s := range map[string]*servertest.Server{"a": a, "b": b} {
		_, fams := scrape(t, s.URL, "")
		if q, l, live := fams.must(t, "reeve_workflow_runs", map[string]string{"status": "queued"}), fams.must(t, "reeve_workflow_runs", map[string]string{"status": "leased"}), fams.must(t, "reeve_workflow_leases", map[string]string{"state": "live"}); q != 1 || l != 1 || live != 1 {
			t.Fatalf("replica %s: %v queued, %v leased, %v live leases; want 1, 1, 1", name, q, l, live)
		}
		created, _ := fams.value("reeve_http_requests_total", create)
		claimed, _ := fams.value("reeve_http_requests_total", claim)
		if want := map[string][2]float64{"a": {2, 0}, "b": {0, 1}}[name]; created != want[0] || claimed != want[1] {
			t.Fatalf("replica %s counted %v run creations and %v claims, want %v", name, created, claimed, want)
		}
	}
}

// A client chooses the method and the path of its requests, not the
// label values: forty made-up methods on forty made-up paths add one
// series, not forty.
func TestMetricsLabelsBounded(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	_, before := scrape(t, s.URL, "")
	for i := range 40 {
		req, _ := http.NewRequest(fmt.Sprintf("BREW%d", i), fmt.Sprintf("%s/no/such/path/%d", s.URL, i), nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	_, after := scrape(t, s.URL, "")
	added := len(after["reeve_http_requests_total"].GetMetric()) - len(before["reeve_http_requests_total"].GetMetric())
	// The scrape before is one more series (GET /metrics 200) at most.
	if added > 2 {
		t.Fatalf("made-up requests added %d series", added)
	}
	var other float64
	for _, m := range after["reeve_http_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "method" && strings.HasPrefix(l.GetValue(), "BREW") {
				t.Fatalf("a made-up method became a label value: %v", m)
			}
			if l.GetName() == "method" && l.GetValue() == "other" {
				other += m.GetCounter().GetValue()
			}
		}
	}
	if other != 40 {
		t.Fatalf("%v requests counted under method other, want 40", other)
	}
}

// Scrapes while the database is slow (a table lock holds the backlog
// query): those arriving together share one gathering, so one query;
// beyond four at once they are refused with 503, not queued; when the
// database answers, the waiting ones are served.
func TestMetricsScrapeFlood(t *testing.T) {
	pg := storetest.PostgresURL(t)
	s := servertest.Start(t, servertest.Options{DataDir: filepath.Join(t.TempDir(), "data"), DatabaseURL: pg})
	db, err := sql.Open("pgx", pg)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `LOCK TABLE workflow_runs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	const scrapes = 6
	codes := make(chan int, scrapes)
	for range scrapes {
		go func() {
			res, err := http.Get(s.URL + "/metrics")
			if err != nil {
				t.Error(err)
				codes <- 0
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			codes <- res.StatusCode
		}()
	}
	// Four hold the slots while the lock holds the query: the other two
	// are refused at once.
	for range scrapes - 4 {
		if c := <-codes; c != http.StatusServiceUnavailable {
			t.Fatalf("a scrape beyond four got %d, want 503", c)
		}
	}
	waiting := func() (n int) {
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'SELECT status, count(*)%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(3 * time.Second)
	for waiting() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // time for uncoalesced scrapes to queue queries of their own
	if n := waiting(); n != 1 {
		t.Fatalf("%d backlog queries wait for the lock, want the one the four scrapes share", n)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if c := <-codes; c != 200 {
			t.Fatalf("a waiting scrape got %d after the database answered", c)
		}
	}
	if _, fams := scrape(t, s.URL, ""); fams.must(t, "reeve_backlog_up", nil) != 1 {
		t.Fatalf("the backlog after the lock")
	}
}
