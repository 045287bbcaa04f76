package store

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// payload256 is a 256-byte JSON event body, the size the goals are stated in.
var payload256 = json.RawMessage(`{"text":"` + strings.Repeat("x", 256-len(`{"text":""}`)) + `"}`)

func benchSessions(b *testing.B, s *Store, n int) []string {
	b.Helper()
	d := newDir(b, s, "/bench")
	ids := make([]string, n)
	for i := range ids {
		sess, err := s.CreateSession(context.Background(), NewSession{DirectoryID: d.ID, Agent: "shell"})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = sess.ID
	}
	return ids
}

// BenchmarkAppend measures durable appends of 256-byte events from many
// concurrent producers, each blocking until its event is fsynced.
func BenchmarkAppend(b *testing.B) {
	for _, producers := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			s := openTest(b)
			sessions := benchSessions(b, s, 1)
			ctx := context.Background()
			var next atomic.Int64
			before := s.Stats()
			b.SetBytes(int64(len(payload256)))
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for p := range producers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sid := sessions[p%len(sessions)]
					for next.Add(1) <= int64(b.N) {
						if _, err := s.Append(ctx, sid, "terminal-output", payload256); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			st := s.Stats()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
			b.ReportMetric(float64(st.Events-before.Events)/float64(max(st.Batches-before.Batches, 1)), "events/fsync")
		})
	}
}

// BenchmarkAppendMany is the batched producer: each call hands over 32 events
// (what a PTY reader has buffered, say) and blocks until they are durable.
func BenchmarkAppendMany(b *testing.B) {
	const chunk = 32
	for _, producers := range []int{16, 64} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			s := openTest(b)
			sessions := benchSessions(b, s, 1)
			ctx := context.Background()
			var next atomic.Int64
			before := s.Stats()
			b.SetBytes(int64(len(payload256)))
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for p := range producers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					in := make([]EventInput, chunk)
					for i := range in {
						in[i] = EventInput{SessionID: sessions[p%len(sessions)], Kind: "terminal-output", Data: payload256}
					}
					for {
						n := next.Add(chunk)
						if n-chunk >= int64(b.N) {
							return
						}
						k := min(int64(chunk), int64(b.N)-(n-chunk))
						if _, err := s.AppendMany(ctx, in[:k]); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			st := s.Stats()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
			b.ReportMetric(float64(st.Events-before.Events)/float64(max(st.Batches-before.Batches, 1)), "events/fsync")
		})
	}
}

// BenchmarkReplay reads a stored log from a sequence number in pages, the way
// Follow and `logs --last-seq` do.
func BenchmarkReplay(b *testing.B) {
	const stored = 100_000
	s := openTest(b)
	sid := benchSessions(b, s, 1)[0]
	ctx := context.Background()
	in := make([]EventInput, 1024)
	for i := range in {
		in[i] = EventInput{SessionID: sid, Kind: "terminal-output", Data: payload256}
	}
	for n := 0; n < stored; n += len(in) {
		if _, err := s.AppendMany(ctx, in[:min(len(in), stored-n)]); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(payload256)))
	b.ResetTimer()
	start := time.Now()
	read := 0
	cursor := int64(stored / 10) // replay "from a sequence number", not from the start
	for read < b.N {
		evs, err := s.Events(ctx, sid, cursor, followPage)
		if err != nil {
			b.Fatal(err)
		}
		read += len(evs)
		if len(evs) < followPage {
			cursor = stored / 10
		} else {
			cursor = evs[len(evs)-1].Seq
		}
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(read)/elapsed.Seconds(), "events/s")
}

// BenchmarkFollowLatency measures how long after an event is produced a live
// follower has it: from the Append call (includes the fsync) and from the
// Append return (the store's notification path alone).
func BenchmarkFollowLatency(b *testing.B) {
	s := openTest(b)
	sid := benchSessions(b, s, 1)[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make([]time.Time, b.N+1)
	returns := make([]time.Time, b.N+1)
	fromCall := make([]time.Duration, 0, b.N)
	fromReturn := make([]time.Duration, 0, b.N)
	var mu sync.Mutex // orders the producer's writes to returns before the follower reads them
	got := make(chan struct{}, 1)
	followDone := make(chan error, 1)
	go func() {
		followDone <- s.Follow(ctx, sid, 0, func(e Event) error {
			now := time.Now()
			mu.Lock()
			fromCall = append(fromCall, now.Sub(calls[e.Seq]))
			if !returns[e.Seq].IsZero() {
				fromReturn = append(fromReturn, now.Sub(returns[e.Seq]))
			} else {
				fromReturn = append(fromReturn, 0) // arrived before Append even returned
			}
			n := len(fromCall)
			mu.Unlock()
			if n == b.N {
				got <- struct{}{}
			}
			return nil
		})
	}()
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		mu.Lock()
		calls[i] = time.Now()
		mu.Unlock()
		e, err := s.Append(ctx, sid, "agent-message", payload256)
		if err != nil {
			b.Fatal(err)
		}
		mu.Lock()
		returns[e.Seq] = time.Now()
		mu.Unlock()
	}
	select {
	case <-got:
	case err := <-followDone:
		b.Fatalf("follow ended: %v", err)
	case <-time.After(30 * time.Second):
		b.Fatal("follower did not receive every event")
	}
	b.StopTimer()
	cancel()
	pct := func(ds []time.Duration, p float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(float64(len(s))*p))].Microseconds())
	}
	b.ReportMetric(pct(fromReturn, 0.50), "p50-after-return-µs")
	b.ReportMetric(pct(fromReturn, 0.99), "p99-after-return-µs")
	b.ReportMetric(pct(fromCall, 0.50), "p50-after-call-µs")
	b.ReportMetric(pct(fromCall, 0.99), "p99-after-call-µs")
}

// BenchmarkAppendBusySessions is the appender under the load of many busy
// terminals: 50 sessions, each with a long log already, each producer
// appending one terminal chunk and waiting for it as a PTY reader does.
// A commit writes every index leaf it changed to the WAL, one per session
// and index, so the figures are per event: the bytes the process wrote
// (the WAL's, nearly all) and its CPU time. kind-index=full is the kind
// index of schema version 4, which held terminal output too, restored in
// the same run as the baseline of the partial one.
func BenchmarkAppendBusySessions(b *testing.B) {
	const sessions, history = 50, 1000
	chunk := json.RawMessage(`{"text":"` + strings.Repeat("x", 400) + `"}`)
	for _, full := range []bool{true, false} {
		name := "kind-index=partial"
		if full {
			name = "kind-index=full"
		}
		b.Run(name, func(b *testing.B) {
			s := openTest(b)
			if full {
				if _, err := s.writer.Exec(`DROP INDEX events_session_kind;
					CREATE INDEX events_session_kind ON events (session_id, kind, seq)`); err != nil {
					b.Fatal(err)
				}
			}
			ids := benchSessions(b, s, sessions)
			ctx := context.Background()
			for _, id := range ids {
				in := make([]EventInput, history)
				for i := range in {
					in[i] = EventInput{SessionID: id, Kind: "terminal-output", Data: chunk}
				}
				if _, err := s.AppendMany(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
			before := s.Stats()
			cpu0, wrote0 := processCPU(b), processWrites(b)
			b.ResetTimer()
			var next atomic.Int64
			var wg sync.WaitGroup
			for _, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := s.Append(ctx, id, "terminal-output", chunk); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			cpu, wrote := processCPU(b)-cpu0, processWrites(b)-wrote0
			st := s.Stats()
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/event")
			b.ReportMetric(float64(wrote)/float64(b.N), "written-B/event")
			b.ReportMetric(float64(st.Events-before.Events)/float64(max(st.Batches-before.Batches, 1)), "events/commit")
		})
	}
}

// processCPU is this process's user and system time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processWrites is how many bytes this process has handed to write calls
// (wchar of /proc/self/io).
func processWrites(b *testing.B) int64 {
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no wchar in /proc/self/io")
	return 0
}

// BenchmarkFollowBusySession is one session written event by event, as a
// PTY reader does, with one live follower: the process's CPU time per
// event, the follower taking what woke it from the session's tail in
// memory, and (from=store) reading the store after every signal as it did
// before, in the same run.
func BenchmarkFollowBusySession(b *testing.B) {
	for _, storeOnly := range []bool{true, false} {
		name := "from=tail"
		if storeOnly {
			name = "from=store"
		}
		b.Run(name, func(b *testing.B) {
			s := openTest(b)
			s.watchers.storeOnly = storeOnly
			sid := benchSessions(b, s, 1)[0]
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			got := make(chan struct{})
			go func() {
				s.Follow(ctx, sid, 0, func(e Event) error {
					if e.Seq == int64(b.N) {
						close(got)
					}
					return nil
				})
			}()
			cpu0 := processCPU(b)
			b.ResetTimer()
			for range b.N {
				if _, err := s.Append(ctx, sid, "terminal-output", payload256); err != nil {
					b.Fatal(err)
				}
			}
			<-got
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/event")
		})
	}
}

// BenchmarkFollowAmongWriters is a follower of one session written 200
// times a second while 0 or 50 other sessions are written as often, every
// producer waiting for its own durable append as a PTY reader does: the
// follower's latency from the Append call to the event's arrival, and the
// process's CPU and bytes written per event, in process (cmd/loadgen follow
// measures the same through the real binary).
func BenchmarkFollowAmongWriters(b *testing.B) {
	const rate = 200
	dur := 4 * time.Second
	for _, writers := range []int{0, 50} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			var lat []time.Duration
			var cpu time.Duration
			var wrote, events int64
			for range b.N {
				s := openTest(b)
				ids := benchSessions(b, s, writers+1)
				ctx, cancel := context.WithCancel(context.Background())
				var mu sync.Mutex
				calls := map[int64]time.Time{}
				followed := make(chan error, 1)
				go func() {
					followed <- s.Follow(ctx, ids[0], 0, func(e Event) error {
						now := time.Now()
						mu.Lock()
						if t, ok := calls[e.Seq]; ok {
							lat = append(lat, now.Sub(t))
						}
						mu.Unlock()
						return nil
					})
				}()
				cpu0, wrote0, ev0 := processCPU(b), processWrites(b), s.Stats().Events
				var wg sync.WaitGroup
				stop := time.Now().Add(dur)
				for i, id := range ids {
					wg.Add(1)
					go func() {
						defer wg.Done()
						tick := time.NewTicker(time.Second / rate)
						defer tick.Stop()
						for seq := int64(1); time.Now().Before(stop); seq++ {
							<-tick.C
							if i == 0 {
								mu.Lock()
								calls[seq] = time.Now()
								mu.Unlock()
							}
							if _, err := s.Append(context.Background(), id, "terminal-output", payload256); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				cpu += processCPU(b) - cpu0
				wrote += processWrites(b) - wrote0
				events += s.Stats().Events - ev0
				time.Sleep(50 * time.Millisecond) // the last events reach the follower
				cancel()
				<-followed
				s.Close()
			}
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds())
			}
			b.ReportMetric(pct(0.5), "p50-µs")
			b.ReportMetric(pct(0.99), "p99-µs")
			b.ReportMetric(pct(0.999), "p99.9-µs")
			b.ReportMetric(float64(cpu.Microseconds())/float64(events), "cpu-µs/event")
			b.ReportMetric(float64(wrote)/float64(events), "written-B/event")
		})
	}
}
