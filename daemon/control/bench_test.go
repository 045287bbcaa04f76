package control

import (
	"bytes"
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

// BenchmarkReplay streams a stored log of 20k events from seq 0, one frame
// per event and in batches (session-updates), and interleaved with them the
// baseline: a bare coder/websocket pipe sending the same 20k session-update
// frames from memory, with no store. Each iteration runs all three, so the
// ratios compare runs under the same load.
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
	pipeURL := barePipe(b, n)
	replay := func(batch bool) time.Duration {
		t0 := time.Now()
		tc := f.dial(b, true)
		tc.send(wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "s", SessionID: f.sid, Batch: batch})
		tc.readRaw() // the ack
		got := 0
		for {
			raw := tc.readRaw()
			head := raw[:min(len(raw), 40)]
			if bytes.Contains(head, []byte(`"session-ended"`)) {
				break
			}
			if bytes.Contains(head, []byte(`"session-updates"`)) {
				got += bytes.Count(raw, []byte(`{"type":"session-update",`))
			} else {
				got++
			}
		}
		if got != n {
			b.Fatalf("replayed %d events", got)
		}
		tc.c.CloseNow()
		return time.Since(t0)
	}
	pipe := func() time.Duration {
		t0 := time.Now()
		c, _, err := websocket.Dial(context.Background(), pipeURL, nil)
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
		return time.Since(t0)
	}
	var tPipe, tFrames, tBatched time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tPipe += pipe()
		tFrames += replay(false)
		tBatched += replay(true)
	}
	rate := func(d time.Duration) float64 { return float64(n*b.N) / d.Seconds() }
	b.ReportMetric(rate(tPipe), "pipe-events/s")
	b.ReportMetric(rate(tFrames), "frames-events/s")
	b.ReportMetric(rate(tBatched), "batched-events/s")
	b.ReportMetric(rate(tFrames)/rate(tPipe), "frames/pipe")
	b.ReportMetric(rate(tBatched)/rate(tPipe), "batched/pipe")
}

// barePipe serves n session-update frames over a bare WebSocket to each
// client, from memory, then closes.
func barePipe(b *testing.B, n int) string {
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
	b.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
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
