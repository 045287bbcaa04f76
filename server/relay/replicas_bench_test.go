package relay_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/server/relay"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store/storetest"
)

// admittedPairs connects n daemon/client pairs of the fixture's workspace,
// each daemon (a machine of its own) on relay dBase and its client on
// cBase, each with its channel open.
func admittedPairs(tb testing.TB, f *fixture, dBase, cBase string, n int) []pair {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dial := func(url, tok string) *websocket.Conn {
		c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
		if err != nil {
			tb.Fatalf("dial %s: %v", url, err)
		}
		c.SetReadLimit(1 << 20)
		return c
	}
	out := make([]pair, n)
	for i := range out {
		in, err := f.u.Client.CreateInstall(ctx, f.u.Workspace, fmt.Sprintf("bench-%d", i))
		if err != nil {
			tb.Fatal(err)
		}
		rt, err := f.s.Client(in.IssueToken).RuntimeRelayToken(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		d := dial(wsURL(tb, dBase, relay.RoleDaemon, f.u.Workspace, in.ID), rt.Token)
		// A client on another instance may find the daemon's presence a
		// moment after the daemon connected: retry until it is opened.
		var c *websocket.Conn
		for attempt := 0; ; attempt++ {
			c = dial(wsURL(tb, cBase, relay.RoleClient, f.u.Workspace, in.ID), f.clientTok)
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			_, b, err := d.Read(rctx)
			rcancel()
			if err == nil && bytes.Contains(b, []byte(`"open"`)) {
				break
			}
			c.CloseNow()
			if attempt == 20 {
				tb.Fatalf("pair %d: never opened (%s, %v)", i, b, err)
			}
		}
		out[i] = pair{send: c, recv: d}
	}
	tb.Cleanup(func() { closePairs(out) })
	return out
}

// BenchmarkRelayAcrossInstances: frames per second from clients to their
// daemons within one relay instance and across two, on one SQLite server
// (the bus in its memory) and on two PostgreSQL replicas (the bus in the
// database), side by side in one run.
func BenchmarkRelayAcrossInstances(b *testing.B) {
	const pairs, perPair = 16, 200
	setups := []struct {
		name  string
		start func(b *testing.B) (f *fixture, a, other string)
	}{
		{"sqlite-memory-bus", func(b *testing.B) (*fixture, string, string) {
			s := servertest.Start(b, servertest.Options{})
			f := fixtureOn(b, s)
			_, other := startRelay(b, s, relay.Options{})
			return f, s.URL, other
		}},
		{"postgres-2-replicas", func(b *testing.B) (*fixture, string, string) {
			o := servertest.Options{DataDir: filepath.Join(b.TempDir(), "data"), DatabaseURL: storetest.PostgresURL(b), PublicURL: "http://replicas.test"}
			s1, s2 := servertest.Start(b, o), servertest.Start(b, o)
			return fixtureOn(b, s1), s1.URL, s2.URL
		}},
	}
	for _, setup := range setups {
		b.Run(setup.name, func(b *testing.B) {
			f, a, other := setup.start(b)
			within := admittedPairs(b, f, a, a, pairs)
			across := admittedPairs(b, f, a, other, pairs)
			throughput(b, within, 20) // warm both up
			throughput(b, across, 20)
			var inSum, acrossSum float64
			b.ResetTimer()
			for range b.N {
				inSum += throughput(b, within, perPair)
				acrossSum += throughput(b, across, perPair)
			}
			b.ReportMetric(inSum/float64(b.N), "within-frames/s")
			b.ReportMetric(acrossSum/float64(b.N), "across-frames/s")
			b.ReportMetric(acrossSum/inSum*100, "across-%-of-within")
			b.ReportMetric(0, "ns/op")
		})
	}
}
