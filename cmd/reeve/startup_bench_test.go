package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkStartup measures the start of short commands against baselines
// built the same way (goBuild: the same Go, flags and cgo setting as the
// binary under test), each iteration running every case once, so each ratio
// compares runs under the same load:
//   - hello: fmt.Println alone;
//   - hello-cli: hello linking cobra and viper, the command-line and
//     configuration libraries every reeve command runs through: the floor
//     of any command line built on them;
//   - hello-required: hello linking the six libraries reeve is required to
//     use (cobra, viper, creack/pty, coder/websocket, go-keyring and
//     kardianos/service);
//   - hello-deps: a main linking every package reeve's main links, printing
//     hello: the floor of any command of a binary with reeve's dependencies;
//   - version: reeve --version;
//   - status-stopped: reeve status with no daemon running (exit 3);
//   - status: reeve status against a running daemon.
//
// Per run it reports wall time, CPU time (user + system: less sensitive to a
// busy machine) and minor page faults (the executable's pages touched, close
// to deterministic). When valgrind is installed it also counts each case's
// instructions once per process (REEVE_BENCH_NO_VALGRIND=1 skips it): the
// most stable figure, independent of the machine's load. Nothing here
// asserts on time.
func BenchmarkStartup(b *testing.B) {
	hello := buildHello(b)
	helloCLI := buildHelloImporting(b, cliLibraries)
	helloRequired := buildHelloImporting(b, requiredLibraries)
	helloDeps := buildHelloDeps(b)
	stopped := filepath.Join(b.TempDir(), "stopped")
	running := filepath.Join(b.TempDir(), "running")
	startForBench(b, running)
	cases := []startCase{
		{name: "hello", argv: []string{hello}},
		{name: "hello-cli", argv: []string{helloCLI}},
		{name: "hello-required", argv: []string{helloRequired}},
		{name: "hello-deps", argv: []string{helloDeps}},
		{name: "version", argv: []string{reeveBin, "--version"}},
		{name: "status-stopped", argv: []string{reeveBin, "status"}, home: stopped, exit: 3},
		{name: "status", argv: []string{reeveBin, "status"}, home: running},
	}
	costs := make([]startCost, len(cases))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range cases {
			costs[j].add(b, cases[j].run(b))
		}
	}
	b.StopTimer()
	base := costs[0]
	for j, c := range cases {
		co := costs[j]
		b.ReportMetric(co.wallMS(b.N), c.name+"-ms")
		b.ReportMetric(co.faults/float64(b.N), c.name+"-faults")
		if j == 0 {
			continue
		}
		b.ReportMetric(float64(co.wall)/float64(base.wall), c.name+"/hello")
		b.ReportMetric(float64(co.cpu)/float64(base.cpu), c.name+"/hello-cpu")
	}
	if instr := startupInstructions(b, cases); instr != nil {
		for j, c := range cases {
			b.ReportMetric(float64(instr[j]), c.name+"-instr")
			if j > 0 {
				b.ReportMetric(float64(instr[j])/float64(instr[0]), c.name+"/hello-instr")
			}
		}
	}
}

// startCase is one command line of the start-up benchmark.
type startCase struct {
	name string
	argv []string
	home string // REEVE_HOME; a fresh empty one when unset
	exit int    // the expected exit code
}

func (c startCase) command(b *testing.B, argv ...string) *exec.Cmd {
	home := c.home
	if home == "" {
		home = filepath.Join(b.TempDir(), "home")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "REEVE_HOME="+home)
	return cmd
}

// run runs the case once and returns what it cost.
func (c startCase) run(b *testing.B) startCost {
	cmd := c.command(b, c.argv...)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	wall := time.Since(t0)
	if code := cmd.ProcessState.ExitCode(); code != c.exit {
		b.Fatalf("%s: exit %d (%v), want %d\n%s", strings.Join(c.argv, " "), code, err, c.exit, out)
	}
	ps := cmd.ProcessState
	var faults float64
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		faults = float64(ru.Minflt + ru.Majflt)
	}
	return startCost{wall: wall, cpu: ps.UserTime() + ps.SystemTime(), faults: faults}
}

type startCost struct {
	wall, cpu time.Duration
	faults    float64
}

func (s *startCost) add(b *testing.B, o startCost) {
	s.wall += o.wall
	s.cpu += o.cpu
	s.faults += o.faults
}

func (s startCost) wallMS(n int) float64 { return float64(s.wall.Microseconds()) / 1000 / float64(n) }

var (
	instrOnce   sync.Once
	instrCounts []int64
	instrRefs   = regexp.MustCompile(`I\s+refs:\s+([\d,]+)`)
)

// startupInstructions counts each case's instructions under callgrind,
// computed once per process (the benchmark function runs several times). A
// Go program's count varies by a few percent with the scheduling of its
// threads, so each case is the median of five runs. Asynchronous preemption
// is off because valgrind's delivery of its signals is unreliable, and so
// is RDTSCP, which valgrind 3.19 does not implement and the runtime's lock
// path executes under contention (the runtime then uses RDTSC; x/sys/cpu,
// which reads GODEBUG too, warns about the name on stderr). A run that
// fails anyway is retried.
func startupInstructions(b *testing.B, cases []startCase) []int64 {
	if os.Getenv("REEVE_BENCH_NO_VALGRIND") != "" {
		return nil
	}
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		return nil
	}
	instrOnce.Do(func() {
		counts := make([]int64, len(cases))
		for j, c := range cases {
			var runs []int64
			for attempt := 0; len(runs) < 5 && attempt < 15; attempt++ {
				argv := append([]string{valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null"}, c.argv...)
				cmd := c.command(b, argv...)
				cmd.Env = append(cmd.Env, "GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off")
				out, _ := cmd.CombinedOutput()
				m := instrRefs.FindSubmatch(out)
				if cmd.ProcessState.ExitCode() != c.exit || m == nil {
					continue
				}
				n, _ := strconv.ParseInt(strings.ReplaceAll(string(m[1]), ",", ""), 10, 64)
				runs = append(runs, n)
			}
			if len(runs) == 0 {
				b.Logf("callgrind could not run %s; no instruction counts", c.name)
				return
			}
			slices.Sort(runs)
			counts[j] = runs[len(runs)/2]
		}
		instrCounts = counts
	})
	return instrCounts
}

// The libraries behind the hello-cli and hello-required baselines.
var (
	cliLibraries      = []string{"github.com/spf13/cobra", "github.com/spf13/viper"}
	requiredLibraries = append([]string{"github.com/creack/pty", "github.com/coder/websocket",
		"github.com/zalando/go-keyring", "github.com/kardianos/service"}, cliLibraries...)
)

// buildHelloDeps builds the hello-deps baseline: a main package that links
// what cmd/reeve's main links and only prints.
func buildHelloDeps(b *testing.B) string {
	pkg, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", ".").Output()
	if err != nil {
		b.Fatalf("go list: %v", err)
	}
	return buildHelloImporting(b, strings.Fields(string(pkg)))
}

// buildHelloImporting builds a hello world that links the packages given
// (blank imports, so only their package init runs). It is placed beside
// cmd/reeve with an overlay, so that it is built inside the module, with
// the module's versions of those packages, without writing into the source
// tree.
func buildHelloImporting(b *testing.B, pkgs []string) string {
	wd, err := os.Getwd()
	if err != nil {
		b.Fatal(err)
	}
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n\t\"fmt\"\n")
	for _, p := range pkgs {
		if p != "fmt" {
			fmt.Fprintf(&src, "\t_ %q\n", p)
		}
	}
	src.WriteString(")\n\nfunc main() { fmt.Println(\"hello\") }\n")
	tmp := b.TempDir()
	file := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(file, []byte(src.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(wd, "hellodeps", "main.go"): file}})
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, overlay, 0o600); err != nil {
		b.Fatal(err)
	}
	exe := filepath.Join(tmp, "hellodeps")
	if out, err := goBuild("-overlay", ovFile, "-o", exe, "./hellodeps").CombinedOutput(); err != nil {
		b.Fatalf("build a hello linking %v: %v\n%s", pkgs, err, out)
	}
	return exe
}
