package cli

import (
	"io"
	"strings"
	"text/template"
	"time"

	"reeve.dev/reeve/daemon/wire"
)

// lsRow is what `reeve ls --format` sees of a session, reeve's or
// discovered: one shape for both, so that a template works on every line.
// A field that does not apply to a kind is empty.
type lsRow struct {
	Kind         string // reeve, or discovered
	ID           string // reeve's session id, or the agent's own
	Agent        string
	Status       string // a reeve status, or "discovered"
	StatusReason string
	Directory    string
	DirectoryID  string // "" for a discovered session
	Workdir      string // the agent's working directory (the directory, for a discovered session)
	Model        string
	Prompt       string // the first prompt (a discovered session's title)
	Title        string // the prompt's first line, clipped
	Path         string // a discovered session's transcript
	CreatedAt    time.Time
	StartedAt    time.Time
	UpdatedAt    time.Time
	EndedAt      time.Time
	LastSeq      int64
}

// lsFieldHelp documents lsRow for --help; a test checks that the two agree.
const lsFieldHelp = `  Kind (reeve or discovered), ID, Agent, Status ("discovered" for those),
  StatusReason, Directory, DirectoryID, Workdir, Model, Prompt (a
  discovered session's title), Title, Path (a discovered session's
  transcript), CreatedAt, StartedAt, UpdatedAt, EndedAt, LastSeq.`

func rowOf(s wire.SessionInfo) lsRow {
	title, _, _ := strings.Cut(strings.TrimSpace(s.Prompt), "\n")
	return lsRow{
		Kind: "reeve", ID: s.ID, Agent: s.Agent, Status: s.Status, StatusReason: s.StatusReason,
		Directory: s.Directory, DirectoryID: s.DirectoryID, Workdir: s.Workdir, Model: s.Model,
		Prompt: s.Prompt, Title: clip(title, 80), CreatedAt: s.CreatedAt, StartedAt: s.CreatedAt,
		UpdatedAt: s.UpdatedAt, EndedAt: s.EndedAt, LastSeq: s.LastSeq,
	}
}

func discoveredRow(d wire.DiscoveredInfo) lsRow {
	return lsRow{
		Kind: "discovered", ID: d.ID, Agent: d.Agent, Status: "discovered", Directory: d.Directory,
		Workdir: d.Directory, Prompt: d.Title, Title: clip(oneLine(d.Title), 80), Path: d.Path,
		CreatedAt: d.StartedAt, StartedAt: d.StartedAt, UpdatedAt: d.UpdatedAt,
	}
}

type lsTemplate struct{ t *template.Template }

func parseLsTemplate(format string) (*lsTemplate, error) {
	t, err := template.New("format").Option("missingkey=error").Parse(format)
	if err != nil {
		return nil, exitf(ExitUsage, "--format: %v", err)
	}
	// A template that names no field of a session fails on the first line
	// either way; trying it on an empty row says so before any request.
	if err := t.Execute(io.Discard, lsRow{}); err != nil {
		return nil, exitf(ExitUsage, "--format: %v (the fields are listed in `reeve ls --help`)", err)
	}
	return &lsTemplate{t: t}, nil
}

func (l *lsTemplate) line(w io.Writer, r lsRow) error {
	if err := l.t.Execute(w, r); err != nil {
		return exitf(ExitUsage, "--format: %v", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}
