package wireclient

import (
	"context"
	"encoding/json"
	"testing"

	"reeve.dev/reeve/daemon/wire"
)

// The client's delivery path — read a frame, find its type, decode it,
// hand it to its subscription — next to the least any client must do with
// the same frames (decode each once), so the figures read as a ratio.

const benchEvents = 20000

func benchFrames() [][]byte {
	frames := make([][]byte, benchEvents)
	for i := range frames {
		frames[i] = updateFrame("S", int64(i+1))
	}
	return frames
}

// BenchmarkSubscriptionDelivery streams frames through an in-memory
// transport to a subscription's consumer.
func BenchmarkSubscriptionDelivery(b *testing.B) {
	frames := benchFrames()
	for i := 0; i < b.N; i++ {
		d := &fakeDaemon{t: nil, handle: func(e *daemonEnd, typ, id string, f []byte) {
			e.ack(id, nil)
			go func() {
				for _, fr := range frames {
					e.p.WriteFrame(context.Background(), fr)
				}
				e.send(wire.SessionEnded{Type: wire.TypeSessionEnded, SessionID: "S", Status: "completed", LastSeq: benchEvents})
			}()
		}}
		c, err := Dial(context.Background(), Options{Dial: d.dial})
		if err != nil {
			b.Fatal(err)
		}
		s, err := c.Subscribe(context.Background(), "S", 0)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for range s.Updates() {
			n++
		}
		if n != benchEvents {
			b.Fatalf("%d events", n)
		}
		c.Close()
	}
	b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkDecodeOnly decodes the same frames, and nothing else.
func BenchmarkDecodeOnly(b *testing.B) {
	frames := benchFrames()
	for i := 0; i < b.N; i++ {
		for _, fr := range frames {
			var u wire.SessionUpdate
			if err := json.Unmarshal(fr, &u); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
}
