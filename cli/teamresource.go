package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/hookbridge/teamsync"
	"reeve.dev/reeve/server/sdk"
)

// reeve team-resource sync: write a workspace's team resources (a bundle
// of .reeve/ files) into a repository, verified file by file, and commit
// them (hookbridge/teamsync). The bundle comes from --bundle FILE or from
// the control plane.

type teamResourceOptions struct {
	daemonCmd
	bundle        string
	repo          string
	commitMessage string
	json          bool
	server        string
	workspace     string
	executor      string
	credential    string
	resource      string
	push          bool
	noCommit      bool
}

type teamResourceReport struct {
	teamsync.Result
	Resource string `json:"resource,omitempty"`
	Version  string `json:"version,omitempty"`
	Source   string `json:"source"` // the bundle file or the server URL
	Reported bool   `json:"reported"`
}

func newTeamResourceCmd(env *Env) *cobra.Command {
	opts := &teamResourceOptions{}
	sync := &cobra.Command{
		Use:   "sync",
		Short: "Write the workspace's team resources into a repository and commit them",
		Long: `Write a bundle of team resources (project configuration under .reeve/) into
a git repository: every file's SHA-256 is checked and any path outside .reeve/
(.., absolute paths, symbolic links that lead out) refused before anything is
written; then the files are staged and committed (--no-commit stages only,
--push pushes the commit). The bundle comes from --bundle FILE, or from the
control plane (--server, --workspace, --credential; default the pairing of
this machine), which is then told the commit.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			return runTeamResourceSync(cmd.Context(), opts)
		},
	}
	f := sync.Flags()
	f.StringVar(&opts.bundle, "bundle", "", "bundle file (JSON) instead of the server's")
	f.StringVar(&opts.repo, "repo", ".", "the repository to write into")
	f.StringVar(&opts.commitMessage, "commit-message", "", "message of the commit (default names the resource and version)")
	f.BoolVar(&opts.json, "json", false, "print the outcome as JSON")
	f.StringVar(&opts.server, "server", "", "control plane URL (default the paired one)")
	f.StringVar(&opts.workspace, "workspace", "", "workspace id (default the paired one)")
	f.StringVar(&opts.executor, "executor", "", "executor name reported with the commit")
	f.StringVar(&opts.credential, "credential", "", "credential for the server: a token, or @FILE to read it from a file (default the pairing's)")
	f.StringVar(&opts.resource, "resource", "default", "which set of team resources")
	f.BoolVar(&opts.push, "push", false, "push the commit to the branch's upstream")
	f.BoolVar(&opts.noCommit, "no-commit", false, "write and stage the files without committing")
	return newGroupCmd("team-resource", "Team resources: shared project configuration from the workspace", sync)
}

func runTeamResourceSync(ctx context.Context, o *teamResourceOptions) error {
	if o.noCommit && o.push {
		return exitf(ExitUsage, "--push needs a commit; drop --no-commit")
	}
	var b sdk.TeamResourceBundle
	rep := teamResourceReport{}
	var client *sdk.Client
	if o.bundle != "" {
		if o.server != "" || o.workspace != "" || o.credential != "" {
			return exitf(ExitUsage, "--bundle reads a file; --server, --workspace and --credential are for fetching it from the control plane")
		}
		if err := readBundle(o.bundle, &b); err != nil {
			return err
		}
		rep.Source = absPath(o.bundle)
	} else {
		var err error
		if client, err = o.client(); err != nil {
			return err
		}
		rep.Source = client.BaseURL
		var resp struct {
			Data sdk.TeamResourceBundle `json:"data"`
		}
		if _, err := client.Do(ctx, http.MethodGet, o.path(""), nil, &resp); err != nil {
			return teamResourceAPIExit(err, "fetch the team resources")
		}
		b = resp.Data
	}
	if b.Resource == "" {
		b.Resource = o.resource
	}
	rep.Resource, rep.Version = b.Resource, b.Version
	res, err := teamsync.Apply(ctx, teamsync.Options{Repo: absPath(o.repo), CommitMessage: o.commitMessage, NoCommit: o.noCommit, Push: o.push}, b)
	rep.Result = res
	switch {
	case errors.Is(err, teamsync.ErrDigest), errors.Is(err, teamsync.ErrPath):
		return exitf(ExitDenied, "bundle refused, nothing written: %v", err)
	case errors.Is(err, teamsync.ErrBundle):
		return exitf(ExitInvalid, "bundle refused, nothing written: %v", err)
	case err != nil:
		return withExit(ExitFailure, err)
	}
	if client != nil {
		receipt := sdk.TeamResourceSyncReceipt{Resource: b.Resource, Version: b.Version, Commit: res.Commit, Repo: filepath.Base(res.Repo), Executor: o.executor, Files: len(res.Files)}
		if _, err := client.Do(ctx, http.MethodPost, o.path("/sync-receipts"), receipt, nil); err != nil {
			fmt.Fprintf(o.env.Err, "reeve: the commit is made, but the server was not told: %v\n", err)
		} else {
			rep.Reported = true
		}
	}
	if o.json {
		return writeJSON(o.env.Out, rep)
	}
	for _, f := range res.Files {
		fmt.Fprintf(o.env.Err, "reeve: %-9s %s\n", f.Action, f.Path)
	}
	switch {
	case res.Commit != "":
		fmt.Fprintf(o.env.Err, "reeve: committed %d files in %s%s\n", len(res.Files), res.Repo, map[bool]string{true: " and pushed", false: ""}[res.Pushed])
		fmt.Fprintln(o.env.Out, res.Commit)
	case res.Staged:
		fmt.Fprintln(o.env.Err, "reeve: written and staged; not committed (--no-commit)")
	default:
		fmt.Fprintln(o.env.Err, "reeve: the repository already holds these team resources; nothing to commit")
	}
	return nil
}

// path is the runtime route of the resource on the control plane.
func (o *teamResourceOptions) path(suffix string) string {
	return "/api/runtime/workspaces/" + url.PathEscape(o.workspace) + "/team-resources/" + url.PathEscape(o.resource) + suffix
}

// client reaches the control plane with the flags, else the pairing.
func (o *teamResourceOptions) client() (*sdk.Client, error) {
	server, token := o.server, o.credential
	if len(token) > 1 && token[0] == '@' {
		b, err := os.ReadFile(token[1:])
		if err != nil {
			return nil, exitf(ExitUsage, "--credential: %v", err)
		}
		token = string(trimSpaceBytes(b))
	}
	if rc, err := o.home.ReadRelayCredentials(); err == nil {
		if server == "" {
			server = rc.ServerURL
		}
		if o.workspace == "" {
			o.workspace = rc.WorkspaceID
		}
		if token == "" {
			token = rc.IssueToken
		}
		if o.workspace != "" && o.workspace != rc.WorkspaceID && o.credential == "" {
			return nil, exitf(ExitUsage, "this machine is paired with workspace %s, not %s: pass --credential for the other workspace", rc.WorkspaceID, o.workspace)
		}
	}
	if server == "" || token == "" || o.workspace == "" {
		return nil, exitf(ExitUsage, "no bundle: pass --bundle FILE, or --server, --workspace and --credential (or pair this machine with `%s`)", o.reeve("pair"))
	}
	return &sdk.Client{BaseURL: server, Token: token, HTTP: &http.Client{Timeout: 60 * time.Second}}, nil
}

func trimSpaceBytes(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

func readBundle(path string, b *sdk.TeamResourceBundle) error {
	f, err := os.Open(path)
	if err != nil {
		return exitf(ExitNotFound, "bundle: %v", err)
	}
	defer f.Close()
	dec := json.NewDecoder(io.LimitReader(f, 4*teamsync.MaxBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(b); err != nil {
		return exitf(ExitInvalid, "bundle %s is not a team resource bundle: %v", path, err)
	}
	return nil
}

func teamResourceAPIExit(err error, what string) error {
	var ae *sdk.APIError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusUnauthorized, http.StatusForbidden:
			return exitf(ExitDenied, "%s: refused: %s", what, ae.Body.Message)
		case http.StatusNotFound:
			return exitf(ExitNotFound, "%s: %s", what, ae.Body.Message)
		}
	}
	return withExit(ExitFailure, fmt.Errorf("%s: %w", what, err))
}
