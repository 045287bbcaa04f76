package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store/storetest"
)

func TestServerMigrateReportsTheVersion(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	env, out, _ := testEnv()
	if code := Execute(context.Background(), env, []string{"server", "migrate", "--data-dir", dir, "--json"}); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	var m ServerMigration
	if err := json.Unmarshal(out.Bytes(), &m); err != nil || m.Engine != "sqlite" || m.From != 0 || m.To < 2 || len(m.Applied) < 2 || m.Applied[len(m.Applied)-1][:4] != fmt.Sprintf("%04d", m.To) {
		t.Fatalf("first migrate: %+v %v (%q)", m, err, out.String())
	}
	env2, out2, _ := testEnv()
	if code := Execute(context.Background(), env2, []string{"server", "migrate", "--data-dir", dir}); code != ExitOK || !strings.Contains(out2.String(), "up to date") {
		t.Fatalf("second migrate: exit %d, %q", code, out2.String())
	}
	env3, _, _ := testEnv()
	if code := Execute(context.Background(), env3, []string{"server", "migrate", "--database-url", "mysql://x/y"}); code != ExitUsage {
		t.Fatalf("bad url: exit %d", code)
	}
}

// A SQLite server's data moved to PostgreSQL through export and import:
// the token minted on SQLite authenticates against a server on PostgreSQL.
func TestServerExportImportToPostgres(t *testing.T) {
	pg := storetest.PostgresURL(t)
	dir := filepath.Join(t.TempDir(), "data")
	env, out, _ := testEnv()
	if code := Execute(context.Background(), env, []string{"server", "token", "create", "--data-dir", dir, "--user", "ops@example.com"}); code != ExitOK {
		t.Fatalf("token create: exit %d", code)
	}
	token := strings.TrimSpace(out.String())
	dump := filepath.Join(t.TempDir(), "dump.jsonl")
	envE, _, errE := testEnv()
	if code := Execute(context.Background(), envE, []string{"server", "export", "--data-dir", dir, "-o", dump}); code != ExitOK {
		t.Fatalf("export: exit %d: %s", code, errE.String())
	}
	if fi, err := os.Stat(dump); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("dump file: %v %v", fi, err)
	}
	envI, outI, errI := testEnv()
	if code := Execute(context.Background(), envI, []string{"server", "import", "--database-url", pg, "-i", dump, "--json"}); code != ExitOK {
		t.Fatalf("import: exit %d: %s", code, errI.String())
	}
	var sum ServerDumpSummary
	if err := json.Unmarshal(outI.Bytes(), &sum); err != nil || sum.Engine != "sqlite" || sum.Tables["users"] != 1 || sum.Tables["tokens"] != 1 {
		t.Fatalf("import summary %+v %v", sum, err)
	}
	envI2, _, _ := testEnv()
	if code := Execute(context.Background(), envI2, []string{"server", "import", "--database-url", pg, "-i", dump}); code != ExitConflict {
		t.Fatalf("second import: exit %d", code)
	}

	senv, _, _ := testEnv()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		// The data directory keeps the master key the secrets were sealed with.
		done <- runServer(ctx, &serverOptions{env: senv, listen: "127.0.0.1:0", dataDir: dir, databaseURL: pg, ready: func(u string) { ready <- u }})
	}()
	var url string
	select {
	case url = <-ready:
	case err := <-done:
		t.Fatalf("server on postgres: %v", err)
	}
	ws, err := (&sdk.Client{BaseURL: url, Token: token}).ListWorkspaces(context.Background())
	if err != nil || len(ws) != 1 {
		t.Fatalf("the SQLite token on the PostgreSQL server: %v %v", ws, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
}
