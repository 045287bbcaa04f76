package api_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store"
)

// doRuntime is do for /api/runtime routes: a 429 of the per-install
// throttle is waited out and retried (it writes nothing).
func doRuntime(t testing.TB, s *servertest.Server, method, path, token string, body any) answer {
	t.Helper()
	for {
		a := do(t, s, method, path, token, body)
		if a.Status != 429 {
			return a
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func gatewayUsageBody(key, cost string) string {
	return `{"gateway_virtual_key_id":"g","idempotency_key":"` + key + `","run_id":"r","lease_id":"l","provider":"provider_a","model":"m","input_tokens":10,"output_tokens":5,"total_tokens":15,"cost_usd":"` + cost + `"}`
}

// 200 concurrent usage records against a cap: the ledger never passes it,
// the answers are exactly 201 or 402, and the admin ledger route agrees
// with the sum of its entries. Replays and conflicts of one key, bad money
// and a member's read are refused as the spec says.
func TestGatewayLedgerOverHTTP(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("ledger@example.com")
	ws := u.Workspace
	in, err := u.Client.CreateInstall(context.Background(), ws, "gw")
	if err != nil {
		t.Fatal(err)
	}
	up := "/api/runtime/internal/gateway/workspaces/" + ws + "/usage"
	expect(t, do(t, s, "PATCH", "/api/workspaces/"+ws, u.Token, `{"budget_policy":{"hard_cap_usd":7.5}}`), 200, "numeric cap")

	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := doRuntime(t, s, "POST", up, in.IssueToken, gatewayUsageBody(fmt.Sprintf("race-%d", i), "0.05"))
			mu.Lock()
			statuses[a.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Admitted ones stop exactly at the cap: 7.50/0.05.
	if statuses[201] != 150 || statuses[402] != 50 {
		t.Fatalf("statuses %v", statuses)
	}
	led := expect(t, do(t, s, "GET", "/api/workspaces/"+ws+"/gateway/ledger?limit=500", u.Token, nil), 200, "ledger")
	data := dataOf(led)
	var sum store.USD
	for _, e := range data["entries"].([]any) {
		// The usage record's own fields come back beside the ledger's.
		if m := e.(map[string]any); m["model"] != "m" || m["provider"] != "provider_a" || m["total_tokens"] != float64(15) || m["run_id"] != "r" {
			t.Fatalf("entry without its usage fields: %v", m)
		}
		c, err := store.ParseUSD(e.(map[string]any)["cost_usd"].(string))
		if err != nil {
			t.Fatal(err)
		}
		sum += c
	}
	cap, _ := store.ParseUSD("7.50")
	if sum > cap || len(data["entries"].([]any)) != statuses[201] {
		t.Fatalf("ledger sum %s over %d entries (201s: %d)", sum, len(data["entries"].([]any)), statuses[201])
	}
	budget := data["budget"].(map[string]any)
	if budget["spent_usd"] != sum.String() || budget["hard_cap_usd"] != "7.50" {
		t.Fatalf("budget %v, sum %s", budget, sum)
	}
	if len(data["periods"].([]any)) != 2 {
		t.Fatalf("periods: %v", data["periods"])
	}

	// Idempotency: same body replays (200, replayed), another is 409.
	expect(t, do(t, s, "PATCH", "/api/workspaces/"+ws, u.Token, `{"budget_policy":{"hard_cap_usd":"1000"}}`), 200, "raise cap")
	first := expect(t, doRuntime(t, s, "POST", up, in.IssueToken, gatewayUsageBody("once", "0.000000001")), 201, "first")
	again := expect(t, doRuntime(t, s, "POST", up, in.IssueToken, gatewayUsageBody("once", "0.000000001")), 200, "replay")
	if dataOf(again)["id"] != dataOf(first)["id"] || dataOf(again)["replayed"] != true || dataOf(first)["cost_usd"] != "0.000000001" {
		t.Fatalf("replay %s / first %s", again.Body, first.Body)
	}
	conflict := expect(t, doRuntime(t, s, "POST", up, in.IssueToken, gatewayUsageBody("once", "0.000000002")), 409, "conflict")
	if conflict.errCode() != sdk.CodeIdempotencyConflict {
		t.Fatalf("conflict code %s", conflict.errCode())
	}
	// Bad money: negative, not a number, too precise: 422, nothing written.
	for _, bad := range []string{"-1", "ten", "0.0000000001", "1e3"} {
		a := expect(t, doRuntime(t, s, "POST", up, in.IssueToken, gatewayUsageBody("bad-"+bad, bad)), 422, "cost "+bad)
		if a.errCode() != sdk.CodeValidation {
			t.Fatalf("cost %s: %s", bad, a.Body)
		}
	}
	// The ledger is for admins.
	m := s.AddMember(ws, "member@example.com", "member")
	expect(t, do(t, s, "GET", "/api/workspaces/"+ws+"/gateway/ledger", m.Token, nil), 403, "member reads the ledger")
	expect(t, do(t, s, "GET", "/api/resources/"+ws+"/gateway/ledger?period=2026-13x", u.Token, nil), 422, "bad period")
	// Another workspace's install cannot write here.
	other := s.NewUser("other@example.com")
	oin, err := other.Client.CreateInstall(context.Background(), other.Workspace, "gw2")
	if err != nil {
		t.Fatal(err)
	}
	if a := doRuntime(t, s, "POST", up, oin.IssueToken, gatewayUsageBody("x", "0.01")); a.Status != 403 && a.Status != 404 {
		t.Fatalf("other workspace's install: %d %s", a.Status, a.Body)
	}
}
