package control

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
)

// BenchmarkFollowUnderLoad measures what a follower of one session waits
// while REEVE_BENCH_WRITERS other sessions (default 50) each append
// REEVE_BENCH_RATE events a second (default 200), as sessions' readers do:
// each append waits for its own durable commit. The followed session writes
// at the same rate. The follower is another process (this test binary
// re-executed as TestFollowerProcess), so its reading and decoding do not
// share this process's scheduler; it reports each event's latency from the
// start of its Append (stamped in the event) to its arrival. The daemon's
// CPU per event is this process's CPU time over the run divided by the
// events appended. In the same run, with no writers, the follower's latency
// alone is the baseline.
func BenchmarkFollowUnderLoad(b *testing.B) {
	writers := envInt("REEVE_BENCH_WRITERS", 50)
	rate := envInt("REEVE_BENCH_RATE", 200)
	dur := time.Duration(envInt("REEVE_BENCH_SECONDS", 10)) * time.Second
	for i := 0; i < b.N; i++ {
		base := followRun(b, 0, rate, dur/2)
		loaded := followRun(b, writers, rate, dur)
		reportPercentiles(b, "idle-", base.lat)
		reportPercentiles(b, "loaded-", loaded.lat)
		b.ReportMetric(float64(loaded.cpu.Microseconds())/float64(max(loaded.events, 1)), "cpu-µs/event")
		b.ReportMetric(float64(loaded.events)/loaded.wall.Seconds(), "events/s")
		b.ReportMetric(float64(loaded.events)/float64(max(loaded.batches, 1)), "events/commit")
	}
}

type followResult struct {
	lat             []time.Duration
	cpu, wall       time.Duration
	events, batches int64
}

func followRun(b *testing.B, writers, rate int, dur time.Duration) followResult {
	f := newWSFixture(b)
	ctx := context.Background()
	d, _, err := f.st.AddDirectory(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	others := make([]string, writers)
	for i := range others {
		s, err := f.st.CreateSession(ctx, store.NewSession{DirectoryID: d.ID, Agent: "shell", Status: store.StatusRunning})
		if err != nil {
			b.Fatal(err)
		}
		others[i] = s.ID
	}
	follower := exec.Command(os.Args[0], "-test.run=^TestFollowerProcess$", "-test.v=false")
	follower.Env = append(os.Environ(), "REEVE_FOLLOWER_URL="+f.url, "REEVE_FOLLOWER_SESSION="+f.sid)
	out, err := follower.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	follower.Stderr = os.Stderr
	if err := follower.Start(); err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		b.Fatalf("follower: %q", sc.Text())
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	write := func(sid string) {
		defer wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		pad := strings.Repeat("x", 200)
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			data := fmt.Sprintf(`{"text":%q,"t0":%d}`, pad, time.Now().UnixNano())
			if _, err := f.st.Append(ctx, sid, wire.KindTerminalOutput, json.RawMessage(data)); err != nil {
				b.Error(err)
				return
			}
		}
	}
	before := f.st.Stats()
	cpu0 := processCPU()
	t0 := time.Now()
	wg.Add(1 + writers)
	go write(f.sid)
	for _, sid := range others {
		go write(sid)
	}
	time.Sleep(dur)
	close(stop)
	wg.Wait()
	wall := time.Since(t0)
	cpu := processCPU() - cpu0
	after := f.st.Stats()
	f.st.UpdateSessionStatus(ctx, f.sid, store.StatusCompleted, "")
	var lat []time.Duration
	for sc.Scan() {
		n, err := strconv.ParseInt(sc.Text(), 10, 64)
		if err != nil {
			b.Fatalf("follower said %q", sc.Text())
		}
		lat = append(lat, time.Duration(n))
	}
	if err := follower.Wait(); err != nil {
		b.Fatalf("follower: %v", err)
	}
	// Each writer waits for its own commit, so on a slow disk it reaches
	// less than rate; the events/s metric says how much was written.
	if len(lat) == 0 {
		b.Fatalf("the follower saw no event in %v", dur)
	}
	return followResult{lat: lat, cpu: cpu, wall: wall, events: after.Events - before.Events, batches: after.Batches - before.Batches}
}

// TestFollowerProcess is the follower of BenchmarkFollowUnderLoad, in its
// own process; it does nothing unless that benchmark started it. It prints
// "ready" once subscribed, then each event's latency in nanoseconds.
func TestFollowerProcess(t *testing.T) {
	url, sid := os.Getenv("REEVE_FOLLOWER_URL"), os.Getenv("REEVE_FOLLOWER_SESSION")
	if url == "" {
		t.Skip("started by BenchmarkFollowUnderLoad only")
	}
	ctx := context.Background()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 22)
	read := func() []byte {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	read() // hello
	hello, _ := json.Marshal(wire.Hello{Type: wire.TypeHello, ProtocolVersion: wire.ProtocolVersion, Version: "bench"})
	sub, _ := json.Marshal(wire.SubscribeRequest{Type: wire.TypeSubscribe, ID: "s", SessionID: sid, Batch: true})
	c.Write(ctx, websocket.MessageText, hello)
	c.Write(ctx, websocket.MessageText, sub)
	read() // ack
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(w, "ready")
	w.Flush()
	handle := func(raw []byte, now int64) {
		var u struct {
			Data struct {
				T0 int64 `json:"t0"`
			} `json:"data"`
		}
		if json.Unmarshal(raw, &u) == nil && u.Data.T0 != 0 {
			fmt.Fprintln(w, now-u.Data.T0)
		}
	}
	for {
		raw := read()
		now := time.Now().UnixNano()
		var env wire.Envelope
		json.Unmarshal(raw, &env)
		switch env.Type {
		case wire.TypeSessionUpdate:
			handle(raw, now)
		case wire.TypeSessionUpdates:
			var b wire.SessionUpdates
			json.Unmarshal(raw, &b)
			for _, u := range b.Updates {
				handle(u, now)
			}
		case wire.TypeSessionEnded:
			w.Flush()
			os.Exit(0) // past the test framework's own output on stdout
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
