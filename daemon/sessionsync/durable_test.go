package sessionsync_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/sessionsync"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/server/servertest"
)

// Only what is on the daemon's disk leaves it: while the log's fsync
// fails or hangs, events the store already shows are not uploaded, and
// once it works again they are, once each.
func TestSyncUploadsOnlyDurableEvents(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("o@example.com")
	ctx := context.Background()
	in, err := owner.Client.CreateInstall(ctx, owner.Workspace, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	var failing atomic.Bool
	var hang atomic.Pointer[chan struct{}]
	st, err := store.Open(ctx, store.Options{Path: filepath.Join(t.TempDir(), "daemon.db"), SyncFault: func(f *os.File) error {
		if h := hang.Load(); h != nil {
			<-*h
		}
		if failing.Load() {
			return errors.New("input/output error")
		}
		return f.Sync()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	d, _, err := st.AddDirectory(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sess, err := st.CreateSession(ctx, store.NewSession{DirectoryID: d.ID, Agent: "claude", Status: store.StatusRunning})
	if err != nil {
		t.Fatal(err)
	}
	y, err := sessionsync.New(sessionsync.Options{Source: &sessionsync.StoreSource{Store: st}, Publisher: s.Client(in.IssueToken), CursorFile: filepath.Join(t.TempDir(), "c.json")})
	if err != nil {
		t.Fatal(err)
	}
	appendEvents(t, st, sess.ID, 1, 10)
	if n, err := y.SyncOnce(ctx); n != 10 || err != nil {
		t.Fatalf("first pass: %d %v", n, err)
	}

	// The fsync fails: ten more events are visible in the log, none goes.
	failing.Store(true)
	appendEvents(t, st, sess.ID, 11, 10)
	if evs, _ := st.Events(ctx, sess.ID, 10, 0); len(evs) != 10 {
		t.Fatalf("the log shows %d new events", len(evs))
	}
	if n, err := y.SyncOnce(ctx); err == nil || n != 0 || y.Acked(sess.ID) != 10 {
		t.Fatalf("pass with a failing fsync: %d %v acked %d", n, err, y.Acked(sess.ID))
	}
	// It hangs: a pass with a deadline uploads nothing either.
	failing.Store(false)
	release := make(chan struct{})
	hang.Store(&release)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	n, err := y.SyncOnce(short)
	cancel()
	if err == nil || n != 0 || y.Acked(sess.ID) != 10 {
		t.Fatalf("pass with a hanging fsync: %d %v acked %d", n, err, y.Acked(sess.ID))
	}
	recs, err := owner.Client.ListRecords(ctx, "/api/resources/"+owner.Workspace+"/sessions?source_kind=daemon")
	if err != nil || len(recs) != 1 {
		t.Fatalf("sessions %v %v", recs, err)
	}
	if got := feed(t, s, owner.Token, owner.Workspace, recs[0].ID, 100); len(got) != 10 {
		t.Fatalf("the control plane holds %d events, want the 10 durable ones", len(got))
	}
	// The disk recovers: the rest goes, once.
	hang.Store(nil)
	close(release)
	if n, err := y.SyncOnce(ctx); n != 10 || err != nil {
		t.Fatalf("pass after recovery: %d %v", n, err)
	}
	got := feed(t, s, owner.Token, owner.Workspace, recs[0].ID, 100)
	if len(got) != 20 {
		t.Fatalf("feed %d events", len(got))
	}
	for i, e := range got {
		if int64(e["seq"].(float64)) != int64(i+1) {
			t.Fatalf("event %d has seq %v", i, e["seq"])
		}
	}
}
