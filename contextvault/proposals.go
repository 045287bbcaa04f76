package contextvault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/pmezard/go-difflib/difflib"

	"reeve.dev/reeve/contextvault/relevance"
	"reeve.dev/reeve/contextvault/seal"
	"reeve.dev/reeve/server/sdk"
)

// Proposal is a context correction from a session, opened on this device
// when it was sealed to it.
type Proposal struct {
	sdk.ContextProposal
	Vault    string                      `json:"vault"`
	Content  *sdk.ContextProposalContent `json:"content,omitempty"`
	Readable bool                        `json:"readable"`
	Problem  string                      `json:"problem,omitempty"`
}

// Decisions lists proposals of this device's sources (state "" is every
// undecided one), opening those sealed to it and checking each against
// its digest.
func (v *Vault) Decisions(ctx context.Context, state string) ([]Proposal, error) {
	srv, err := v.server()
	if err != nil {
		return nil, err
	}
	if _, err := v.Refresh(ctx); err != nil {
		return nil, err
	}
	var ps []sdk.ContextProposal
	if state == "" {
		for _, st := range []string{sdk.ProposalPending, sdk.ProposalPreviewed} {
			some, err := srv.Proposals(ctx, st)
			if err != nil {
				return nil, apiErr("list proposals", err)
			}
			ps = append(ps, some...)
		}
	} else if ps, err = srv.Proposals(ctx, state); err != nil {
		return nil, apiErr("list proposals", err)
	}
	out := make([]Proposal, 0, len(ps))
	for _, p := range ps {
		out = append(out, v.open(p))
	}
	return out, nil
}

func (v *Vault) open(p sdk.ContextProposal) Proposal {
	out := Proposal{ContextProposal: p}
	if s, err := v.l.source(p.SourceID); err == nil {
		out.Vault = s.Name
	}
	out.Sealed = ""
	if p.Sealed == "" {
		if p.State == sdk.ProposalPending || p.State == sdk.ProposalPreviewed {
			out.Problem = "sealed to other devices of the vault (it arrived before this device was enrolled); decide it there"
		}
		return out
	}
	id, err := v.identity()
	if err != nil {
		out.Problem = err.Error()
		return out
	}
	plain, err := id.OpenSealed(p.Sealed)
	if err != nil {
		out.Problem = "cannot open: " + err.Error()
		return out
	}
	if seal.Digest(plain) != p.Digest {
		out.Problem = "its content does not match its digest: refused"
		return out
	}
	var c sdk.ContextProposalContent
	if err := json.Unmarshal(plain, &c); err != nil {
		out.Problem = "unreadable content"
		return out
	}
	out.Content, out.Readable = &c, true
	return out
}

// Candidate is an entry proposed for a vault, not yet in it.
type Candidate struct {
	NewEntry
	ProposalID string
	Digest     string
}

// Preview is what a candidate would add to its vault.
type Preview struct {
	Vault      string                   `json:"vault"`
	VaultID    string                   `json:"vault_id"`
	ProposalID string                   `json:"proposal_id,omitempty"`
	Title      string                   `json:"title"`
	Kind       string                   `json:"kind"` // new, change, duplicate
	Closest    *Entry                   `json:"closest,omitempty"`
	Diff       string                   `json:"diff"`
	BaseSeq    int64                    `json:"base_seq"`
	Proof      *sdk.ContextPreviewProof `json:"proof,omitempty"`
}

// proposalCandidate opens a proposal as a candidate entry.
func (v *Vault) proposalCandidate(ctx context.Context, id string) (Candidate, Proposal, error) {
	ps, err := v.Decisions(ctx, "")
	if err != nil {
		return Candidate{}, Proposal{}, err
	}
	for _, p := range ps {
		if p.ID != id {
			continue
		}
		if !p.Readable {
			return Candidate{}, p, fmt.Errorf("%w: proposal %s: %s", ErrRefused, id, p.Problem)
		}
		body := p.Content.ProposedText
		if p.Content.Summary != "" && body == "" {
			body = p.Content.Summary
		}
		tags := []string{strings.ReplaceAll(p.Content.CorrectionKind, "_", "-")}
		if p.Content.TargetKind == "config_candidate" {
			tags = append(tags, "config-candidate")
		}
		c := Candidate{NewEntry: NewEntry{Title: p.Content.Title, Body: body, Tags: tags}, ProposalID: id, Digest: p.Digest}
		if uw, ok := p.Content.Metadata["use_when"].(string); ok {
			c.UseWhen = uw
		}
		return c, p, nil
	}
	return Candidate{}, Proposal{}, fmt.Errorf("%w: no undecided proposal %s for this device's sources", ErrNotFound, id)
}

// CandidatePreview shows what a proposal (or a local candidate) would add
// to its vault: a new entry, a change of the closest existing one (with
// the diff), or a duplicate. The server records a signed proof of the
// preview, which accepting the proposal needs.
func (v *Vault) CandidatePreview(ctx context.Context, proposalID string, local *Candidate, vaultRef string) (Preview, error) {
	srv, err := v.server()
	if err != nil {
		return Preview{}, err
	}
	var c Candidate
	var sourceID string
	if proposalID != "" {
		cand, p, err := v.proposalCandidate(ctx, proposalID)
		if err != nil {
			return Preview{}, err
		}
		c, sourceID = cand, p.SourceID
	} else if local != nil {
		c = *local
		src, err := v.l.source(vaultRef)
		if err != nil {
			return Preview{}, err
		}
		sourceID = src.ID
		b, _ := json.Marshal(sdk.ContextProposalContent{Title: c.Title, ProposedText: c.Body})
		c.Digest = seal.Digest(b)
	} else {
		return Preview{}, fmt.Errorf("%w: name a proposal, or give a candidate file", ErrRefused)
	}
	src, err := v.l.source(sourceID)
	if err != nil {
		return Preview{}, err
	}
	if _, err := v.SyncPull(ctx, src.ID); err != nil {
		return Preview{}, err
	}
	src, _ = v.l.source(sourceID)
	pv := Preview{Vault: src.Name, VaultID: src.ID, ProposalID: c.ProposalID, Title: c.Title, BaseSeq: src.Cursor}
	entries, _, err := v.Entries(src.ID)
	if err != nil {
		return pv, err
	}
	q := relevance.Prepare(relevance.Query{Task: c.Title + "\n" + c.Body})
	best, bestScore := -1, 0.0
	for i, e := range entries {
		s := q.Score(relevance.Doc{Title: e.Title, Body: e.Body, Tags: e.Tags})
		if s > bestScore {
			best, bestScore = i, s
		}
	}
	newText := c.Title + "\n\n" + strings.TrimSpace(c.Body) + "\n"
	oldText := ""
	pv.Kind = "new"
	if best >= 0 && bestScore >= 3 {
		e := entries[best]
		pv.Closest = &e
		oldText = e.Title + "\n\n" + strings.TrimSpace(e.Body) + "\n"
		pv.Kind = "change"
		if oldText == newText {
			pv.Kind = "duplicate"
		}
	}
	pv.Diff, _ = difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: difflib.SplitLines(oldText), B: difflib.SplitLines(newText), FromFile: "vault", ToFile: "candidate", Context: 3})
	adds, changes, dups := 0, 0, 0
	switch pv.Kind {
	case "new":
		adds = 1
	case "change":
		changes = 1
	default:
		dups = 1
	}
	proof, err := srv.PreviewProof(ctx, sdk.ContextPreviewRequest{ProposalID: c.ProposalID, VaultID: src.ID, CandidateDigest: c.Digest, BaseSeq: pv.BaseSeq, Adds: adds, Changes: changes, Duplicates: dups})
	if err != nil {
		return pv, apiErr("record the preview", err)
	}
	pv.Proof = &proof
	return pv, nil
}

// Decision is what deciding a proposal did.
type Decision struct {
	Proposal sdk.ContextProposal `json:"proposal"`
	Preview  *Preview            `json:"preview,omitempty"`
	Added    *Added              `json:"added,omitempty"`
	Proposed *Proposed           `json:"proposed,omitempty"`
}

// Accept previews a proposal, writes it into its vault as an entry (or,
// for a git source, proposes it as a pull request), and reports the
// writeback; the server then drops the sealed content. With entryID it
// replaces that entry instead of adding one.
func (v *Vault) Accept(ctx context.Context, proposalID, entryID, provider string) (Decision, error) {
	srv, err := v.server()
	if err != nil {
		return Decision{}, err
	}
	pv, err := v.CandidatePreview(ctx, proposalID, nil, "")
	if err != nil {
		return Decision{}, err
	}
	c, p, err := v.proposalCandidate(ctx, proposalID)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Preview: &pv}
	src, err := v.l.source(p.SourceID)
	if err != nil {
		return d, err
	}
	req := sdk.ContextWritebackRequest{ProofID: pv.Proof.ID, CandidateDigest: c.Digest}
	if src.Kind == sdk.ContextKindGit {
		pr, err := v.Propose(ctx, ProposeOptions{Source: src.ID, Provider: provider, Entry: c.NewEntry})
		if err != nil {
			return d, err
		}
		d.Proposed = &pr
		req.Branch, req.URL = pr.Branch, pr.URL
	} else {
		c.EntryID = entryID
		added, err := v.Add(ctx, src.ID, c.NewEntry)
		if err != nil {
			return d, err
		}
		if _, err := v.SyncPush(ctx, src.ID); err != nil {
			return d, err
		}
		added.Pushed = true
		d.Added = &added
		req.EventID = added.EventID
	}
	out, err := srv.Writeback(ctx, proposalID, req)
	if err != nil {
		return d, apiErr("report the writeback", err)
	}
	d.Proposal = out
	return d, nil
}

// Reject declines a proposal.
func (v *Vault) Reject(ctx context.Context, proposalID, reason string) (Decision, error) {
	srv, err := v.server()
	if err != nil {
		return Decision{}, err
	}
	out, err := srv.Decide(ctx, proposalID, sdk.ContextDecisionRequest{Decision: "reject", Reason: reason})
	if err != nil {
		return Decision{}, apiErr("reject "+proposalID, err)
	}
	return Decision{Proposal: out}, nil
}

// ProposeOptions describe a change to a git source.
type ProposeOptions struct {
	Source   string // id or name; "" when there is one git source
	Provider string
	Entry    NewEntry
	// File is the document's path in the repository; default
	// <slug of title>.md.
	File string
}

// Proposed is a change pushed for review.
type Proposed struct {
	Source  string `json:"source"`
	Branch  string `json:"branch"`
	Base    string `json:"base"`
	File    string `json:"file"`
	Commit  string `json:"commit"`
	URL     string `json:"url,omitempty"`
	Opened  bool   `json:"pull_request_opened"`
	Command string `json:"how_to_open,omitempty"`
}

var slugRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^a-z0-9]+`) })

func slug(s string) string {
	s = strings.Trim(slugRe().ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(s) > 48 {
		s = strings.Trim(s[:48], "-")
	}
	if s == "" {
		s = "entry"
	}
	return s
}

// Propose writes an entry as a markdown document on a new branch of a
// git source, pushes the branch and opens a pull request with gh when it
// is installed (provider github); otherwise it says which branch to open
// one from, and where.
func (v *Vault) Propose(ctx context.Context, o ProposeOptions) (Proposed, error) {
	src, err := v.gitSource(o.Source)
	if err != nil {
		return Proposed{}, err
	}
	if strings.TrimSpace(o.Entry.Title) == "" {
		return Proposed{}, fmt.Errorf("%w: a proposal needs a title", ErrRefused)
	}
	if o.Provider == "" {
		o.Provider = src.Provider
	}
	dir := v.clonePath(src.ID)
	if _, err := v.syncGitSource(ctx, src, true); err != nil {
		return Proposed{}, err
	}
	file := o.File
	if file == "" {
		file = slug(o.Entry.Title) + ".md"
	}
	if filepath.IsAbs(file) || strings.HasPrefix(filepath.Clean(file), "..") || strings.HasPrefix(filepath.ToSlash(filepath.Clean(file)), ".git/") {
		return Proposed{}, fmt.Errorf("%w: %s is outside the repository", ErrRefused, file)
	}
	branch := "reeve/context/" + slug(o.Entry.Title) + "-" + strings.ToLower(newID()[20:])
	out := Proposed{Source: src.Name, Branch: branch, Base: src.Branch, File: filepath.ToSlash(file)}
	git := func(args ...string) (string, error) { return v.o.Git(ctx, dir, args...) }
	if _, err := git("checkout", "--quiet", "-B", branch, "origin/"+src.Branch); err != nil {
		return out, err
	}
	// Whatever happens, the clone goes back to the base branch.
	defer git("checkout", "--quiet", "--detach", "origin/"+src.Branch)
	path := filepath.Join(dir, file)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return out, err
	}
	if err := os.WriteFile(path, renderDoc(o.Entry), 0o644); err != nil {
		return out, err
	}
	if _, err := git("add", "--", file); err != nil {
		return out, err
	}
	ident := []string{}
	if name, _ := git("config", "user.email"); strings.TrimSpace(name) == "" {
		ident = []string{"-c", "user.name=reeve context", "-c", "user.email=context@reeve.invalid"}
	}
	if _, err := git(append(ident, "commit", "--quiet", "-m", "context: "+o.Entry.Title)...); err != nil {
		return out, err
	}
	head, err := git("rev-parse", "HEAD")
	if err != nil {
		return out, err
	}
	out.Commit = strings.TrimSpace(head)
	if _, err := git("push", "--quiet", "origin", branch); err != nil {
		return out, fmt.Errorf("push %s: %w", branch, err)
	}
	owner, repo, isGitHub := githubRepo(src.RepoURL)
	if isGitHub {
		out.URL = fmt.Sprintf("https://github.com/%s/%s/compare/%s...%s?expand=1", owner, repo, src.Branch, branch)
	}
	body := "Proposed with `reeve context propose`.\n\n" + strings.TrimSpace(o.Entry.Body)
	if gh := v.gh(); gh != nil && isGitHub && (o.Provider == "" || o.Provider == "github") {
		url, err := gh(ctx, dir, "pr", "create", "--repo", owner+"/"+repo, "--head", branch, "--base", src.Branch, "--title", "context: "+o.Entry.Title, "--body", body)
		if err == nil {
			out.URL, out.Opened = strings.TrimSpace(lastLine(url)), true
			return out, nil
		}
		v.logf("gh pr create failed (%v); open the pull request yourself", err)
	}
	out.Command = fmt.Sprintf("open a pull request from branch %s into %s of %s", branch, src.Branch, src.RepoURL)
	return out, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func (v *Vault) gh() func(ctx context.Context, dir string, args ...string) (string, error) {
	if v.o.GH != nil {
		return v.o.GH
	}
	path, err := exec.LookPath("gh")
	if err != nil {
		return nil
	}
	return func(ctx context.Context, dir string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Dir = dir
		b, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%v: %s", err, strings.TrimSpace(string(b)))
		}
		return string(b), nil
	}
}

var githubRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`github\.com[:/]([^/]+)/([^/]+?)(\.git)?/?$`) })

func githubRepo(url string) (owner, repo string, ok bool) {
	m := githubRe().FindStringSubmatch(url)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

func (v *Vault) gitSource(ref string) (Source, error) {
	if ref != "" {
		s, err := v.l.source(ref)
		if err == nil && s.Kind != sdk.ContextKindGit {
			return s, fmt.Errorf("%w: %s is a vault, not a git source; add to it with `reeve context add`", ErrRefused, s.Name)
		}
		return s, err
	}
	srcs, err := v.l.sources()
	if err != nil {
		return Source{}, err
	}
	var git []Source
	for _, s := range srcs {
		if s.Kind == sdk.ContextKindGit && !s.Gone {
			git = append(git, s)
		}
	}
	if len(git) != 1 {
		return Source{}, fmt.Errorf("%w: this device has %d git sources: name one with --source", ErrRefused, len(git))
	}
	return git[0], nil
}

var _ = errors.Is
