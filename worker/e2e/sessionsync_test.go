package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// newPairedMachine is a daemon home paired with the plane (an install
// and its issue token, as `reeve pair` leaves them) before the daemon
// starts, so the daemon's session sync publishes to the plane.
func newPairedMachine(t *testing.T, p *plane, name string) (*machine, sdk.Install) {
	t.Helper()
	in, err := p.owner.Client.CreateInstall(ctxT(t), p.owner.Workspace, name)
	if err != nil {
		t.Fatal(err)
	}
	m := &machine{t: t, home: filepath.Join(t.TempDir(), "home"), env: os.Environ()}
	d := home.Dir(m.home)
	if err := d.Prepare(); err != nil {
		t.Fatal(err)
	}
	creds := home.RelayCredentials{InstallID: in.ID, WorkspaceID: p.owner.Workspace, IssueToken: in.IssueToken, ServerURL: p.srv.URL,
		Worker: true, Transport: "polling", PairedAt: time.Now()}
	if err := d.WriteRelayCredentials(creds); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.run("stop", "--force", "--timeout", "10") })
	m.must("start", "--listen", "127.0.0.1:0")
	return m, in
}

// syncedEvent is an event of a synced session as the control plane
// answers it.
type syncedEvent struct {
	Seq  int64  `json:"seq"`
	Kind string `json:"kind"`
}

// planeEvents reads every event the control plane holds for a synced
// session, by the daemon's seq.
func planeEvents(t *testing.T, p *plane, sessionRecord string) []syncedEvent {
	t.Helper()
	var out []syncedEvent
	after := int64(0)
	for {
		var page struct {
			Data []struct {
				Attributes syncedEvent `json:"attributes"`
			} `json:"data"`
			Meta sdk.ListMeta `json:"meta"`
		}
		path := fmt.Sprintf("/api/resources/%s/sessions/%s/events?after_sequence=%d&limit=500", p.owner.Workspace, sessionRecord, after)
		if _, err := p.owner.Client.Do(ctxT(t), http.MethodGet, path, nil, &page); err != nil {
			t.Fatalf("session events: %v", err)
		}
		for _, d := range page.Data {
			out = append(out, d.Attributes)
		}
		if page.Meta.NextAfter == 0 || len(page.Data) == 0 {
			return out
		}
		after = page.Meta.NextAfter
	}
}

// A run executed by a worker's daemon has its session and its events on
// the control plane: the daemon's session sync publishes them, the run
// links to the session record, and the plane holds the daemon's log seq
// for seq. The worker serves a runner pool, so it also shows that a
// pooled worker takes its pool's run and leaves the default pool's.
func TestWorkerRunSessionSyncedSeqForSeq(t *testing.T) {
	p := newPlane(t, servertest.Options{})
	_, cred := p.executor(p.owner, "synced", nil, nil)
	repo := gitRepo(t, "app")
	m, in := newPairedMachine(t, p, "worker-box")
	w := m.startWorker("gpu", "--server", p.srv.URL, "--credential-file", cred, "--workdir", repo, "--agents", "shell", "--runner-pool", "gpu")
	unpooled := p.queue(sdk.WorkflowRunCreateRequest{Agent: "shell", Prompt: "echo default > default.txt", Workdir: "app"})
	run := p.queue(sdk.WorkflowRunCreateRequest{Agent: "shell", Prompt: "for i in 1 2 3; do echo line $i; done | tee synced.txt", Workdir: "app", RunnerPool: "gpu"})
	done := p.waitRun(run.ID, "the end", 3*time.Minute, func(r sdk.WorkflowRun) bool { return sdk.RunTerminal(r.Status) })
	if done.Status != sdk.RunSucceeded || done.SessionID == "" || done.RunnerPool != "gpu" {
		t.Fatalf("run: %+v", done)
	}

	// The daemon's own log of the session, which has ended.
	c, _, err := controlclient.FromHome(home.Dir(m.home), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	local, err := c.Events(ctxT(t), done.SessionID, 0, 5000)
	if err != nil || len(local) == 0 {
		t.Fatalf("daemon events: %d %v", len(local), err)
	}

	// The plane catches up within a few sync passes (2 s each).
	var linked sdk.WorkflowRun
	var remote []syncedEvent
	deadline := time.Now().Add(90 * time.Second)
	for {
		linked = p.run(run.ID)
		if linked.SyncedSessionID != "" {
			remote = planeEvents(t, p, linked.SyncedSessionID)
			if len(remote) >= len(local) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the plane holds %d of the session's %d events (session record %q); worker log:\n%s", len(remote), len(local), linked.SyncedSessionID, w.log())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(remote) != len(local) {
		t.Fatalf("the plane holds %d events, the daemon %d", len(remote), len(local))
	}
	for i := range local {
		if remote[i].Seq != local[i].Seq || remote[i].Kind != local[i].Kind {
			t.Fatalf("event %d: plane %+v, daemon seq %d kind %s", i, remote[i], local[i].Seq, local[i].Kind)
		}
	}
	t.Logf("%d events, seq %d..%d, on the plane as session %s", len(local), local[0].Seq, local[len(local)-1].Seq, linked.SyncedSessionID)
	// The session record is the worker's daemon session, from this install.
	rec, err := p.owner.Client.GetRecord(ctxT(t), "/api/resources/"+p.owner.Workspace+"/sessions/"+linked.SyncedSessionID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Attributes["daemon_session_id"] != done.SessionID || rec.Attributes["install_id"] != in.ID || rec.Attributes["agent"] != "shell" {
		t.Fatalf("session record: %+v", rec.Attributes)
	}

	// The pooled worker left the default pool's run alone.
	if got := p.run(unpooled.ID); got.Status != sdk.RunQueued || got.Attempt != 0 {
		t.Fatalf("the default pool's run: %+v", got)
	}
	if rs := w.results(); len(rs) != 1 || rs[0].RunID != run.ID {
		t.Fatalf("worker results: %+v", rs)
	}
}
