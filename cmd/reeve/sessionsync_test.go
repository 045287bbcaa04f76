package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/server/sdk"
)

// serverAt runs `reeve server` on a fixed address (a restart must come back
// where the paired daemon looks for it).
func serverAt(t *testing.T, addr, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(reeveBin, "server", "--listen", addr, "--data-dir", dir)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on") {
				close(up)
				for sc.Scan() {
				}
				return
			}
		}
	}()
	select {
	case <-up:
	case <-time.After(60 * time.Second):
		t.Fatal("reeve server did not start")
	}
	return cmd
}

// A paired daemon runs a session; the control plane is killed mid-session
// and restarted; the control plane's feed then equals the daemon's log,
// seq for seq.
func TestDaemonSessionSyncAcrossServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	url := "http://" + addr
	data := filepath.Join(t.TempDir(), "server")
	h := newHome(t)
	tok := strings.TrimSpace(h.must("server", "token", "create", "--data-dir", data, "--user", "owner@example.com").stdout)
	srv := serverAt(t, addr, data)
	user := &sdk.Client{BaseURL: url, Token: tok}
	wss, err := user.ListWorkspaces(ctx)
	if err != nil || len(wss) != 1 {
		t.Fatalf("workspaces: %v %v", wss, err)
	}
	ws := wss[0].ID
	pairThroughAPI(t, ctx, home.Dir(h.dir), url, user, ws, false)
	h.start()
	work := t.TempDir()
	h.must("add", work)
	sid := strings.TrimSpace(h.must("run", work, "--agent", "shell", "--prompt", "for i in $(seq 1 400); do echo SYNC-$i; sleep 0.02; done; echo TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789").stdout)

	daemonSession := func() (sdk.Record, bool) {
		recs, err := user.ListRecords(ctx, "/api/resources/"+ws+"/sessions?source_kind=daemon")
		if err != nil || len(recs) != 1 {
			return sdk.Record{}, false
		}
		return recs[0], recs[0].Attributes["daemon_session_id"] == sid
	}
	waitFor(t, "the session to reach the control plane", 60*time.Second, func() bool {
		r, ok := daemonSession()
		n, _ := r.Attributes["synced_seq"].(float64)
		return ok && n > 0
	})
	// kill -9 the control plane mid-session; the session goes on.
	srv.Process.Signal(syscall.SIGKILL)
	srv.Wait()
	time.Sleep(2 * time.Second)
	serverAt(t, addr, data)
	h.must("wait", sid, "--timeout", "120")

	// The daemon's log, read from its store once it stops.
	var log []store.Event
	waitFor(t, "the control plane to catch up", 90*time.Second, func() bool {
		r, ok := daemonSession()
		if !ok || r.Attributes["status"] == "running" {
			return false
		}
		st, err := store.Open(ctx, store.Options{Path: home.Dir(h.dir).StoreFile()})
		if err != nil {
			return false
		}
		defer st.Close()
		log, _ = st.Events(ctx, sid, 0, 100000)
		n, _ := r.Attributes["synced_seq"].(float64)
		return len(log) > 0 && int64(n) == log[len(log)-1].Seq
	})
	r, _ := daemonSession()
	var feed []map[string]any
	after := int64(0)
	for {
		var page struct {
			Data []struct {
				Attributes map[string]any `json:"attributes"`
			} `json:"data"`
		}
		if _, err := user.Do(ctx, http.MethodGet, fmt.Sprintf("/api/resources/%s/sessions/%s/events?after_sequence=%d&limit=100", ws, r.ID, after), nil, &page); err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Data {
			feed = append(feed, d.Attributes)
		}
		if len(page.Data) < 100 {
			break
		}
		after = int64(page.Data[len(page.Data)-1].Attributes["seq"].(float64))
	}
	if len(feed) != len(log) {
		t.Fatalf("feed has %d events, the daemon's log %d", len(feed), len(log))
	}
	for i, e := range log {
		if int64(feed[i]["seq"].(float64)) != e.Seq || feed[i]["kind"] != e.Kind {
			t.Fatalf("event %d: feed seq %v kind %v, log seq %d kind %s", i, feed[i]["seq"], feed[i]["kind"], e.Seq, e.Kind)
		}
	}
	all, _ := json.Marshal(feed)
	if strings.Contains(string(all), "ghp_abcdefghijklmnopqrstuvwxyz0123456789") {
		t.Fatal("a secret left the machine in redacted mode")
	}
	if !strings.Contains(string(all), "SYNC-399") {
		t.Fatalf("the output did not arrive: %.400s", all)
	}

	// The receipt carries the command line the daemon launched, the
	// prompt (and the token in it) as a digest; governance the policy in
	// force at the start: none here.
	var receipt, gov struct {
		Data map[string]any `json:"data"`
	}
	if _, err := user.Do(ctx, http.MethodGet, "/api/resources/"+ws+"/sessions/"+r.ID+"/adapter-receipts", nil, &receipt); err != nil {
		t.Fatal(err)
	}
	cmd, _ := receipt.Data["command_line"].([]any)
	launches, _ := receipt.Data["launches"].([]any)
	if len(cmd) != 3 || cmd[1] != "-c" || !strings.HasPrefix(cmd[2].(string), "[prompt sha256:") || len(launches) != 1 {
		t.Fatalf("receipt %v", receipt.Data)
	}
	if _, err := user.Do(ctx, http.MethodGet, "/api/resources/"+ws+"/sessions/"+r.ID+"/governance", nil, &gov); err != nil {
		t.Fatal(err)
	}
	if gov.Data["effective_policy_hash"] != "none" || gov.Data["current_policy_hash"] != "none" {
		t.Fatalf("governance %v", gov.Data)
	}
}
