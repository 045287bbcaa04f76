package host

import (
	"bufio"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The Prometheus text exposition format (version 0.0.4) of the server's
// metrics: per family "# HELP", "# TYPE", then its samples, label values
// quoted with \\, \" and \n escaped.

// funcMetric is a family read when scraped.
type funcMetric struct {
	name, help, typ string
	read            func() []sampleValue
}

// sampleValue is one sample: label pairs (name, value, name, value, ...).
type sampleValue struct {
	labels []string
	v      float64
}

func one(v float64) []sampleValue { return []sampleValue{{v: v}} }

// histogram counts observations per bucket (not cumulative; summed when
// written).
type histogram struct {
	counts []uint64 // len(latencyBuckets)+1, the last for +Inf
	sum    float64
	n      uint64
}

func (m *metrics) observe(route, method, code string, timed bool, seconds float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[requestKey{route, method, code}]++
	if !timed {
		return
	}
	k := latencyKey{route, method}
	h := m.latency[k]
	if h == nil {
		h = &histogram{counts: make([]uint64, len(latencyBuckets)+1)}
		m.latency[k] = h
	}
	i := sort.SearchFloat64s(latencyBuckets, seconds) // first bound >= seconds
	h.counts[i]++
	h.sum += seconds
	h.n++
}

// write writes every family.
func (m *metrics) write(w *bufio.Writer) {
	m.mu.Lock()
	reqs := make([]requestKey, 0, len(m.requests))
	for k := range m.requests {
		reqs = append(reqs, k)
	}
	sort.Slice(reqs, func(i, j int) bool {
		a, b := reqs[i], reqs[j]
		return a.route+"\x00"+a.method+"\x00"+a.code < b.route+"\x00"+b.method+"\x00"+b.code
	})
	header(w, "reeve_http_requests_total", "HTTP requests answered, by route pattern, method and status code.", "counter")
	for _, k := range reqs {
		sample(w, "reeve_http_requests_total", []string{"route", k.route, "method", k.method, "code", k.code}, float64(m.requests[k]))
	}
	lats := make([]latencyKey, 0, len(m.latency))
	for k := range m.latency {
		lats = append(lats, k)
	}
	sort.Slice(lats, func(i, j int) bool {
		return lats[i].route+"\x00"+lats[i].method < lats[j].route+"\x00"+lats[j].method
	})
	const lat = "reeve_http_request_duration_seconds"
	header(w, lat, "Time to answer an HTTP request, by route pattern and method (WebSockets excluded).", "histogram")
	for _, k := range lats {
		h := m.latency[k]
		var cum uint64
		for i, bound := range latencyBuckets {
			cum += h.counts[i]
			sample(w, lat+"_bucket", []string{"route", k.route, "method", k.method, "le", formatFloat(bound)}, float64(cum))
		}
		sample(w, lat+"_bucket", []string{"route", k.route, "method", k.method, "le", "+Inf"}, float64(h.n))
		sample(w, lat+"_sum", []string{"route", k.route, "method", k.method}, h.sum)
		sample(w, lat+"_count", []string{"route", k.route, "method", k.method}, float64(h.n))
	}
	m.mu.Unlock()
	for _, f := range m.funcs {
		header(w, f.name, f.help, f.typ)
		for _, s := range f.read() {
			sample(w, f.name, s.labels, s.v)
		}
	}
	for _, f := range runtimeFamilies() {
		header(w, f.name, f.help, f.typ)
		for _, s := range f.read() {
			sample(w, f.name, s.labels, s.v)
		}
	}
}

func header(w *bufio.Writer, name, help, typ string) {
	w.WriteString("# HELP " + name + " " + strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(help) + "\n")
	w.WriteString("# TYPE " + name + " " + typ + "\n")
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func sample(w *bufio.Writer, name string, labels []string, v float64) {
	w.WriteString(name)
	if len(labels) > 0 {
		w.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString(labels[i] + `="` + labelEscaper.Replace(labels[i+1]) + `"`)
		}
		w.WriteByte('}')
	}
	w.WriteByte(' ')
	w.WriteString(formatFloat(v))
	w.WriteByte('\n')
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// runtimeFamilies are the Go runtime's and the process's metrics, under the
// names the Prometheus client uses for them.
func runtimeFamilies() []funcMetric {
	// runtime.ReadMemStats rather than runtime/metrics: that package's init
	// builds its description table at every start of the binary, for every
	// command, and these five values are all /metrics needs.
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	vals := []float64{float64(runtime.NumGoroutine()), float64(ms.HeapAlloc), float64(ms.Sys), float64(ms.NumGC), float64(ms.NextGC)}
	val := func(i int) float64 { return vals[i] }
	threads, _ := runtime.ThreadCreateProfile(nil)
	out := []funcMetric{
		{name: "go_info", help: "Information about the Go environment.", typ: "gauge", read: func() []sampleValue {
			return []sampleValue{{labels: []string{"version", runtime.Version()}, v: 1}}
		}},
		{name: "go_goroutines", help: "Number of goroutines that currently exist.", typ: "gauge", read: func() []sampleValue { return one(val(0)) }},
		{name: "go_threads", help: "Number of OS threads created.", typ: "gauge", read: func() []sampleValue { return one(float64(threads)) }},
		{name: "go_memstats_heap_alloc_bytes", help: "Number of heap bytes allocated and still in use.", typ: "gauge", read: func() []sampleValue { return one(val(1)) }},
		{name: "go_memstats_sys_bytes", help: "Number of bytes obtained from system.", typ: "gauge", read: func() []sampleValue { return one(val(2)) }},
		{name: "go_gc_cycles_total", help: "Count of completed GC cycles.", typ: "counter", read: func() []sampleValue { return one(val(3)) }},
		{name: "go_gc_heap_goal_bytes", help: "Heap size target for the end of the GC cycle.", typ: "gauge", read: func() []sampleValue { return one(val(4)) }},
	}
	return append(out, processFamilies()...)
}

var processStart = time.Now()

// processFamilies reads /proc/self (Linux); elsewhere only the start time.
func processFamilies() []funcMetric {
	out := []funcMetric{{name: "process_start_time_seconds", help: "Start time of the process since unix epoch in seconds.", typ: "gauge",
		read: func() []sampleValue { return one(float64(processStart.UnixNano()) / 1e9) }}}
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return out
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 || i+2 >= len(stat) {
		return out
	}
	f := strings.Fields(string(stat[i+2:]))
	if len(f) < 22 {
		return out
	}
	num := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	const userHZ = 100
	cpu := (num(f[11]) + num(f[12])) / userHZ
	vsize, rss := num(f[20]), num(f[21])*float64(os.Getpagesize())
	fds, _ := os.ReadDir("/proc/self/fd")
	return append(out,
		funcMetric{name: "process_cpu_seconds_total", help: "Total user and system CPU time spent in seconds.", typ: "counter", read: func() []sampleValue { return one(cpu) }},
		funcMetric{name: "process_resident_memory_bytes", help: "Resident memory size in bytes.", typ: "gauge", read: func() []sampleValue { return one(rss) }},
		funcMetric{name: "process_virtual_memory_bytes", help: "Virtual memory size in bytes.", typ: "gauge", read: func() []sampleValue { return one(vsize) }},
		funcMetric{name: "process_open_fds", help: "Number of open file descriptors.", typ: "gauge", read: func() []sampleValue { return one(float64(len(fds))) }},
	)
}
