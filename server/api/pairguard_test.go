package api_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store/storetest"
)

// The failure budgets of pairing are shared by replicas: guesses spread
// over two servers on one PostgreSQL database (20 at once) still exhaust
// the address's ten failures, after which both refuse it, and wrong status
// tokens for one code count across both.
func TestPairingFailuresSharedByReplicas(t *testing.T) {
	url, dir := storetest.PostgresURL(t), t.TempDir()
	a := servertest.Start(t, servertest.Options{DatabaseURL: url, DataDir: dir})
	b := servertest.Start(t, servertest.Options{DatabaseURL: url, DataDir: dir})
	ctx := context.Background()
	key, _ := anchor(t)
	m, err := a.Client("").MintPairingCode(ctx, sdk.PairingMachineRequest{AnchorPublicKey: key})
	if err != nil {
		t.Fatal(err)
	}
	// Three wrong status tokens on one replica, two on the other: the code
	// is locked on both.
	for i, s := range []*servertest.Server{a, b, a, b, a} {
		expect(t, do(t, s, "GET", "/api/pairing-codes/"+m.Code+"/status", "rvt_guess", nil), 401, fmt.Sprint("wrong status token ", i))
	}
	expect(t, do(t, b, "GET", "/api/pairing-codes/"+m.Code+"/status", m.StatusToken, nil), 429, "the code on the other replica")

	// The five failures left to the address, raced by 20 guesses over
	// both replicas: at most five are answered 404, the rest 429.
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[int]int{}
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			st := do(t, s, "POST", fmt.Sprintf("/api/pairing-codes/Q%07d/claim", i), "", `{"anchor_public_key":"`+key+`"}`).Status
			mu.Lock()
			counts[st]++
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if counts[404] > 5 || counts[404]+counts[429] != 20 {
		t.Fatalf("answers %v: the shared budget was exceeded", counts)
	}
	for _, s := range []*servertest.Server{a, b} {
		expect(t, do(t, s, "POST", "/api/pairing-codes/ZZZZZZZZ/claim", "", `{"anchor_public_key":"`+key+`"}`), 429, "guess after the budget")
	}
}
