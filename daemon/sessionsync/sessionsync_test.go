package sessionsync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/sessionsync"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// switchable publishes to whichever server is current (a restarted test
// server listens on another port).
type switchable struct {
	mu sync.Mutex
	c  *sdk.Client
}

func (p *switchable) set(c *sdk.Client) { p.mu.Lock(); p.c = c; p.mu.Unlock() }
func (p *switchable) SyncSession(ctx context.Context, r sdk.SyncRequest) (sdk.SyncResult, error) {
	p.mu.Lock()
	c := p.c
	p.mu.Unlock()
	return c.SyncSession(ctx, r)
}

func daemonStore(t testing.TB) (*store.Store, store.Session) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{Path: filepath.Join(t.TempDir(), "daemon.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	d, _, err := st.AddDirectory(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sess, err := st.CreateSession(ctx, store.NewSession{DirectoryID: d.ID, Agent: "claude", Model: "sonnet", Status: store.StatusRunning})
	if err != nil {
		t.Fatal(err)
	}
	return st, sess
}

func appendEvents(t testing.TB, st *store.Store, sid string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		data := fmt.Sprintf(`{"i":%d,"text":"step %d"}`, i, i)
		if i == 3 {
			data = `{"i":3,"command":"export OPENAI_API_KEY=sk-proj-THISISAKNOWNSECRET0123456789"}`
		}
		if _, err := st.Append(context.Background(), sid, "agent.output", json.RawMessage(data)); err != nil {
			t.Fatal(err)
		}
	}
}

// feed reads the control plane's event feed page by page.
func feed(t *testing.T, s *servertest.Server, token, ws, sid string, page int) []map[string]any {
	t.Helper()
	var out []map[string]any
	after := int64(0)
	for {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/resources/%s/sessions/%s/events?after_sequence=%d&limit=%d", s.URL, ws, sid, after, page), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Data []struct {
				Attributes map[string]any `json:"attributes"`
			} `json:"data"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("feed: %d", resp.StatusCode)
		}
		for _, d := range body.Data {
			out = append(out, d.Attributes)
		}
		if len(body.Data) < page {
			return out
		}
		after = int64(body.Data[len(body.Data)-1].Attributes["seq"].(float64))
	}
}

// A session syncs; the server stops mid-session and comes back; the daemon
// restarts: the feed equals the daemon's log, seq for seq, nothing lost
// and nothing twice.
func TestSyncSurvivesServerAndDaemonRestarts(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "server")
	s := servertest.Start(t, servertest.Options{DataDir: dataDir})
	owner := s.NewUser("o@example.com")
	in, err := owner.Client.CreateInstall(context.Background(), owner.Workspace, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	st, sess := daemonStore(t)
	pub := &switchable{c: s.Client(in.IssueToken)}
	cursor := filepath.Join(t.TempDir(), "sync.json")
	newSyncer := func() *sessionsync.Syncer {
		y, err := sessionsync.New(sessionsync.Options{Source: &sessionsync.StoreSource{Store: st}, Publisher: pub, CursorFile: cursor, Batch: 50})
		if err != nil {
			t.Fatal(err)
		}
		return y
	}
	y := newSyncer()
	ctx := context.Background()
	appendEvents(t, st, sess.ID, 1, 120)
	if n, err := y.SyncOnce(ctx); err != nil || n != 120 || y.Acked(sess.ID) != 120 {
		t.Fatalf("first sync: %d %v acked %d", n, err, y.Acked(sess.ID))
	}

	// The server goes away mid-session; the daemon keeps logging.
	s.Stop()
	appendEvents(t, st, sess.ID, 121, 80)
	if _, err := y.SyncOnce(ctx); err == nil {
		t.Fatal("sync with the server down succeeded")
	}
	if y.Acked(sess.ID) != 120 {
		t.Fatalf("acked moved while offline: %d", y.Acked(sess.ID))
	}
	s = servertest.Start(t, servertest.Options{DataDir: dataDir})
	pub.set(s.Client(in.IssueToken))
	if n, err := y.SyncOnce(ctx); err != nil || n != 80 {
		t.Fatalf("sync after restart: %d %v", n, err)
	}
	// The daemon restarts (a new syncer from the cursor file) and a
	// second syncer with no cursor races it: nothing is stored twice.
	appendEvents(t, st, sess.ID, 201, 30)
	other, err := sessionsync.New(sessionsync.Options{Source: &sessionsync.StoreSource{Store: st}, Publisher: pub, CursorFile: filepath.Join(t.TempDir(), "fresh.json")})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var stored [2]int
	for i, sy := range []*sessionsync.Syncer{newSyncer(), other} {
		wg.Add(1)
		go func(i int, sy *sessionsync.Syncer) {
			defer wg.Done()
			n, err := sy.SyncOnce(ctx)
			if err != nil {
				t.Errorf("syncer %d: %v", i, err)
			}
			stored[i] = n
		}(i, sy)
	}
	wg.Wait()
	if stored[0]+stored[1] != 30 {
		t.Fatalf("stored %v, want 30 in all", stored)
	}

	// The feed equals the daemon's log, seq for seq, in pages of 7.
	list := s.Client(owner.Token)
	recs, err := list.ListRecords(ctx, "/api/resources/"+owner.Workspace+"/sessions?source_kind=daemon")
	if err != nil || len(recs) != 1 {
		t.Fatalf("daemon sessions %v %v", recs, err)
	}
	got := feed(t, s, owner.Token, owner.Workspace, recs[0].ID, 7)
	log, err := st.Events(ctx, sess.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(log) || len(log) != 230 {
		t.Fatalf("feed has %d events, the log %d", len(got), len(log))
	}
	for i, e := range log {
		if int64(got[i]["seq"].(float64)) != e.Seq || got[i]["kind"] != e.Kind {
			t.Fatalf("event %d: feed %v, log seq %d kind %s", i, got[i], e.Seq, e.Kind)
		}
	}
	// Redacted by default: the known secret never left the machine.
	all, _ := json.Marshal(got)
	if strings.Contains(string(all), "THISISAKNOWNSECRET") || !strings.Contains(string(all), "step 150") {
		t.Fatalf("upload not redacted or lost: %.300s", all)
	}
	// Pages of the largest size give the same feed.
	if big := feed(t, s, owner.Token, owner.Workspace, recs[0].ID, 100); len(big) != 230 {
		t.Fatalf("pages of 100: %d", len(big))
	}
	if recs[0].Attributes["agent"] != "claude" || recs[0].Attributes["status"] != "running" || recs[0].Attributes["install_id"] != in.ID {
		t.Fatalf("session record %v", recs[0].Attributes)
	}
}

func TestSyncBadInput(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("o@example.com")
	ctx := context.Background()
	in, err := owner.Client.CreateInstall(ctx, owner.Workspace, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	c := s.Client(in.IssueToken)
	now := time.Now().UTC()
	sess := sdk.SyncSession{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Agent: "codex", Status: "running", CreatedAt: now, UpdatedAt: now}
	evs := func(from, n int) []sdk.SyncEvent {
		var out []sdk.SyncEvent
		for i := from; i < from+n; i++ {
			out = append(out, sdk.SyncEvent{Seq: int64(i), Kind: "k", TS: now})
		}
		return out
	}
	if _, err := c.SyncSession(ctx, sdk.SyncRequest{Session: sess, Events: evs(1, sdk.MaxSyncEvents+1)}); !sdk.IsCode(err, sdk.CodeValidation) {
		t.Fatalf("oversized batch: %v", err)
	}
	big := evs(1, 1)
	big[0].Data = json.RawMessage(`"` + strings.Repeat("x", 2<<20) + `"`)
	if _, err := c.SyncSession(ctx, sdk.SyncRequest{Session: sess, Events: big}); !sdk.IsCode(err, sdk.CodeBodyTooLarge) {
		t.Fatalf("oversized body: %v", err)
	}
	if _, err := c.SyncSession(ctx, sdk.SyncRequest{Session: sess, Events: []sdk.SyncEvent{{Seq: 1, Kind: "k", TS: now}, {Seq: 3, Kind: "k", TS: now}}}); !sdk.IsCode(err, sdk.CodeValidation) {
		t.Fatalf("non-consecutive batch: %v", err)
	}
	if r, err := c.SyncSession(ctx, sdk.SyncRequest{Session: sess, UploadMode: "metadata", Events: evs(1, 10)}); err != nil || r.AckedSeq != 10 {
		t.Fatalf("sync: %+v %v", r, err)
	}
	_, err = c.SyncSession(ctx, sdk.SyncRequest{Session: sess, Events: evs(15, 3)})
	var ae *sdk.APIError
	if !sdk.IsCode(err, sdk.CodeSyncGap) || !errorsAs(err, &ae) || !strings.Contains(string(ae.Data), `"acked_seq":10`) {
		t.Fatalf("gap: %v", err)
	}
	// Another install cannot take over the session.
	in2, _ := owner.Client.CreateInstall(ctx, owner.Workspace, "other")
	if _, err := s.Client(in2.IssueToken).SyncSession(ctx, sdk.SyncRequest{Session: sess, Events: evs(11, 1)}); !sdk.IsCode(err, sdk.CodeConflict) {
		t.Fatalf("takeover: %v", err)
	}
	// A detached install is refused at once.
	if _, err := owner.Client.Do(ctx, "DELETE", "/api/workspaces/"+owner.Workspace+"/installs/"+in.ID, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SyncSession(ctx, sdk.SyncRequest{Session: sess, Events: evs(11, 1)}); !sdk.IsCode(err, sdk.CodeUnauthenticated) {
		t.Fatalf("detached install: %v", err)
	}
	// A user token is not a daemon credential.
	if _, err := owner.Client.SyncSession(ctx, sdk.SyncRequest{Session: sess}); !sdk.IsCode(err, sdk.CodeUnauthenticated) {
		t.Fatalf("user token: %v", err)
	}
}

func errorsAs(err error, target **sdk.APIError) bool {
	ae, ok := err.(*sdk.APIError)
	if ok {
		*target = ae
	}
	return ok
}
