package contextvault_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/contextvault"
	"reeve.dev/reeve/contextvault/vaulttest"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

func post(t *testing.T, c *sdk.Client, path string, body any, want int) map[string]any {
	t.Helper()
	var out map[string]any
	status, err := c.Do(context.Background(), http.MethodPost, path, body, &out)
	if status != want {
		t.Fatalf("POST %s: %d %v, want %d", path, status, err, want)
	}
	if code := contextvault.Code(err); code != "" {
		return map[string]any{"error": map[string]any{"code": code}}
	}
	return out
}

// A session's correction becomes a proposal a human accepts into the
// vault: sealed to the vault's devices on arrival, previewed (with a
// signed proof), written as an entry, and only then marked accepted; the
// server never keeps its text. Working sets and retrieval work over
// descriptors and refuse a source outside the working set.
func TestCorrectionsWorkingSetAndRetrieval(t *testing.T) {
	ctx := context.Background()
	srv := servertest.Start(t, servertest.Options{})
	alice := srv.NewUser("alice@example.com")
	a1 := vaulttest.NewDevice(t, srv, alice, "a1")
	v := must(a1.Init(ctx, "a1", "team"))(t).Vault
	must(a1.Add(ctx, "team", contextvault.NewEntry{Title: "Migrations", Body: "one file per change", UseWhen: "database migrations; path:**/migrations/*.sql"}))(t)
	must(a1.Add(ctx, "team", contextvault.NewEntry{Title: "CSS", Body: "tailwind only", UseWhen: "frontend styling"}))(t)
	must(a1.SyncPush(ctx, ""))(t)
	other := post(t, alice.Client, "/api/context-sources", map[string]any{"name": "elsewhere", "use_when": "always"}, 201)["data"].(map[string]any)["id"].(string)

	sess := post(t, alice.Client, "/api/resources/"+alice.Workspace+"/sessions", map[string]any{
		"title": "Write the database migrations for invoices", "source_kind": "cli",
		"metadata": map[string]any{"context_source_ids": []string{v.ID}},
	}, 201)["data"].(map[string]any)["id"].(string)
	base := "/api/resources/" + alice.Workspace + "/sessions/" + sess

	ws := post(t, alice.Client, base+"/context-working-set", nil, 200)["data"].(map[string]any)
	entries := ws["entries"].([]any)
	if ids := ws["context_source_ids"].([]any); len(ids) != 1 || ids[0] != v.ID {
		t.Fatalf("working set sources = %v", ids)
	}
	if len(entries) != 1 || !strings.Contains(entries[0].(map[string]any)["use_when"].(string), "migrations") {
		t.Fatalf("working set entries = %v", entries)
	}
	hit := post(t, alice.Client, base+"/memory-retrieval", map[string]any{"query": "styling the frontend"}, 200)["data"].(map[string]any)
	res := hit["results"].([]any)
	if len(res) != 1 || res[0].(map[string]any)["ciphertext"] == "" {
		t.Fatalf("retrieval = %v", hit)
	}
	outside := post(t, alice.Client, base+"/memory-retrieval", map[string]any{"query": "x", "context_source_ids": []string{v.ID, other}}, 422)
	if outside["error"].(map[string]any)["code"] != sdk.CodeOutsideWorkingSet {
		t.Fatalf("outside the working set: %v", outside)
	}
	// The placeholder spelling of the session routes behaves the same.
	alice.Client.HTTP.Transport = nil
	post(t, alice.Client, "/api/sessions/"+sess+"/memory-retrieval", map[string]any{"query": "x", "context_source_ids": []string{other}}, 422)

	// A correction from the session.
	post(t, alice.Client, base+"/context-corrections", map[string]any{"correction_kind": "new_memory", "target_kind": "memory_candidate", "title": "x", "context_source_id": other}, 422)
	prop := post(t, alice.Client, base+"/context-corrections", map[string]any{
		"correction_kind": "new_memory", "target_kind": "memory_candidate", "title": "Invoices never change",
		"proposed_text": "SENTINEL-DELTA: an issued invoice is immutable; correct it with a credit note",
	}, 201)["data"].(map[string]any)
	pid := prop["id"].(string)
	if prop["state"] != "pending" || prop["context_source_id"] != v.ID {
		t.Fatalf("proposal = %v", prop)
	}
	ds := must(a1.Decisions(ctx, ""))(t)
	if len(ds) != 1 || !ds[0].Readable || ds[0].Content.Title != "Invoices never change" {
		t.Fatalf("decisions = %+v", ds)
	}
	// Accepting needs a preview first: the server refuses a writeback
	// without a proof.
	_, err := a1.Client.Writeback(ctx, pid, sdk.ContextWritebackRequest{ProofID: "nope", CandidateDigest: ds[0].Digest, EventID: "x"})
	if contextvault.Code(err) != sdk.CodeValidation {
		t.Fatalf("a writeback without a preview: %v", err)
	}
	pv := must(a1.CandidatePreview(ctx, pid, nil, ""))(t)
	if pv.Kind != "new" || pv.Proof == nil || !strings.Contains(pv.Diff, "+Invoices never change") {
		t.Fatalf("preview = %+v", pv)
	}
	dec := must(a1.Accept(ctx, pid, "", ""))(t)
	if dec.Proposal.State != sdk.ProposalAccepted || dec.Added == nil || dec.Proposal.Sealed != "" {
		t.Fatalf("accept = %+v", dec)
	}
	if titles(t, a1)["Invoices never change"] != 1 {
		t.Fatal("the accepted proposal is not in the vault")
	}
	if _, err := a1.Accept(ctx, pid, "", ""); err == nil {
		t.Fatal("a proposal was accepted twice")
	}
	// A second proposal, rejected.
	p2 := post(t, alice.Client, base+"/context-corrections", map[string]any{"correction_kind": "wrong_context", "target_kind": "memory_candidate", "title": "CSS is wrong"}, 201)["data"].(map[string]any)["id"].(string)
	rej := must(a1.Reject(ctx, p2, "it is right"))(t)
	if rej.Proposal.State != sdk.ProposalRejected {
		t.Fatalf("reject = %+v", rej)
	}
	if bytes.Contains(vaulttest.ServerFiles(t, srv), []byte("SENTINEL-DELTA")) {
		t.Fatal("the server kept the correction's text")
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// A markdown repository (a local bare one here) attached as a context
// source: its documents are resolved, the server gets only descriptors,
// and a proposal becomes a pushed branch.
func TestGitSourceAndPropose(t *testing.T) {
	ctx := context.Background()
	srv := servertest.Start(t, servertest.Options{})
	alice := srv.NewUser("alice@example.com")
	a1 := vaulttest.NewDevice(t, srv, alice, "a1")
	must(a1.Init(ctx, "a1", ""))(t)

	root := t.TempDir()
	bare := filepath.Join(root, "handbook.git")
	work := filepath.Join(root, "work")
	git(t, root, "init", "--quiet", "--bare", "--initial-branch=main", bare)
	git(t, root, "clone", "--quiet", bare, work)
	os.MkdirAll(filepath.Join(work, "backend"), 0o755)
	os.WriteFile(filepath.Join(work, "backend", "errors.md"), []byte("---\ntitle: Wrap errors\ntags: [go]\nuse_when: path:**/*.go\nupdate_when: the error style changes\n---\n\nSENTINEL-ECHO wrap with %w and lowercase messages.\n"), 0o644)
	os.WriteFile(filepath.Join(work, "README.md"), []byte("# Handbook\n\nHow we work.\n"), 0o644)
	git(t, work, "add", ".")
	git(t, work, "commit", "--quiet", "-m", "handbook")
	git(t, work, "push", "--quiet", "origin", "main")

	src, r := func() (contextvault.Source, contextvault.GitSyncResult) {
		s, r, err := a1.UseGit(ctx, contextvault.UseGitOptions{Repo: bare, Provider: "local"})
		if err != nil {
			t.Fatal(err)
		}
		return s, r
	}()
	if src.Kind != sdk.ContextKindGit || r.Docs != 2 || r.Changed != 2 {
		t.Fatalf("use git = %+v %+v", src, r)
	}
	idx := post(t, alice.Client, "/api/context-sources/"+src.ID+"/indexes", nil, 200)["data"].(map[string]any)
	if idx["entries"].(float64) != 2 {
		t.Fatalf("index = %v", idx)
	}
	b, _ := json.Marshal(idx)
	if !strings.Contains(string(b), "backend/errors.md") || strings.Contains(string(b), "SENTINEL-ECHO") {
		t.Fatalf("the server's index: %s", b)
	}
	// Resolving for Go work in a Go project finds the document.
	proj := t.TempDir()
	os.WriteFile(filepath.Join(proj, "main.go"), []byte("package main\n"), 0o644)
	res := must(a1.Resolve(ctx, contextvault.ResolveOptions{Dir: proj, Task: "add a handler"}))(t)
	if len(res.Entries) == 0 || res.Entries[0].Title != "Wrap errors" || !strings.Contains(res.Markdown(), "SENTINEL-ECHO") {
		t.Fatalf("resolve = %+v", res)
	}
	// A second sync with nothing new reports nothing.
	again := must(a1.SyncGit(ctx))(t)
	if len(again) != 1 || again[0].Changed != 0 {
		t.Fatalf("sync again = %+v", again)
	}

	pr := must(a1.Propose(ctx, contextvault.ProposeOptions{Entry: contextvault.NewEntry{Title: "Log with slog", Body: "structured logs only", UseWhen: "logging"}}))(t)
	if pr.Opened || pr.Command == "" || pr.File != "log-with-slog.md" {
		t.Fatalf("propose = %+v", pr)
	}
	if got := git(t, bare, "branch", "--list", pr.Branch); !strings.Contains(got, pr.Branch) {
		t.Fatalf("the branch %s was not pushed (branches: %q)", pr.Branch, git(t, bare, "branch"))
	}
	if got := git(t, bare, "show", pr.Branch+":log-with-slog.md"); !strings.Contains(got, "use_when: logging") {
		t.Fatalf("the proposed document: %s", got)
	}
	// The clone is back on the base: the proposal is not resolved as if
	// it were merged.
	if titles(t, a1)["Log with slog"] != 0 {
		t.Fatal("an unmerged proposal is resolved")
	}

	// OWNER/REPO on github with gh installed: the pull request is opened
	// with gh. git is told to fetch github.com/acme/handbook from the bare
	// repository, and a stand-in gh records how it was called.
	cfg := filepath.Join(root, "gitconfig")
	os.WriteFile(cfg, []byte("[url \"file://"+bare+"\"]\n\tinsteadOf = https://github.com/acme/handbook.git\n"), 0o644)
	t.Setenv("GIT_CONFIG_GLOBAL", cfg)
	bin := filepath.Join(root, "bin")
	os.MkdirAll(bin, 0o755)
	record := filepath.Join(root, "gh-args")
	os.WriteFile(filepath.Join(bin, "gh"), []byte("#!/bin/sh\nprintf '%s\\n' \"$@\" > "+record+"\necho https://github.com/acme/handbook/pull/7\n"), 0o755)
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	gh, _, err := a1.UseGit(ctx, contextvault.UseGitOptions{Repo: "acme/handbook", Provider: "github", Name: "handbook-gh"})
	if err != nil {
		t.Fatal(err)
	}
	pr = must(a1.Propose(ctx, contextvault.ProposeOptions{Source: gh.Name, Entry: contextvault.NewEntry{Title: "Review checklist", Body: "two approvals"}}))(t)
	if !pr.Opened || pr.URL != "https://github.com/acme/handbook/pull/7" {
		t.Fatalf("propose with gh = %+v", pr)
	}
	args, _ := os.ReadFile(record)
	for _, want := range []string{"pr\ncreate\n", "--repo\nacme/handbook\n", "--head\n" + pr.Branch + "\n", "--base\nmain\n"} {
		if !strings.Contains(string(args), want) {
			t.Fatalf("gh was called with %q, missing %q", args, want)
		}
	}
}
