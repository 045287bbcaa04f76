package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/internal/goproxy/goproxytest"
)

// newRelease is a module reeve.dev/reeve whose cmd/reeve prints its
// version, standing in for a published release.
func newRelease(greeting string) map[string]string {
	return map[string]string{
		"go.mod":                      "module reeve.dev/reeve\n\ngo 1.22\n",
		"internal/version/version.go": "package version\n\nvar Version = \"dev\"\n",
		"cmd/reeve/main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"reeve.dev/reeve/internal/version\"\n)\n\n" +
			"func main() { fmt.Println(\"" + greeting + " \" + version.Version) }\n",
	}
}

// update and status --check-updates over a GOPROXY=file:// directory and a
// checksum database the test runs: a tampered release is refused with the
// old binary kept, a good one replaces the binary atomically and keeps the
// previous one.
func TestUpdateThroughTheModuleProxy(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("update builds with the Go toolchain")
	}
	fx := goproxytest.New(t)
	fx.Publish("reeve.dev/reeve", "v0.0.1", newRelease("old"))
	h := newHome(t)
	bin := filepath.Join(t.TempDir(), "reeve")
	orig, _ := os.ReadFile(reeveBin)
	os.WriteFile(bin, orig, 0o755)
	env := append(os.Environ(), "REEVE_HOME="+h.dir, "GOPROXY="+fx.Proxy(), "GOSUMDB="+fx.SumDB, "GOFLAGS=", "GONOSUMDB=", "GOPRIVATE=")
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return out.String(), errb.String(), code
	}

	// Nothing newer than this build: up to date.
	out, errs, code := run("update")
	if code != 0 || !strings.Contains(errs, "is up to date") {
		t.Fatalf("update with nothing newer: exit %d %s %s", code, out, errs)
	}

	fx.Publish("reeve.dev/reeve", "v0.99.0", newRelease("new"))
	out, _, _ = run("status", "--check-updates", "--json")
	var st struct {
		Updates struct {
			Current, Latest string
			Available       bool
		}
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Updates.Latest != "v0.99.0" || !st.Updates.Available {
		t.Fatalf("status --check-updates: %s %v", out, err)
	}
	if out, _, _ := run("status", "--check-updates"); !strings.Contains(out, "update available: v0.99.0") {
		t.Fatalf("status --check-updates: %s", out)
	}

	// A proxy serving other content than the checksum database vouches for.
	fx.Tamper("reeve.dev/reeve", "v0.99.0", newRelease("evil"))
	_, errs, code = run("update", "--yes")
	if code != 6 || !strings.Contains(errs, "checksum mismatch") || !strings.Contains(errs, "unchanged") {
		t.Fatalf("tampered update: exit %d %s", code, errs)
	}
	if now, _ := os.ReadFile(bin); !bytes.Equal(now, orig) {
		t.Fatal("a refused update changed the binary")
	}
	if _, err := os.Stat(bin + ".previous"); err == nil {
		t.Fatal("a refused update left a .previous")
	}

	// Checking switched off: refused, not trusted blindly.
	env = append(env, "GOSUMDB=off")
	if _, errs, code := run("update"); code != 2 || !strings.Contains(errs, "GOSUMDB=off") {
		t.Fatalf("update with GOSUMDB=off: exit %d %s", code, errs)
	}
	env = env[:len(env)-1]

	fx.Publish("reeve.dev/reeve", "v0.99.0", newRelease("new"))
	var rep struct {
		Updated               bool
		Binary, Previous, Sum string
		RestartedDaemon       bool `json:"restarted_daemon"`
	}
	out, errs, code = run("update", "--yes", "--json")
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || !rep.Updated || rep.Previous != bin+".previous" || !strings.HasPrefix(rep.Sum, "h1:") {
		t.Fatalf("update: exit %d %+v %v\n%s", code, rep, err, errs)
	}
	got, err := exec.Command(bin).Output()
	if err != nil || strings.TrimSpace(string(got)) != "new 0.99.0" {
		t.Fatalf("the updated binary says %q %v", got, err)
	}
	if prev, _ := os.ReadFile(bin + ".previous"); !bytes.Equal(prev, orig) {
		t.Fatal("the previous binary was not kept")
	}
	if fi, _ := os.Stat(bin); fi.Mode().Perm() != 0o755 {
		t.Fatalf("the new binary is mode %v", fi.Mode())
	}
}
