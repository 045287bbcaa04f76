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
	"reeve.dev/reeve/server/servertest"
)

// BenchmarkSync measures events/s from the daemon's log to the control
// plane, and the lag from an event's commit on the daemon to its being
// readable through REST (p99: the first event of a batch of 100, from its
// append to the batch's last event answering GET …/events).
func BenchmarkSync(b *testing.B) {
	s := servertest.Start(b, servertest.Options{})
	owner := s.NewUser("o@example.com")
	ctx := context.Background()
	in, err := owner.Client.CreateInstall(ctx, owner.Workspace, "m")
	if err != nil {
		b.Fatal(err)
	}
	st, sess := daemonStore(b)
	y, err := sessionsync.New(sessionsync.Options{Source: &sessionsync.StoreSource{Store: st}, Publisher: s.Client(in.IssueToken), CursorFile: filepath.Join(b.TempDir(), "c.json")})
	if err != nil {
		b.Fatal(err)
	}
	var lag []time.Duration
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
		n, err := y.SyncOnce(ctx)
		if err != nil || n != 100 {
			b.Fatalf("sync %d %v", n, err)
		}
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
	b.ReportMetric(float64(lag[len(lag)*99/100].Microseconds())/1000, "lag-p99-ms")
}
