package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Two `reeve start` at once, one with --auth and one without: the start
// that wins the home's lock runs its own settings, the other says that a
// daemon is already running and exits 5. A daemon never runs the loser's
// settings while the winner reports success (which once dropped --auth).
func TestRacingStartsRunTheWinnersSettings(t *testing.T) {
	for trial := range 10 {
		t.Run(fmt.Sprint("trial ", trial), func(t *testing.T) {
			h := newHome(t)
			args := [][]string{
				{"start", "--listen", "127.0.0.1:0", "--auth"},
				{"start", "--listen", "127.0.0.1:0"},
			}
			if trial%2 == 1 {
				args[0], args[1] = args[1], args[0] // either may go first
			}
			res := make([]result, len(args))
			var wg sync.WaitGroup
			for i := range args {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res[i] = h.run(args[i]...)
				}()
			}
			wg.Wait()
			winner := -1
			for i, r := range res {
				switch r.code {
				case 0:
					if winner >= 0 {
						t.Fatalf("both starts succeeded:\n%+v\n%+v", res[0], res[1])
					}
					winner = i
				case 5:
					if !strings.Contains(r.stderr, "already running") {
						t.Fatalf("the losing start says %q", r.stderr)
					}
				default:
					t.Fatalf("reeve %v: exit %d\n%s", args[i], r.code, r.stderr)
				}
			}
			if winner < 0 {
				t.Fatalf("no start succeeded:\n%+v\n%+v", res[0], res[1])
			}
			wantAuth := strings.Contains(strings.Join(args[winner], " "), "--auth")
			st, _ := h.status()
			code, body := raw(t, st.Reachability.Address, "/api/directories", nil)
			if gotAuth := code == 401; gotAuth != wantAuth {
				t.Fatalf("the winner (%v) asked auth=%v, the daemon answers %d: %s", args[winner], wantAuth, code, body)
			}
			if wantAuth != strings.Contains(res[winner].stderr, "token auth is on") {
				t.Fatalf("the winner's report does not match its settings: %q", res[winner].stderr)
			}
		})
	}
}
