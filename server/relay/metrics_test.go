package relay_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"reeve.dev/reeve/server/relay"
)

// `reeve relay`'s /metrics is the Prometheus text format, with the relay's
// families read at the scrape, under the access rule of the server's.
func TestRelayMetricsHandler(t *testing.T) {
	f := newFixture(t)
	r, base := startRelay(t, f.s, relay.Options{})
	f.daemon(t, base)
	waitMetrics(t, r, func(m relay.Metrics) bool { return m.DaemonConns == 1 })

	t.Setenv(relay.EnvMetricsToken, "")
	h := r.MetricsHandler()
	scrape := func(remote, auth string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.RemoteAddr = remote
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	w := scrape("127.0.0.1:5000", "")
	if w.Code != 200 {
		t.Fatalf("loopback scrape: %d", w.Code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(w.Body)
	if err != nil {
		t.Fatalf("not the Prometheus text format: %v", err)
	}
	var daemons float64 = -1
	for _, m := range fams["reeve_relay_connections"].GetMetric() {
		if m.GetLabel()[0].GetValue() == "daemon" {
			daemons = m.GetGauge().GetValue()
		}
	}
	if daemons != 1 {
		t.Fatalf("daemon connections %v", daemons)
	}
	if info := fams["reeve_relay_info"].GetMetric(); len(info) != 1 || info[0].GetLabel()[0].GetValue() != r.InstanceID() {
		t.Fatalf("relay info %v", info)
	}
	for _, name := range []string{"reeve_relay_disconnects_total", "reeve_relay_bus_messages_total", "go_goroutines", "process_open_fds"} {
		if fams[name] == nil {
			t.Errorf("no %s", name)
		}
	}
	if w := scrape("192.0.2.9:5000", ""); w.Code != 403 {
		t.Fatalf("remote scrape without a token: %d", w.Code)
	}

	t.Setenv(relay.EnvMetricsToken, "relay-metrics-token")
	h = r.MetricsHandler()
	for _, c := range []struct {
		remote, auth string
		want         int
	}{
		{"127.0.0.1:5000", "", 401},
		{"192.0.2.9:5000", "Bearer relay-metrics-token-", 401},
		{"192.0.2.9:5000", "Basic relay-metrics-token", 401},
		{"192.0.2.9:5000", "Bearer relay-metrics-token", 200},
	} {
		if w := scrape(c.remote, c.auth); w.Code != c.want {
			t.Errorf("from %s with %q: %d, want %d", c.remote, c.auth, w.Code, c.want)
		}
	}
}
