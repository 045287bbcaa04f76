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

// BenchmarkIdleDaemonMemory reports the memory of an idle daemon. Both
// processes run the same executable, so RSS counts its shared pages twice;
// PSS splits shared pages between their users, so the PSS sum is what the
// pair really occupies. The baseline, measured in the same run, is a Go
// program built the same way that serves HTTP on a port and idles: what
// the Go runtime alone costs a process. Anonymous memory (heap, stacks) and
// the executable's file pages are reported apart; pss-fresh is the pair just
// after start, the rest after one `reeve status`.
func BenchmarkIdleDaemonMemory(b *testing.B) {
	idle := startIdleHello(b)
	dir := filepath.Join(b.TempDir(), "home")
	sup, worker := startForBench(b, dir)
	time.Sleep(2 * time.Second) // let start-up allocations settle
	fresh := memOf(b, sup).pss + memOf(b, worker).pss
	// One request brings back into the worker the code that serves it: the
	// figure that counts is the idle daemon after it has done some work.
	status := exec.Command(reeveBin, "status")
	status.Env = append(os.Environ(), "REEVE_HOME="+dir)
	if out, err := status.CombinedOutput(); err != nil {
		b.Fatalf("status: %v\n%s", err, out)
	}
	time.Sleep(time.Second)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, w, h := memOf(b, sup), memOf(b, worker), memOf(b, idle)
		b.ReportMetric(float64(fresh)/1024, "pss-fresh-MiB")
		b.ReportMetric(float64(s.pss+w.pss)/1024, "pss-total-MiB")
		b.ReportMetric(float64(s.pssAnon+w.pssAnon)/1024, "pss-anon-MiB")
		b.ReportMetric(float64(s.pssFile+w.pssFile)/1024, "pss-file-MiB")
		b.ReportMetric(float64(s.rss+w.rss)/1024, "rss-sum-MiB")
		b.ReportMetric(float64(s.rss)/1024, "supervisor-rss-MiB")
		b.ReportMetric(float64(w.rss)/1024, "worker-rss-MiB")
		b.ReportMetric(float64(h.pss)/1024, "hello-idle-pss-MiB")
		b.ReportMetric(float64(s.pss+w.pss)/float64(2*h.pss), "pss/(2*hello)")
	}
}

// startIdleHello starts the idle baseline process and returns its pid.
func startIdleHello(b *testing.B) int {
	exe := buildGo(b, `package main

import (
	"fmt"
	"net"
	"net/http"
)

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Println(ln.Addr())
	http.Serve(ln, http.NotFoundHandler())
}
`)
	cmd := exec.Command(exe)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if _, err := out.Read(make([]byte, 64)); err != nil { // listening
		b.Fatal(err)
	}
	return cmd.Process.Pid
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

type procMem struct{ rss, pss, pssAnon, pssFile int } // KiB

// memOf reads a process's memory from /proc/PID/smaps_rollup.
func memOf(b *testing.B, pid int) procMem {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		b.Fatal(err)
	}
	var m procMem
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "Rss:":
			m.rss = n
		case "Pss:":
			m.pss = n
		case "Pss_Anon:":
			m.pssAnon = n
		case "Pss_File:":
			m.pssFile = n
		}
	}
	if m.rss == 0 {
		b.Fatalf("no Rss for %d", pid)
	}
	return m
}

func buildHello(b *testing.B) string {
	return buildGo(b, "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n")
}

// buildGo builds a one-file program the way the harness builds reeve
// (goBuild), in a module of the same go version as reeve's, which sets the
// same GODEBUG defaults.
func buildGo(b *testing.B, source string) string {
	dir := b.TempDir()
	goVersion, err := exec.Command("go", "list", "-m", "-f", "{{.GoVersion}}").Output()
	if err != nil {
		b.Fatalf("go list -m: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(source), 0o600)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo "+strings.TrimSpace(string(goVersion))+"\n"), 0o600)
	exe := filepath.Join(dir, "hello")
	cmd := goBuild("-o", exe, ".")
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
