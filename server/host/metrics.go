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
	"sync"
	"time"

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
// relay's connections and frames, the database pool and write queue, and
// the process and Go runtime (expose.go). They are written in the
// Prometheus text format by this package rather than by the Prometheus
// client library, whose package initialisation (about 1,400 allocations
// with procfs) every start of the reeve binary paid for, the daemon and
// each command included, though only `reeve server` serves metrics.
type metrics struct {
	token string

	mu       sync.Mutex
	requests map[requestKey]uint64
	latency  map[latencyKey]*histogram

	// funcs are the metrics read when scraped, in the order registered.
	funcs []funcMetric
}

type requestKey struct{ route, method, code string }
type latencyKey struct{ route, method string }

// latencyBuckets are the upper bounds (seconds) of the latency histogram.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

func newMetrics(h *Host) *metrics {
	m := &metrics{token: os.Getenv(EnvMetricsToken), requests: map[requestKey]uint64{}, latency: map[latencyKey]*histogram{}}
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
		m.funcs = append(m.funcs, funcMetric{name: name, help: help, typ: "gauge", read: func() []sampleValue { return one(f(r.Metrics())) }})
	}
	counter := func(name, help string, f func(relay.Metrics) float64) {
		m.funcs = append(m.funcs, funcMetric{name: name, help: help, typ: "counter", read: func() []sampleValue { return one(f(r.Metrics())) }})
	}
	m.funcs = append(m.funcs, funcMetric{name: "reeve_relay_connections", help: "Relay connections open now, by role.", typ: "gauge",
		read: func() []sampleValue {
			x := r.Metrics()
			return []sampleValue{{labels: []string{"role", "daemon"}, v: float64(x.DaemonConns)}, {labels: []string{"role", "client"}, v: float64(x.ClientConns)}}
		}})
	gauge("reeve_relay_channels", "Relay channels open now.", func(x relay.Metrics) float64 { return float64(x.Channels) })
	gauge("reeve_relay_buffered_bytes", "Bytes the relay holds for slow peers and the bus (its queue depth).", func(x relay.Metrics) float64 { return float64(x.BufferedBytes) })
	counter("reeve_relay_frames_in_total", "Frames read from peers.", func(x relay.Metrics) float64 { return float64(x.FramesIn) })
	counter("reeve_relay_frames_out_total", "Frames written to peers.", func(x relay.Metrics) float64 { return float64(x.FramesOut) })
	counter("reeve_relay_admitted_total", "Connections admitted.", func(x relay.Metrics) float64 { return float64(x.Admitted) })
	counter("reeve_relay_refused_total", "Connections refused.", func(x relay.Metrics) float64 { return float64(x.Refused) })
	counter("reeve_relay_bus_dropped_total", "Bus messages dropped.", func(x relay.Metrics) float64 { return float64(x.BusDropped) })
}

func (m *metrics) registerDB(st dbStats) {
	engine := []string{"engine", st.Engine()}
	add := func(name, help, typ string, f func() float64) {
		m.funcs = append(m.funcs, funcMetric{name: name, help: help, typ: typ, read: func() []sampleValue {
			return []sampleValue{{labels: engine, v: f()}}
		}})
	}
	add("reeve_db_connections_open", "Database connections open.", "gauge", func() float64 { return float64(st.Stats().OpenConnections) })
	add("reeve_db_connections_in_use", "Database connections in use.", "gauge", func() float64 { return float64(st.Stats().InUse) })
	add("reeve_db_connection_waits_total", "Waits for a free database connection.", "counter", func() float64 { return float64(st.Stats().WaitCount) })
	add("reeve_db_write_queue", "Writes queued for SQLite's writer (0 on PostgreSQL, which has no queue).", "gauge", func() float64 { return float64(st.WriteQueue()) })
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
		m.observe(route, r.Method, strconv.Itoa(sw.code), route != "/ws", time.Since(start).Seconds())
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
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	bw := bufio.NewWriter(w)
	m.write(bw)
	bw.Flush()
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
