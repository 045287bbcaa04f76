package sessionsync_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"reeve.dev/reeve/daemon/sessionsync"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// counting publishes through a client and counts the requests.
type counting struct {
	c    *sdk.Client
	n    atomic.Int32
	last atomic.Pointer[sdk.SyncRequest]
}

func (p *counting) SyncSession(ctx context.Context, r sdk.SyncRequest) (sdk.SyncResult, error) {
	p.n.Add(1)
	p.last.Store(&r)
	return p.c.SyncSession(ctx, r)
}

// The project's .reeve/access.yaml travels with the session: a member the
// file gives none cannot read the synced session through REST, a change
// to the file reaches the control plane on the next pass (and only then:
// a pass with nothing new sends nothing), and removing the file lifts the
// cap.
func TestAccessFileSyncsWithTheSession(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("owner@example.com")
	ws := owner.Workspace
	carol := s.AddMember(ws, "carol@example.com", sdk.RoleMember)
	ctx := context.Background()
	in, err := owner.Client.CreateInstall(ctx, ws, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	st, sess := daemonStore(t)
	appendEvents(t, st, sess.ID, 1, 3)
	d, err := st.Directory(ctx, sess.DirectoryID)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(d.Path, ".reeve", "access.yaml")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	pub := &counting{c: s.Client(in.IssueToken)}
	cursor := filepath.Join(t.TempDir(), "c.json")
	y, err := sessionsync.New(sessionsync.Options{Source: &sessionsync.StoreSource{Store: st}, Publisher: pub, CursorFile: cursor, Mode: sdk.UploadFull})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(wantRequests int32) {
		t.Helper()
		before := pub.n.Load()
		if _, err := y.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if got := pub.n.Load() - before; got != wantRequests {
			t.Fatalf("pass sent %d requests, want %d", got, wantRequests)
		}
	}
	base := "/api/resources/" + ws + "/sessions"
	var rid string
	status := func(path string) int {
		t.Helper()
		_, err := carol.Client.Do(ctx, "GET", base+"/"+rid+path, nil, nil)
		if err == nil {
			return 200
		}
		if ae, ok := err.(*sdk.APIError); ok {
			return ae.Status
		}
		t.Fatal(err)
		return 0
	}
	listed := func() bool {
		t.Helper()
		var l sdk.RecordCollectionResponse
		if _, err := carol.Client.Do(ctx, "GET", base, nil, &l); err != nil {
			t.Fatal(err)
		}
		for _, r := range l.Data {
			if r.ID == rid {
				return true
			}
		}
		return false
	}
	readable := func(want bool) {
		t.Helper()
		for _, p := range []string{"", "/events", "/receipt-export"} {
			if got := status(p); (got == 200) != want {
				t.Fatalf("GET session%s as carol: %d, want readable=%v", p, got, want)
			}
		}
		if listed() != want {
			t.Fatalf("carol lists the session: %v, want %v", !want, want)
		}
	}

	// No file: no access is sent, and the workspace sees the session.
	pass(1)
	if pub.last.Load().Session.Access != nil {
		t.Fatalf("access sent without a file: %+v", pub.last.Load().Session.Access)
	}
	var l sdk.RecordCollectionResponse
	if _, err := owner.Client.Do(ctx, "GET", base, nil, &l); err != nil || len(l.Data) != 1 {
		t.Fatalf("owner's list: %v %+v", err, l)
	}
	rid = l.Data[0].ID
	readable(true)
	pass(0)

	// A file that gives carol nothing: the next pass carries it, once.
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("version: 1\ndefault_role: none\nmembers:\n  - user: owner@example.com\n    role: admin\n")
	pass(1)
	if a := pub.last.Load().Session.Access; a == nil || a.DefaultRole != "none" || len(a.Members) != 1 {
		t.Fatalf("access sent: %+v", a)
	}
	readable(false)
	pass(0)
	appendEvents(t, st, sess.ID, 4, 2) // events alone do not change the rule
	pass(1)
	readable(false)

	// Listed by email (in another case): she reads again.
	write("version: 1\ndefault_role: none\nmembers:\n  - user: Carol@Example.com\n    role: viewer\n")
	pass(1)
	readable(true)

	// A broken file refuses everyone, as on the daemon.
	write("version: 1\ndefault_role: everyone\nmembers: []\n")
	pass(1)
	if a := pub.last.Load().Session.Access; a == nil || a.Invalid == "" {
		t.Fatalf("invalid file sent as %+v", a)
	}
	readable(false)

	// No file any more: no cap.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	pass(1)
	readable(true)
	pass(0)

	// A restarted syncer (same cursor) sends nothing new; with the file
	// back it sends it.
	if y, err = sessionsync.New(sessionsync.Options{Source: &sessionsync.StoreSource{Store: st}, Publisher: pub, CursorFile: cursor, Mode: sdk.UploadFull}); err != nil {
		t.Fatal(err)
	}
	pass(0)
	write("version: 1\ndefault_role: none\nmembers:\n  - team: platform\n    role: operator\n")
	pass(1)
	readable(false)
}
