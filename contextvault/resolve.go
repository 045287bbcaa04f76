package contextvault

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"reeve.dev/reeve/contextvault/entrylog"
	"reeve.dev/reeve/contextvault/relevance"
	"reeve.dev/reeve/contextvault/seal"
	"reeve.dev/reeve/server/sdk"
)

// Entry is an entry decrypted on this device.
type Entry struct {
	Vault      string   `json:"vault"`
	VaultID    string   `json:"vault_id"`
	Kind       string   `json:"kind"` // vault or git
	EntryID    string   `json:"entry_id"`
	EventID    string   `json:"event_id"`
	Title      string   `json:"title"`
	Tags       []string `json:"tags,omitempty"`
	Body       string   `json:"body"`
	UseWhen    string   `json:"use_when,omitempty"`
	UpdateWhen string   `json:"update_when,omitempty"`
	Path       string   `json:"path,omitempty"`
	// Conflict: another version of this entry exists (kept, listed
	// beside it); Pending: not pushed yet.
	Conflict bool    `json:"conflict,omitempty"`
	Pending  bool    `json:"pending,omitempty"`
	Score    float64 `json:"score,omitempty"`
}

// Unreadable counts entries this device holds but cannot open.
type Unreadable struct {
	NoKey    int `json:"no_key"`
	Tampered int `json:"tampered"`
}

// Entries decrypts the live entries of one source (ref) or all: each
// version of an entry in conflict is listed.
func (v *Vault) Entries(ref string) ([]Entry, Unreadable, error) {
	srcs, err := v.pick(ref)
	if err != nil {
		return nil, Unreadable{}, err
	}
	var out []Entry
	var bad Unreadable
	for _, s := range srcs {
		switch s.Kind {
		case sdk.ContextKindVault:
			es, u, err := v.vaultEntries(s)
			if err != nil {
				return nil, bad, err
			}
			out = append(out, es...)
			bad.NoKey += u.NoKey
			bad.Tampered += u.Tampered
		case sdk.ContextKindGit:
			es, err := v.gitEntries(s)
			if err != nil {
				return nil, bad, err
			}
			out = append(out, es...)
		}
	}
	return out, bad, nil
}

func (v *Vault) vaultEntries(s Source) ([]Entry, Unreadable, error) {
	var bad Unreadable
	evs, err := v.l.allEvents(s.ID)
	if err != nil {
		return nil, bad, err
	}
	byID := make(map[string]Event, len(evs))
	for _, e := range evs {
		byID[e.EventID] = e
	}
	var out []Entry
	for _, en := range entrylog.Fold(logEvents(evs)) {
		live := en.Live()
		for _, h := range live {
			e := byID[h.EventID]
			key, err := v.epochKey(s.ID, e.Epoch)
			if err != nil {
				bad.NoKey++
				continue
			}
			plain, err := seal.Open(key, headerOf(e), e.Ciphertext)
			if err != nil {
				bad.Tampered++
				continue
			}
			var c Content
			if err := json.Unmarshal(plain, &c); err != nil {
				bad.Tampered++
				continue
			}
			out = append(out, Entry{Vault: s.Name, VaultID: s.ID, Kind: s.Kind, EntryID: e.EntryID, EventID: e.EventID, Title: c.Title, Tags: c.Tags,
				Body: c.Body, UseWhen: e.UseWhen, UpdateWhen: e.UpdateWhen, Conflict: len(live) > 1, Pending: e.Seq == 0})
		}
	}
	return out, bad, nil
}

// ResolveOptions say what to resolve for.
type ResolveOptions struct {
	Dir  string // the directory the work happens in
	Task string // the prompt or task
	// Limit bounds the entries (default 20); MaxBytes the bodies' total
	// (default 16 KiB): the most relevant come first.
	Limit    int
	MaxBytes int
}

// Resolved is the working set for a task in a directory.
type Resolved struct {
	Dir        string     `json:"dir"`
	Task       string     `json:"task"`
	Entries    []Entry    `json:"entries"`
	Considered int        `json:"considered"`
	Unreadable Unreadable `json:"unreadable"`
	Truncated  bool       `json:"truncated"`
}

// Resolve picks the entries relevant to a task in a directory, decrypted
// locally, best first. It needs no network.
func (v *Vault) Resolve(ctx context.Context, o ResolveOptions) (Resolved, error) {
	if o.Limit <= 0 {
		o.Limit = 20
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 16 << 10
	}
	res := Resolved{Dir: o.Dir, Task: o.Task, Entries: []Entry{}}
	all, bad, err := v.Entries("")
	if err != nil {
		return res, err
	}
	res.Considered, res.Unreadable = len(all), bad
	srcs, err := v.l.sources()
	if err != nil {
		return res, err
	}
	srcDoc := map[string]relevance.Doc{}
	for _, s := range srcs {
		srcDoc[s.ID] = relevance.Doc{UseWhen: s.UseWhen, UpdateWhen: s.UpdateWhen}
	}
	paths := []string(nil)
	if o.Dir != "" {
		paths = listFiles(ctx, v, o.Dir)
	}
	q := relevance.Prepare(relevance.Query{Task: o.Task + " " + filepath.Base(o.Dir), Paths: paths})
	top := relevance.Top(all, func(e Entry) float64 {
		return q.Score(srcDoc[e.VaultID]) + q.Score(relevance.Doc{UseWhen: e.UseWhen, UpdateWhen: e.UpdateWhen, Path: e.Path, Title: e.Title, Body: e.Body, Tags: e.Tags})
	}, 0)
	size := 0
	for _, r := range top {
		if len(res.Entries) >= o.Limit || size+len(r.Item.Body) > o.MaxBytes && len(res.Entries) > 0 {
			res.Truncated = true
			break
		}
		e := r.Item
		e.Score = r.Score
		size += len(e.Body)
		res.Entries = append(res.Entries, e)
	}
	return res, nil
}

// listFiles lists a directory's files, relative: git's tracked files in a
// repository, else a bounded walk.
func listFiles(ctx context.Context, v *Vault, dir string) []string {
	if out, err := v.o.Git(ctx, dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard"); err == nil {
		var files []string
		for _, f := range strings.Split(out, "\x00") {
			if f != "" {
				files = append(files, f)
			}
		}
		return files
	}
	var files []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || len(files) >= 20000 {
			return filepath.SkipDir
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != dir {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			if rel, err := filepath.Rel(dir, p); err == nil {
				files = append(files, filepath.ToSlash(rel))
			}
		}
		return nil
	})
	return files
}

// Markdown renders resolved entries for an agent: a short preamble, then
// each entry with its title, where it comes from and its body.
func (r Resolved) Markdown() string {
	if len(r.Entries) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# Team context (reeve context vault)\n\n")
	b.WriteString("These entries are the team's conventions and knowledge that apply to this task. Follow them unless the user says otherwise.\n")
	for _, e := range r.Entries {
		fmt.Fprintf(&b, "\n## %s\n", strings.TrimSpace(e.Title))
		meta := []string{"from " + e.Vault}
		if e.Path != "" {
			meta = append(meta, e.Path)
		}
		if len(e.Tags) > 0 {
			meta = append(meta, "tags: "+strings.Join(e.Tags, ", "))
		}
		if e.UpdateWhen != "" {
			meta = append(meta, "revise when: "+e.UpdateWhen)
		}
		if e.Conflict {
			meta = append(meta, "one of several conflicting versions")
		}
		fmt.Fprintf(&b, "_%s_\n\n%s\n", strings.Join(meta, "; "), strings.TrimSpace(e.Body))
	}
	return b.String()
}

var _ = os.Getenv
