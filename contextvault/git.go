package contextvault

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"reeve.dev/reeve/server/sdk"
)

// Git sources: a repository of markdown, cloned on each device that uses
// it. Its documents are read from the clone; the server gets only their
// descriptors (path, use_when, update_when, commit).

func runGit(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// ownerRepo is compiled on first use: package init runs at every start of
// the binary, whatever the command.
var ownerRepo = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$`) })

// RepoURL turns what a person typed (OWNER/REPO, a URL, a local path)
// into something git clones.
func RepoURL(repo, provider string) (string, error) {
	repo = strings.TrimSpace(repo)
	if repo == "" {
		return "", fmt.Errorf("%w: --repo is required", ErrRefused)
	}
	if strings.Contains(repo, "://") || strings.HasPrefix(repo, "git@") {
		return repo, nil
	}
	if st, err := os.Stat(repo); err == nil && st.IsDir() {
		return filepath.Abs(repo)
	}
	if ownerRepo().MatchString(repo) {
		switch provider {
		case "", "github":
			return "https://github.com/" + strings.TrimSuffix(repo, ".git") + ".git", nil
		case "gitlab":
			return "https://gitlab.com/" + strings.TrimSuffix(repo, ".git") + ".git", nil
		}
		return "", fmt.Errorf("%w: OWNER/REPO is understood for the github and gitlab providers; give a URL for %s", ErrRefused, provider)
	}
	return "", fmt.Errorf("%w: %q is neither OWNER/REPO, a URL nor a local repository", ErrRefused, repo)
}

func (v *Vault) clonePath(sourceID string) string { return filepath.Join(v.dir, "git", sourceID) }

// UseGitOptions attach a repository.
type UseGitOptions struct {
	Repo, Provider, Name, Branch string
	UseWhen, UpdateWhen          string
}

// UseGit attaches a markdown repository as a context source of this
// workspace: it is cloned here and its documents' descriptors reported.
func (v *Vault) UseGit(ctx context.Context, o UseGitOptions) (Source, GitSyncResult, error) {
	srv, err := v.server()
	if err != nil {
		return Source{}, GitSyncResult{}, err
	}
	url, err := RepoURL(o.Repo, o.Provider)
	if err != nil {
		return Source{}, GitSyncResult{}, err
	}
	if o.Name == "" {
		o.Name = strings.TrimSuffix(filepath.Base(strings.TrimSuffix(url, "/")), ".git")
	}
	// Clone first: a repository that cannot be read is not attached.
	tmp, err := os.MkdirTemp(v.dir, ".clone-*")
	if err != nil {
		return Source{}, GitSyncResult{}, err
	}
	defer os.RemoveAll(tmp)
	args := []string{"clone", "--quiet"}
	if o.Branch != "" {
		args = append(args, "--branch", o.Branch)
	}
	if _, err := v.o.Git(ctx, v.dir, append(args, url, tmp)...); err != nil {
		return Source{}, GitSyncResult{}, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if o.Branch == "" {
		b, err := v.o.Git(ctx, tmp, "rev-parse", "--abbrev-ref", "HEAD")
		if err != nil {
			return Source{}, GitSyncResult{}, err
		}
		o.Branch = strings.TrimSpace(b)
	}
	cv, err := srv.CreateVault(ctx, sdk.ContextSourceRequest{Kind: sdk.ContextKindGit, Name: o.Name, RepoURL: url, Provider: o.Provider, Branch: o.Branch, UseWhen: o.UseWhen, UpdateWhen: o.UpdateWhen})
	if err != nil {
		return Source{}, GitSyncResult{}, apiErr("attach "+o.Name, err)
	}
	if err := os.MkdirAll(filepath.Dir(v.clonePath(cv.ID)), 0o700); err != nil {
		return Source{}, GitSyncResult{}, err
	}
	if err := os.Rename(tmp, v.clonePath(cv.ID)); err != nil {
		return Source{}, GitSyncResult{}, err
	}
	if err := v.l.putSource(sourceOf(cv)); err != nil {
		return Source{}, GitSyncResult{}, err
	}
	src, err := v.l.source(cv.ID)
	if err != nil {
		return src, GitSyncResult{}, err
	}
	r, err := v.syncGitSource(ctx, src, false)
	return src, r, err
}

// GitSyncResult is what syncing a git source did.
type GitSyncResult struct {
	Source  string `json:"source"`
	Commit  string `json:"commit"`
	Docs    int    `json:"docs"`
	Changed int    `json:"changed"`
	Removed int    `json:"removed"`
}

// SyncGit fetches every git source this device uses and reports changed
// documents.
func (v *Vault) SyncGit(ctx context.Context) ([]GitSyncResult, error) {
	srcs, err := v.l.sources()
	if err != nil {
		return nil, err
	}
	var out []GitSyncResult
	for _, s := range srcs {
		if s.Kind != sdk.ContextKindGit || s.Gone {
			continue
		}
		r, err := v.syncGitSource(ctx, s, true)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (v *Vault) syncGitSource(ctx context.Context, s Source, fetch bool) (GitSyncResult, error) {
	res := GitSyncResult{Source: s.Name}
	dir := v.clonePath(s.ID)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return res, err
		}
		args := []string{"clone", "--quiet"}
		if s.Branch != "" {
			args = append(args, "--branch", s.Branch)
		}
		if _, err := v.o.Git(ctx, v.dir, append(args, s.RepoURL, dir)...); err != nil {
			return res, err
		}
	} else if fetch {
		if _, err := v.o.Git(ctx, dir, "fetch", "--quiet", "origin"); err != nil {
			return res, err
		}
		if _, err := v.o.Git(ctx, dir, "checkout", "--quiet", "--detach", "origin/"+s.Branch); err != nil {
			return res, err
		}
	}
	head, err := v.o.Git(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return res, err
	}
	res.Commit = strings.TrimSpace(head)
	if v.o.Server == nil {
		return res, nil
	}
	// What the server knows: pull the source's descriptors first.
	if _, err := v.SyncPull(ctx, s.ID); err != nil {
		return res, err
	}
	docs, err := v.gitEntries(s)
	if err != nil {
		return res, err
	}
	res.Docs = len(docs)
	evs, err := v.l.allEvents(s.ID)
	if err != nil {
		return res, err
	}
	latest := map[string]Event{}
	for _, e := range evs {
		latest[e.EntryID] = e
	}
	var push []sdk.ContextEvent
	seen := map[string]bool{}
	for _, d := range docs {
		entry := docEntryID(d.Path)
		seen[entry] = true
		prev, had := latest[entry]
		digest := docDigest(d)
		// A document's event id ends with its content digest: unchanged
		// documents are not reported again.
		if had && prev.Kind == sdk.EventDoc && strings.HasSuffix(prev.EventID, digest[:8]) {
			continue
		}
		ev := sdk.ContextEvent{EntryID: entry, Kind: sdk.EventDoc, UseWhen: d.UseWhen, UpdateWhen: d.UpdateWhen, Path: d.Path, Commit: res.Commit}
		if had {
			ev.Base = prev.EventID
		}
		ev.EventID = shortHash(entry+ev.Base+digest, 18) + digest[:8]
		push = append(push, ev)
	}
	for entry, prev := range latest {
		if !seen[entry] && prev.Kind == sdk.EventDoc {
			push = append(push, sdk.ContextEvent{EventID: shortHash(entry+prev.EventID+"delete", 26), EntryID: entry, Kind: sdk.EventDelete, Base: prev.EventID, Path: prev.Path, Commit: res.Commit})
			res.Removed++
		}
	}
	for i := 0; i < len(push); i += pushBatch {
		batch := push[i:min(i+pushBatch, len(push))]
		ack, err := v.o.Server.Push(ctx, sdk.ContextPushRequest{VaultID: s.ID, Events: batch})
		if err != nil {
			return res, apiErr("report the documents of "+s.Name, err)
		}
		if err := v.l.tx(ctx, func(tx *sql.Tx) error {
			for j, a := range ack.Accepted {
				e := batch[j]
				if _, err := tx.Exec(`DELETE FROM events WHERE source_id = ? AND event_id = ?`, s.ID, a.EventID); err != nil {
					return err
				}
				if err := insertEvent(tx, Event{SourceID: s.ID, EventID: e.EventID, Seq: a.Seq, EntryID: e.EntryID, Kind: e.Kind, Base: e.Base, UseWhen: e.UseWhen, UpdateWhen: e.UpdateWhen, Path: e.Path, Commit: e.Commit, DeviceID: v.DeviceID(), CreatedAt: v.o.Now()}); err != nil {
					return err
				}
			}
			_, err := tx.Exec(`UPDATE sources SET cursor = max(cursor, ?), head_commit = ? WHERE id = ?`, ack.HeadSeq, res.Commit, s.ID)
			return err
		}); err != nil {
			return res, err
		}
	}
	res.Changed = len(push) - res.Removed
	return res, nil
}

func docEntryID(path string) string { return "doc-" + shortHash(path, 22) }

func docDigest(d Entry) string {
	return shortHash(d.Path+"\x00"+d.Title+"\x00"+d.Body+"\x00"+d.UseWhen+"\x00"+d.UpdateWhen, 64)
}

func shortHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

// frontMatter is what a document may declare above its body.
type frontMatter struct {
	Title      string   `yaml:"title"`
	Tags       []string `yaml:"tags"`
	UseWhen    string   `yaml:"use_when"`
	UpdateWhen string   `yaml:"update_when"`
}

// gitEntries reads the markdown documents of a git source's clone.
func (v *Vault) gitEntries(s Source) ([]Entry, error) {
	dir := v.clonePath(s.ID)
	if _, err := os.Stat(dir); err != nil {
		return nil, nil // not cloned on this device yet: sync-all fetches it
	}
	var out []Entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.EqualFold(filepath.Ext(p), ".md") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		fm, body := parseDoc(b)
		title := fm.Title
		if title == "" {
			title = firstHeading(body)
		}
		if title == "" {
			title = strings.TrimSuffix(filepath.Base(rel), filepath.Ext(rel))
		}
		out = append(out, Entry{Vault: s.Name, VaultID: s.ID, Kind: sdk.ContextKindGit, EntryID: docEntryID(rel), Title: title, Tags: fm.Tags,
			Body: body, UseWhen: fm.UseWhen, UpdateWhen: fm.UpdateWhen, Path: rel})
		return nil
	})
	return out, err
}

// parseDoc splits YAML front matter ("---" lines) from a document.
func parseDoc(b []byte) (frontMatter, string) {
	var fm frontMatter
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	if rest, ok := strings.CutPrefix(s, "---\n"); ok {
		if head, body, ok := strings.Cut(rest, "\n---\n"); ok {
			if yaml.Unmarshal([]byte(head), &fm) == nil {
				return fm, strings.TrimLeft(body, "\n")
			}
		}
	}
	return fm, s
}

func firstHeading(body string) string {
	for _, line := range strings.Split(body, "\n") {
		if t, ok := strings.CutPrefix(strings.TrimSpace(line), "# "); ok {
			return strings.TrimSpace(t)
		}
	}
	return ""
}

// renderDoc writes a document with its front matter.
func renderDoc(e NewEntry) []byte {
	fm, _ := yaml.Marshal(frontMatter{Title: e.Title, Tags: e.Tags, UseWhen: e.UseWhen, UpdateWhen: e.UpdateWhen})
	return []byte("---\n" + string(fm) + "---\n\n" + strings.TrimSpace(e.Body) + "\n")
}
