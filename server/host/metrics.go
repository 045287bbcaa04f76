package host

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"reeve.dev/reeve/server/relay"
	"reeve.dev/reeve/server/store"
)

// EnvMetricsToken, when set, is the bearer token /metrics requires; without
// it /metrics answers loopback clients only (a scraper beside the server).
// The rule is the relay's too (relay.MetricsAccess).
const EnvMetricsToken = relay.EnvMetricsToken

// storeStats is what the metrics read of the store: its pool and write
// queue (this process's), and the backlog (the shared database's).
type storeStats interface {
	Stats() sql.DBStats
	Engine() string
	WriteQueue() int
	Backlog(ctx context.Context, now time.Time) (store.Backlog, error)
}

// metrics are the server's Prometheus metrics, in a registry of the host's
// own (the client library's global one is left alone): requests by route,
// the relay (relay.Collector), the store's pool and backlog, and the Go
// runtime and process. Everything but the request counts is read when
// scraped; nothing polls in the background.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	serve    http.Handler
}

// latencyBuckets are the upper bounds (seconds) of the latency histogram.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// scrapesInFlight bounds concurrent scrapes: a gathering queries the
// database, so a flood of scrapes is answered 503 rather than queued.
const scrapesInFlight = 4

func newMetrics(h *Host) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reeve_http_requests_total",
			Help: "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "reeve_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route pattern and method (WebSockets excluded).",
			Buckets: latencyBuckets,
		}, []string{"route", "method"}),
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.requests, m.latency, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if h.relay != nil {
		reg.MustRegister(h.relay.Collector())
	}
	if st, ok := h.st.(storeStats); ok {
		reg.MustRegister(newStoreCollector(st, h.opts.Logger))
	}
	m.serve = relay.MetricsAccess(os.Getenv(EnvMetricsToken), promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(h.opts.Logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
		// Scrapes that arrive together share one gathering, so one set
		// of backlog queries; beyond scrapesInFlight they are refused.
		CoalesceGather:      true,
		MaxRequestsInFlight: scrapesInFlight,
		// promhttp_metric_handler_errors_total counts failed gatherings.
		Registry: reg,
	}))
	return m
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
		method := methodLabel(r.Method)
		m.requests.WithLabelValues(route, method, strconv.Itoa(sw.code)).Inc()
		if route != "/ws" {
			m.latency.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
		}
	})
}

// methodLabel is the method as a label value: the standard methods by
// name, any other as "other". A client may send any token as a method,
// and each new label value is a series the registry keeps for good.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// ServeHTTP answers /metrics in the Prometheus text format.
func (m *metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.serve.ServeHTTP(w, r) }

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
