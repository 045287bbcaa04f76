package sessionsync_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/daemon/sessionsync"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/servertest"
)

func sum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// What the daemon knows of a session reaches the control plane's views:
// the adapter receipt (agent version, command line, digests of the policy,
// the agent binary and the turn's raw output), governance (policy hash,
// mode, guarded), the turn count after a turn ends without a new event,
// and spend and approval audit from the events. A changed evidence file
// is published with its new digest.
func TestReceiptsAndGovernanceFromTheDaemon(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	owner := s.NewUser("o@example.com")
	ctx := context.Background()
	in, err := owner.Client.CreateInstall(ctx, owner.Workspace, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	st, sess := daemonStore(t)
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	agent := filepath.Join(dir, "claude")
	state := filepath.Join(dir, "state", sess.ID)
	os.MkdirAll(state, 0o700)
	os.WriteFile(policy, []byte("version: 1\ndeny: [rm]\n"), 0o600)
	os.WriteFile(agent, []byte("#!/bin/sh\necho agent\n"), 0o700)
	turnLog := filepath.Join(state, "claude-1.jsonl")
	os.WriteFile(turnLog, []byte(`{"type":"system"}`+"\n"), 0o600)
	startHash := "sha256:" + sum(t, policy)
	argv := []string{agent, "-p", "--output-format", "stream-json", "--settings", filepath.Join(state, "claude-settings.json")}
	mf := wire.Manifest{SessionID: sess.ID, Agent: "claude", AgentVersion: "2.1.3", AgentPath: agent, PolicyFile: policy, Guarded: true, PermissionMode: "default", Turns: 0,
		PolicyHash: startHash, CommandLine: argv}
	setManifest := func() {
		raw, _ := json.Marshal(mf)
		if err := st.SetManifest(ctx, sess.ID, raw); err != nil {
			t.Fatal(err)
		}
	}
	setManifest()
	for _, e := range []struct{ kind, data string }{
		{"policy", `{"change":"start","hash":"` + startHash + `","file":"` + policy + `"}`},
		{"launch", `{"turn":1,"agent":"claude","argv":` + toJSON(argv) + `,"env":["ANTHROPIC_API_KEY=[redacted]"],"dir":"/w"}`},
		{"permission-request", `{"id":"r1","tool":"Bash","input":{"command":"rm -rf /tmp/x"}}`},
		{"permission-decision", `{"request_id":"r1","tool":"Bash","decision":"deny","decided_by":"policy:deny-rm"}`},
		{"usage", `{"model":"sonnet","input_tokens":120,"output_tokens":30,"cost_usd":0.4}`},
	} {
		if _, err := st.Append(ctx, sess.ID, e.kind, json.RawMessage(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	src := &sessionsync.StoreSource{Store: st, StateDir: func(id string) string { return filepath.Join(dir, "state", id) }}
	y, err := sessionsync.New(sessionsync.Options{Source: src, Publisher: s.Client(in.IssueToken), CursorFile: filepath.Join(t.TempDir(), "c.json"), Mode: "full"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := y.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := owner.Client.ListRecords(ctx, "/api/resources/"+owner.Workspace+"/sessions?source_kind=daemon")
	if err != nil || len(recs) != 1 {
		t.Fatalf("sessions %v %v", recs, err)
	}
	base := "/api/resources/" + owner.Workspace + "/sessions/" + recs[0].ID
	view := func(name string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL+base+"/"+name, nil)
		req.Header.Set("Authorization", "Bearer "+owner.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Data map[string]any `json:"data"`
		}
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil {
			t.Fatalf("%s: %d", name, resp.StatusCode)
		}
		return out.Data
	}
	files := func(r map[string]any) map[string]string {
		out := map[string]string{}
		for _, f := range r["evidence_files"].([]any) {
			m := f.(map[string]any)
			out[m["role"].(string)+" "+m["path"].(string)] = m["sha256"].(string)
		}
		return out
	}
	r := view("adapter-receipts")
	if r["agent"] != "claude" || r["agent_version"] != "2.1.3" || toJSON(r["command_line"]) != toJSON(argv) {
		t.Fatalf("receipt %v", r)
	}
	if l := r["launches"].([]any); len(l) != 1 || toJSON(l[0].(map[string]any)["argv"]) != toJSON(argv) {
		t.Fatalf("launches %v", r["launches"])
	}
	f := files(r)
	if f["policy "+policy] != sum(t, policy) || f["agent "+agent] != sum(t, agent) || f["state "+turnLog] != sum(t, turnLog) || len(f) != 3 {
		t.Fatalf("evidence files %v", f)
	}
	g := view("governance")
	if g["effective_policy_hash"] != startHash || g["current_policy_hash"] != startHash || g["mode"] != "default" || g["guarded"] != true {
		t.Fatalf("governance %v", g)
	}
	// The policy file changes after the start, before any change is
	// recorded: the receipt keeps the hash of the policy the session
	// started with, not the file as it is at publish time.
	os.WriteFile(policy, []byte("version: 1\ndeny: [rm, curl]\n"), 0o600)
	if _, err := st.Append(ctx, sess.ID, "agent-message", json.RawMessage(`{"text":"later"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := y.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if g := view("governance"); g["effective_policy_hash"] != startHash {
		t.Fatalf("the start hash moved with the file: %v", g)
	}
	// The daemon records the change: both hashes are kept.
	edited := "sha256:" + sum(t, policy)
	mf.CurrentPolicyHash = edited
	setManifest()
	if _, err := st.Append(ctx, sess.ID, "policy", json.RawMessage(`{"change":"changed","hash":"`+edited+`","previous":"`+startHash+`"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := y.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	g = view("governance")
	if h := g["policy_history"].([]any); g["effective_policy_hash"] != startHash || g["current_policy_hash"] != edited || len(h) != 2 ||
		h[0].(map[string]any)["hash"] != startHash || h[1].(map[string]any)["hash"] != edited || h[1].(map[string]any)["previous"] != startHash {
		t.Fatalf("after the change: %v", g)
	}
	if sp := view("spend"); toJSON(sp["total"]) != `{"cache_read_tokens":0,"cache_write_tokens":0,"cost_usd":0.4,"input_tokens":120,"output_tokens":30}` {
		t.Fatalf("spend %v", sp)
	}
	if aa := view("approval-audit"); aa["count"] != float64(1) || !strings.Contains(toJSON(aa), "rm -rf /tmp/x") {
		t.Fatalf("approval audit %v", aa)
	}

	// The turn ends: the manifest counts it and the output grew, with no
	// new event; the next pass publishes both.
	mf.Turns = 1
	setManifest()
	os.WriteFile(turnLog, []byte(`{"type":"system"}`+"\n"+`{"type":"result"}`+"\n"), 0o600)
	if _, err := y.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	r = view("adapter-receipts")
	if r["turns"] != float64(1) || files(r)["state "+turnLog] != sum(t, turnLog) {
		t.Fatalf("after the turn: %v", r)
	}
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
