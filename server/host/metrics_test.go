package host_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"reeve.dev/reeve/server/host"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store/storetest"
)

func scrape(t *testing.T, url, token string) (int, map[string]*modelFamily) {
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
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("/metrics is not the Prometheus text format: %v", err)
	}
	out := map[string]*modelFamily{}
	for name, f := range fams {
		mf := &modelFamily{}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			mf.samples = append(mf.samples, sample{labels, v})
		}
		out[name] = mf
	}
	return res.StatusCode, out
}

type sample struct {
	labels map[string]string
	value  float64
}

type modelFamily struct{ samples []sample }

func (f *modelFamily) find(want map[string]string) (float64, bool) {
	if f == nil {
		return 0, false
	}
next:
	for _, s := range f.samples {
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		return s.value, true
	}
	return 0, false
}

// /metrics counts requests by route, times them, and reports the relay and
// the database pool, on either engine.
func TestMetrics(t *testing.T) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			o := servertest.Options{DataDir: filepath.Join(t.TempDir(), "data")}
			if engine == "postgres" {
				o.DatabaseURL = storetest.PostgresURL(t)
			}
			s := servertest.Start(t, o)
			u := s.NewUser("m@example.com")
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
			if n, _ := fams["reeve_http_requests_total"].find(map[string]string{"route": route, "code": "200"}); n != 3 {
				t.Fatalf("requests 200 on %s: %v", route, n)
			}
			if n, _ := fams["reeve_http_requests_total"].find(map[string]string{"route": route, "code": "401"}); n != 1 {
				t.Fatalf("requests 401: %v", n)
			}
			if n, _ := fams["reeve_http_request_duration_seconds"].find(map[string]string{"route": route}); n != 4 {
				t.Fatalf("latency samples: %v", n)
			}
			if _, ok := fams["reeve_db_connections_open"].find(map[string]string{"engine": engine}); !ok {
				t.Fatalf("no pool metrics for %s", engine)
			}
			for _, role := range []string{"daemon", "client"} {
				if _, ok := fams["reeve_relay_connections"].find(map[string]string{"role": role}); !ok {
					t.Fatalf("no relay connections of role %s", role)
				}
			}
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
	if code != 200 || !strings.Contains(strings.Join(keys(fams), ","), "reeve_http_requests_total") {
		t.Fatalf("with the token: %d", code)
	}
}

func keys(m map[string]*modelFamily) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
