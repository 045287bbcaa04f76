package control

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
)

// The benchmarks below run the daemon's subscribe path over a real
// WebSocket on loopback, next to a bare coder/websocket pipe doing the same
// transfer without a store, so their figures read as ratios.

// payload256 is an event payload of 256 bytes.
var payload256 = json.RawMessage(`{"text":"` + strings.Repeat("x", 256-len(`{"text":""}`)) + `"}`)

// BenchmarkReplay streams a stored log of 20k events from seq 0.
func BenchmarkReplay(b *testing.B) {
	const n = 20000
	f := newWSFixture(b)
	in := make([]store.EventInput, 4000)
	for i := range in {
		in[i] = store.EventInput{SessionID: f.sid, Kind: wire.KindAgentMessage, Data: payload256}
	}
	for i := 0; i < n/len(in); i++ {
		if _, err := f.st.AppendMany(context.Background(), in); err != nil {
			b.Fatal(err)
		}
	}
	f.st.UpdateSessionStatus(context.Background(), f.sid, store.StatusCompleted, "")
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		tc := f.dial(b, true)
		tc.send(wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "s", SessionID: f.sid})
		got := 0
		for {
			raw := tc.readRaw()
			if strings.Contains(string(raw[:min(len(raw), 40)]), `"session-ended"`) {
				break
			}
			got++
		}
		if got != n+1 { // + the ack
			b.Fatalf("replayed %d frames", got)
		}
		tc.c.CloseNow()
	}
	b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkBarePipeReplay sends the same frames over a bare WebSocket.
func BenchmarkBarePipeReplay(b *testing.B) {
	const n = 20000
	frame, _ := json.Marshal(wire.SessionUpdate{Type: wire.TypeSessionUpdate, SessionID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Seq: 1, TS: time.Now(), Kind: wire.KindAgentMessage, Data: payload256})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for i := 0; i < n; i++ {
			if c.Write(r.Context(), websocket.MessageText, frame) != nil {
				return
			}
		}
		c.Close(websocket.StatusNormalClosure, "")
	}))
	defer srv.Close()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		c, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for {
			if _, _, err := c.Read(context.Background()); err != nil {
				break
			}
			got++
		}
		if got != n {
			b.Fatalf("got %d", got)
		}
	}
	b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkFollowLatency measures a live event's way to a follower: "total"
// from the start of the durable append (so it includes the fsync), and
// "delivery" from the append's return, when the event is committed.
func BenchmarkFollowLatency(b *testing.B) {
	f := newWSFixture(b)
	tc := f.dial(b, true)
	tc.send(wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "s", SessionID: f.sid})
	tc.readRaw() // ack
	total := make([]time.Duration, 0, b.N)
	delivery := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := f.st.Append(context.Background(), f.sid, wire.KindAgentMessage, payload256); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		tc.readRaw()
		total = append(total, time.Since(t0))
		delivery = append(delivery, time.Since(t1))
	}
	reportPercentiles(b, "total-", total)
	reportPercentiles(b, "delivery-", delivery)
}

// BenchmarkBarePipeLatency measures one frame's trip over a bare WebSocket
// from a server goroutine told to send it.
func BenchmarkBarePipeLatency(b *testing.B) {
	frame, _ := json.Marshal(wire.SessionUpdate{Type: wire.TypeSessionUpdate, Seq: 1, Kind: wire.KindAgentMessage, Data: payload256})
	kick := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for range kick {
			if c.Write(r.Context(), websocket.MessageText, frame) != nil {
				return
			}
		}
	}))
	defer srv.Close()
	defer close(kick)
	c, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.CloseNow()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		kick <- struct{}{}
		if _, _, err := c.Read(context.Background()); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	reportPercentiles(b, "", lat)
}

func reportPercentiles(b *testing.B, prefix string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(p(0.50), prefix+"p50-µs")
	b.ReportMetric(p(0.99), prefix+"p99-µs")
}
