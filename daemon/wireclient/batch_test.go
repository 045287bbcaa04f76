package wireclient

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand"
	"sync/atomic"
	"testing"

	"reeve.dev/reeve/daemon/wire"
)

// batchStreamer is a daemon that answers a subscription asking for batches
// with session-updates frames of random sizes (single frames between them),
// replaying a few events the client already has and dropping the first
// connection mid-stream.
func batchStreamer(t *testing.T, total, dropAt int64, dropped *atomic.Bool) func(e *daemonEnd, typ, id string, f []byte) {
	return func(e *daemonEnd, typ, id string, f []byte) {
		if typ != wire.TypeSubscribe {
			e.ack(id, nil)
			return
		}
		var req wire.SubscribeRequest
		json.Unmarshal(f, &req)
		if !req.Batch {
			t.Errorf("the client did not ask for batches: %s", f)
		}
		e.ack(id, nil)
		go func() {
			rng := rand.New(rand.NewSource(req.AfterSeq))
			for seq := max(1, req.AfterSeq-3); seq <= total; {
				if seq >= dropAt && dropped.CompareAndSwap(false, true) {
					e.p.Close("dropped")
					return
				}
				n := min(int64(1+rng.Intn(40)), total-seq+1)
				var frame []byte
				if n == 1 {
					frame = updateFrame(req.SessionID, seq)
				} else {
					b := wire.SessionUpdates{Type: wire.TypeSessionUpdates, SessionID: req.SessionID}
					for i := int64(0); i < n; i++ {
						b.Updates = append(b.Updates, updateFrame(req.SessionID, seq+i))
					}
					// Noise a client must skip: another session's event
					// and an element that is not a frame.
					b.Updates = append(b.Updates, updateFrame("OTHER", seq), json.RawMessage(`"garbage"`))
					frame, _ = json.Marshal(b)
				}
				if e.p.WriteFrame(context.Background(), frame) != nil {
					return
				}
				seq += n
			}
			e.send(wire.SessionEnded{Type: wire.TypeSessionEnded, SessionID: req.SessionID, Status: "completed", LastSeq: total})
		}()
	}
}

// TestBatchesDeliverEachEventOnce: events that come in session-updates
// frames reach the subscription one by one, in order, once each across a
// resumption, each with the frame it would have had alone as Raw.
func TestBatchesDeliverEachEventOnce(t *testing.T) {
	var dropped atomic.Bool
	d := &fakeDaemon{}
	d.handle = batchStreamer(t, 5000, 2345, &dropped)
	c := dialFake(t, d, Options{Reconnect: true})
	s, err := c.Subscribe(context.Background(), "S", 0)
	if err != nil {
		t.Fatal(err)
	}
	var want int64 = 1
	for u := range s.Updates() {
		if u.Seq != want || u.SessionID != "S" || !bytes.Equal(u.Raw, updateFrame("S", u.Seq)) {
			t.Fatalf("got seq %d (%s), want %d", u.Seq, u.Raw, want)
		}
		want++
	}
	if want != 5001 || s.Ended() == nil || s.Err() != nil {
		t.Fatalf("ended after %d: %+v %v", want-1, s.Ended(), s.Err())
	}
	if !dropped.Load() || c.Connections() != 2 {
		t.Fatalf("dropped %v, %d connections", dropped.Load(), c.Connections())
	}
}
