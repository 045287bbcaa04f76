package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/config"
	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/daemon/wireclient"
)

// WorkerOptions is what the hidden worker command hands to the daemon worker.
type WorkerOptions struct {
	Home          string
	SupervisorPID int
	Stdin         io.Reader
	Status        io.Writer
	Log           io.Writer
}

// Programs are the long-running parts the binary hosts. main wires them in,
// so that cli stays free of the daemon worker's internals.
type Programs struct {
	// Worker runs the daemon worker process until ctx ends.
	Worker func(ctx context.Context, opts WorkerOptions) error
	// WorkerFatal reports whether a Worker error is a start-up failure that
	// a restart cannot fix.
	WorkerFatal func(error) bool
	// Server is the hosted control plane.
	Server ServerPrograms
	// Relay is a stand-alone relay instance (`reeve relay`).
	Relay RelayPrograms
}

// healthTimeout is how long status waits for /health before it calls a live
// daemon unresponsive.
const healthTimeout = 2 * time.Second

// defaultCallTimeout bounds every call to the daemon (a REST request, or a
// request of the control protocol until its ack), so that no command hangs
// on a frozen worker; a follower checks as often that the daemon still
// answers, and rides out an outage (a worker restart) as long.
// REEVE_DAEMON_TIMEOUT (seconds) changes it.
const defaultCallTimeout = 30 * time.Second

// Daemon is what commands ask of a running daemon: its REST routes and its
// control protocol. Env.Connect makes one; unit tests inject fakes.
type Daemon interface {
	Health(ctx context.Context) (wire.Health, error)
	ListDirectories(ctx context.Context) ([]wire.Directory, error)
	AddDirectory(ctx context.Context, path string) (wire.AddDirectoryResponse, error)
	RemoveDirectory(ctx context.Context, id string) error
	Session(ctx context.Context, id string) (wire.SessionInfo, error)
	Manifest(ctx context.Context, id string) (wire.Manifest, error)
	Events(ctx context.Context, id string, afterSeq int64, limit int) ([]wire.SessionUpdate, error)
	// StreamEvents copies the log after afterSeq up to untilSeq to w, a
	// session-update frame a line, without decoding it.
	StreamEvents(ctx context.Context, id string, afterSeq, untilSeq int64, w io.Writer) (int64, error)
	Pending(ctx context.Context, sessionID string) ([]wire.PermissionRequest, error)
	UnlockRemote(ctx context.Context, ttlSeconds int) (wire.RemoteStatus, error)
	// Protocol opens the control protocol, once; later calls return the
	// same connection.
	Protocol(ctx context.Context) (Protocol, error)
	// Close ends the control protocol connection, if one was opened.
	Close() error
}

// Protocol is the control protocol as commands use it
// (*wireclient.Conn, through protocolConn).
type Protocol interface {
	Launch(ctx context.Context, req wire.LaunchRequest) (wire.SessionInfo, error)
	Prompt(ctx context.Context, req wire.PromptRequest) error
	Kill(ctx context.Context, req wire.KillRequest) error
	List(ctx context.Context, req wire.ListRequest) (wire.ListResult, []wire.DiscoveredInfo, error)
	Subscribe(ctx context.Context, sessionID string, afterSeq int64) (Stream, error)
	RespondPermission(ctx context.Context, req wire.RespondPermissionRequest) (wire.PermissionDecision, error)
	SetMode(ctx context.Context, req wire.SetModeRequest) error
	WorktreeList(ctx context.Context, req wire.WorktreeListRequest) (wire.WorktreeList, error)
	WorktreeDiff(ctx context.Context, req wire.WorktreeDiffRequest) (wire.WorktreeDiff, error)
	WorktreeSummary(ctx context.Context, req wire.WorktreeSummaryRequest) (wire.WorktreeSummary, error)
	Rollback(ctx context.Context, req wire.RollbackRequest) (wire.RollbackResult, error)
	BranchRetry(ctx context.Context, req wire.BranchRetryRequest) (wire.BranchRetryResult, error)
	SquashMerge(ctx context.Context, req wire.SquashMergeRequest) (wire.SquashMergeResult, error)
	WorktreeRemove(ctx context.Context, req wire.WorktreeRemoveRequest) (wire.WorktreeRemoveResult, error)
	// Err is why the connection ended (nil while it runs).
	Err() error
}

// Stream is one followed session (*wireclient.Subscription).
type Stream interface {
	Updates() <-chan wireclient.Update
	Ended() *wire.SessionEnded
	Err() error
}

// protocolConn adapts the protocol client to Protocol.
type protocolConn struct{ *wireclient.Conn }

func (p protocolConn) Subscribe(ctx context.Context, sessionID string, afterSeq int64) (Stream, error) {
	s, err := p.Conn.Subscribe(ctx, sessionID, afterSeq)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// localDaemon is the daemon running from a home, reached through its
// recorded endpoint.
type localDaemon struct {
	*controlclient.Client
	dir     home.Dir
	timeout time.Duration

	mu   sync.Mutex
	conn *wireclient.Conn
}

func (d *localDaemon) Protocol(ctx context.Context) (Protocol, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn == nil {
		dctx, cancel := context.WithTimeout(ctx, d.timeout)
		defer cancel()
		// Followers ride out a worker restart: the protocol client finds the
		// daemon again through the home and resumes where it was.
		c, err := controlclient.DialHome(dctx, d.dir, controlclient.ConnOptions{
			Reconnect: true, ReconnectFor: d.timeout, RequestTimeout: d.timeout, PingInterval: d.timeout,
		})
		if err != nil {
			return nil, err
		}
		d.conn = c
	}
	return protocolConn{d.conn}, nil
}

func (d *localDaemon) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil {
		return d.conn.Close()
	}
	return nil
}

// connectHome is the default Env.Connect: the daemon running from dir.
func connectHome(env *Env) func(ctx context.Context, dir home.Dir) (Daemon, error) {
	return func(ctx context.Context, dir home.Dir) (Daemon, error) {
		timeout := callTimeout(env)
		c, _, err := controlclient.FromHome(dir, timeout)
		if errors.Is(err, fs.ErrNotExist) {
			// The hint is added by the command, which knows how its home
			// was given (homeFlag.apiExit).
			return nil, fmt.Errorf("%w from %s", controlclient.ErrNoDaemon, dir)
		}
		if err != nil {
			return nil, withExit(ExitFailure, err)
		}
		return &localDaemon{Client: c, dir: dir, timeout: timeout}, nil
	}
}

// callTimeout is the bound of one call to the daemon.
func callTimeout(env *Env) time.Duration {
	if env.Getenv != nil {
		if s, err := strconv.Atoi(env.Getenv("REEVE_DAEMON_TIMEOUT")); err == nil && s > 0 {
			return time.Duration(s) * time.Second
		}
	}
	return defaultCallTimeout
}

// daemonCmd is the part of a command's options that reaches the daemon,
// resolved before the command runs: the streams and injected parts, and
// the home.
type daemonCmd struct {
	env  *Env
	home home.Dir
	homeFlag
}

// homeFlag is the --home the command line gave, "" when the home came from
// REEVE_HOME or the default. Every reeve command line that a hint or
// message tells the person to run is spelled by its reeve method, so that
// the command pasted as printed reaches the same home.
type homeFlag string

// givenHome is the homeFlag of cmd, whose home resolved to dir: dir when
// --home chose it, else "".
func givenHome(cmd *cobra.Command, dir home.Dir) homeFlag {
	if f := cmd.Flags().Lookup("home"); f != nil && f.Changed {
		return homeFlag(dir)
	}
	return ""
}

// reeve is the command line, with args, that a hint tells the person to
// run next: it names the home when --home chose it, since the next command
// would otherwise reach the daemon of another home (REEVE_HOME and the
// default carry over by themselves).
func (h homeFlag) reeve(args string) string {
	if h == "" {
		return "reeve " + args
	}
	return "reeve --home " + shellWord(string(h)) + " " + args
}

// fromDaemon is err, a refusal the daemon wrote, with the command lines it
// suggests (`reeve …`, in backquotes) naming h's home. The daemon cannot
// know which --home its client was given, and a pasted suggestion would
// otherwise reach another home's daemon.
func (h homeFlag) fromDaemon(err error) error {
	if h == "" || !strings.Contains(err.Error(), "`reeve ") {
		return err
	}
	return daemonRefusal{err: err, msg: strings.ReplaceAll(err.Error(), "`reeve ", "`"+h.reeve(""))}
}

// daemonRefusal is a daemon's error with its message rewritten by
// homeFlag.fromDaemon; errors.As still finds what it wraps.
type daemonRefusal struct {
	err error
	msg string
}

func (e daemonRefusal) Error() string { return e.msg }
func (e daemonRefusal) Unwrap() error { return e.err }

// shellWord quotes s for a POSIX shell when it needs quoting.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@%=,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// connect reaches the daemon running from the home. A failure says what to
// run next in terms of this command's home (apiExit).
func (d *daemonCmd) connect(ctx context.Context) (Daemon, error) {
	c, err := d.env.Connect(ctx, d.home)
	if err != nil {
		return nil, d.apiExit(err)
	}
	return c, nil
}

// protocol reaches the daemon and opens its control protocol. Close the
// Daemon when done.
func (d *daemonCmd) protocol(ctx context.Context) (Daemon, Protocol, error) {
	c, err := d.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	p, err := c.Protocol(ctx)
	if err != nil {
		c.Close()
		return nil, nil, d.apiExit(err)
	}
	return c, p, nil
}

// addHomeFlag registers --home, the daemon home every daemon command works on.
func addHomeFlag(cmd *cobra.Command) {
	cmd.PersistentFlags().String("home", "", "daemon home directory (default $REEVE_HOME, else a per-user directory)")
}

// homeDir resolves the daemon home from --home, then REEVE_HOME, then the
// per-user default. Only start reads the config file; every other command
// needs nothing but the home to find the daemon.
func homeDir(cmd *cobra.Command, env *Env) (home.Dir, error) {
	h, _, _, _, err := config.Locate(config.LoadOptions{Flags: cmd.Flags(), Getenv: env.Getenv})
	if err != nil {
		return "", exitf(ExitUsage, "find the daemon home: %v (pass --home)", err)
	}
	return home.Dir(h), nil
}

// bind resolves the home of a daemon command into its options, before it
// runs.
func (d *daemonCmd) bind(cmd *cobra.Command, env *Env) error {
	d.env = env
	dir, err := homeDir(cmd, env)
	if err != nil {
		return err
	}
	d.home = dir
	d.homeFlag = givenHome(cmd, dir)
	return nil
}

// apiExit maps a failure to reach or use the daemon to the exit code the
// README documents; the command lines it suggests name h's home.
func (h homeFlag) apiExit(err error) error {
	if err == nil {
		return nil
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return err
	}
	var ae *controlclient.APIError
	var ack *wire.AckError
	var stopped *wireclient.StoppedError
	switch {
	case errors.As(err, &ack):
		return h.ackExit(err)
	case errors.As(err, &ae):
		err = h.fromDaemon(err)
		switch ae.Status {
		case http.StatusUnauthorized, http.StatusForbidden:
			return withExit(ExitDenied, err)
		case http.StatusNotFound:
			return withExit(ExitNotFound, err)
		case http.StatusBadRequest, http.StatusUnprocessableEntity:
			return withExit(ExitUsage, err)
		case http.StatusConflict:
			return withExit(ExitConflict, err)
		}
	case errors.As(err, &stopped):
		return &ExitError{Code: ExitNotRunning, Err: fmt.Errorf("%w; start it again with `%s`", err, h.reeve("start"))}
	case errors.Is(err, context.DeadlineExceeded):
		return &ExitError{Code: ExitUnhealthy, Err: fmt.Errorf("the daemon did not answer in time (%w); see `%s`", err, h.reeve("status"))}
	case errors.Is(err, controlclient.ErrNoDaemon):
		return &ExitError{Code: ExitNotRunning, Err: fmt.Errorf("%w (start one with `%s`)", err, h.reeve("start"))}
	case errors.Is(err, controlclient.ErrUnreachable), errors.Is(err, wireclient.ErrLost):
		return &ExitError{Code: ExitNotRunning, Err: fmt.Errorf("%w (is the daemon running? see `%s`)", err, h.reeve("status"))}
	}
	return withExit(ExitFailure, err)
}
