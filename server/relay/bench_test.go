package relay_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/server/relay"
	"reeve.dev/reeve/server/sdk"
)

// The benchmarks compare the relay with a bare coder/websocket forwarding
// pipe in the same run, on 127.0.0.1:
//
//	go test ./server/relay -run XXX -bench . -benchtime 1x
//
// Admission goes through admitAll, so the figures are the relay's routing
// and not the control plane's validation.

const (
	benchPairs = 1000
	frameBytes = 256
)

// admitAll is a control plane that admits every connection as asked and
// has no other instances.
type admitAll struct{}

func (admitAll) Validate(_ context.Context, _ string, r sdk.RelayValidateRequest) (sdk.RelayAdmission, error) {
	return sdk.RelayAdmission{Valid: true, WorkspaceID: r.WorkspaceID, Role: r.Role, RuntimeTargetID: r.RuntimeTargetID}, nil
}
func (admitAll) Upsert(context.Context, sdk.RelayPresenceUpsertRequest) (sdk.RelayPresenceUpsertResult, error) {
	return sdk.RelayPresenceUpsertResult{}, nil
}
func (admitAll) Resolve(context.Context, sdk.RelayPresenceResolveRequest) (sdk.RelayPresenceResolveResult, error) {
	return sdk.RelayPresenceResolveResult{}, nil
}
func (admitAll) Publish(_ context.Context, r sdk.RelayBusPublishRequest) (sdk.RelayBusPublishResult, error) {
	return sdk.RelayBusPublishResult{Accepted: len(r.Messages)}, nil
}
func (admitAll) Pull(ctx context.Context, _ sdk.RelayBusPullRequest) (sdk.RelayBusPullResult, error) {
	<-ctx.Done()
	return sdk.RelayBusPullResult{}, ctx.Err()
}

func raiseFileLimit(tb testing.TB) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		tb.Fatal(err)
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		tb.Fatal(err)
	}
}

func serve(tb testing.TB, h http.Handler) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func startBenchRelay(tb testing.TB) (*relay.Relay, string) {
	tb.Helper()
	r, err := relay.New(relay.Options{Control: admitAll{}})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go r.Run(ctx)
	mux := http.NewServeMux()
	mux.Handle("/ws", r)
	base := serve(tb, mux)
	tb.Cleanup(func() { r.Close(); cancel() })
	return r, base
}

// pipeServer is the baseline: side b of a pair waits, side a's messages
// are read and written to b as they come, nothing else.
type pipeServer struct {
	mu    sync.Mutex
	waits map[string]chan *websocket.Conn
}

func (p *pipeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c.SetReadLimit(1 << 20)
	pair, side := r.URL.Query().Get("pair"), r.URL.Query().Get("side")
	p.mu.Lock()
	ch := p.waits[pair]
	if ch == nil {
		ch = make(chan *websocket.Conn, 1)
		p.waits[pair] = ch
	}
	p.mu.Unlock()
	ctx := context.Background()
	if side == "b" {
		ch <- c
		// Keep reading so closes and pings are handled.
		for {
			if _, _, err := c.Read(ctx); err != nil {
				return
			}
		}
	}
	peer := <-ch
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			peer.CloseNow()
			return
		}
		if err := peer.Write(ctx, websocket.MessageText, data); err != nil {
			return
		}
	}
}

func startPipe(tb testing.TB) string {
	return serve(tb, &pipeServer{waits: map[string]chan *websocket.Conn{}})
}

// pair is a sender and a receiver connected through the thing measured.
type pair struct{ send, recv *websocket.Conn }

func dialWS(ctx context.Context, url string) (*websocket.Conn, error) {
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer bench"}}})
	if c != nil {
		c.SetReadLimit(1 << 20)
	}
	return c, err
}

func workspaceID() string { return "01JBENCHWORKSPACE000000000" }

func targetID(i int) string { return fmt.Sprintf("01JBENCHTARGET%012d", i) }

// relayPairs connects n daemon/client pairs, each with its channel open.
func relayPairs(ctx context.Context, base string, n int) ([]pair, error) {
	out := make([]pair, n)
	for i := range out {
		du, _ := sdk.RelayWSURL(base, relay.RoleDaemon, workspaceID(), targetID(i))
		d, err := dialWS(ctx, du)
		if err != nil {
			return nil, err
		}
		cu, _ := sdk.RelayWSURL(base, relay.RoleClient, workspaceID(), targetID(i))
		c, err := dialWS(ctx, cu)
		if err != nil {
			return nil, err
		}
		if _, b, err := d.Read(ctx); err != nil || !bytes.Contains(b, []byte(`"open"`)) {
			return nil, fmt.Errorf("pair %d: no open (%s, %v)", i, b, err)
		}
		out[i] = pair{send: c, recv: d}
	}
	return out, nil
}

func pipePairs(ctx context.Context, base string, n int) ([]pair, error) {
	out := make([]pair, n)
	for i := range out {
		b, err := dialWS(ctx, fmt.Sprintf("%s/?pair=%d&side=b", strings.Replace(base, "http", "ws", 1), i))
		if err != nil {
			return nil, err
		}
		a, err := dialWS(ctx, fmt.Sprintf("%s/?pair=%d&side=a", strings.Replace(base, "http", "ws", 1), i))
		if err != nil {
			return nil, err
		}
		out[i] = pair{send: a, recv: b}
	}
	return out, nil
}

func closePairs(ps []pair) {
	for _, p := range ps {
		p.send.CloseNow()
		p.recv.CloseNow()
	}
}

// frame is a 256-byte client envelope whose payload starts with the send
// time in nanoseconds (19 digits); the relay forwards it undecoded.
func frame(ts int64) []byte {
	head := `{"t":"data","p":"`
	b := make([]byte, 0, frameBytes)
	b = append(b, head...)
	b = strconv.AppendInt(b, ts, 10)
	for len(b) < frameBytes-2 {
		b = append(b, 'A')
	}
	return append(b, '"', '}')
}

func sentAt(b []byte) int64 {
	i := bytes.Index(b, []byte(`"p":"`))
	if i < 0 || len(b) < i+5+19 {
		return 0
	}
	ts, _ := strconv.ParseInt(string(b[i+5:i+5+19]), 10, 64)
	return ts
}

// throughput sends perPair frames on every pair at full speed and returns
// frames per second delivered.
func throughput(tb testing.TB, ps []pair, perPair int) float64 {
	ctx := context.Background()
	f := frame(time.Now().UnixNano())
	var wg sync.WaitGroup
	start := time.Now()
	for _, p := range ps {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range perPair {
				if err := p.send.Write(ctx, websocket.MessageText, f); err != nil {
					tb.Error(err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range perPair {
				if _, _, err := p.recv.Read(ctx); err != nil {
					tb.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(perPair*len(ps)) / time.Since(start).Seconds()
}

func BenchmarkThroughput1000Pairs(b *testing.B) {
	raiseFileLimit(b)
	ctx := context.Background()
	_, rbase := startBenchRelay(b)
	rp, err := relayPairs(ctx, rbase, benchPairs)
	if err != nil {
		b.Fatal(err)
	}
	defer closePairs(rp)
	pp, err := pipePairs(ctx, startPipe(b), benchPairs)
	if err != nil {
		b.Fatal(err)
	}
	defer closePairs(pp)
	const perPair = 200
	throughput(b, pp, 20) // warm both up
	throughput(b, rp, 20)
	var pipeSum, relaySum float64
	b.ResetTimer()
	for range b.N {
		// Alternate so that a noisy neighbour hits both alike.
		pipeSum += throughput(b, pp, perPair)
		relaySum += throughput(b, rp, perPair)
	}
	b.ReportMetric(pipeSum/float64(b.N), "pipe-frames/s")
	b.ReportMetric(relaySum/float64(b.N), "relay-frames/s")
	b.ReportMetric(relaySum/pipeSum*100, "relay-%-of-pipe")
}

// latency sends rate frames per second in total, round robin over the
// pairs, for d, and returns the sorted one-way latencies. A few pacer
// goroutines send what is due every millisecond, so the load generator
// itself is not a thousand timers.
func latency(tb testing.TB, ps []pair, rate int, d time.Duration) []time.Duration {
	ctx := context.Background()
	const pacers = 4
	total := int(d.Seconds() * float64(rate))
	var (
		mu  sync.Mutex
		all []time.Duration
		wg  sync.WaitGroup
	)
	// Each pair receives its share; frames are counted per pair so the
	// readers know when to stop.
	want := make([]int, len(ps))
	for k := range total {
		want[k%len(ps)]++
	}
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, want[i])
			for range want[i] {
				_, b, err := p.recv.Read(ctx)
				if err != nil {
					tb.Error(err)
					return
				}
				local = append(local, time.Duration(time.Now().UnixNano()-sentAt(b)))
			}
			mu.Lock()
			all = append(all, local...)
			mu.Unlock()
		}()
	}
	start := time.Now()
	for k := range pacers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			share := total / pacers
			next := k // frame k, k+pacers, ... goes to pair (frame % len(ps))
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for sent := 0; sent < share; {
				due := min(share, int(time.Since(start).Seconds()*float64(rate)/pacers)) - sent
				for range due {
					p := ps[next%len(ps)]
					if err := p.send.Write(ctx, websocket.MessageText, frame(time.Now().UnixNano())); err != nil {
						tb.Error(err)
						return
					}
					next += pacers
					sent++
				}
				<-tick.C
			}
		}()
	}
	wg.Wait()
	slices.Sort(all)
	return all
}

func pct(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// BenchmarkLatency measures one-way latency at 50k frames/s in total (the
// goal) and, for reference, 10k frames/s, over 1,000 pairs.
func BenchmarkLatency(b *testing.B) {
	raiseFileLimit(b)
	ctx := context.Background()
	_, rbase := startBenchRelay(b)
	rp, err := relayPairs(ctx, rbase, benchPairs)
	if err != nil {
		b.Fatal(err)
	}
	defer closePairs(rp)
	pp, err := pipePairs(ctx, startPipe(b), benchPairs)
	if err != nil {
		b.Fatal(err)
	}
	defer closePairs(pp)
	for _, rate := range []int{50000, 10000} {
		b.Run(fmt.Sprintf("%dk-frames-per-s", rate/1000), func(b *testing.B) {
			d := 3 * time.Second
			var pipeL, relayL []time.Duration
			for range b.N {
				pipeL = append(pipeL, latency(b, pp, rate, d)...)
				relayL = append(relayL, latency(b, rp, rate, d)...)
			}
			slices.Sort(pipeL)
			slices.Sort(relayL)
			ms := func(x time.Duration) float64 { return float64(x) / 1e6 }
			b.ReportMetric(ms(pct(pipeL, 0.5)), "pipe-p50-ms")
			b.ReportMetric(ms(pct(pipeL, 0.99)), "pipe-p99-ms")
			b.ReportMetric(ms(pct(relayL, 0.5)), "relay-p50-ms")
			b.ReportMetric(ms(pct(relayL, 0.99)), "relay-p99-ms")
			b.ReportMetric(float64(pct(relayL, 0.99))/float64(pct(pipeL, 0.99)), "p99-relay/pipe")
		})
	}
}

// ---- memory per idle connection ----

const loadgenEnv = "REEVE_RELAY_LOADGEN"

// TestMain doubles as the load generator of the memory benchmark, so that
// the client ends of 10,000 connections live in another process and do
// not count against the relay's memory.
func TestMain(m *testing.M) {
	if spec := os.Getenv(loadgenEnv); spec != "" {
		os.Exit(loadgen(spec))
	}
	os.Exit(m.Run())
}

// loadgen opens the connections spec asks for ("relay|pipe base n"),
// prints "ready", and holds them until stdin closes.
func loadgen(spec string) int {
	var l syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	l.Cur = l.Max
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	f := strings.Fields(spec)
	n, _ := strconv.Atoi(f[2])
	ctx := context.Background()
	var (
		ps  []pair
		err error
	)
	if f[0] == "relay" {
		ps, err = relayPairs(ctx, f[1], n/2)
	} else {
		ps, err = pipePairs(ctx, f[1], n/2)
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	// Keep reading (pongs, closes) without holding buffers.
	for _, p := range ps {
		go func() { p.send.Read(ctx) }()
		go func() { p.recv.Read(ctx) }()
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

type memSample struct{ heapStack, rss uint64 }

func sampleMem() memSample {
	for range 3 {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := memSample{heapStack: ms.HeapInuse + ms.StackInuse}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				kb, _ := strconv.ParseUint(strings.Fields(line)[1], 10, 64)
				s.rss = kb << 10
			}
		}
	}
	return s
}

// idleConns has a load generator hold n connections to base and returns
// the growth of this process's memory per connection.
func idleConns(b *testing.B, kind, base string, n int, live func() int) (heapPer, rssPer float64) {
	before := sampleMem()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", loadgenEnv, kind, base, n))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		b.Fatalf("load generator: %q", line)
	}
	if live != nil && live() != n {
		b.Fatalf("%d connections live, want %d", live(), n)
	}
	time.Sleep(time.Second)
	after := sampleMem()
	return float64(after.heapStack-before.heapStack) / float64(n), float64(after.rss-before.rss) / float64(n)
}

// Run the two halves separately for RSS figures (-bench Idle.*/relay):
// freed heap is not returned to the system at once, so a second half in
// the same process reuses it and shows a smaller RSS growth.
func BenchmarkIdleMemory10kConnections(b *testing.B) {
	raiseFileLimit(b)
	const n = 10000
	b.Run("relay", func(b *testing.B) {
		for range b.N {
			r, rbase := startBenchRelay(b)
			heap, rss := idleConns(b, "relay", rbase, n, func() int {
				m := r.Metrics()
				return int(m.DaemonConns + m.ClientConns)
			})
			b.ReportMetric(heap/1024, "heap+stack-KiB/conn")
			b.ReportMetric(rss/1024, "rss-KiB/conn")
		}
	})
	b.Run("pipe", func(b *testing.B) {
		for range b.N {
			heap, rss := idleConns(b, "pipe", startPipe(b), n, nil)
			b.ReportMetric(heap/1024, "heap+stack-KiB/conn")
			b.ReportMetric(rss/1024, "rss-KiB/conn")
		}
	})
}
