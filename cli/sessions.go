package cli

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/daemon/wireclient"
)

type sendOptions struct {
	daemonCmd
	sessionID string
	prompt    string
}

func newSendCmd(env *Env) *cobra.Command {
	opts := &sendOptions{}
	cmd := &cobra.Command{
		Use:   "send SID --prompt TEXT",
		Short: "Send a further prompt to a session (resuming it if it has ended and its agent can resume)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			opts.sessionID = args[0]
			return runSend(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.prompt, "prompt", "", "the prompt (required)")
	cmd.MarkFlagRequired("prompt")
	return cmd
}

func runSend(ctx context.Context, opts *sendOptions) error {
	if opts.prompt == "" {
		return exitf(ExitUsage, "--prompt must not be empty")
	}
	c, p, err := opts.protocol(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := p.Prompt(ctx, wire.PromptRequest{SessionID: opts.sessionID, Text: opts.prompt}); err != nil {
		return opts.ackExit(err)
	}
	fmt.Fprintf(opts.env.Err, "reeve: prompt sent to %s (follow it with `%s`)\n", opts.sessionID, opts.reeve("attach "+opts.sessionID))
	return nil
}

type logsOptions struct {
	daemonCmd
	sessionID string
	follow    bool
	lastSeq   int64
	json      bool
	noInput   bool
}

func newLogsCmd(env *Env) *cobra.Command {
	opts := &logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs SID",
		Short: "Print a session's events (with --follow, stream them until the session ends)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			opts.sessionID = args[0]
			return runLogs(cmd.Context(), opts)
		},
	}
	addLogsFlags(cmd, opts)
	cmd.Flags().BoolVar(&opts.follow, "follow", false, "stream new events until the session ends (lossless, from --last-seq)")
	return cmd
}

func addLogsFlags(cmd *cobra.Command, opts *logsOptions) {
	cmd.Flags().Int64Var(&opts.lastSeq, "last-seq", 0, "show only events after sequence number N")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print one JSON session-update frame per line")
	cmd.Flags().BoolVar(&opts.noInput, "no-input", false, "when following on a terminal, do not offer to decide permission requests with a key")
}

func runLogs(ctx context.Context, opts *logsOptions) error {
	if opts.lastSeq < 0 {
		return exitf(ExitUsage, "--last-seq must not be negative")
	}
	c, err := opts.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if opts.follow {
		end, err := opts.followSession(ctx, c, opts.sessionID, opts.lastSeq, followOptions{json: opts.json, ask: !opts.noInput && !opts.json})
		if err != nil {
			return err
		}
		if !opts.json {
			fmt.Fprintf(opts.env.Err, "reeve: session %s %s\n", end.SessionID, end.Status)
		}
		return nil
	}
	return opts.printStored(ctx, c)
}

// printStored prints what the session's log holds now, then returns, up
// to the last seq the session had when the command began (a running
// session goes on writing). With --json each line is the daemon's
// session-update frame, which the daemon encodes once and this copies
// through without decoding (one streamed response); for people, it
// follows over the control protocol, in batches, and renders each event.
func (opts *logsOptions) printStored(ctx context.Context, c Daemon) error {
	si, err := c.Session(ctx, opts.sessionID)
	if err != nil {
		return opts.apiExit(err)
	}
	if si.LastSeq <= opts.lastSeq {
		return nil
	}
	if opts.json {
		w := bufio.NewWriterSize(opts.env.Out, 256<<10)
		_, err := c.StreamEvents(ctx, opts.sessionID, opts.lastSeq, si.LastSeq, w)
		if ferr := w.Flush(); err == nil && ferr != nil {
			return fmt.Errorf("write events: %w", ferr)
		}
		if err != nil {
			return timeoutExit(ctx, opts.apiExit(err), "session "+opts.sessionID)
		}
		return nil
	}
	p, err := c.Protocol(ctx)
	if err != nil {
		return opts.apiExit(err)
	}
	s, err := p.Subscribe(ctx, opts.sessionID, opts.lastSeq)
	if err != nil {
		return timeoutExit(ctx, opts.ackExit(err), "session "+opts.sessionID)
	}
	w := bufio.NewWriterSize(opts.env.Out, 64<<10)
	r := &renderer{w: w}
	last := opts.lastSeq
	for last < si.LastSeq {
		var u wireclient.Update
		var ok bool
		select {
		case u, ok = <-s.Updates():
		case <-ctx.Done():
			w.Flush()
			return timeoutExit(ctx, ctx.Err(), "session "+opts.sessionID)
		}
		if !ok {
			break
		}
		r.render(u.SessionUpdate)
		last = u.Seq
	}
	r.finish()
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write events: %w", err)
	}
	if last < si.LastSeq && s.Ended() == nil {
		err := s.Err()
		if err == nil {
			err = p.Err()
		}
		return timeoutExit(ctx, fmt.Errorf("the stream of session %s ended after seq %d of %d: %w", opts.sessionID, last, si.LastSeq, err), "session "+opts.sessionID)
	}
	return nil
}

// followSession subscribes to a session after afterSeq and follows it to
// its end (follow.go). The permission requests still pending are looked up
// first, so that a request made before the command began is announced too.
func (d *daemonCmd) followSession(ctx context.Context, c Daemon, sessionID string, afterSeq int64, fo followOptions) (wire.SessionEnded, error) {
	si, err := c.Session(ctx, sessionID)
	if err != nil {
		return wire.SessionEnded{}, d.apiExit(err)
	}
	p, err := c.Protocol(ctx)
	if err != nil {
		return wire.SessionEnded{}, d.apiExit(err)
	}
	s, err := p.Subscribe(ctx, sessionID, afterSeq)
	if err != nil {
		return wire.SessionEnded{}, timeoutExit(ctx, d.ackExit(err), "session "+sessionID)
	}
	fo.history = si.LastSeq
	if pending, err := c.Pending(ctx, sessionID); err == nil {
		fo.pending = map[string]bool{}
		for _, req := range pending {
			fo.pending[req.ID] = true
		}
	}
	fo.running = func() bool { locked, err := d.home.Locked(); return err == nil && locked }
	fo.homeFlag = d.homeFlag
	end, err := follow(ctx, d.env, p, s, sessionID, fo)
	if err != nil {
		return end, timeoutExit(ctx, err, "session "+sessionID)
	}
	return end, nil
}

func newAttachCmd(env *Env) *cobra.Command {
	opts := &logsOptions{follow: true}
	cmd := &cobra.Command{
		Use:   "attach SID",
		Short: "Stream a session's events until it ends (the same as logs --follow)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			opts.sessionID = args[0]
			return runLogs(cmd.Context(), opts)
		},
	}
	addLogsFlags(cmd, opts)
	return cmd
}

type waitOptions struct {
	daemonCmd
	sessionID string
	timeout   int
	json      bool
}

func newWaitCmd(env *Env) *cobra.Command {
	opts := &waitOptions{}
	cmd := &cobra.Command{
		Use:   "wait SID",
		Short: "Wait until a session ends; exit 0 if it completed, 10 if it failed, was killed or interrupted",
		Long: `Wait until a session ends. While it waits for a permission decision, wait says
so on stderr, with the commands that give it.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			opts.sessionID = args[0]
			return runWait(cmd.Context(), opts)
		},
	}
	cmd.Flags().IntVar(&opts.timeout, "timeout", 0, "give up after SECONDS (exit 7; the session keeps running)")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the ended session as JSON")
	return cmd
}

func runWait(ctx context.Context, opts *waitOptions) error {
	if opts.timeout < 0 {
		return exitf(ExitUsage, "--timeout must not be negative")
	}
	c, err := opts.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	si, err := c.Session(ctx, opts.sessionID)
	if err != nil {
		return opts.apiExit(err)
	}
	wctx, cancel := withTimeout(ctx, opts.timeout)
	defer cancel()
	// Start at the current end: wait needs the end, not the history.
	end, err := opts.followSession(wctx, c, si.ID, si.LastSeq, followOptions{quiet: true})
	if err != nil {
		return err
	}
	return opts.finishWait(ctx, c, end, opts.json)
}

type lsOptions struct {
	daemonCmd
	scope     string
	directory string
	agent     string
	json      bool
	format    string
}

// lsResult is the --json shape of `reeve ls`.
type lsResult struct {
	Sessions   []wire.SessionInfo    `json:"sessions"`
	Discovered []wire.DiscoveredInfo `json:"discovered"`
}

func newLsCmd(env *Env) *cobra.Command {
	opts := &lsOptions{}
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List sessions: reeve's own, and those agents ran outside reeve",
		Long: `List sessions. --scope ACTIVE shows reeve's sessions that have not ended,
DISCOVERED the sessions agents ran outside reeve (found in their transcripts),
ALL (the default) both.

--format takes a Go template applied to each session, e.g.
'{{.ID}} {{.Status}}'. Every session, reeve's or discovered, has all of
these fields (empty where they do not apply):
` + lsFieldHelp,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			return runLs(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.scope, "scope", wire.ScopeAll, "ALL, ACTIVE or DISCOVERED")
	f.StringVar(&opts.directory, "directory", "", "only sessions in this registered directory (its id or path)")
	f.StringVar(&opts.agent, "agent", "", "only sessions of this agent")
	f.BoolVar(&opts.json, "json", false, "print as JSON")
	f.StringVar(&opts.format, "format", "", "Go template for each session (fields: see --help)")
	return cmd
}

func runLs(ctx context.Context, opts *lsOptions) error {
	scope := strings.ToUpper(opts.scope)
	switch scope {
	case wire.ScopeAll, wire.ScopeActive, wire.ScopeDiscovered:
	default:
		return exitf(ExitUsage, "--scope must be ALL, ACTIVE or DISCOVERED, not %q", opts.scope)
	}
	var tmpl *lsTemplate
	if opts.format != "" {
		if opts.json {
			return exitf(ExitUsage, "--format and --json cannot be used together")
		}
		t, err := parseLsTemplate(opts.format)
		if err != nil {
			return err
		}
		tmpl = t
	}
	c, p, err := opts.protocol(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	dirID := opts.directory
	if dirID != "" {
		// A directory is named as remove names it, by id or by path; one
		// that is not registered is not found, rather than an empty list
		// that looks like a directory without sessions.
		dirs, err := c.ListDirectories(ctx)
		if err != nil {
			return opts.apiExit(err)
		}
		d, ok := findDirectory(dirs, opts.directory)
		if !ok {
			return exitf(ExitNotFound, "%s is not a registered directory (see `%s`)", opts.directory, opts.reeve("list"))
		}
		dirID = d.ID
	}
	// Listing discovered sessions reads the agents' transcripts.
	stop := opts.env.waitingFor("listing sessions")
	res, found, err := p.List(ctx, wire.ListRequest{Scope: scope, DirectoryID: dirID, Agent: opts.agent})
	stop()
	if err != nil {
		return opts.ackExit(err)
	}
	if scope == wire.ScopeDiscovered && opts.directory != "" {
		fmt.Fprintln(opts.env.Err, "reeve: --directory applies to reeve's sessions; discovered sessions are not in registered directories")
	}
	out := lsResult{Sessions: res.Sessions, Discovered: found}
	if out.Sessions == nil {
		out.Sessions = []wire.SessionInfo{}
	}
	if out.Discovered == nil {
		out.Discovered = []wire.DiscoveredInfo{}
	}
	switch {
	case opts.json:
		return writeJSON(opts.env.Out, out)
	case tmpl != nil:
		for _, s := range out.Sessions {
			if err := tmpl.line(opts.env.Out, rowOf(s)); err != nil {
				return err
			}
		}
		for _, d := range out.Discovered {
			if err := tmpl.line(opts.env.Out, discoveredRow(d)); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(opts.env.Out, 0, 4, 2, ' ', 0)
	if scope != wire.ScopeDiscovered {
		fmt.Fprintln(w, "SESSION\tAGENT\tSTATUS\tCREATED\tDIRECTORY\tPROMPT")
		for _, s := range out.Sessions {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Agent, s.Status, s.CreatedAt.Local().Format("2006-01-02 15:04"), s.Directory, clip(oneLine(s.Prompt), 50))
		}
	}
	if scope != wire.ScopeActive {
		if scope == wire.ScopeAll {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, "DISCOVERED\tAGENT\tUPDATED\tDIRECTORY\tTITLE")
		for _, d := range out.Discovered {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", d.ID, d.Agent, d.UpdatedAt.Local().Format("2006-01-02 15:04"), d.Directory, clip(oneLine(d.Title), 50))
		}
	}
	return w.Flush()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

type sessionStopOptions struct {
	daemonCmd
	sessionID string
}

type manifestOptions struct {
	daemonCmd
	sessionID string
	json      bool
}

func newSessionCmd(env *Env) *cobra.Command {
	stop := &sessionStopOptions{}
	stopCmd := &cobra.Command{
		Use:   "stop SID",
		Short: "Stop (kill) a running session",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := stop.bind(cmd, env); err != nil {
				return err
			}
			stop.sessionID = args[0]
			return runSessionStop(cmd.Context(), stop)
		},
	}
	man := &manifestOptions{}
	manCmd := &cobra.Command{
		Use:   "manifest --session SID",
		Short: "Print a session's manifest: provider, model, directory, agent version, governance",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := man.bind(cmd, env); err != nil {
				return err
			}
			return runManifest(cmd.Context(), man)
		},
	}
	manCmd.Flags().StringVar(&man.sessionID, "session", "", "session id (required)")
	manCmd.Flags().BoolVar(&man.json, "json", false, "print as JSON")
	manCmd.MarkFlagRequired("session")
	return newGroupCmd("session", "Manage one session", stopCmd, manCmd)
}

func runSessionStop(ctx context.Context, opts *sessionStopOptions) error {
	c, p, err := opts.protocol(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := p.Kill(ctx, wire.KillRequest{SessionID: opts.sessionID}); err != nil {
		return opts.ackExit(err)
	}
	fmt.Fprintf(opts.env.Err, "reeve: stopping session %s\n", opts.sessionID)
	return nil
}

func runManifest(ctx context.Context, opts *manifestOptions) error {
	c, err := opts.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := opts.env.waitingFor("reading the manifest of session " + opts.sessionID)
	m, err := c.Manifest(ctx, opts.sessionID)
	stop()
	if err != nil {
		return opts.apiExit(err)
	}
	if opts.json {
		return writeJSON(opts.env.Out, m)
	}
	w := tabwriter.NewWriter(opts.env.Out, 0, 4, 2, ' ', 0)
	guard := "yes"
	if !m.Guarded {
		guard = "no"
	}
	workflow := "(none)"
	if m.Workflow != nil {
		workflow = *m.Workflow
	}
	rows := [][2]string{
		{"session", m.SessionID}, {"agent", m.Agent + " " + m.AgentVersion}, {"provider", dash(m.Provider)},
		{"model", dash(m.Model)}, {"directory", m.Directory}, {"workdir", m.Workdir},
		{"agent session", dash(m.AgentSessionID)}, {"turns", fmt.Sprint(m.Turns)},
		{"guarded", guard}, {"permission mode", m.PermissionMode}, {"note", dash(m.GuardNote)},
		{"workflow", workflow}, {"approvals", fmt.Sprint(len(m.Approvals))},
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\n", r[0], r[1])
	}
	for _, a := range m.Approvals {
		fmt.Fprintf(w, "\t%s %s %s by %s: %s\n", a.At.Local().Format("15:04:05"), a.Tool, a.Decision, a.DecidedBy, a.Reason)
	}
	return w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
