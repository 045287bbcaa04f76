package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"reeve.dev/reeve/server/sdk"
)

// ErrTransport refuses a transport this build cannot run well. Polling
// is complete; the relay transport (assignments pushed over the paired
// relay) and inbound (the server calling the worker's own endpoint) are
// not built, and a worker asked for them says so instead of pretending.
var ErrTransport = errors.New("transport not supported by this worker")

// CheckTransport accepts "" (polling) and polling.
func CheckTransport(t string) error {
	switch t {
	case "", TransportPolling:
		return nil
	case TransportRelay, TransportInbound:
		return fmt.Errorf("%w: %s (only polling is available: the worker long-polls %s/claim; relay and inbound delivery are not implemented)", ErrTransport, t, "/api/runtime/worker")
	}
	return fmt.Errorf("unknown transport %q: use polling, relay or inbound", t)
}

// Options configure a persistent worker.
type Options struct {
	Server  Server
	Daemon  Daemon
	Profile Profile
	// ClaimWait is the long poll of one claim (default 30 s, at most 60).
	ClaimWait time.Duration
	// ApprovalTimeout: see LeaseRunner.
	ApprovalTimeout time.Duration
	// MaxRuns ends the loop after that many leases (0: never).
	MaxRuns int
	Logf    func(format string, args ...any)
	// OnLease is told of each finished lease (tests, status output).
	OnLease func(LeaseResult)
}

// Worker is the persistent lease loop of `reeve worker start`.
type Worker struct {
	o        Options
	agents   []string
	executor sdk.ManagedExecutor
}

// ErrRefused means the control plane refused the runner credential.
var ErrRefused = errors.New("the control plane refused the runner credential")

// New checks what must hold before any claim: the transport, the agents
// against the daemon's loaded adapters, and the credential against the
// server (its workspace must be the profile's).
func New(ctx context.Context, o Options) (*Worker, error) {
	if err := CheckTransport(o.Profile.Transport); err != nil {
		return nil, err
	}
	if o.ClaimWait <= 0 {
		o.ClaimWait = 30 * time.Second
	}
	o.ClaimWait = min(o.ClaimWait, 60*time.Second)
	h, err := o.Daemon.Health(ctx)
	if err != nil {
		return nil, fmt.Errorf("ask the daemon which agents it loaded: %w", err)
	}
	agents, err := CheckAgents(h, o.Profile.Agents)
	if err != nil {
		return nil, err
	}
	if len(o.Profile.Workdirs) == 0 {
		return nil, errors.New("the worker has no --workdir: runs need a directory to work in")
	}
	if err := CheckRunnerPool(o.Profile.RunnerPool); err != nil {
		return nil, err
	}
	ex, err := o.Server.WorkerIdentity(ctx)
	if err != nil {
		return nil, credentialErr(err)
	}
	if o.Profile.WorkspaceID != "" && ex.WorkspaceID != o.Profile.WorkspaceID {
		return nil, fmt.Errorf("%w: it belongs to workspace %s, not %s", ErrRefused, ex.WorkspaceID, o.Profile.WorkspaceID)
	}
	if o.Profile.ExecutorID != "" && ex.ID != o.Profile.ExecutorID {
		return nil, fmt.Errorf("%w: it is executor %s's, not %s's", ErrRefused, ex.ID, o.Profile.ExecutorID)
	}
	return &Worker{o: o, agents: agents, executor: ex}, nil
}

// runnerPoolName is compiled on first use: a counted repetition costs over a
// thousand allocations, which package init would charge every command.
var runnerPoolName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`) })

// CheckRunnerPool refuses a pool name the server would refuse in every
// claim. The pool decides what the worker takes: only runs naming this
// pool, or, without one, only runs naming none.
func CheckRunnerPool(pool string) error {
	if pool != "" && !runnerPoolName().MatchString(pool) {
		return fmt.Errorf("--runner-pool %q is not a pool name: letters, digits, '.', '_' and '-', at most 100", pool)
	}
	return nil
}

func credentialErr(err error) error {
	var ae *sdk.APIError
	if errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden) {
		return fmt.Errorf("%w: %s", ErrRefused, ae.Body.Message)
	}
	return fmt.Errorf("check the runner credential: %w", err)
}

// Executor is the executor the credential is.
func (w *Worker) Executor() sdk.ManagedExecutor { return w.executor }

// Agents are the agents the worker offers.
func (w *Worker) Agents() []string { return w.agents }

func (w *Worker) logf(format string, args ...any) {
	if w.o.Logf != nil {
		w.o.Logf(format, args...)
	}
}

// Run claims and runs leases, one at a time, until ctx ends. A refused
// credential ends it with ErrRefused; an unreachable server is retried
// with backoff for as long as it takes.
func (w *Worker) Run(ctx context.Context) error {
	runner := &LeaseRunner{Server: w.o.Server, Daemon: w.o.Daemon, Profile: w.o.Profile, Agents: w.agents, ApprovalTimeout: w.o.ApprovalTimeout, Logf: w.o.Logf}
	req := sdk.WorkerClaimRequest{Agents: w.agents, Tags: w.o.Profile.Tags, Workdirs: workdirNames(w.o.Profile.Workdirs), RunnerPool: w.o.Profile.RunnerPool,
		WaitSeconds: int(w.o.ClaimWait.Seconds())}
	backoff := time.Duration(0)
	done := 0
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, w.o.ClaimWait+30*time.Second)
		l, ok, err := w.o.Server.ClaimLease(cctx, req)
		cancel()
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			if !transient(err) {
				return credentialErr(err)
			}
			backoff = min(max(2*backoff, time.Second), 30*time.Second)
			d := backoff/2 + rand.N(backoff/2+1)
			w.logf("claim: %v (retrying in %s)", err, d.Round(time.Millisecond))
			sleep(ctx, d)
			continue
		}
		backoff = 0
		if !ok {
			continue
		}
		w.logf("lease %s: run %s (attempt %d, fence %d)", l.ID, l.RunID, l.Run.Attempt, l.Fence)
		// The job's context ends with ErrStopping when the worker stops.
		jctx, stop := context.WithCancelCause(context.WithoutCancel(ctx))
		stopped := context.AfterFunc(ctx, func() { stop(ErrStopping) })
		res := runner.Run(jctx, l)
		stopped()
		stop(nil)
		w.logf("lease %s: run %s %s%s", l.ID, l.RunID, res.Status, suffix(res.Error))
		if w.o.OnLease != nil {
			w.o.OnLease(res)
		}
		done++
		if w.o.MaxRuns > 0 && done >= w.o.MaxRuns {
			return nil
		}
	}
	return nil
}

// RunOnce runs the one lease a lease token names (`worker run-once`): the
// server is a client holding that token. It checks the agents first and
// returns what became of the lease.
func RunOnce(ctx context.Context, o Options) (LeaseResult, error) {
	if err := CheckTransport(o.Profile.Transport); err != nil {
		return LeaseResult{}, err
	}
	h, err := o.Daemon.Health(ctx)
	if err != nil {
		return LeaseResult{}, fmt.Errorf("ask the daemon which agents it loaded: %w", err)
	}
	agents, err := CheckAgents(h, o.Profile.Agents)
	if err != nil {
		return LeaseResult{}, err
	}
	l, err := o.Server.LeaseByToken(ctx)
	if err != nil {
		return LeaseResult{}, fmt.Errorf("read the lease: %w", err)
	}
	runner := &LeaseRunner{Server: o.Server, Daemon: o.Daemon, Profile: o.Profile, Agents: agents, ApprovalTimeout: o.ApprovalTimeout, Logf: o.Logf}
	jctx, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(nil)
	unhook := context.AfterFunc(ctx, func() { stop(ErrStopping) })
	defer unhook()
	return runner.Run(jctx, l), nil
}

// workdirNames are the names a run may give a workdir: its path and its
// base name.
func workdirNames(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		out = append(out, d)
		if b := filepath.Base(d); b != d {
			out = append(out, b)
		}
	}
	return out
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
