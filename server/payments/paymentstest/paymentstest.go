// Package paymentstest runs the payments provider's own mock server
// (stripe-mock) for tests: installed once into the repository's .cache/bin
// with `go install` (under a file lock, so parallel test packages do not
// race), then started on a loopback port for the test.
//
// Without it (no Go proxy, no network) tests skip with a message, except
// under REEVE_REQUIRE_AGENTS=1 (CI), where they fail.
package paymentstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Version is the mock server release the tests are written against.
const Version = "v0.203.0"

// root finds the module root (the directory holding go.mod).
func root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

func fail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("REEVE_REQUIRE_AGENTS") == "1" {
		t.Fatal(msg + " (REEVE_REQUIRE_AGENTS=1)")
	}
	t.Skip(msg)
}

// install returns the mock's binary, installing it if needed.
func install(t testing.TB) string {
	t.Helper()
	r, err := root()
	if err != nil {
		fail(t, "stripe-mock: "+err.Error())
	}
	bin := filepath.Join(r, ".cache", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		fail(t, "stripe-mock: "+err.Error())
	}
	exe := filepath.Join(bin, "stripe-mock")
	stamp := exe + "." + Version
	lock, err := os.OpenFile(filepath.Join(bin, ".stripe-mock.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		fail(t, "stripe-mock: "+err.Error())
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		fail(t, "stripe-mock lock: "+err.Error())
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(stamp); err == nil {
		if _, err := os.Stat(exe); err == nil {
			return exe
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/stripe/stripe-mock@"+Version)
	cmd.Env = append(os.Environ(), "GOBIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		fail(t, fmt.Sprintf("install stripe-mock %s: %v\n%s", Version, err, out))
	}
	if err := os.WriteFile(stamp, nil, 0o644); err != nil {
		fail(t, "stripe-mock: "+err.Error())
	}
	return exe
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs the mock server until the test ends and returns its base URL
// (http://127.0.0.1:PORT). Any API key is accepted, e.g. "sk_test_123".
func Start(t testing.TB) string {
	t.Helper()
	exe := install(t)
	for attempt := 0; attempt < 3; attempt++ {
		port, tls := freePort(t), freePort(t)
		cmd := exec.Command(exe, "-http-port", strconv.Itoa(port), "-https-port", strconv.Itoa(tls))
		if err := cmd.Start(); err != nil {
			fail(t, "start stripe-mock: "+err.Error())
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		base := "http://127.0.0.1:" + strconv.Itoa(port)
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			req, _ := http.NewRequest("GET", base+"/v1/customers?limit=1", nil)
			req.SetBasicAuth("sk_test_123", "")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return base
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		cmd.Process.Kill()
	}
	t.Fatal("stripe-mock did not answer")
	return ""
}
