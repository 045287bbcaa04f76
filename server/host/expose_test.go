package host

import (
	"bufio"
	"bytes"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The hand-written exposition parses as the Prometheus text format, label
// values with quotes, backslashes and newlines included, and a histogram's
// buckets are cumulative.
func TestExpositionParses(t *testing.T) {
	m := &metrics{requests: map[requestKey]uint64{}, latency: map[latencyKey]*histogram{}}
	odd := "GET /x/{id}\n\"quoted\" \\ back"
	m.observe(odd, "GET", "200", true, 0.0007)
	m.observe(odd, "GET", "200", true, 3)
	m.observe(odd, "GET", "500", true, 20)
	m.observe("/ws", "GET", "101", false, 1)
	m.funcs = append(m.funcs, funcMetric{name: "reeve_test_gauge", help: "A gauge\nwith two lines.", typ: "gauge", read: func() []sampleValue { return one(2.5) }})
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	m.write(w)
	w.Flush()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	var ok200 float64
	for _, s := range fams["reeve_http_requests_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range s.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["route"] == odd && labels["code"] == "200" {
			ok200 = s.GetCounter().GetValue()
		}
	}
	if ok200 != 2 {
		t.Fatalf("requests of the odd route: %v\n%s", ok200, buf.String())
	}
	h := fams["reeve_http_request_duration_seconds"].GetMetric()
	if len(h) != 1 || h[0].GetHistogram().GetSampleCount() != 3 {
		t.Fatalf("histogram %v", h)
	}
	for _, b := range h[0].GetHistogram().GetBucket() {
		want := map[float64]uint64{0.0005: 0, 0.001: 1, 2.5: 1, 5: 2, 10: 2}
		if n, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != n {
			t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), n)
		}
	}
	if g := fams["reeve_test_gauge"].GetMetric(); len(g) != 1 || g[0].GetGauge().GetValue() != 2.5 {
		t.Fatalf("gauge %v", g)
	}
	for _, name := range []string{"go_goroutines", "go_info", "go_memstats_heap_alloc_bytes", "process_start_time_seconds", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("no %s", name)
		}
	}
}
