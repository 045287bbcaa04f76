package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"reeve.dev/reeve/internal/aptget"
)

// needTool finds a program of a Debian package, installing the package
// when it is missing and this process may. Without it the test skips,
// except under CI (REEVE_REQUIRE_AGENTS), where .ci/run promises the
// machine's tools and a skip would hide a check.
func needTool(t *testing.T, prog, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(prog); err == nil {
		return p
	}
	aptInstall(t, pkg, func() bool { _, err := exec.LookPath(prog); return err == nil })
	if p, err := exec.LookPath(prog); err == nil {
		return p
	}
	if os.Getenv("REEVE_REQUIRE_AGENTS") != "" {
		t.Fatalf("%s (Debian package %s) is needed", prog, pkg)
	}
	t.Skipf("%s (Debian package %s) is not installed and cannot be installed here", prog, pkg)
	return ""
}

// needFile is needTool for a file a package installs.
func needFile(t *testing.T, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	aptInstall(t, pkg, func() bool { _, err := os.Stat(path); return err == nil })
	if _, err := os.Stat(path); err == nil {
		return
	}
	if os.Getenv("REEVE_REQUIRE_AGENTS") != "" {
		t.Fatalf("%s (Debian package %s) is needed", path, pkg)
	}
	t.Skipf("%s (Debian package %s) is not installed and cannot be installed here", path, pkg)
}

// aptInstall installs a Debian package when this process may; the
// callers look for what it provides afterwards and decide what a miss means.
func aptInstall(t *testing.T, pkg string, present func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := aptget.Install(ctx, present, pkg); err != nil && !errors.Is(err, aptget.ErrCannot) {
		t.Logf("install %s: %v", pkg, err)
	}
}

// unitExecStart splits the unit's ExecStart as systemd does for the
// quoting reeve writes.
func unitExecStart(t *testing.T, unit string) []string {
	t.Helper()
	for _, l := range strings.Split(unit, "\n") {
		v, ok := strings.CutPrefix(l, "ExecStart=")
		if !ok {
			continue
		}
		var words []string
		var cur strings.Builder
		in, quoted := false, false
		for i := 0; i < len(v); i++ {
			switch c := v[i]; {
			case quoted && c == '\\':
				i++
				cur.WriteByte(v[i])
			case c == '"':
				quoted, in = !quoted, true
			case c == ' ' && !quoted:
				if in {
					words, in = append(words, cur.String()), false
					cur.Reset()
				}
			case (c == '%' || c == '$') && i+1 < len(v) && v[i+1] == c:
				i++
				cur.WriteByte(c)
				in = true
			default:
				cur.WriteByte(c)
				in = true
			}
		}
		if in {
			words = append(words, cur.String())
		}
		return words
	}
	t.Fatalf("no ExecStart in\n%s", unit)
	return nil
}

// The unit reeve writes passes systemd's own check, and the daemon runs in
// the foreground under the unit's exact command line with the launch
// settings saved in the home, and stops on SIGTERM as systemd stops it.
func TestServiceUnitVerifiesAndRuns(t *testing.T) {
	analyze := needTool(t, "systemd-analyze", "systemd")
	h := newHome(t)
	h.dir = filepath.Join(t.TempDir(), "home with space")
	sock := filepath.Join(t.TempDir(), "d.sock")
	h.must("start", "--listen", sock)
	h.must("stop")

	for _, args := range [][]string{{"service", "install", "--print"}, {"service", "install", "--print", "--system", "--user", "alice"}} {
		r := h.must(args...)
		unit := filepath.Join(t.TempDir(), "reeve.service")
		os.WriteFile(unit, []byte(r.stdout), 0o644)
		cmd := exec.Command(analyze, "verify", unit)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.Contains(string(out), "reeve.service") {
			t.Fatalf("systemd-analyze verify %v: %v\n%s\nunit:\n%s", args, err, out, r.stdout)
		}
	}
	// systemd-analyze reports a bad unit: the check above can fail.
	bad := filepath.Join(t.TempDir(), "reeve.service")
	os.WriteFile(bad, []byte("[Service]\nType=bogus\nExecStart=/nonexistent/reeve\n"), 0o644)
	if out, _ := exec.Command(analyze, "verify", bad).CombinedOutput(); !strings.Contains(string(out), "reeve.service") {
		t.Fatalf("systemd-analyze accepted a bad unit: %s", out)
	}

	argv := unitExecStart(t, h.must("service", "install", "--print").stdout)
	if argv[0] != reeveBin && !strings.HasSuffix(argv[0], "/reeve") || argv[len(argv)-1] != h.dir {
		t.Fatalf("ExecStart %q", argv)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "REEVE_HOME=/nonexistent-the-unit-names-its-home")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitFor(t, "the unit's daemon", 60*time.Second, func() bool {
		st, _ := h.status()
		return st.State == "running"
	})
	if st, _ := h.status(); st.Reachability.Address != sock {
		t.Fatalf("the unit's daemon listens on %s, want the saved %s", st.Reachability.Address, sock)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("foreground daemon after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the foreground daemon did not stop on SIGTERM")
	}
}

// install and uninstall into a root through the binary, with --json; a
// second install changes nothing.
func TestServiceInstallIntoRoot(t *testing.T) {
	needTool(t, "systemctl", "systemd")
	h := newHome(t)
	root := t.TempDir()
	var rep struct {
		Unit    struct{ Path string }
		Changed bool
		Steps   []string
	}
	if err := json.Unmarshal([]byte(h.must("service", "install", "--root", root, "--json").stdout), &rep); err != nil || !rep.Changed {
		t.Fatalf("install: %+v %v", rep, err)
	}
	if !strings.HasPrefix(rep.Unit.Path, root+"/etc/systemd/user/") {
		t.Fatalf("unit at %s", rep.Unit.Path)
	}
	var st struct{ Installed, Current, Enabled, Running bool }
	if err := json.Unmarshal([]byte(h.must("service", "status", "--root", root, "--json").stdout), &st); err != nil || !st.Installed || !st.Current || !st.Enabled || st.Running {
		t.Fatalf("status: %+v %v", st, err)
	}
	if r := h.must("service", "install", "--root", root); !strings.Contains(r.stdout, "already installed") {
		t.Fatalf("second install: %s", r.stdout)
	}
	h.must("service", "uninstall", "--root", root)
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("uninstall left %v", entries)
	}
	if r := h.must("service", "status", "--root", root); !strings.Contains(r.stdout, "not installed") {
		t.Fatalf("status after uninstall: %s", r.stdout)
	}
}

// Without systemd as PID 1 the live commands exit 3 and say what to do; a
// user who may not write the unit's place is refused with exit 6.
func TestServiceRefusals(t *testing.T) {
	h := newHome(t)
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		for _, args := range [][]string{{"service", "install"}, {"service", "status"}, {"service", "uninstall"}} {
			r := h.run(args...)
			if args[1] == "uninstall" {
				// Nothing installed: nothing to ask the manager.
				if r.code != 0 {
					t.Fatalf("uninstall of nothing: exit %d %s", r.code, r.stderr)
				}
				continue
			}
			if r.code != 3 || !strings.Contains(r.stderr, "systemd is not running") || !strings.Contains(r.stderr, "--print") {
				t.Fatalf("%v without systemd: exit %d\n%s", args, r.code, r.stderr)
			}
		}
	}
	if r := h.run("service", "install", "--user", "x"); r.code != 2 {
		t.Fatalf("--user without --system: exit %d", r.code)
	}

	// An unprivileged user installing a system unit into a root it may not
	// write.
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the binary as another user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv is not installed")
	}
	bin := filepath.Join(t.TempDir(), "reeve")
	data, _ := os.ReadFile(reeveBin)
	os.WriteFile(bin, data, 0o755)
	os.Chmod(filepath.Dir(bin), 0o755)
	root := t.TempDir()
	os.Chmod(root, 0o755)
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bin, "service", "install", "--system", "--root", root, "--home", "/tmp/nobody-home")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 6 || !strings.Contains(string(out), "permission denied") {
		t.Fatalf("install by an unprivileged user: %v\n%s", err, out)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("a refused install wrote %v", entries)
	}
}
