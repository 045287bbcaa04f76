package keystore_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/internal/keystore"
	"reeve.dev/reeve/internal/keystore/keystoretest"
)

const childEnv = "REEVE_KEYSTORE_SECRET_SERVICE"

// TestKeychainSecretService runs the keychain store against a real Secret
// Service: Debian's gnome-keyring, on a private D-Bus session bus started
// with dbus-run-session, with a login keyring created and unlocked with a
// throwaway password. The test re-runs itself inside that session.
func TestKeychainSecretService(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		s, err := keystore.Open(keystore.Options{Kind: keystore.KindKeychain, Service: "reeve-test", Namespace: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		exercise(t, s)
		// Two namespaces (two homes) do not see each other's secrets.
		other := &keystore.Keychain{Service: "reeve-test", Namespace: "/another/home"}
		if err := s.Set("shared-name", []byte("mine")); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Get("shared-name"); err == nil {
			t.Fatal("a secret leaked across namespaces")
		}
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("the Secret Service test runs on Linux")
	}
	daemon, runSession := keystoretest.SecretService(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The keyring daemon keeps its files in a private home; --unlock reads
	// the login keyring's password from stdin and creates it.
	script := `printf 'reeve-test' | "$1" --unlock --components=secrets >/dev/null && exec "$2" -test.run '^TestKeychainSecretService$' -test.v`
	cmd := exec.CommandContext(ctx, runSession, "--", "sh", "-c", script, "sh", daemon, exe)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), childEnv+"=1", "HOME="+home, "XDG_DATA_HOME="+filepath.Join(home, "data"), "XDG_RUNTIME_DIR="+keystoretest.PrivateDir(t))
	out, err := cmd.CombinedOutput()
	t.Logf("inside dbus-run-session:\n%s", out)
	if err != nil {
		t.Fatalf("keychain test inside the Secret Service session failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestKeychainSecretService") {
		t.Fatal("the inner test did not pass")
	}
}
