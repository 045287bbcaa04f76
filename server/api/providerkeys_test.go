package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/internal/syncbuf"
	"reeve.dev/reeve/server/host"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/store/storetest"
)

// startLogged runs a server whose debug log goes to logs; dbURL selects
// its database ("": SQLite in its data directory).
func startLogged(t *testing.T, logs *syncbuf.Buffer, dbURL ...string) *servertest.Server {
	o := host.Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if len(dbURL) > 0 {
		o.DatabaseURL = dbURL[0]
	}
	return startHost(t, o)
}

// startHost runs a server with o (its listener and data directory set
// here) until the test ends.
func startHost(t *testing.T, o host.Options) *servertest.Server {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	o.Listen, o.DataDir = "127.0.0.1:0", dir
	h, err := host.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		h.Close()
	})
	s := &servertest.Server{T: t, Host: h, URL: h.URL(), DataDir: dir}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := s.Client("").Health(context.Background()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("server did not come up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// heldRun creates a workflow run in ws and has a worker claim it, so the
// gateway may ask for key material on its behalf.
func heldRun(t *testing.T, s *servertest.Server, ws string) store.WorkflowRun {
	t.Helper()
	wf := s.Store().(store.Workflows)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	r := store.WorkflowRun{ID: "01RUN" + strings.ToUpper(hex.EncodeToString([]byte(ws[:5])))[:10] + "00000000000", WorkspaceID: ws, Status: "queued", Agent: "shell",
		Tags: []string{}, MaxAttempts: 1, Spec: []byte(`{"prompt":"hi"}`), CreatedBy: "user:1", CreatedAt: now, UpdatedAt: now}
	if err := wf.CreateRun(ctx, &r, []store.RunEvent{{Kind: "run.created", Actor: "user:1", CreatedAt: now}}, store.AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	claimed, err := wf.ClaimRun(ctx, store.ClaimFilter{WorkspaceID: ws, ExecutorID: "E1"},
		store.LeaseGrant{LeaseID: "lease-" + r.ID, TokenHash: "hash-" + r.ID, Now: now, ExpiresAt: now.Add(time.Hour), Actor: "executor:E1"})
	if err != nil {
		t.Fatal(err)
	}
	return claimed
}

// Provider keys end to end, with a sentinel secret: sealed at rest, never
// echoed, fingerprinted by a keyed MAC, rotated to a new secret, released
// only to the workspace's gateway for a held run, and audited. Then the
// database files (WAL included), the log and every response other than
// the one release are searched for the sentinel; on PostgreSQL, every
// table and the WAL written meanwhile.
func TestProviderKeysNeverLeakTheirSecret(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testProviderKeysNeverLeak(t, "") })
	t.Run("postgres", func(t *testing.T) { testProviderKeysNeverLeak(t, storetest.PostgresURL(t)) })
}

func testProviderKeysNeverLeak(t *testing.T, dbURL string) {
	logs := &syncbuf.Buffer{}
	var s *servertest.Server
	var walFrom string
	if dbURL == "" {
		s = startLogged(t, logs)
	} else {
		walFrom = storetest.WALPosition(t, dbURL)
		s = startLogged(t, logs, dbURL)
	}
	u := s.NewUser("keys@example.com")
	ws := u.Workspace
	var nonce [12]byte
	rand.Read(nonce[:])
	sentinel := "sk-SENTINEL-" + hex.EncodeToString(nonce[:])
	rotated := sentinel + "-ROTATED"
	var seen []answer
	call := func(method, path, token string, body any, status int, what string) answer {
		t.Helper()
		a := expect(t, doRuntime(t, s, method, path, token, body), status, what)
		seen = append(seen, a)
		return a
	}
	pk := "/api/resources/" + ws + "/provider-keys"
	call("POST", pk, u.Token, `{"provider":"provider_a","mode":"managed_byok"}`, 422, "byok without a secret")
	call("POST", pk, u.Token, `{"provider":"provider_a","mode":"managed_byok","secret":"`+sentinel+`","api_key":"`+sentinel+`"}`, 422, "a secret in an unknown field")
	call("POST", pk, u.Token, `{"provider":"provider_a","mode":"managed_byok","secret":"has space"}`, 422, "a secret with a space")
	m := s.AddMember(ws, "member@example.com", "member")
	call("POST", pk, m.Token, `{"provider":"provider_a","mode":"managed_byok","secret":"`+sentinel+`"}`, 403, "member creates")
	made := call("POST", pk, u.Token, `{"provider":"provider_a","mode":"managed_byok","secret":"`+sentinel+`"}`, 201, "create")
	k := dataOf(made)
	id := k["id"].(string)
	plainHash := sha256.Sum256([]byte(sentinel))
	fp, _ := k["fingerprint"].(string)
	if k["has_secret"] != true || k["version"].(float64) != 1 || !strings.HasPrefix(fp, "hmac-sha256:") || strings.Contains(fp, hex.EncodeToString(plainHash[:4])) {
		t.Fatalf("created key: %s", made.Body)
	}
	call("GET", pk, m.Token, nil, 200, "member lists")
	call("GET", pk+"/"+id, u.Token, nil, 200, "get")
	call("GET", "/api/provider-keys/"+id, u.Token, nil, 200, "get through the placeholder spelling")
	// Rotate: without a secret 422; with the same secret 422; with a new
	// one a new version and fingerprint.
	call("POST", pk+"/"+id+"/rotate", u.Token, nil, 422, "rotate without a secret")
	call("POST", pk+"/"+id+"/rotate", u.Token, `{"secret":"`+sentinel+`"}`, 422, "rotate to the same secret")
	rot := dataOf(call("POST", pk+"/"+id+"/rotate", u.Token, `{"secret":"`+rotated+`"}`, 200, "rotate"))
	if rot["version"].(float64) != 2 || rot["fingerprint"] == fp || rot["rotated_at"] == nil {
		t.Fatalf("rotated: %v", rot)
	}
	// Key material: only for a run of this workspace that a worker holds.
	in, err := u.Client.CreateInstall(context.Background(), ws, "gateway")
	if err != nil {
		t.Fatal(err)
	}
	run := heldRun(t, s, ws)
	mat := "/api/runtime/internal/gateway/workspaces/" + ws + "/provider-key-material"
	call("POST", mat, in.IssueToken, `{"provider_key_id":"`+id+`","run_id":"no-such-run"}`, 403, "unknown run")
	call("POST", mat, in.IssueToken, `{"provider_key_id":"`+id+`","run_id":"`+run.ID+`","lease_id":"stale"}`, 403, "stale lease")
	call("POST", mat, in.IssueToken, `{"provider_key_id":"nope","run_id":"`+run.ID+`"}`, 404, "unknown key")
	call("POST", mat, u.Token, `{"provider_key_id":"`+id+`","run_id":"`+run.ID+`"}`, 401, "a user token")
	other := s.NewUser("other@example.com")
	oin, err := other.Client.CreateInstall(context.Background(), other.Workspace, "gw2")
	if err != nil {
		t.Fatal(err)
	}
	if a := doRuntime(t, s, "POST", mat, oin.IssueToken, `{"provider_key_id":"`+id+`","run_id":"`+run.ID+`"}`); a.Status != 403 && a.Status != 404 {
		t.Fatalf("another workspace's install: %d %s", a.Status, a.Body)
	} else {
		seen = append(seen, a)
	}
	rel := expect(t, doRuntime(t, s, "POST", mat, in.IssueToken, `{"provider_key_id":"`+id+`","run_id":"`+run.ID+`","lease_id":"`+run.LeaseID+`"}`), 200, "release")
	if dataOf(rel)["secret"] != rotated || dataOf(rel)["version"].(float64) != 2 {
		t.Fatalf("released: %s", rel.Body)
	}
	audit := call("GET", "/api/workspaces/"+ws+"/audit?limit=1000", u.Token, nil, 200, "audit")
	for _, want := range []string{"provider_key.create", "provider_key.rotate", "provider_key.material_released", "provider_key.material_refused"} {
		if !strings.Contains(string(audit.Body), want) {
			t.Fatalf("audit lacks %s", want)
		}
	}
	call("DELETE", pk+"/"+id, m.Token, nil, 403, "member deletes")

	// The sentinel, rotated or not, is nowhere but in the release.
	for i, a := range seen {
		if bytes.Contains(a.Body, []byte(sentinel)) {
			t.Fatalf("response %d carries the secret: %s", i, a.Body)
		}
	}
	if strings.Contains(logs.String(), sentinel) {
		t.Fatal("the log carries the secret")
	}
	files, _ := os.ReadDir(s.DataDir)
	names := []string{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(s.DataDir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, f.Name())
		if bytes.Contains(b, []byte(sentinel)) {
			t.Fatalf("%s holds the secret in the clear", f.Name())
		}
	}
	if dbURL == "" && !strings.Contains(strings.Join(names, " "), "-wal") {
		t.Fatalf("no WAL among %v: the grep did not cover it", names)
	}
	if dbURL != "" {
		if where := storetest.Leaks(t, dbURL, walFrom, []byte(sentinel)); len(where) > 0 {
			t.Fatalf("PostgreSQL holds the secret in the clear: %v", where)
		}
	}
	call("DELETE", pk+"/"+id, u.Token, nil, 200, "delete")
	call("GET", pk+"/"+id, u.Token, nil, 404, "gone")
}
