package host

import (
	"bufio"
	"crypto/subtle"
	"database/sql"
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"reeve.dev/reeve/server/relay"
)

// EnvMetricsToken, when set, is the bearer token /metrics requires; without
// it /metrics answers loopback clients only (a scraper beside the server).
const EnvMetricsToken = "REEVE_METRICS_TOKEN"

// dbStats is what the metrics read of a store over database/sql.
type dbStats interface {
	Stats() sql.DBStats
	Engine() string
	WriteQueue() int
}

// metrics are the server's Prometheus metrics: requests by route, the
// relay's connections and frames, the database pool and write queue.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	token    string
}

func newMetrics(h *Host) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), token: os.Getenv(EnvMetricsToken)}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reeve_http_requests_total", Help: "HTTP requests answered, by route pattern, method and status code.",
	}, []string{"route", "method", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "reeve_http_request_duration_seconds", Help: "Time to answer an HTTP request, by route pattern and method (WebSockets excluded).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"route", "method"})
	m.reg.MustRegister(m.requests, m.latency)
	if h.relay != nil {
		m.registerRelay(h.relay)
	}
	if st, ok := h.st.(dbStats); ok {
		m.registerDB(st)
	}
	return m
}

func (m *metrics) registerRelay(r *relay.Relay) {
	gauge := func(name, help string, f func(relay.Metrics) float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(r.Metrics()) }))
	}
	counter := func(name, help string, f func(relay.Metrics) float64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(r.Metrics()) }))
	}
	conns := prometheus.NewDesc("reeve_relay_connections", "Relay connections open now, by role.", []string{"role"}, nil)
	m.reg.MustRegister(relayConns{r: r, desc: conns})
	gauge("reeve_relay_channels", "Relay channels open now.", func(x relay.Metrics) float64 { return float64(x.Channels) })
	gauge("reeve_relay_buffered_bytes", "Bytes the relay holds for slow peers and the bus (its queue depth).", func(x relay.Metrics) float64 { return float64(x.BufferedBytes) })
	counter("reeve_relay_frames_in_total", "Frames read from peers.", func(x relay.Metrics) float64 { return float64(x.FramesIn) })
	counter("reeve_relay_frames_out_total", "Frames written to peers.", func(x relay.Metrics) float64 { return float64(x.FramesOut) })
	counter("reeve_relay_admitted_total", "Connections admitted.", func(x relay.Metrics) float64 { return float64(x.Admitted) })
	counter("reeve_relay_refused_total", "Connections refused.", func(x relay.Metrics) float64 { return float64(x.Refused) })
	counter("reeve_relay_bus_dropped_total", "Bus messages dropped.", func(x relay.Metrics) float64 { return float64(x.BusDropped) })
}

type relayConns struct {
	r    *relay.Relay
	desc *prometheus.Desc
}

func (c relayConns) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c relayConns) Collect(ch chan<- prometheus.Metric) {
	x := c.r.Metrics()
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(x.DaemonConns), "daemon")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(x.ClientConns), "client")
}

func (m *metrics) registerDB(st dbStats) {
	labels := prometheus.Labels{"engine": st.Engine()}
	g := func(name, help string, f func(sql.DBStats) float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, func() float64 { return f(st.Stats()) }))
	}
	g("reeve_db_connections_open", "Database connections open.", func(s sql.DBStats) float64 { return float64(s.OpenConnections) })
	g("reeve_db_connections_in_use", "Database connections in use.", func(s sql.DBStats) float64 { return float64(s.InUse) })
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "reeve_db_connection_waits_total", Help: "Waits for a free database connection.", ConstLabels: labels},
		func() float64 { return float64(st.Stats().WaitCount) }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "reeve_db_write_queue", Help: "Writes queued for SQLite's writer (0 on PostgreSQL, which has no queue).", ConstLabels: labels},
		func() float64 { return float64(st.WriteQueue()) }))
}

// instrument counts and times every request by the route pattern that
// served it (set by the muxes on the request).
func (m *metrics) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		m.requests.WithLabelValues(route, r.Method, strconv.Itoa(sw.code)).Inc()
		if route != "/ws" {
			m.latency.WithLabelValues(route, r.Method).Observe(time.Since(start).Seconds())
		}
	})
}

// ServeHTTP answers /metrics in the Prometheus text format.
func (m *metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.token != "" {
		got, want := r.Header.Get("Authorization"), "Bearer "+m.token
		if len(got) != len(want) || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "metrics need the bearer token of "+EnvMetricsToken, http.StatusUnauthorized)
			return
		}
	} else if host, _, _ := net.SplitHostPort(r.RemoteAddr); !net.ParseIP(host).IsLoopback() {
		http.Error(w, "metrics answer loopback clients only unless "+EnvMetricsToken+" is set", http.StatusForbidden)
		return
	}
	promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

type statusWriter struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wroteHeader {
		s.code, s.wroteHeader = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController (and the WebSocket upgrade) reach
// the connection.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Hijack hands the connection over (the WebSocket upgrade); the status is
// then 101.
func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("hijack: not supported")
	}
	s.code, s.wroteHeader = http.StatusSwitchingProtocols, true
	return hj.Hijack()
}

// Flush passes flushes through (streamed answers).
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
