package host

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"reeve.dev/reeve/server/store"
)

// backlogTimeout bounds the backlog's queries in one scrape: a database
// that does not answer costs the scrape its backlog families, not the
// scrape.
const backlogTimeout = 5 * time.Second

// sharedNote ends the help of every family read from the database rather
// than from this process: with several replicas each reports the same
// figure, so dashboards take one replica's (max), never the sum.
const sharedNote = " Read from the database all replicas share: every replica reports the same figure, aggregate with max, not sum."

// storeCollector reports the store: this process's connection pool and
// SQLite write queue, and the shared database's backlog (store.Backlog:
// runs by status, leases, the webhook outbox, the relay bus), each read
// when scraped.
type storeCollector struct {
	st  storeStats
	log *slog.Logger

	open, inUse, waits, writeQueue                         *prometheus.Desc
	up, runs, leases, outbox, outboxOldest, bus, busOldest *prometheus.Desc
}

func newStoreCollector(st storeStats, log *slog.Logger) *storeCollector {
	engine := prometheus.Labels{"engine": st.Engine()}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, engine)
	}
	return &storeCollector{st: st, log: log,
		open:         d("reeve_db_connections_open", "Database connections open (this replica's pool)."),
		inUse:        d("reeve_db_connections_in_use", "Database connections in use (this replica's pool)."),
		waits:        d("reeve_db_connection_waits_total", "Waits for a free database connection (this replica's pool)."),
		writeQueue:   d("reeve_db_write_queue", "Writes queued for SQLite's writer (0 on PostgreSQL, which has no queue)."),
		up:           d("reeve_backlog_up", "1 when this scrape read the backlog from the database, 0 when it could not (the backlog families are then absent)."),
		runs:         d("reeve_workflow_runs", "Unfinished workflow runs by status (draft, queued, blocked, leased, running, waiting-approval); queued is the queue depth."+sharedNote, "status"),
		leases:       d("reeve_workflow_leases", "Workflow runs a worker holds a lease on, by state: live, or expired and not yet taken back."+sharedNote, "state"),
		outbox:       d("reeve_webhook_outbox_messages", "Outbound webhook messages not delivered, by state: due (waiting for a dispatcher), scheduled (a retry waiting for its time), delivering (leased by a dispatcher), dead."+sharedNote, "state"),
		outboxOldest: d("reeve_webhook_outbox_oldest_due_seconds", "How long the longest-waiting due webhook message has been due (0 when none is)."+sharedNote),
		bus:          d("reeve_relay_bus_backlog_messages", "Relay bus messages published and not yet acknowledged by their relay instance."+sharedNote),
		busOldest:    d("reeve_relay_bus_backlog_oldest_seconds", "Age of the oldest unacknowledged relay bus message (0 when there is none)."+sharedNote),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.open, c.inUse, c.waits, c.writeQueue, c.up, c.runs, c.leases, c.outbox, c.outboxOldest, c.bus, c.busOldest} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	pool := c.st.Stats()
	gauge(c.open, float64(pool.OpenConnections))
	gauge(c.inUse, float64(pool.InUse))
	ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, float64(pool.WaitCount))
	gauge(c.writeQueue, float64(c.st.WriteQueue()))

	ctx, cancel := context.WithTimeout(context.Background(), backlogTimeout)
	defer cancel()
	now := time.Now()
	b, err := c.st.Backlog(ctx, now)
	if err != nil {
		c.log.Warn("metrics: read the backlog", "err", err)
		gauge(c.up, 0)
		return
	}
	gauge(c.up, 1)
	for _, status := range store.UnfinishedRunStatuses {
		gauge(c.runs, float64(b.Runs[status]), status)
	}
	gauge(c.leases, float64(b.LiveLeases), "live")
	gauge(c.leases, float64(b.ExpiredLeases), "expired")
	for _, state := range []string{store.WebhookDue, store.WebhookScheduled, store.WebhookDelivering, store.WebhookDead} {
		gauge(c.outbox, float64(b.Webhooks[state]), state)
	}
	gauge(c.outboxOldest, age(now, b.OldestDueWebhook))
	gauge(c.bus, float64(b.BusMessages))
	gauge(c.busOldest, age(now, b.OldestBusMessage))
}

// age is how long before now t was, in seconds; 0 for the zero time (none)
// and for a t a clock ahead of ours put in the future.
func age(now, t time.Time) float64 {
	if t.IsZero() || t.After(now) {
		return 0
	}
	return now.Sub(t).Seconds()
}
