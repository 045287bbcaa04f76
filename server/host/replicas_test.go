package host_test

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/store/storetest"
)

// twoReplicas starts two servers on one PostgreSQL database, sharing the
// data directory only for the master key.
func twoReplicas(t *testing.T) (*servertest.Server, *servertest.Server) {
	t.Helper()
	pg := storetest.PostgresURL(t)
	dir := filepath.Join(t.TempDir(), "data")
	a := servertest.Start(t, servertest.Options{DataDir: dir, DatabaseURL: pg})
	b := servertest.Start(t, servertest.Options{DataDir: dir, DatabaseURL: pg})
	return a, b
}

type answer struct {
	status int
	body   map[string]any
}

func post(t *testing.T, base, path, token, body string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+path, bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := (&http.Client{Timeout: 120 * time.Second}).Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return answer{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m map[string]any
	json.Unmarshal(b, &m)
	return answer{status: res.StatusCode, body: m}
}

// race sends n requests at once, alternating between the replicas.
func race(t *testing.T, n int, send func(i int, base string) answer, replicas ...*servertest.Server) []answer {
	out := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			out[i] = send(i, replicas[i%len(replicas)].URL)
		}(i)
	}
	close(start)
	wg.Wait()
	return out
}

func statuses(as []answer) map[int]int {
	m := map[int]int{}
	for _, a := range as {
		m[a.status]++
	}
	return m
}

func usageBody(key, cost string) string {
	return `{"gateway_virtual_key_id":"g","idempotency_key":"` + key + `","run_id":"r","lease_id":"l","provider":"provider_a","model":"m","input_tokens":1,"output_tokens":1,"total_tokens":2,"cost_usd":"` + cost + `"}`
}

// The gateway's hard cap holds across replicas: 60 entries of 0.10 against
// a cap of 1.00, raced over two servers, admit exactly ten.
func TestReplicasHoldTheGatewayHardCap(t *testing.T) {
	a, b := twoReplicas(t)
	u := a.NewUser("cap@example.com")
	ctx := context.Background()
	in, err := u.Client.CreateInstall(ctx, u.Workspace, "gw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client(u.Token).UpdateWorkspace(ctx, u.Workspace, sdk.WorkspaceUpdateRequest{BudgetPolicy: json.RawMessage(`{"hard_cap_usd":"1.00"}`)}); err != nil {
		t.Fatal(err)
	}
	path := "/api/runtime/internal/gateway/workspaces/" + u.Workspace + "/usage"
	got := race(t, 60, func(i int, base string) answer {
		return post(t, base, path, in.IssueToken, usageBody(fmt.Sprintf("k%d", i), "0.10"))
	}, a, b)
	if s := statuses(got); s[201] != 10 || s[402] != 50 {
		t.Fatalf("statuses %v, want 10×201 and 50×402", s)
	}
	var total store.USD
	var after int64
	for {
		es, err := a.Store().LedgerEntries(ctx, u.Workspace, "", store.ListOptions{After: after, Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			total += e.Cost
			after = e.Seq
		}
		if len(es) < 500 {
			break
		}
	}
	if total.String() != "1.00" {
		t.Fatalf("ledger total %s, want exactly the cap", total)
	}
}

// One idempotency key raced over two replicas makes one ledger entry; every
// answer carries it.
func TestReplicasHonourIdempotencyKeys(t *testing.T) {
	a, b := twoReplicas(t)
	u := a.NewUser("idem@example.com")
	in, err := u.Client.CreateInstall(context.Background(), u.Workspace, "gw")
	if err != nil {
		t.Fatal(err)
	}
	path := "/api/runtime/internal/gateway/workspaces/" + u.Workspace + "/usage"
	got := race(t, 40, func(i int, base string) answer {
		return post(t, base, path, in.IssueToken, usageBody("same-key", "0.25"))
	}, a, b)
	if s := statuses(got); s[201] != 1 || s[200] != 39 {
		t.Fatalf("statuses %v, want one 201 and 39 replays", s)
	}
	ids := map[any]bool{}
	for _, g := range got {
		ids[g.body["data"].(map[string]any)["id"]] = true
	}
	recs, _ := b.Store().LedgerEntries(context.Background(), u.Workspace, "", store.ListOptions{})
	if len(ids) != 1 || len(recs) != 1 {
		t.Fatalf("%d ids answered, %d entries stored", len(ids), len(recs))
	}
}

// A pairing code is spent once: approvals raced over two replicas make one
// install.
func TestReplicasSpendAPairingCodeOnce(t *testing.T) {
	a, b := twoReplicas(t)
	u := a.NewUser("pair@example.com")
	ctx := context.Background()
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	m, err := b.Client("").MintPairingCode(ctx, sdk.PairingMachineRequest{Name: "box", AnchorPublicKey: base64.StdEncoding.EncodeToString(k.PublicKey().Bytes())})
	if err != nil {
		t.Fatal(err)
	}
	got := race(t, 20, func(i int, base string) answer {
		return post(t, base, "/api/pairing-codes/"+m.Code+"/approve", u.Token, `{"workspace":"`+u.Workspace+`"}`)
	}, a, b)
	// The shared guess throttle may answer some racers 429 before they
	// reach the code; what must hold is that exactly one approval wins.
	if s := statuses(got); s[200] != 1 || s[409]+s[429] != 19 {
		t.Fatalf("statuses %v, want one 200 and 19 refused (409, or 429 from the throttle)", s)
	}
	ins, err := a.Store().Installs(ctx, u.Workspace)
	if err != nil || len(ins) != 1 {
		t.Fatalf("%d installs, %v", len(ins), err)
	}
}

func get(t *testing.T, base, path, token string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := (&http.Client{Timeout: 120 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m map[string]any
	json.Unmarshal(b, &m)
	return answer{status: res.StatusCode, body: m}
}

// /api/health reports the database; when the database goes away, health
// and requests answer 503 with an ErrorEnvelope, and recover with it.
func TestDatabaseLossIsA503(t *testing.T) {
	pg := storetest.PostgresURL(t)
	s := servertest.Start(t, servertest.Options{DataDir: filepath.Join(t.TempDir(), "data"), DatabaseURL: pg, CacheTTL: -1})
	u := s.NewUser("ops@example.com")
	h := get(t, s.URL, "/api/health", "")
	db, _ := h.body["database"].(map[string]any)
	if h.status != 200 || db["engine"] != "postgres" || db["status"] != "ok" || db["schema_version"].(float64) != float64(store.LatestSchemaVersion()) {
		t.Fatalf("health: %d %v", h.status, h.body)
	}
	restore := storetest.CutOff(t, pg)
	for _, a := range []answer{
		get(t, s.URL, "/api/health", ""),
		get(t, s.URL, "/api/workspaces/"+u.Workspace, u.Token),
		post(t, s.URL, "/api/workspaces/"+u.Workspace+"/installs", u.Token, `{"name":"m"}`),
	} {
		e, _ := a.body["error"].(map[string]any)
		if a.status != 503 || e["code"] != sdk.CodeUnavailable {
			t.Fatalf("with the database gone: %d %v", a.status, a.body)
		}
	}
	restore()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if a := get(t, s.URL, "/api/workspaces/"+u.Workspace, u.Token); a.status == 200 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no recovery: %d %v", a.status, a.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
