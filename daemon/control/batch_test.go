package control

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
)

// TestBatchedSubscription follows a session that asked for batches while
// events of every size pour in (one larger than a batch may be), dropping
// the connection at random points and resuming from the last seq seen: every
// event arrives exactly once, in order, each element of a batch is the
// session-update frame the event would have been alone, no batch exceeds
// wire.MaxBatchBytes, and a replay does travel in batches.
func TestBatchedSubscription(t *testing.T) {
	f := newWSFixture(t)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(3))
	sizes := func() int {
		switch rng.Intn(50) {
		case 0:
			return wire.MaxBatchBytes + 5000 // alone in its frame
		case 1:
			return wire.MaxBatchBytes - 200 // nearly fills one
		default:
			return rng.Intn(3000)
		}
	}
	const stored, live = 2000, 2000
	// One producer, so the i-th append gets seq i; the data is decided
	// first because a follower may see an event before Append returns.
	want := make([]string, stored+live+1)
	for i := 1; i < len(want); i++ {
		want[i] = fmt.Sprintf(`{"text":%q}`, strings.Repeat(string(rune('a'+i%26)), sizes()))
	}
	next := 1
	add := func(n int) {
		for ; n > 0; n-- {
			e, err := f.st.Append(ctx, f.sid, wire.KindTerminalOutput, json.RawMessage(want[next]))
			if err != nil || e.Seq != int64(next) {
				t.Errorf("append %d: seq %d, %v", next, e.Seq, err)
				return
			}
			next++
		}
	}
	add(stored)
	done := make(chan struct{})
	go func() {
		defer close(done)
		add(live)
		f.st.UpdateSessionStatus(ctx, f.sid, store.StatusCompleted, "")
	}()
	var last int64
	batches, maxPerBatch, reconnects := 0, 0, 0
	check := func(raw []byte) {
		var u wire.SessionUpdate
		if err := json.Unmarshal(raw, &u); err != nil || u.Type != wire.TypeSessionUpdate || u.SessionID != f.sid {
			t.Fatalf("bad update %.200s: %v", raw, err)
		}
		if u.Seq != last+1 {
			t.Fatalf("seq %d after %d", u.Seq, last)
		}
		if string(u.Data) != want[u.Seq] {
			t.Fatalf("seq %d: data differs", u.Seq)
		}
		last = u.Seq
	}
	for ended := false; !ended; reconnects++ {
		tc := f.dial(t, true)
		tc.send(wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "s", SessionID: f.sid, AfterSeq: last, Batch: true})
		if a := tc.ack(); !a.OK {
			t.Fatalf("subscribe: %+v", a)
		}
		for budget := 1 + rng.Intn(60); budget > 0; budget-- {
			raw := tc.readRaw()
			var env wire.Envelope
			json.Unmarshal(raw, &env)
			switch env.Type {
			case wire.TypeSessionUpdate:
				check(raw)
			case wire.TypeSessionUpdates:
				if len(raw) > wire.MaxBatchBytes {
					t.Fatalf("a batch of %d bytes, the limit is %d", len(raw), wire.MaxBatchBytes)
				}
				var b wire.SessionUpdates
				if err := json.Unmarshal(raw, &b); err != nil || b.SessionID != f.sid || len(b.Updates) < 2 {
					t.Fatalf("bad batch (%d updates): %v", len(b.Updates), err)
				}
				batches++
				maxPerBatch = max(maxPerBatch, len(b.Updates))
				for _, u := range b.Updates {
					check(u)
				}
			case wire.TypeSessionEnded:
				ended = true
				budget = 0
			default:
				t.Fatalf("unexpected frame %.200s", raw)
			}
		}
		tc.c.CloseNow()
	}
	<-done
	if last != stored+live {
		t.Fatalf("followed to %d, want %d", last, stored+live)
	}
	if batches == 0 || maxPerBatch < 10 {
		t.Fatalf("%d batches, at most %d events in one: the replay was not batched", batches, maxPerBatch)
	}
	t.Logf("%d batches (up to %d events), %d reconnections", batches, maxPerBatch, reconnects)

	// A subscription that did not ask gets one frame per event.
	tc := f.dial(t, true)
	tc.send(wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "s", SessionID: f.sid})
	tc.ack()
	if got := readUpdates(t, tc, 0); got != stored+live {
		t.Fatalf("unbatched replay to %d", got)
	}
}
