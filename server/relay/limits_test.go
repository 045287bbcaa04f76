package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/server/relay"
	"reeve.dev/reeve/server/relay/relaywire"
)

// attackFull: scripts/attack.sh (REEVE_ATTACK=1) runs the attacks at full
// size; the regular suite runs them smaller.
func attackFull() bool { return os.Getenv("REEVE_ATTACK") != "" }

// A client message over the one size limit, or a payload that would not
// fit the daemon's envelope, ends that client's channel only: the daemon's
// connection and the other channels carry on.
func TestRelayOversizeFramesEndOnlyTheirChannel(t *testing.T) {
	f := newFixture(t)
	r, base := startRelay(t, f.s, relay.Options{})
	d := f.daemon(t, base)
	good := f.client(t, base)
	goodCh := read(t, d).Channel

	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"70 KB message", []byte(`{"t":"data","p":"` + strings.Repeat("A", 70<<10) + `"}`)},
		{"2 MB message", []byte(`{"t":"data","p":"` + strings.Repeat("A", 2<<20) + `"}`)},
		// Under MaxEnvelope as sent, over it once the relay names the
		// channel for the daemon.
		{"payload over MaxPayload", []byte(`{"t":"data","p":"` + strings.Repeat("A", relaywire.MaxEnvelope-20) + `"}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := f.client(t, base)
			badCh := read(t, d).Channel
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// The write may fail once the relay has closed on us.
			_ = bad.Write(ctx, websocket.MessageText, tc.frame)
			if code := closeCode(t, bad); code != websocket.StatusMessageTooBig {
				t.Fatalf("the sender closed with %v, want %v", code, websocket.StatusMessageTooBig)
			}
			// The daemon learns that this channel, and only it, ended.
			if e := read(t, d); e.Type != relay.TypeClose || e.Channel != badCh {
				t.Fatalf("daemon got %+v, want the close of %s", e, badCh)
			}
			// The other client still reaches the daemon, both ways.
			write(t, good, relay.Envelope{Type: relay.TypeData, Payload: "still here"})
			if e := read(t, d); e.Type != relay.TypeData || e.Channel != goodCh || e.Payload != "still here" {
				t.Fatalf("daemon got %+v", e)
			}
			write(t, d, relay.Envelope{Type: relay.TypeData, Channel: goodCh, Payload: "and back"})
			if e := read(t, good); e.Payload != "and back" {
				t.Fatalf("client got %+v", e)
			}
		})
	}

	// A daemon payload over the limit ends the channel it names, not the
	// daemon's connection.
	victim := f.client(t, base)
	victimCh := read(t, d).Channel
	write(t, d, []byte(`{"t":"data","ch":"`+victimCh+`","p":"`+strings.Repeat("B", relaywire.MaxPayload)+`"}`))
	if e := read(t, victim); e.Type != relay.TypeError {
		t.Fatalf("client got %+v", e)
	}
	if code := closeCode(t, victim); code != websocket.StatusMessageTooBig {
		t.Fatalf("client closed with %v", code)
	}
	if e := read(t, d); e.Type != relay.TypeClose || e.Channel != victimCh {
		t.Fatalf("daemon got %+v", e)
	}
	// A reason is cut to MaxReason before it is forwarded.
	write(t, good, relay.Envelope{Type: relay.TypeClose, Reason: strings.Repeat("r", 10000)})
	if e := read(t, d); e.Type != relay.TypeClose || e.Channel != goodCh || len(e.Reason) != relaywire.MaxReason {
		t.Fatalf("daemon got a close with a %d-byte reason", len(e.Reason))
	}
	m := r.Metrics()
	if m.DaemonConns != 1 || m.TooLarge < 2 || m.BadEnvelopes != 0 {
		t.Fatalf("metrics %+v", m)
	}
}

// 100 clients that never read, each sent 10 MB by their daemon: the relay
// holds at most its buffer bound, disconnects them as too slow, and the
// memory of the process stays flat.
func TestRelayMemoryBoundedUnderStalledPeers(t *testing.T) {
	// Each connection gets more than the kernel's socket buffers absorb.
	n, perConn := 30, 10<<20
	if attackFull() {
		n = 100
	}
	const maxBuffered = 16 << 20
	f := newFixture(t)
	r, base := startRelay(t, f.s, relay.Options{MaxBufferedBytes: maxBuffered, SlowTimeout: 2 * time.Second})
	d := f.daemon(t, base)
	stalled := make([]*websocket.Conn, n)
	chans := make([]string, n)
	for i := range stalled {
		stalled[i] = f.client(t, base) // never read
		chans[i] = read(t, d).Channel
	}
	// The daemon drains what the relay tells it (closes of dead channels).
	go func() {
		for {
			if _, _, err := d.Read(context.Background()); err != nil {
				return
			}
		}
	}()

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base0 := ms.HeapInuse
	var peakHeap, peakBuffered atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if h := int64(ms.HeapInuse - min(ms.HeapInuse, base0)); h > peakHeap.Load() {
				peakHeap.Store(h)
			}
			if b := r.Metrics().BufferedBytes; b > peakBuffered.Load() {
				peakBuffered.Store(b)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()

	payload := strings.Repeat("A", 60<<10)
	frames := make([][]byte, n)
	for i, ch := range chans {
		frames[i], _ = json.Marshal(relay.Envelope{Type: relay.TypeData, Channel: ch, Payload: payload})
	}
	began := time.Now()
	pushed := 0
	for sent := 0; sent < perConn; sent += len(payload) {
		for i := range chans {
			if err := d.Write(context.Background(), websocket.MessageText, frames[i]); err != nil {
				t.Fatalf("the daemon's connection failed: %v", err)
			}
			pushed += len(payload)
		}
	}
	close(stop)
	<-sampled
	t.Logf("pushed %d MB to %d stalled clients in %v; relay buffers peaked at %.1f MB (bound %d MB), heap in use grew by at most %.1f MB",
		pushed>>20, n, time.Since(began).Round(time.Millisecond), float64(peakBuffered.Load())/(1<<20), maxBuffered>>20, float64(peakHeap.Load())/(1<<20))
	if peakBuffered.Load() > maxBuffered {
		t.Fatalf("the relay buffered %d bytes, over its bound of %d", peakBuffered.Load(), maxBuffered)
	}
	// Frames being read and written, garbage awaiting collection and the
	// test's own connections come on top of the bound; a relay that kept
	// what it was given would hold all of it.
	if limit := int64(3*maxBuffered + 64<<20); peakHeap.Load() > limit {
		t.Fatalf("heap grew by %d bytes while %d were pushed", peakHeap.Load(), pushed)
	}
	// Every stalled client was disconnected as too slow (those whose
	// socket was stuck mid-frame cannot read the close frame; a peer that
	// reads late gets it, see TestRelaySlowPeerIsDisconnected).
	waitMetrics(t, r, func(m relay.Metrics) bool {
		return m.ClientConns == 0 && m.DaemonConns == 1 && m.SlowDisconnects == uint64(n)
	})
	for _, c := range stalled[:5] {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var err error
		for err == nil {
			_, _, err = c.Read(ctx)
		}
		timedOut := ctx.Err() != nil
		cancel()
		if code := websocket.CloseStatus(err); (code != relay.CloseTooSlow && code != -1) || timedOut {
			t.Fatalf("stalled client ended with %v", err)
		}
	}
	waitMetrics(t, r, func(m relay.Metrics) bool { return m.BufferedBytes == 0 })
}

// One client that stops reading must not hold up the others of the same
// daemon: the relay routes without waiting, drops the slow one alone, and
// the others' round trips stay short while it happens.
func TestRelaySlowClientDoesNotStallOthers(t *testing.T) {
	f := newFixture(t)
	// A relay that waited for the slow client would stall the daemon's
	// read loop for this long.
	const slow = 20 * time.Second
	r, base := startRelay(t, f.s, relay.Options{SlowTimeout: slow})
	d := f.daemon(t, base)
	slowC := f.client(t, base)
	slowCh := read(t, d).Channel
	const fast = 4
	clients := make([]*websocket.Conn, fast)
	for i := range clients {
		clients[i] = f.client(t, base)
		read(t, d)
	}
	// The daemon echoes every data envelope back on its channel.
	go func() {
		for {
			_, b, err := d.Read(context.Background())
			if err != nil {
				return
			}
			var e relay.Envelope
			if json.Unmarshal(b, &e) == nil && e.Type == relay.TypeData {
				out, _ := json.Marshal(relay.Envelope{Type: relay.TypeData, Channel: e.Channel, Payload: e.Payload})
				if d.Write(context.Background(), websocket.MessageText, out) != nil {
					return
				}
			}
		}
	}()
	// Meanwhile the daemon floods the slow client.
	flood, _ := json.Marshal(relay.Envelope{Type: relay.TypeData, Channel: slowCh, Payload: strings.Repeat("F", 32<<10)})
	var flooding atomic.Bool
	flooding.Store(true)
	go func() {
		for flooding.Load() {
			if d.Write(context.Background(), websocket.MessageText, flood) != nil {
				return
			}
		}
	}()

	var mu sync.Mutex
	var rtts []time.Duration
	var wg sync.WaitGroup
	end := time.Now().Add(3 * time.Second)
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; time.Now().Before(end) || r.Metrics().SlowDisconnects == 0; seq++ {
				if time.Now().After(end.Add(slow)) {
					return
				}
				msg := fmt.Sprintf("c%d-%d", i, seq)
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 2*slow)
				err := c.Write(ctx, websocket.MessageText, []byte(`{"t":"data","p":"`+msg+`"}`))
				var b []byte
				if err == nil {
					_, b, err = c.Read(ctx)
				}
				cancel()
				if err != nil {
					t.Errorf("fast client %d: %v", i, err)
					return
				}
				if !strings.Contains(string(b), msg) {
					t.Errorf("fast client %d got %s", i, b)
					return
				}
				mu.Lock()
				rtts = append(rtts, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	flooding.Store(false)
	if r.Metrics().SlowDisconnects == 0 {
		t.Fatal("the slow client was never disconnected")
	}
	slices.Sort(rtts)
	if len(rtts) < 20 {
		t.Fatalf("only %d round trips", len(rtts))
	}
	p50, p99 := rtts[len(rtts)/2], rtts[len(rtts)*99/100]
	t.Logf("%d round trips of %d other clients while one client was flooded: p50 %v, p99 %v, max %v",
		len(rtts), fast, p50.Round(time.Microsecond), p99.Round(time.Microsecond), rtts[len(rtts)-1].Round(time.Microsecond))
	// Not a speed requirement: a stall shows as the slow timeout itself.
	if p99 >= slow/4 {
		t.Fatalf("the other clients stalled: p99 %v", p99)
	}
	if code := closeCode(t, slowC); code != relay.CloseTooSlow {
		t.Fatalf("slow client closed with %v", code)
	}
}
