package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/discovery"
	"reeve.dev/reeve/daemon/control"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/daemon/worktree"
	"reeve.dev/reeve/hookbridge"
	"reeve.dev/reeve/hookbridge/hookprog"
	"reeve.dev/reeve/hookbridge/policy"
	"reeve.dev/reeve/internal/atomicfile"
)

// Agents is what the session manager needs of the agent registry.
type Agents interface {
	Lookup(id string) (agents.Adapter, error)
	Default(ctx context.Context) (agents.Adapter, error)
	List(ctx context.Context) []agents.Info
}

// SessionError is a request failure with a protocol error code.
type SessionError struct {
	Code string
	Err  error
}

func (e *SessionError) Error() string { return e.Err.Error() }

// ErrorCode is the protocol error code of the failure.
func (e *SessionError) ErrorCode() string { return e.Code }
func (e *SessionError) Unwrap() error     { return e.Err }

func sessionErr(code, format string, args ...any) error {
	return &SessionError{Code: code, Err: fmt.Errorf(format, args...)}
}

// ManagerOptions configure a session manager.
type ManagerOptions struct {
	Store        *store.Store
	Agents       Agents
	Home         home.Dir
	DefaultAgent string   // from the config; "" picks the registry's default
	Env          []string // the agents' base environment
	Log          io.Writer
	// DefaultMode is the operator mode of a session launched without one:
	// detect unless the user configured bypass.
	DefaultMode string
	// HookTimeout is how long a permission request waits for a human
	// before it is denied; default 10 minutes.
	HookTimeout time.Duration
	// HookProgram is the copy of the reeve binary that agents' hooks run
	// (hookbridge/hookprog), checked by digest before every governed
	// turn; a zero value leaves structured agents unguarded (the worker
	// always installs one, or does not start).
	HookProgram hookprog.Program
	// Policy evaluates a tool use by the policy of the source a session
	// started with; nil means no policy (tests).
	Policy func(src policy.Source, req policy.Request) hookbridge.PolicyVerdict
	// Context resolves the context vault's working set for a session's
	// task in its directory (context.go); nil gives agents none.
	Context func(ctx context.Context, dir, task string) string
	// RetryEvery is how often the record of events lost to a failing
	// store (a full disk) is retried (lost.go); default 2 seconds.
	RetryEvery time.Duration
}

// Manager runs sessions: it starts agent turns, persists every event before
// anyone can see it, and records how each turn ended.
type Manager struct {
	opts ManagerOptions
	// ctx lives as long as the worker; agent turns run under it.
	ctx    context.Context
	cancel context.CancelFunc

	// broker holds the permission requests waiting for a human.
	broker *hookbridge.Broker
	// manifestMu serialises manifest updates.
	manifestMu sync.Mutex
	// statusMu serialises status changes, so that a conditional one
	// (setStatusFrom) sees the status it changes.
	statusMu sync.Mutex
	// worktrees runs git for the sessions' worktrees (worktrees.go).
	worktrees *worktree.Manager

	mu sync.Mutex
	// slots are the sessions' turn slots (slot.go): a running turn or a
	// worktree operation.
	slots map[string]*slot
	// modes and agentSessions cache what hooks consult on every call.
	modes         map[string]string
	agentSessions map[string]string
	// decided keeps hook decisions for the in-band channel to confirm
	// (permissions.go).
	decided map[string]decidedUse

	// lost counts the events the store could not write (lost.go).
	lost losses

	cacheMu   sync.Mutex
	manifests map[string]wire.Manifest // decoded manifests (manifest, saveManifest)
	closing   bool
	listeners map[int]func(control.Notice)
	nextL     int
	turns     sync.WaitGroup
}

// NewManager builds a manager. Sessions left active by a worker that died
// become interrupted.
func NewManager(ctx context.Context, opts ManagerOptions) (*Manager, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	ids, err := opts.Store.MarkRunningInterrupted(ctx, "the daemon worker stopped while the session was running")
	if err != nil {
		return nil, fmt.Errorf("recover sessions: %w", err)
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if opts.HookTimeout <= 0 {
		opts.HookTimeout = wire.DefaultHookTimeoutSeconds * time.Second
	}
	m := &Manager{
		opts: opts, ctx: mctx, cancel: cancel, slots: map[string]*slot{}, listeners: map[int]func(control.Notice){},
		broker: hookbridge.NewBroker(hookbridge.BrokerOptions{Timeout: opts.HookTimeout}),
		modes:  map[string]string{}, agentSessions: map[string]string{}, decided: map[string]decidedUse{}, manifests: map[string]wire.Manifest{},
		worktrees: newWorktrees(opts),
		lost:      losses{m: map[string]*loss{}, wake: make(chan struct{}, 1)},
	}
	go m.retryLost()
	// Sessions whose end a previous worker kept (the disk was full) and the
	// store has now written: their logs stop where the disk filled up.
	for _, id := range opts.Store.RecoveredEnds() {
		fmt.Fprintf(opts.Log, "worker: session %s: ended with the end a previous worker could not record\n", id)
		if s, err := opts.Store.Session(ctx, id); err == nil {
			now := time.Now().UTC()
			raw, _ := json.Marshal(wire.OutputLost{From: s.EndedAt, To: now,
				Reason: "the disk was full when the session ended; what it did after the last event above was not recorded"})
			st, _ := json.Marshal(wire.Status{Status: string(s.Status), Reason: s.StatusReason})
			_, err := opts.Store.AppendMany(ctx, []store.EventInput{
				{SessionID: id, Kind: wire.KindOutputLost, Data: raw, TS: s.EndedAt},
				{SessionID: id, Kind: wire.KindStatus, Data: st},
			})
			if err != nil {
				fmt.Fprintf(opts.Log, "worker: session %s: record lost output: %v\n", id, err)
			}
		}
	}
	for _, id := range ids {
		fmt.Fprintf(opts.Log, "worker: session %s interrupted by a previous worker's end\n", id)
		// The log says so too; nobody follows yet, the API is not served.
		m.record(id, wire.KindStatus, wire.Status{Status: string(store.StatusInterrupted), Reason: "the daemon worker stopped while the session was running"})
		if n, err := m.settleAbandoned(ctx, id); err != nil {
			fmt.Fprintf(opts.Log, "worker: session %s: %v\n", id, err)
		} else if n > 0 {
			fmt.Fprintf(opts.Log, "worker: session %s: denied %d permission request(s) a previous worker left undecided\n", id, n)
		}
	}
	return m, nil
}

// OnNotice registers fn for every notice; the returned func removes it. fn
// must not block.
func (m *Manager) OnNotice(fn func(control.Notice)) func() {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.nextL
	m.nextL++
	m.listeners[id] = fn
	return func() {
		m.mu.Lock()
		delete(m.listeners, id)
		m.mu.Unlock()
	}
}

// Notify pushes a notice to the connected clients it concerns.
func (m *Manager) Notify(n control.Notice) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, fn := range m.listeners {
		fn(n)
	}
}

// Launch starts a session in a registered directory.
func (m *Manager) Launch(ctx context.Context, req wire.LaunchRequest) (wire.SessionInfo, error) {
	return m.launch(ctx, req, nil)
}

// launch starts a session; from, for a branch-retry, starts its worktree
// at a checkpoint of another session.
func (m *Manager) launch(ctx context.Context, req wire.LaunchRequest, from *retryFrom) (wire.SessionInfo, error) {
	if strings.TrimSpace(req.Prompt) == "" {
		return wire.SessionInfo{}, sessionErr(wire.CodeBadFrame, "prompt is required")
	}
	dir, err := m.resolveDirectory(ctx, req.Directory)
	if err != nil {
		return wire.SessionInfo{}, err
	}
	adapter, info, err := m.pickAgent(ctx, req.Agent)
	if err != nil {
		return wire.SessionInfo{}, err
	}
	m.mu.Lock()
	closing := m.closing
	m.mu.Unlock()
	if closing {
		return wire.SessionInfo{}, sessionErr(wire.CodeShuttingDown, "the daemon is shutting down")
	}

	mode, err := m.launchMode(req.Mode)
	if err != nil {
		return wire.SessionInfo{}, err
	}
	manifest := wire.Manifest{
		Provider: info.Provider, Model: req.Model, Agent: info.ID, AgentVersion: info.Version, AgentPath: info.Path,
		Directory: dir.Path, Workdir: dir.Path, Resumable: info.Resumable, Approvals: []wire.Approval{},
		PermissionMode: mode,
	}
	manifest.Guarded, manifest.GuardNote = guardOf(info, m.opts.HookProgram.Path != "")
	if src := policy.SourceOf(dir.Path); src.Required {
		manifest.PolicyFile = filepath.Join(dir.Path, policy.Dir, policy.File)
	}
	// The policy in force at the start, for the session's receipt.
	var inForce wire.PolicyInForce
	manifest.PolicyHash, inForce = startPolicy(dir.Path, manifest.PolicyFile)
	// The id comes first: it names the worktree's branch.
	manifest.SessionID = ulid.Make().String()
	workdir, err := m.isolate(ctx, manifest.SessionID, dir.Path, from, &manifest)
	if err != nil {
		return wire.SessionInfo{}, err
	}
	raw, _ := json.Marshal(manifest)
	sess, err := m.opts.Store.CreateSession(ctx, store.NewSession{
		ID: manifest.SessionID, DirectoryID: dir.ID, Agent: info.ID, Model: req.Model, Prompt: req.Prompt,
		Worktree: manifest.Worktree, Workdir: workdir, Manifest: raw,
	})
	if err != nil {
		m.dropWorktree(ctx, manifest)
		return wire.SessionInfo{}, fmt.Errorf("create session: %w", err)
	}
	manifest.SessionID = sess.ID
	if err := m.saveManifest(ctx, sess.ID, manifest); err != nil {
		return wire.SessionInfo{}, err
	}
	if manifest.PolicyHash != wire.PolicyNone {
		// A project without a policy says so in the manifest alone.
		m.record(sess.ID, wire.KindPolicy, inForce)
	}
	if err := m.startTurn(sess.ID, turnParams{adapter: adapter, prompt: req.Prompt, model: req.Model, workdir: workdir}); err != nil {
		return m.info(ctx, sess.ID), err
	}
	si := m.info(ctx, sess.ID)
	m.Notify(control.Notice{Frame: wire.SessionStarted{Type: wire.TypeSessionStarted, Session: si}})
	return si, nil
}

// Prompt gives a session a further prompt: typed into a running terminal
// agent, or as a new turn that resumes an ended one.
func (m *Manager) Prompt(ctx context.Context, req wire.PromptRequest) error {
	sessionID, text := req.SessionID, req.Text
	if strings.TrimSpace(text) == "" {
		return sessionErr(wire.CodeBadFrame, "prompt text is required")
	}
	m.awaitEnding(sessionID)
	sess, err := m.session(ctx, sessionID)
	if err != nil {
		return err
	}
	if proc, busy := m.running(sessionID); busy {
		if proc == nil {
			return sessionErr(wire.CodeBusy, "session %s is busy (a turn is starting, or a worktree operation runs); try again when it has ended (see `reeve wait %s`)", sessionID, sessionID)
		}
		// "\r" is what the Enter key sends; a terminal in line mode turns it
		// into a newline, and raw-mode programs expect it.
		err := proc.Input([]byte(text + "\r"))
		if errors.Is(err, agents.ErrNoInput) {
			return sessionErr(wire.CodeBusy, "session %s is running a turn; send the prompt when it has ended (see `reeve wait %s`)", sessionID, sessionID)
		}
		if err != nil {
			return fmt.Errorf("send prompt: %w", err)
		}
		return m.appendEvent(sessionID, wire.KindUserPrompt, wire.UserPrompt{Text: text})
	}
	manifest, err := m.manifest(ctx, sessionID)
	if err != nil {
		return err
	}
	adapter, err := m.opts.Agents.Lookup(sess.Agent)
	if err != nil {
		return sessionErr(wire.CodeUnknownAgent, "%v", err)
	}
	if !manifest.Resumable || manifest.ResumeToken == "" {
		return sessionErr(wire.CodeNotResumable, "session %s has ended (%s) and agent %s cannot resume it", sessionID, sess.Status, sess.Agent)
	}
	return m.startTurn(sessionID, turnParams{adapter: adapter, prompt: text, model: sess.Model, workdir: sess.Workdir, resume: manifest.ResumeToken})
}

// Kill stops a running session.
func (m *Manager) Kill(ctx context.Context, req wire.KillRequest) error {
	sess, err := m.session(ctx, req.SessionID)
	if err != nil {
		return err
	}
	return m.kill(req.SessionID, sess.Status)
}

// Close kills every running turn and waits for them to be recorded as
// interrupted.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closing = true
	procs := make([]agents.Process, 0, len(m.slots))
	for _, sl := range m.slots {
		if sl.proc != nil {
			procs = append(procs, sl.proc)
		}
	}
	m.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
	done := make(chan struct{})
	go func() { m.turns.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		fmt.Fprintln(m.opts.Log, "worker: sessions did not finish within 10s of shutdown")
	}
	m.cancel()
}

// turnParams are what one turn of a session runs with.
type turnParams struct {
	adapter agents.Adapter
	prompt  string
	model   string
	workdir string
	// resume is the agent's token from the previous turn; "" for the
	// first.
	resume string
}

// startTurn records the prompt, starts the agent and follows the turn to
// its end in the background. The session's slot is taken first, so that
// two prompts cannot race.
func (m *Manager) startTurn(sessionID string, tp turnParams) error {
	sl, err := m.reserve(sessionID, "")
	if err != nil {
		return err
	}
	ctx := m.ctx
	if err := m.appendEvent(sessionID, wire.KindUserPrompt, wire.UserPrompt{Text: tp.prompt}); err != nil {
		m.release(sessionID, sl)
		return err
	}
	if err := m.setStatus(ctx, sessionID, store.StatusRunning, ""); err != nil {
		m.release(sessionID, sl)
		return err
	}
	stateDir := filepath.Join(string(m.opts.Home), "sessions", sessionID)
	if err := atomicfile.EnsurePrivateDir(stateDir); err != nil {
		m.endTurn(sessionID, store.StatusFailed, err.Error(), agents.TurnResult{})
		m.release(sessionID, sl)
		return sessionErr(wire.CodeLaunchFailed, "session %s: %v", sessionID, err)
	}
	// The agent's events come after its launch event (launchgate.go).
	emit := m.emitAfterLaunch(sessionID, sl)
	if tp.resume != "" {
		m.notePolicy(ctx, sessionID) // edited between turns
	}
	extra, env := m.sessionContext(ctx, sessionID, stateDir, tp.workdir, tp.prompt, tp.resume == "")
	hook, err := m.verifiedHook(sessionID)
	var proc agents.Process
	if err == nil {
		proc, err = tp.adapter.StartTurn(ctx, agents.Turn{
			SessionID: sessionID, Prompt: tp.prompt, Model: tp.model, Dir: tp.workdir, StateDir: stateDir,
			Env: env, Resume: tp.resume, Hook: hook, Context: extra,
		}, emit)
	}
	if err != nil {
		sl.launch.open() // what the agent did before it failed
		reason := fmt.Sprintf("agent %s could not start: %v", tp.adapter.ID(), err)
		m.endTurn(sessionID, store.StatusFailed, reason, agents.TurnResult{})
		m.release(sessionID, sl)
		return sessionErr(wire.CodeLaunchFailed, "session %s: %s", sessionID, reason)
	}
	m.turns.Add(1)
	m.started(sl, proc)
	// Before the turn can end, so the launch counts this turn.
	m.recordLaunch(ctx, sessionID, proc, tp.adapter, tp.workdir)
	sl.launch.open()
	go func() {
		defer m.turns.Done()
		res := proc.Wait()
		m.mu.Lock()
		sl.exited = true
		killed, closing := sl.killed, m.closing
		m.mu.Unlock()
		status, reason := store.StatusCompleted, ""
		switch {
		case killed:
			status, reason = store.StatusKilled, "killed by request"
		case closing:
			status, reason = store.StatusInterrupted, "the daemon stopped while the session was running"
		case res.Err != nil:
			status, reason = store.StatusFailed, res.Err.Error()
		}
		m.endTurn(sessionID, status, reason, res)
		m.release(sessionID, sl)
	}()
	return nil
}

// endTurn records the end of a turn: the error if any, what the next turn
// needs, then the terminal status, last, so that followers that see the
// status have already seen every event.
func (m *Manager) endTurn(sessionID string, status store.Status, reason string, res agents.TurnResult) {
	ctx := m.ctx
	if status == store.StatusFailed {
		m.record(sessionID, wire.KindError, wire.Error{Message: reason})
	}
	// A request the agent can no longer act on must not wait for a human.
	m.broker.DenyPending(sessionID, "the turn ended before anyone decided")
	m.forgetDecided(sessionID)
	m.logFailure(sessionID, "update manifest", m.updateManifest(ctx, sessionID, func(mf *wire.Manifest) {
		mf.Turns++
		if res.Resume != "" {
			mf.ResumeToken = res.Resume
		}
		if res.AgentSessionID != "" {
			mf.AgentSessionID = res.AgentSessionID
		}
	}))
	m.checkpointTurn(ctx, sessionID)
	if err := m.setStatus(ctx, sessionID, status, reason); err != nil {
		fmt.Fprintf(m.opts.Log, "worker: session %s: record end: %v\n", sessionID, err)
	}
}

// setStatus appends a status event, then changes the session row.
func (m *Manager) setStatus(ctx context.Context, sessionID string, status store.Status, reason string) error {
	m.statusMu.Lock()
	defer m.statusMu.Unlock()
	return m.writeStatus(ctx, sessionID, status, reason)
}

// setStatusFrom changes the status only while it is one of from: a hook's
// waiting-permission and back must never overwrite the end of a turn that
// came meanwhile.
func (m *Manager) setStatusFrom(ctx context.Context, sessionID string, from store.Status, status store.Status, reason string) error {
	m.statusMu.Lock()
	defer m.statusMu.Unlock()
	s, err := m.opts.Store.Session(ctx, sessionID)
	if err != nil || s.Status != from {
		return err
	}
	return m.writeStatus(ctx, sessionID, status, reason)
}

// An end that cannot be recorded (the disk is full) is not left
// half-done: the session ends as failed, saying why, and the store shows
// that at once and writes it when it can (store.ErrEndPending); the status
// event follows with the lost-output marker (lost.go).
func (m *Manager) writeStatus(ctx context.Context, sessionID string, status store.Status, reason string) error {
	aerr := m.appendEvent(sessionID, wire.KindStatus, wire.Status{Status: string(status), Reason: reason})
	if aerr != nil {
		if !status.Terminal() || !lostWrite(aerr) {
			return aerr
		}
		reason = endNotRecorded(status, reason, aerr)
		status = store.StatusFailed
		m.loseEnd(sessionID, wire.Status{Status: string(status), Reason: reason})
	}
	_, err := m.opts.Store.UpdateSessionStatus(ctx, sessionID, status, reason)
	if errors.Is(err, store.ErrEndPending) && aerr == nil {
		// The event is written but not the row: fail it all the same, so
		// that the log and the row agree once both are written.
		reason = endNotRecorded(status, reason, err)
		status = store.StatusFailed
		m.loseEnd(sessionID, wire.Status{Status: string(status), Reason: reason})
		_, err = m.opts.Store.UpdateSessionStatus(ctx, sessionID, status, reason)
	}
	if errors.Is(err, store.ErrEndPending) {
		fmt.Fprintf(m.opts.Log, "worker: session %s: its end is kept until it can be written: %v\n", sessionID, err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("update session status: %w", err)
	}
	return nil
}

// record appends an event the caller cannot act on a failure of; the
// failure goes to the worker's log rather than nowhere.
func (m *Manager) record(sessionID, kind string, data any) {
	m.logFailure(sessionID, "record "+kind+" event", m.appendEvent(sessionID, kind, data))
}

// logFailure writes a failed bookkeeping step of a session to the log.
func (m *Manager) logFailure(sessionID, what string, err error) {
	if err != nil {
		fmt.Fprintf(m.opts.Log, "worker: session %s: %s: %v\n", sessionID, what, err)
	}
}

func (m *Manager) appendEvent(sessionID, kind string, data any) error {
	if data == nil {
		data = json.RawMessage("null") // a nil Value would mean "no value"
	}
	var lost []store.EventInput
	var done func(bool)
	if m.hasLoss() {
		// The marker of what was lost goes first, in the same transaction.
		lost, done = m.takeLoss(sessionID)
	}
	// The store encodes the value: it then knows the data is valid JSON
	// and need not scan it again.
	in := append(lost, store.EventInput{SessionID: sessionID, Kind: kind, Value: data})
	_, err := m.opts.Store.AppendMany(m.ctx, in)
	if done != nil {
		done(err == nil)
	}
	if err != nil {
		if lostWrite(err) {
			m.lose(sessionID, kind, err)
		}
		return fmt.Errorf("append %s event: %w", kind, err)
	}
	return nil
}

func (m *Manager) resolveDirectory(ctx context.Context, ref string) (store.Directory, error) {
	if ref == "" {
		return store.Directory{}, sessionErr(wire.CodeBadFrame, "directory is required")
	}
	var d store.Directory
	var err error
	if filepath.IsAbs(ref) {
		path := ref
		if real, rerr := filepath.EvalSymlinks(ref); rerr == nil {
			path = real
		}
		d, err = m.opts.Store.DirectoryByPath(ctx, path)
	} else {
		d, err = m.opts.Store.Directory(ctx, ref)
	}
	if errors.Is(err, store.ErrNotFound) {
		return d, &SessionError{Code: wire.CodeNotFound, Err: fmt.Errorf("directory %s is not registered (register it with `reeve add`)", ref)}
	}
	if err != nil {
		return d, err
	}
	if info, err := os.Stat(d.Path); err != nil || !info.IsDir() {
		return d, &SessionError{Code: wire.CodeNotFound, Err: fmt.Errorf("registered directory %s no longer exists", d.Path)}
	}
	return d, nil
}

func (m *Manager) pickAgent(ctx context.Context, id string) (agents.Adapter, agents.Info, error) {
	if id == "" {
		id = m.opts.DefaultAgent
	}
	var a agents.Adapter
	var err error
	if id == "" {
		a, err = m.opts.Agents.Default(ctx)
	} else {
		a, err = m.opts.Agents.Lookup(id)
	}
	if err != nil {
		return nil, agents.Info{}, sessionErr(wire.CodeUnknownAgent, "%v", err)
	}
	info := a.Describe(ctx)
	if !info.Installed || info.Problem != "" {
		why := info.Problem
		if why == "" {
			why = "it is not installed"
		}
		return nil, info, sessionErr(wire.CodeAgentMissing, "agent %s cannot run: %s", info.ID, why)
	}
	return a, info, nil
}

func (m *Manager) session(ctx context.Context, id string) (store.Session, error) {
	s, err := m.opts.Store.Session(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return s, &SessionError{Code: wire.CodeNotFound, Err: fmt.Errorf("no session %q", id)}
	}
	return s, err
}

// Session describes one session.
func (m *Manager) Session(ctx context.Context, id string) (wire.SessionInfo, error) {
	if _, err := m.session(ctx, id); err != nil {
		return wire.SessionInfo{}, err
	}
	return m.info(ctx, id), nil
}

// Manifest returns a session's manifest.
func (m *Manager) Manifest(ctx context.Context, id string) (wire.Manifest, error) {
	if _, err := m.session(ctx, id); err != nil {
		return wire.Manifest{}, err
	}
	mf, err := m.manifest(ctx, id)
	if err != nil {
		return mf, err
	}
	mf.Approvals, err = m.approvals(ctx, id)
	return mf, err
}

func (m *Manager) manifest(ctx context.Context, id string) (wire.Manifest, error) {
	if mf, ok := m.cachedManifest(id); ok {
		return mf, nil
	}
	s, err := m.opts.Store.Session(ctx, id)
	if err != nil {
		return wire.Manifest{}, err
	}
	var mf wire.Manifest
	if err := json.Unmarshal(s.Manifest, &mf); err != nil {
		return mf, fmt.Errorf("read manifest of %s: %w", id, err)
	}
	if mf.Approvals == nil {
		mf.Approvals = []wire.Approval{}
	}
	m.cacheManifest(id, mf)
	return mf, nil
}

// maxCachedManifests bounds the decoded manifests a worker keeps.
const maxCachedManifests = 256

// The decoded manifests of sessions, so that a tool use's decision does
// not read and decode a manifest whose approvals grow with every decision
// (twice: for the mode and the policy source). Every write goes through
// saveManifest, which refreshes the cache; a copy goes in and out, so no
// caller shares the approvals' backing array.
func (m *Manager) cachedManifest(id string) (wire.Manifest, bool) {
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	mf, ok := m.manifests[id]
	if ok {
		mf.Approvals = append([]wire.Approval{}, mf.Approvals...)
	}
	return mf, ok
}

func (m *Manager) cacheManifest(id string, mf wire.Manifest) {
	mf.Approvals = append([]wire.Approval{}, mf.Approvals...)
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	if _, ok := m.manifests[id]; !ok && len(m.manifests) >= maxCachedManifests {
		for k := range m.manifests {
			delete(m.manifests, k)
			break
		}
	}
	m.manifests[id] = mf
}

// updateManifest changes a session's manifest; one change at a time, so
// that approvals recorded by concurrent hooks and the end of a turn do not
// overwrite each other.
func (m *Manager) updateManifest(ctx context.Context, id string, change func(*wire.Manifest)) error {
	m.manifestMu.Lock()
	defer m.manifestMu.Unlock()
	mf, err := m.manifest(ctx, id)
	if err != nil {
		return err
	}
	change(&mf)
	return m.saveManifest(ctx, id, mf)
}

func (m *Manager) saveManifest(ctx context.Context, id string, mf wire.Manifest) error {
	raw, err := json.Marshal(mf)
	if err != nil {
		return err
	}
	if err := m.opts.Store.SetManifest(ctx, id, raw); err != nil {
		// The stored one may or may not have changed: read it afresh.
		m.cacheMu.Lock()
		delete(m.manifests, id)
		m.cacheMu.Unlock()
		return err
	}
	if mf.Approvals == nil {
		mf.Approvals = []wire.Approval{}
	}
	m.cacheManifest(id, mf)
	return nil
}

// List lists reeve's sessions matching the request.
func (m *Manager) List(ctx context.Context, req wire.ListRequest) ([]wire.SessionInfo, error) {
	f := store.SessionFilter{DirectoryID: req.DirectoryID, Agent: req.Agent}
	if req.Scope == wire.ScopeActive {
		f.Statuses = store.ActiveStatuses
	}
	list, err := m.opts.Store.ListSessions(ctx, f)
	if err != nil {
		return nil, err
	}
	dirs := map[string]string{}
	out := make([]wire.SessionInfo, 0, len(list))
	for _, s := range list {
		out = append(out, m.toInfo(ctx, s, dirs))
	}
	return out, nil
}

func (m *Manager) info(ctx context.Context, id string) wire.SessionInfo {
	s, err := m.opts.Store.Session(ctx, id)
	if err != nil {
		return wire.SessionInfo{ID: id}
	}
	return m.toInfo(ctx, s, map[string]string{})
}

func (m *Manager) toInfo(ctx context.Context, s store.Session, dirs map[string]string) wire.SessionInfo {
	dir, ok := dirs[s.DirectoryID]
	if !ok {
		if d, err := m.opts.Store.Directory(ctx, s.DirectoryID); err == nil {
			dir = d.Path
		}
		dirs[s.DirectoryID] = dir
	}
	last, _ := m.opts.Store.LastSeq(ctx, s.ID)
	return wire.SessionInfo{
		ID: s.ID, DirectoryID: s.DirectoryID, Directory: dir, Workdir: s.Workdir, Agent: s.Agent, Model: s.Model,
		Prompt: s.Prompt, Status: string(s.Status), StatusReason: s.StatusReason,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, EndedAt: s.EndedAt, LastSeq: last,
	}
}

// geminiDir is Gemini CLI's directory when GEMINI_CLI_HOME moves it; ""
// leaves discovery its default.
func geminiDir(env []string) string {
	if h := envValue(env, "GEMINI_CLI_HOME"); h != "" {
		return filepath.Join(h, ".gemini")
	}
	return ""
}

// Discover lists sessions the agents ran outside reeve, leaving out the ones
// reeve ran itself.
func (m *Manager) Discover(ctx context.Context) ([]wire.DiscoveredInfo, error) {
	ours := map[string]bool{}
	sessions, err := m.opts.Store.ListSessions(ctx, store.SessionFilter{})
	if err != nil {
		return nil, err
	}
	for _, s := range sessions {
		var mf wire.Manifest
		if json.Unmarshal(s.Manifest, &mf) == nil && mf.AgentSessionID != "" {
			ours[mf.Agent+"/"+mf.AgentSessionID] = true
		}
	}
	found, err := discovery.Scan(ctx, discovery.Options{
		CodexHome: envValue(m.opts.Env, "CODEX_HOME"),
		GeminiDir: geminiDir(m.opts.Env),
		Exclude:   func(agent, id string) bool { return ours[agent+"/"+id] },
	})
	if err != nil {
		return nil, fmt.Errorf("discover sessions: %w", err)
	}
	out := make([]wire.DiscoveredInfo, 0, len(found))
	for _, d := range found {
		out = append(out, wire.DiscoveredInfo{
			Agent: d.Agent, ID: d.ID, Directory: d.Dir, Title: d.Title, Path: d.Path,
			StartedAt: d.StartedAt, UpdatedAt: d.UpdatedAt,
		})
	}
	return out, nil
}

// envValue reads key from an environment list.
func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}
