package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "reeve.dev/reeve"

// deps lists the non-standard packages pkg depends on, transitively. A
// package that does not exist yet yields ok=false.
func deps(t *testing.T, pkg string) (list []string, ok bool) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "matched no packages") || strings.Contains(string(out), "cannot find") || strings.Contains(string(out), "no required module provides") || strings.Contains(string(out), "no Go files") {
			return nil, false
		}
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	for _, l := range strings.Fields(string(out)) {
		if l != pkg {
			list = append(list, l)
		}
	}
	return list, true
}

// Leaves import only the standard library and a few JSON/ID helpers, so any
// program can speak the formats they define.
func TestLeafPackages(t *testing.T) {
	allowed := []string{"github.com/oklog/ulid/v2"}
	for _, pkg := range []string{module + "/daemon/wire", module + "/server/sdk"} {
		list, ok := deps(t, pkg)
		if !ok {
			continue
		}
		for _, d := range list {
			if !hasAnyPrefix(d, allowed) {
				t.Errorf("%s is a leaf but depends on %s", pkg, d)
			}
		}
	}
}

// The command layer reaches the daemon worker and the server handlers only
// through wiring done in main, never by import.
func TestCLIStaysThin(t *testing.T) {
	list, _ := deps(t, module+"/cli")
	forbidden := []string{module + "/daemon/runtime", module + "/server/api", module + "/server/relay"}
	for _, d := range list {
		if hasAnyPrefix(d, forbidden) {
			t.Errorf("cli depends on %s", d)
		}
	}
}

// The hosted server never links daemon, agent or hook-bridge code.
func TestServerIndependentOfDaemon(t *testing.T) {
	out, err := exec.Command("go", "list", module+"/server/...").CombinedOutput()
	if err != nil {
		t.Skipf("no server packages yet: %s", strings.TrimSpace(string(out)))
	}
	forbidden := []string{module + "/daemon", module + "/agents", module + "/hookbridge"}
	for _, pkg := range strings.Fields(string(out)) {
		list, _ := deps(t, pkg)
		for _, d := range list {
			if hasAnyPrefix(d, forbidden) {
				t.Errorf("%s depends on %s", pkg, d)
			}
		}
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if s == p || strings.HasPrefix(s, p+"/") {
			return true
		}
	}
	return false
}
