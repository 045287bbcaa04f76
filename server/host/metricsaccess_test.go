package host

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Without a token /metrics answers loopback clients only; a forwarding
// header naming loopback does not make a remote client one.
func TestMetricsLoopbackOnly(t *testing.T) {
	t.Setenv(EnvMetricsToken, "")
	m := newMetrics(&Host{opts: Options{Logger: slog.New(slog.DiscardHandler)}})
	for _, c := range []struct {
		remote string
		header string
		want   int
	}{
		{"127.0.0.1:40000", "", 200},
		{"[::1]:40000", "", 200},
		{"192.0.2.7:40000", "", 403},
		{"192.0.2.7:40000", "127.0.0.1", 403},
		{"[2001:db8::1]:40000", "", 403},
		{"not an address", "", 403},
	} {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.RemoteAddr = c.remote
		if c.header != "" {
			req.Header.Set("X-Forwarded-For", c.header)
		}
		w := httptest.NewRecorder()
		m.ServeHTTP(w, req)
		if w.Code != c.want {
			t.Errorf("from %s (forwarded for %q): %d, want %d", c.remote, c.header, w.Code, c.want)
		}
	}
}
