package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/server/secrets"
)

// reeve server master-key rotate on a key file named by the environment:
// a new key first, the old kept; --drop-old leaves the new one alone; a
// key given in REEVE_MASTER_KEY is refused with exit 2.
func TestServerMasterKeyRotate(t *testing.T) {
	t.Setenv(secrets.EnvMasterKey, "")
	t.Setenv(secrets.EnvMasterKeyFile, "")
	dir := filepath.Join(t.TempDir(), "data")
	keyFile := filepath.Join(t.TempDir(), "k", "master.key")
	if _, err := secrets.Load(secrets.Options{File: keyFile}); err != nil {
		t.Fatal(err)
	}
	env, out, errb := testEnv()
	env.Getenv = func(k string) string {
		if k == EnvMasterKeyFile {
			return keyFile
		}
		return ""
	}
	if code := Execute(context.Background(), env, []string{"server", "master-key", "rotate", "--data-dir", dir, "--json"}); code != ExitOK {
		t.Fatalf("rotate: exit %d: %s", code, errb.String())
	}
	var r ServerMasterKeyRotation
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.File != keyFile || r.NewKeyID == r.OldKeyID {
		t.Fatalf("rotation: %+v %v", r, err)
	}
	if b, _ := os.ReadFile(keyFile); len(strings.Fields(string(b))) != 2 {
		t.Fatalf("key file after rotate: %d keys", len(strings.Fields(string(b))))
	}
	env2, out2, _ := testEnv()
	if code := Execute(context.Background(), env2, []string{"server", "master-key", "rotate", "--data-dir", dir, "--master-key-file", keyFile, "--drop-old"}); code != ExitOK || !strings.Contains(out2.String(), "dropped") {
		t.Fatalf("drop old: exit %d %q", code, out2.String())
	}
	if b, _ := os.ReadFile(keyFile); len(strings.Fields(string(b))) != 1 {
		t.Fatalf("key file after --drop-old: %q", b)
	}
	env3, _, _ := testEnv()
	env3.Getenv = func(k string) string {
		if k == "REEVE_MASTER_KEY" {
			return strings.Repeat("A", 43) + "="
		}
		return ""
	}
	if code := Execute(context.Background(), env3, []string{"server", "master-key", "rotate", "--data-dir", dir}); code != ExitUsage {
		t.Fatalf("env key: exit %d, want %d", code, ExitUsage)
	}
}
