package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/store"
)

// The command-line benchmarks exec real processes. BenchmarkCLI runs, in
// each iteration, a hello-world Go binary built the same way, then
// `reeve --version`, then `reeve status` against a running daemon, so each
// ratio compares runs under the same load. Wall time and CPU time (user +
// system, less sensitive to a busy machine) are both reported.
func BenchmarkCLI(b *testing.B) {
	hello := buildHello(b)
	dir := filepath.Join(b.TempDir(), "home")
	startForBench(b, dir)
	type cost struct{ wall, cpu time.Duration }
	run := func(c *cost, exe string, args ...string) {
		cmd := exec.Command(exe, args...)
		cmd.Env = append(os.Environ(), "REEVE_HOME="+dir)
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("%s %v: %v\n%s", exe, args, err, out)
		}
		c.wall += time.Since(t0)
		c.cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	var h, v, st cost
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run(&h, hello)
		run(&v, reeveBin, "--version")
		run(&st, reeveBin, "status")
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(h.wall), "hello-ms")
	b.ReportMetric(ms(v.wall), "version-ms")
	b.ReportMetric(ms(st.wall), "status-ms")
	b.ReportMetric(float64(v.wall)/float64(h.wall), "version/hello")
	b.ReportMetric(float64(st.wall)/float64(h.wall), "status/hello")
	b.ReportMetric(float64(v.cpu)/float64(h.cpu), "version/hello-cpu")
	b.ReportMetric(float64(st.cpu)/float64(h.cpu), "status/hello-cpu")
}

// BenchmarkIdleDaemonMemory reports the memory of an idle daemon. Both
// processes run the same executable, so RSS counts its shared pages twice;
// PSS splits shared pages between their users, so the PSS sum is what the
// pair really occupies.
func BenchmarkIdleDaemonMemory(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "home")
	sup, worker := startForBench(b, dir)
	time.Sleep(2 * time.Second) // let start-up allocations settle
	for i := 0; i < b.N; i++ {
		sr, sp := memKiB(b, sup)
		wr, wp := memKiB(b, worker)
		b.ReportMetric(float64(sp+wp)/1024, "pss-total-MiB")
		b.ReportMetric(float64(sr+wr)/1024, "rss-sum-MiB")
		b.ReportMetric(float64(sr)/1024, "supervisor-rss-MiB")
		b.ReportMetric(float64(wr)/1024, "worker-rss-MiB")
	}
}

func startForBench(b *testing.B, dir string) (supervisorPID, workerPID int) {
	b.Helper()
	cmd := exec.Command(reeveBin, "start", "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "REEVE_HOME="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("start: %v\n%s", err, out)
	}
	b.Cleanup(func() {
		stop := exec.Command(reeveBin, "stop", "--force")
		stop.Env = append(os.Environ(), "REEVE_HOME="+dir)
		stop.Run()
	})
	return pidFrom(b, filepath.Join(dir, "supervisor.pid")), pidFrom(b, filepath.Join(dir, "worker.pid"))
}

func pidFrom(b *testing.B, path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	i := strings.Index(string(data), `"pid":`)
	rest := strings.TrimSpace(string(data)[i+6:])
	n, _ := strconv.Atoi(strings.TrimRight(strings.SplitN(rest, ",", 2)[0], "\n}"))
	return n
}

// memKiB reads a process's RSS and PSS from /proc/PID/smaps_rollup.
func memKiB(b *testing.B, pid int) (rss, pss int) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "Rss:":
			rss = n
		case "Pss:":
			pss = n
		}
	}
	if rss == 0 {
		b.Fatalf("no Rss for %d", pid)
	}
	return rss, pss
}

func buildHello(b *testing.B) string {
	dir := b.TempDir()
	src := filepath.Join(dir, "main.go")
	os.WriteFile(src, []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o600)
	exe := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-o", exe, ".")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build hello: %v\n%s", err, out)
	}
	return exe
}

// BenchmarkLogsVsCat prints a stored log of REEVE_BENCH_LOG_EVENTS events
// (default 1M, 256-byte payloads) with `reeve logs SID --last-seq 0 --json`
// to /dev/null, and interleaved with it the baseline: `cat` of the same JSON
// lines from a file, which is in the page cache after the first run (so
// named "cat-cached"). Both are separate processes; the daemon is the real
// one, started from the built binary.
func BenchmarkLogsVsCat(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("REEVE_BENCH_LOG_EVENTS")); err == nil && v > 0 {
		n = v
	}
	dir := filepath.Join(b.TempDir(), "home")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{Path: filepath.Join(dir, "reeve.db")})
	if err != nil {
		b.Fatal(err)
	}
	d, _, err := st.AddDirectory(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	sess, err := st.CreateSession(ctx, store.NewSession{DirectoryID: d.ID, Agent: "shell", Status: store.StatusRunning})
	if err != nil {
		b.Fatal(err)
	}
	payload := json.RawMessage(`{"text":"` + strings.Repeat("x", 256-len(`{"text":""}`)) + `"}`)
	in := make([]store.EventInput, 4000)
	for i := range in {
		in[i] = store.EventInput{SessionID: sess.ID, Kind: "terminal-output", Data: payload}
	}
	for left := n; left > 0; left -= len(in) {
		if _, err := st.AppendMany(ctx, in[:min(left, len(in))]); err != nil {
			b.Fatal(err)
		}
	}
	st.UpdateSessionStatus(ctx, sess.ID, store.StatusCompleted, "")
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	startForBench(b, dir)
	lines := filepath.Join(b.TempDir(), "events.jsonl")
	logs := func(out string) time.Duration {
		t0 := time.Now()
		cmd := exec.Command("sh", "-c", `exec "$0" logs "$1" --last-seq 0 --json > "$2"`, reeveBin, sess.ID, out)
		cmd.Env = append(os.Environ(), "REEVE_HOME="+dir)
		if o, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("logs: %v\n%s", err, o)
		}
		return time.Since(t0)
	}
	logs(lines)
	if got := countLines(b, lines); got != n {
		b.Fatalf("logs printed %d lines, want %d", got, n)
	}
	cat := func() time.Duration {
		t0 := time.Now()
		if o, err := exec.Command("sh", "-c", `exec cat "$0" > /dev/null`, lines).CombinedOutput(); err != nil {
			b.Fatalf("cat: %v\n%s", err, o)
		}
		return time.Since(t0)
	}
	var tLogs, tCat time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tCat += cat()
		tLogs += logs("/dev/null")
	}
	rate := func(d time.Duration) float64 { return float64(n*b.N) / d.Seconds() }
	b.ReportMetric(rate(tLogs), "logs-events/s")
	b.ReportMetric(rate(tCat), "cat-cached-events/s")
	b.ReportMetric(rate(tLogs)/rate(tCat), "logs/cat")
}

func countLines(b *testing.B, path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}
