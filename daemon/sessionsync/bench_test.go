package sessionsync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/sessionsync"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// visibleSource reads the log up to what the store shows, not to its
// durable mark: how the syncer read before the mark, kept as the
// benchmark's baseline.
type visibleSource struct{ *sessionsync.StoreSource }

func (v visibleSource) Events(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]sdk.SyncEvent, error) {
	evs, err := v.Store.Events(ctx, sessionID, afterSeq, limit)
	if err != nil {
		return nil, err
	}
	out := make([]sdk.SyncEvent, len(evs))
	for i, e := range evs {
		out[i] = sdk.SyncEvent{Seq: e.Seq, Kind: e.Kind, TS: e.TS, Data: e.Data}
	}
	return out, nil
}

// BenchmarkSync measures events/s from the daemon's log to the control
// plane, and the lag from an event's commit on the daemon to its being
// readable through REST (p99: the first event of a batch of 100, from its
// append to the batch's last event answering GET …/events). events/s
// counts the whole loop (the daemon's 100 fsynced appends included);
// sync-events/s only the passes of the syncer. "durable" reads up to the
// log's durable mark (an fsync of its own per pass with news); the
// baseline, "visible", reads what the store shows.
func BenchmarkSync(b *testing.B) {
	for _, mode := range []string{"visible-baseline", "durable"} {
		b.Run(mode, func(b *testing.B) {
			s := servertest.Start(b, servertest.Options{})
			owner := s.NewUser("o@example.com")
			ctx := context.Background()
			in, err := owner.Client.CreateInstall(ctx, owner.Workspace, "m")
			if err != nil {
				b.Fatal(err)
			}
			st, sess := daemonStore(b)
			var src sessionsync.Source = &sessionsync.StoreSource{Store: st}
			if mode == "visible-baseline" {
				src = visibleSource{&sessionsync.StoreSource{Store: st}}
			}
			y, err := sessionsync.New(sessionsync.Options{Source: src, Publisher: s.Client(in.IssueToken), CursorFile: filepath.Join(b.TempDir(), "c.json")})
			if err != nil {
				b.Fatal(err)
			}
			var lag []time.Duration
			var syncing time.Duration
			b.ResetTimer()
			start := time.Now()
			total := 0
			sid := ""
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				for j := 0; j < 100; j++ {
					if _, err := st.Append(ctx, sess.ID, "agent-message", json.RawMessage(fmt.Sprintf(`{"text":"line %d %d"}`, i, j))); err != nil {
						b.Fatal(err)
					}
				}
				t1 := time.Now()
				n, err := y.SyncOnce(ctx)
				if err != nil || n != 100 {
					b.Fatalf("sync %d %v", n, err)
				}
				syncing += time.Since(t1)
				// Readable through REST: the batch's last event is in the feed.
				if i == 0 {
					recs, err := owner.Client.ListRecords(ctx, "/api/resources/"+owner.Workspace+"/sessions?source_kind=daemon")
					if err != nil || len(recs) != 1 {
						b.Fatalf("sessions %v %v", recs, err)
					}
					sid = recs[0].ID
				}
				last, err := owner.Client.ListRecords(ctx, fmt.Sprintf("/api/resources/%s/sessions/%s/events?after_sequence=%d&limit=1", owner.Workspace, sid, total+99))
				if err != nil || len(last) != 1 {
					b.Fatalf("event %d not readable: %v %v", total+100, last, err)
				}
				total += n
				lag = append(lag, time.Since(t0))
			}
			el := time.Since(start)
			sort.Slice(lag, func(i, j int) bool { return lag[i] < lag[j] })
			b.ReportMetric(float64(total)/el.Seconds(), "events/s")
			b.ReportMetric(float64(total)/syncing.Seconds(), "sync-events/s")
			b.ReportMetric(float64(lag[len(lag)*99/100].Microseconds())/1000, "lag-p99-ms")
		})
	}
}
