package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/server/sdk"
)

func bundleFile(p, content string) sdk.TeamResourceFile {
	sum := sha256.Sum256([]byte(content))
	return sdk.TeamResourceFile{Path: p, SHA256: hex.EncodeToString(sum[:]), ContentBase64: base64.StdEncoding.EncodeToString([]byte(content))}
}

func newGitRepo(t *testing.T) string {
	t.Helper()
	repo := t.TempDir()
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"config", "user.email", "t@example.com"}, {"config", "user.name", "t"}, {"commit", "-q", "--allow-empty", "-m", "init"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return repo
}

// An admin puts a bundle on the control plane; a machine of the workspace
// syncs it into a repository, commits, and the commit is reported back;
// a machine of another workspace is refused; a bundle file with a wrong
// digest or a path outside .reeve/ is refused with nothing written.
func TestTeamResourceSync(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	_, serverURL, user, ws := ownedServer(t, "owner@example.com")
	ctx := context.Background()
	policy := "version: 1\nrules:\n  - deny: {tool: Bash, command: 'rm -rf *'}\n"
	bundle := sdk.TeamResourceBundle{Files: []sdk.TeamResourceFile{bundleFile(".reeve/policy.yaml", policy)}}
	var put struct{ Data sdk.TeamResourceBundle }
	if _, err := user.Do(ctx, http.MethodPut, "/api/workspaces/"+ws+"/team-resources/default", bundle, &put); err != nil || put.Data.Version != "1" {
		t.Fatalf("put: %+v %v", put, err)
	}
	// The server checks digests and paths too.
	bad := sdk.TeamResourceBundle{Files: []sdk.TeamResourceFile{bundleFile("../escape", "x")}}
	if _, err := user.Do(ctx, http.MethodPut, "/api/workspaces/"+ws+"/team-resources/default", bad, nil); !sdk.IsCode(err, sdk.CodeValidation) {
		t.Fatalf("a bundle with a path outside .reeve/: %v", err)
	}
	in, err := user.CreateInstall(ctx, ws, "ci-runner")
	if err != nil {
		t.Fatal(err)
	}

	h := newHome(t)
	repo := newGitRepo(t)
	r := h.must("team-resource", "sync", "--server", serverURL, "--workspace", ws, "--credential", in.IssueToken, "--repo", repo, "--executor", "ci", "--json")
	var rep struct {
		Commit   string
		Reported bool
		Version  string
		Files    []struct{ Path, Action string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.Commit == "" || !rep.Reported || rep.Version != "1" || len(rep.Files) != 1 {
		t.Fatalf("sync: %+v %v\n%s", rep, err, r.stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(repo, ".reeve/policy.yaml")); string(got) != policy {
		t.Fatalf("policy written: %q", got)
	}
	if strings.Contains(r.stdout+r.stderr, in.IssueToken) {
		t.Fatal("the credential was printed")
	}
	var receipts sdk.RecordCollectionResponse
	if _, err := user.Do(ctx, http.MethodGet, "/api/workspaces/"+ws+"/team-resources/default/sync-receipts", nil, &receipts); err != nil || len(receipts.Data) != 1 || receipts.Data[0].Attributes["commit"] != rep.Commit || receipts.Data[0].Attributes["executor"] != "ci" {
		t.Fatalf("receipts: %+v %v", receipts, err)
	}
	// Again: nothing to commit.
	if r := h.must("team-resource", "sync", "--server", serverURL, "--workspace", ws, "--credential", in.IssueToken, "--repo", repo); strings.TrimSpace(r.stdout) != "" || !strings.Contains(r.stderr, "nothing to commit") {
		t.Fatalf("second sync: %q %q", r.stdout, r.stderr)
	}

	// A machine of another workspace.
	other, err := user.CreateWorkspace(ctx, sdk.WorkspaceCreateRequest{Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	{
		oin, err := user.CreateInstall(ctx, other.ID, "m")
		if err != nil {
			t.Fatal(err)
		}
		if r := h.run("team-resource", "sync", "--server", serverURL, "--workspace", ws, "--credential", oin.IssueToken, "--repo", newGitRepo(t)); r.code != 6 {
			t.Fatalf("another workspace's machine: exit %d %s", r.code, r.stderr)
		}
	}

	// Bundle files: a wrong digest and a path outside .reeve/.
	for name, f := range map[string]sdk.TeamResourceFile{
		"digest": {Path: ".reeve/policy.yaml", SHA256: strings.Repeat("0", 64), ContentBase64: base64.StdEncoding.EncodeToString([]byte("x"))},
		"path":   bundleFile(".reeve/../.github/workflows/x.yml", "x"),
	} {
		b, _ := json.Marshal(sdk.TeamResourceBundle{Files: []sdk.TeamResourceFile{bundleFile(".reeve/routes/a.yaml", "version: 1\n"), f}})
		path := filepath.Join(t.TempDir(), "bundle.json")
		os.WriteFile(path, b, 0o600)
		fresh := newGitRepo(t)
		r := h.run("team-resource", "sync", "--bundle", path, "--repo", fresh)
		if r.code != 6 || !strings.Contains(r.stderr, "nothing written") {
			t.Fatalf("%s: exit %d %s", name, r.code, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(fresh, ".reeve")); err == nil {
			t.Fatalf("%s: files written", name)
		}
	}
}
