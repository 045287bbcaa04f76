package home_test

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/internal/keystore/keystoretest"
)

const secretsChild = "REEVE_HOME_SECRET_SERVICE"

// The local API token and the relay issue token move into the OS keychain
// (a real Secret Service: gnome-keyring on a private D-Bus session) and
// back, with nothing lost and no secret left in the files of the home.
func TestSecretsInTheKeychain(t *testing.T) {
	if os.Getenv(secretsChild) != "1" {
		keystoretest.RunInSession(t, "TestSecretsInTheKeychain", secretsChild)
		return
	}
	dir := home.Dir(t.TempDir())
	tok, err := dir.EnsureToken()
	if err != nil {
		t.Fatal(err)
	}
	rc := home.RelayCredentials{InstallID: "ins", WorkspaceID: "ws", IssueToken: "rvi_secret", ServerURL: "http://s", RelayURL: "ws://r", Transport: "relay", PairedAt: time.Now().UTC()}
	if err := dir.WriteRelayCredentials(rc); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(read(t, dir.RelayFile()), "rvi_secret") {
		t.Fatal("the file store keeps the issue token in relay.json")
	}
	if err := dir.KeychainReachable(); err != nil {
		t.Fatalf("keychain: %v", err)
	}
	if err := dir.SetKeyStore("keychain"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir.TokenFile()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the token file stayed after the move to the keychain")
	}
	if strings.Contains(read(t, dir.RelayFile()), "rvi_secret") {
		t.Fatal("relay.json still holds the issue token")
	}
	if got, err := dir.ReadToken(); err != nil || got != tok {
		t.Fatalf("token from the keychain: %q %v", got, err)
	}
	if got, err := dir.ReadRelayCredentials(); err != nil || got.IssueToken != "rvi_secret" || got.InstallID != "ins" {
		t.Fatalf("relay credentials from the keychain: %+v %v", got, err)
	}
	rotated, err := dir.RotateToken()
	if err != nil || rotated == tok {
		t.Fatal(err)
	}
	if got, _ := dir.ReadToken(); got != rotated {
		t.Fatal("the rotated token is not the one read back")
	}
	if _, err := os.Stat(dir.TokenFile()); err == nil {
		t.Fatal("rotation wrote a token file")
	}
	// Another home on the same machine does not see these secrets.
	other := home.Dir(t.TempDir())
	other.SetKeyStore("keychain")
	if _, err := other.ReadToken(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("another home read a token: %v", err)
	}

	// And back to files.
	if err := dir.SetKeyStore("file"); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(read(t, dir.TokenFile())); got != rotated {
		t.Fatalf("token file after the move back: %q", got)
	}
	if fi, _ := os.Stat(dir.TokenFile()); fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v", fi.Mode())
	}
	if got, err := dir.ReadRelayCredentials(); err != nil || got.IssueToken != "rvi_secret" || !strings.Contains(read(t, dir.RelayFile()), "rvi_secret") {
		t.Fatalf("relay credentials after the move back: %+v %v", got, err)
	}
}

// Without a reachable keychain the move is refused and nothing changes.
func TestKeychainUnreachable(t *testing.T) {
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")
	dir := home.Dir(t.TempDir())
	tok, _ := dir.EnsureToken()
	if err := dir.SetKeyStore("keychain"); err == nil {
		t.Fatal("moved secrets into an unreachable keychain")
	}
	if k, _ := dir.KeyStoreKind(); k != "file" {
		t.Fatalf("key store %s", k)
	}
	if got, err := dir.ReadToken(); err != nil || got != tok {
		t.Fatalf("token after a refused move: %q %v", got, err)
	}
	if err := dir.SetKeyStore("vault"); err == nil {
		t.Fatal("accepted an unknown key store")
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
