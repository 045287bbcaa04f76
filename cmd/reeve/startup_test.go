package main

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Every command of the binary pays for the package init of everything the
// binary links, before it reads a flag. These budgets keep heavy inits out:
// a JSON-Schema library that compiled five metaschemas in init cost 21k
// allocations, and a package-level regexp with a counted repetition like
// {0,127} costs over a thousand. Today the whole binary allocates about
// 3,900 times in init, more with a longer PATH (see below), so the budget
// keeps a hundred in hand. The largest dependencies are the Prometheus
// client that /metrics goes through (about 1,630 with its modules, 890 of
// them procfs's package-level regexps, which no build option leaves out on
// Linux), the service manager (about 470: its init picks the host's init system by
// looking up four programs on PATH, so it grows with PATH), then viper's
// dotenv reader (230, regexps) and the YAML library (280; one module,
// go.yaml.in/yaml/v3, serves both viper and reeve). Man pages no longer go
// through cobra/doc's Markdown parser (cli/manpage.go): that was 760 more.
const (
	initAllocBudget = 4000
	// ownPackageAllocBudget is for reeve.dev packages: deferring work to
	// first use is always possible there (sync.OnceValue).
	ownPackageAllocBudget = 100
	// depPackageAllocBudget is for dependencies, whose init we can only
	// avoid by not linking them.
	depPackageAllocBudget = 600
)

// depPackageAllocExceptions are the dependencies allowed over
// depPackageAllocBudget, each at its measured figure (rounded up).
var depPackageAllocExceptions = map[string]int{"github.com/prometheus/procfs": 900}

// TestStartupInitBudget runs the built binary with the runtime's init trace
// and fails, naming the packages, when package init allocates more than the
// budgets allow. Counting allocations rather than time keeps it independent
// of the machine's load.
func TestStartupInitBudget(t *testing.T) {
	cmd := exec.Command(reeveBin, "--version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1", "REEVE_HOME="+t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	total, packages := 0, 0
	var heavy []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		// init PKG @T ms, C ms clock, B bytes, A allocs
		f := strings.Fields(sc.Text())
		if len(f) < 11 || f[0] != "init" || f[10] != "allocs" {
			continue
		}
		n, err := strconv.Atoi(f[9])
		if err != nil {
			t.Fatalf("unreadable init trace line %q", sc.Text())
		}
		packages++
		total += n
		budget := depPackageAllocBudget
		if b, ok := depPackageAllocExceptions[f[1]]; ok {
			budget = b
		}
		if strings.HasPrefix(f[1], "reeve.dev/") {
			budget = ownPackageAllocBudget
		}
		if n > budget {
			heavy = append(heavy, f[1]+" ("+f[9]+" allocs, "+f[7]+" bytes)")
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("reeve --version: %v", err)
	}
	if packages < 20 {
		t.Fatalf("the init trace named only %d packages: is GODEBUG=inittrace still honoured?", packages)
	}
	if len(heavy) > 0 {
		t.Errorf("package init allocates more than its budget (%d for reeve's packages, %d for dependencies) in: %s; defer the work to first use (sync.OnceValue) or do without the dependency", ownPackageAllocBudget, depPackageAllocBudget, strings.Join(heavy, ", "))
	}
	if total > initAllocBudget {
		t.Errorf("package init allocates %d times in all, the budget is %d", total, initAllocBudget)
	}
	t.Logf("%d packages initialised with %d allocations", packages, total)
}
