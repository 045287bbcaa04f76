package relay

import (
	"crypto/subtle"
	"net"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is a snapshot of a relay's counters.
type Metrics struct {
	InstanceID string `json:"instance_id"`
	// Current connections and channels.
	DaemonConns    int64 `json:"daemon_conns"`
	ClientConns    int64 `json:"client_conns"`
	Channels       int64 `json:"channels"`
	RemoteChannels int64 `json:"remote_channels_opened"`
	// Admission.
	Admitted uint64 `json:"admitted"`
	Refused  uint64 `json:"refused"`
	// Frames read from and written to peers.
	FramesIn  uint64 `json:"frames_in"`
	FramesOut uint64 `json:"frames_out"`
	// Disconnections the relay decided.
	SlowDisconnects   uint64 `json:"slow_disconnects"`
	Replaced          uint64 `json:"replaced"`
	Revoked           uint64 `json:"revoked"`
	KeepaliveTimeouts uint64 `json:"keepalive_timeouts"`
	BadEnvelopes      uint64 `json:"bad_envelopes"`
	// TooLarge counts payloads over relaywire.MaxPayload (their channel
	// ended).
	TooLarge uint64 `json:"too_large"`
	// BufferedBytes is what the relay holds for its peers and the bus now.
	BufferedBytes int64  `json:"buffered_bytes"`
	NoDaemon      uint64 `json:"no_daemon"`
	// The bus between instances.
	BusOut     uint64 `json:"bus_out"`
	BusIn      uint64 `json:"bus_in"`
	BusDropped uint64 `json:"bus_dropped"`
}

type counters struct {
	daemons, clients, channels, remoteChannels               atomic.Int64
	admitted, refused, framesIn, framesOut                   atomic.Uint64
	slow, replaced, revoked, keepaliveTimeouts, badEnvelopes atomic.Uint64
	noDaemon, busOut, busIn, busDropped, tooLarge            atomic.Uint64
}

// Metrics returns the current counters.
func (r *Relay) Metrics() Metrics {
	m := &r.m
	return Metrics{
		InstanceID:  r.opts.InstanceID,
		DaemonConns: m.daemons.Load(), ClientConns: m.clients.Load(), Channels: m.channels.Load(), RemoteChannels: m.remoteChannels.Load(),
		Admitted: m.admitted.Load(), Refused: m.refused.Load(), FramesIn: m.framesIn.Load(), FramesOut: m.framesOut.Load(),
		SlowDisconnects: m.slow.Load(), Replaced: m.replaced.Load(), Revoked: m.revoked.Load(),
		KeepaliveTimeouts: m.keepaliveTimeouts.Load(), BadEnvelopes: m.badEnvelopes.Load(), NoDaemon: m.noDaemon.Load(),
		TooLarge: m.tooLarge.Load(), BufferedBytes: r.buffered.Load(),
		BusOut: m.busOut.Load(), BusIn: m.busIn.Load(), BusDropped: m.busDropped.Load(),
	}
}

// EnvMetricsToken, when set, is the bearer token /metrics requires, of
// `reeve relay` and `reeve server` alike; without it /metrics answers
// loopback clients only (a scraper beside the process).
const EnvMetricsToken = "REEVE_METRICS_TOKEN"

// MetricsAccess lets through to next only the scrapers the rule of
// EnvMetricsToken admits, token being its value: with a token, a request
// bearing it (401 otherwise); without, a loopback peer (403 otherwise).
// The peer is the connection's, never a forwarding header's.
func MetricsAccess(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" {
			got, want := r.Header.Get("Authorization"), "Bearer "+token
			if len(got) != len(want) || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
				http.Error(w, "metrics need the bearer token of "+EnvMetricsToken, http.StatusUnauthorized)
				return
			}
		} else if host, _, _ := net.SplitHostPort(r.RemoteAddr); !net.ParseIP(host).IsLoopback() {
			http.Error(w, "metrics answer loopback clients only unless "+EnvMetricsToken+" is set", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// MetricsHandler serves `reeve relay`'s /metrics: the relay's families
// (Collector) with the Go runtime's and the process's, in the Prometheus
// text format, from a registry of its own, to the scrapers MetricsAccess
// admits under the token in the environment.
func (r *Relay) MetricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return MetricsAccess(os.Getenv(EnvMetricsToken), promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
}

// Collector reports the relay's counters to a Prometheus registry, read
// from one snapshot (Metrics) at each scrape: nothing runs between scrapes.
// `reeve relay` and `reeve server` (its embedded relay) register it, so the
// families are defined here once.
func (r *Relay) Collector() prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("reeve_relay_"+name, help, labels, nil)
	}
	return &relayCollector{r: r,
		info:        d("info", "The relay instance (its id as a label), always 1.", "instance_id"),
		conns:       d("connections", "Relay connections open now, by role.", "role"),
		channels:    d("channels", "Relay channels open now."),
		buffered:    d("buffered_bytes", "Bytes the relay holds for slow peers and the bus (its queue depth)."),
		framesIn:    d("frames_in_total", "Frames read from peers."),
		framesOut:   d("frames_out_total", "Frames written to peers."),
		admitted:    d("admitted_total", "Connections admitted."),
		refused:     d("refused_total", "Connections refused."),
		disconnects: d("disconnects_total", "Connections the relay ended, by reason: slow (over its queue budget), keepalive (no pong), replaced (a newer connection of the same daemon), revoked (its credential was).", "reason"),
		badEnv:      d("bad_envelopes_total", "Envelopes that did not parse."),
		tooLarge:    d("too_large_total", "Payloads over the envelope limit (their channel ended)."),
		noDaemon:    d("no_daemon_total", "Client connections for a daemon connected nowhere."),
		remote:      d("remote_channels_opened_total", "Channels opened to a daemon on another relay instance."),
		bus:         d("bus_messages_total", "Bus messages between relay instances, by direction (out: published, in: received).", "direction"),
		busDropped:  d("bus_dropped_total", "Bus messages dropped."),
	}
}

type relayCollector struct {
	r                                                    *Relay
	info, conns, channels, buffered, framesIn, framesOut *prometheus.Desc
	admitted, refused, disconnects, badEnv, tooLarge     *prometheus.Desc
	noDaemon, remote, bus, busDropped                    *prometheus.Desc
}

func (c *relayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.conns, c.channels, c.buffered, c.framesIn, c.framesOut, c.admitted, c.refused, c.disconnects, c.badEnv, c.tooLarge, c.noDaemon, c.remote, c.bus, c.busDropped} {
		ch <- d
	}
}

func (c *relayCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.r.Metrics()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(c.info, 1, m.InstanceID)
	gauge(c.conns, float64(m.DaemonConns), "daemon")
	gauge(c.conns, float64(m.ClientConns), "client")
	gauge(c.channels, float64(m.Channels))
	gauge(c.buffered, float64(m.BufferedBytes))
	counter(c.framesIn, m.FramesIn)
	counter(c.framesOut, m.FramesOut)
	counter(c.admitted, m.Admitted)
	counter(c.refused, m.Refused)
	counter(c.disconnects, m.SlowDisconnects, "slow")
	counter(c.disconnects, m.KeepaliveTimeouts, "keepalive")
	counter(c.disconnects, m.Replaced, "replaced")
	counter(c.disconnects, m.Revoked, "revoked")
	counter(c.badEnv, m.BadEnvelopes)
	counter(c.tooLarge, m.TooLarge)
	counter(c.noDaemon, m.NoDaemon)
	counter(c.remote, uint64(m.RemoteChannels))
	counter(c.bus, m.BusOut, "out")
	counter(c.bus, m.BusIn, "in")
	counter(c.busDropped, m.BusDropped)
}
