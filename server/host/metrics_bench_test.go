package host

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkInstrument: the cost /metrics adds to every request (count by
// route, method and code; time into the histogram), around a handler that
// does nothing.
func BenchmarkInstrument(b *testing.B) {
	m := newMetrics(&Host{opts: Options{Logger: slog.New(slog.DiscardHandler)}})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/workspaces/{workspace}", func(w http.ResponseWriter, r *http.Request) {})
	h := m.instrument(mux)
	req := httptest.NewRequest(http.MethodGet, "/api/workspaces/w1", nil)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
}
