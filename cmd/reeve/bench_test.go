package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The command-line benchmarks exec real processes. BenchmarkCLI/hello is a
// hello-world Go binary built the same way, so the figures read as ratios.
func BenchmarkCLI(b *testing.B) {
	hello := buildHello(b)
	dir := filepath.Join(b.TempDir(), "home")
	run := func(b *testing.B, exe string, args ...string) {
		for i := 0; i < b.N; i++ {
			cmd := exec.Command(exe, args...)
			cmd.Env = append(os.Environ(), "REEVE_HOME="+dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%s %v: %v\n%s", exe, args, err, out)
			}
		}
	}
	b.Run("hello", func(b *testing.B) { run(b, hello) })
	b.Run("version", func(b *testing.B) { run(b, reeveBin, "--version") })
	startForBench(b, dir)
	b.Run("status", func(b *testing.B) { run(b, reeveBin, "status") })
}

// BenchmarkIdleDaemonRSS reports the resident memory of an idle daemon,
// supervisor and worker together.
func BenchmarkIdleDaemonRSS(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "home")
	sup, worker := startForBench(b, dir)
	time.Sleep(2 * time.Second) // let start-up allocations settle
	var total float64
	for i := 0; i < b.N; i++ {
		s, w := rssKiB(b, sup), rssKiB(b, worker)
		total = float64(s+w) / 1024
		b.ReportMetric(float64(s)/1024, "supervisor-MiB")
		b.ReportMetric(float64(w)/1024, "worker-MiB")
	}
	b.ReportMetric(total, "total-MiB")
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

func rssKiB(b *testing.B, pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			n, _ := strconv.Atoi(strings.Fields(line)[1])
			return n
		}
	}
	b.Fatalf("no VmRSS for %d", pid)
	return 0
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
