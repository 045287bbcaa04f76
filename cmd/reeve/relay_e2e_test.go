package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/daemon/wireclient"
	"reeve.dev/reeve/server/sdk/remote"
)

// The whole product path with nothing stood in: `reeve server` with its own
// relay, `reeve pair` approved by the user, a daemon that pairing moved to
// the relay profile, and a remote client that launches and follows a
// session through the relay, end to end encrypted.
func TestRemoteSessionThroughServerRelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, serverURL, user, ws := ownedServer(t, "owner@example.com")

	h := newHome(t)
	h.start()
	creds := pairToServer(t, ctx, h, user, serverURL, ws)
	if l, err := home.Dir(h.dir).ReadLaunch(); err != nil || l.Profile != "relay" {
		t.Fatalf("pairing left the daemon in profile %q (%v)", l.Profile, err)
	}
	if !strings.HasPrefix(creds.RelayURL, serverURL) {
		t.Fatalf("relay URL %q is not the server's own origin %s", creds.RelayURL, serverURL)
	}

	c, err := remote.Dial(ctx, remote.Options{
		RelayURL: creds.RelayURL, WorkspaceID: ws, RuntimeTargetID: creds.InstallID,
		Fingerprint: strings.TrimSpace(h.must("pair", "anchor").stdout),
		Token:       remote.WorkspaceToken(user, ws), NoReconnect: true, Logf: t.Logf,
	})
	if err != nil {
		t.Fatalf("dial through the server's relay: %v", err)
	}
	defer c.Close()
	work := t.TempDir()
	h.must("add", work)
	si, err := c.Launch(ctx, wire.LaunchRequest{Directory: work, Agent: "shell", Prompt: "for i in 1 2 3; do echo remote-$i; done"})
	if err != nil {
		t.Fatalf("remote launch: %v", err)
	}
	sub, err := c.Subscribe(ctx, si.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []wireclient.Update
	for u := range sub.Updates() {
		got = append(got, u)
	}
	if end := sub.Ended(); end == nil || end.Status != "completed" || end.LastSeq != int64(len(got)) {
		t.Fatalf("ended %+v after %d events (%v)", end, len(got), sub.Err())
	}
	var out strings.Builder
	for i, u := range got {
		if u.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, u.Seq)
		}
		if u.Kind == wire.KindTerminalOutput {
			var d wire.TerminalOutput
			json.Unmarshal(u.Data, &d)
			out.WriteString(d.Text)
		}
	}
	if !strings.Contains(out.String(), "remote-3") {
		t.Fatalf("remote follower missed output: %q", out.String())
	}
	if logged := h.logEvents(si.ID); len(logged) != len(got) {
		t.Fatalf("the remote follower saw %d events, the log has %d", len(got), len(logged))
	}
}

// freePort finds a loopback port nobody listens on, so that a server can
// come back on the same address after a restart.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// A remote follower keeps its session across a restart of the server and
// its relay: the daemon's link and the client both reconnect, and the
// client resumes from the last seq it saw, with no gap and no duplicate.
func TestRemoteFollowAcrossServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	data := filepath.Join(t.TempDir(), "server")
	addr := freePort(t)
	srv1, _ := startReady(t, nil, "(API ", "server", "--listen", addr, "--data-dir", data)
	serverURL := "http://" + addr
	user := operatorClient(t, data, serverURL, "owner@example.com")
	wss, err := user.ListWorkspaces(ctx)
	if err != nil || len(wss) == 0 {
		t.Fatalf("workspaces: %v %v", wss, err)
	}
	ws := wss[0].ID

	h := newHome(t)
	h.start()
	creds := pairToServer(t, ctx, h, user, serverURL, ws)

	c, err := remote.Dial(ctx, remote.Options{
		RelayURL: creds.RelayURL, WorkspaceID: ws, RuntimeTargetID: creds.InstallID,
		Fingerprint: strings.TrimSpace(h.must("pair", "anchor").stdout),
		Token:       remote.WorkspaceToken(user, ws),
		MinBackoff:  100 * time.Millisecond, MaxBackoff: time.Second, Logf: t.Logf,
	})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	work := t.TempDir()
	h.must("add", work)
	si, err := c.Launch(ctx, wire.LaunchRequest{Directory: work, Agent: "shell",
		Prompt: "for i in $(seq 1 400); do echo line-$i; sleep 0.02; done"})
	if err != nil {
		t.Fatalf("remote launch: %v", err)
	}
	sub, err := c.Subscribe(ctx, si.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []wireclient.Update
	restarted := false
	for u := range sub.Updates() {
		got = append(got, u)
		if !restarted && u.Seq >= 10 {
			restarted = true
			srv1.cmd.Process.Signal(os.Interrupt)
			srv1.cmd.Wait()
			startReady(t, nil, "(API ", "server", "--listen", addr, "--data-dir", data)
		}
	}
	if !restarted {
		t.Fatal("the session ended before the restart")
	}
	if end := sub.Ended(); end == nil || end.Status != "completed" || end.LastSeq != int64(len(got)) {
		t.Fatalf("ended %+v after %d events (%v)", end, len(got), sub.Err())
	}
	for i, u := range got {
		if u.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: a gap or a duplicate across the restart", i, u.Seq)
		}
	}
	if c.Connections() < 2 {
		t.Fatalf("the client never reconnected (%d connections)", c.Connections())
	}
	if logged := h.logEvents(si.ID); len(logged) != len(got) {
		t.Fatalf("the remote follower saw %d events, the log has %d", len(got), len(logged))
	}
}
