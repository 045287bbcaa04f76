package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"reeve.dev/reeve/daemon/wire"
)

// Job is what a lease asks a worker to do.
type Job struct {
	RunID     string
	Directory string // a path or a base name among the worker's workdirs
	Agent     string
	Model     string
	Prompt    string
	Mode      string // operator mode; "" = detect (a human decides what the policy leaves open)
}

// Outcome is how a run ended, with its evidence.
type Outcome struct {
	Status      string // succeeded, failed or cancelled
	ExitCode    int
	SessionID   string
	Error       string
	Diff        wire.DiffStat
	Checkpoints []wire.CheckpointInfo
	Usage       Usage
	// SessionStatus is how the daemon ended the session (completed,
	// failed, killed, interrupted).
	SessionStatus string
}

// Usage sums a session's usage events.
type Usage struct {
	Model        string
	InputTokens  int64
	OutputTokens int64
	CostUSD      float64
	HasCost      bool
}

// Run statuses a worker reports.
const (
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// Governor is the control plane's side of a running job: it learns that
// the agent runs (with its session) and decides the permission requests
// the project policy leaves to a human.
type Governor interface {
	Running(ctx context.Context, sessionID string) error
	// Record is given every event of the session, in order; it must not
	// block (the evidence is sent on the side).
	Record(u wire.SessionUpdate)
	// Approve raises an approval for req and waits for a human's
	// decision: allow or deny, with a reason. It returns an error when
	// no decision came (the caller then denies).
	Approve(ctx context.Context, req wire.PermissionRequest) (decision, reason string, err error)
}

// ErrNoDirectory means a run names a directory this worker does not have.
var ErrNoDirectory = errors.New("the run names a directory this worker does not have")

// ResolveDirectory finds a run's directory among the worker's workdirs:
// by absolute path, or by base name (a repository's name, with or without
// .git). A path outside the workdirs is refused even when it exists: the
// workdirs are what the worker's owner agreed to let runs touch.
func ResolveDirectory(asked string, workdirs []string) (string, error) {
	if asked == "" {
		if len(workdirs) == 1 {
			return workdirs[0], nil
		}
		return "", fmt.Errorf("%w: the run names no directory and the worker has %d", ErrNoDirectory, len(workdirs))
	}
	if filepath.IsAbs(asked) {
		clean := filepath.Clean(asked)
		for _, w := range workdirs {
			if filepath.Clean(w) == clean {
				return w, nil
			}
		}
		return "", fmt.Errorf("%w: %s (workdirs: %s)", ErrNoDirectory, asked, strings.Join(workdirs, ", "))
	}
	// A name, or a repository URL whose last segment is the name; a
	// relative path is neither (it would be relative to what?).
	if !strings.Contains(asked, "://") && !strings.Contains(asked, ":") && strings.Contains(strings.TrimRight(asked, "/"), "/") {
		return "", fmt.Errorf("%w: %q is a relative path; name a workdir by its absolute path or its name", ErrNoDirectory, asked)
	}
	name := strings.TrimSuffix(filepath.Base(strings.TrimRight(asked, "/")), ".git")
	var found []string
	for _, w := range workdirs {
		if filepath.Base(w) == name {
			found = append(found, w)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("%w: %q (workdirs: %s)", ErrNoDirectory, asked, strings.Join(workdirs, ", "))
	}
	return "", fmt.Errorf("%w: %q is ambiguous (%s)", ErrNoDirectory, asked, strings.Join(found, ", "))
}

// Execute runs one job through the daemon and returns its outcome. It
// stops the agent when ctx ends (a cancel or a lost lease: the cause says
// which). Permission requests the policy leaves to a human go to gov;
// one left undecided is denied, as the hook bridge would on timeout.
func Execute(ctx context.Context, d Daemon, dir string, job Job, gov Governor, logf func(string, ...any)) Outcome {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	fail := func(format string, args ...any) Outcome {
		return Outcome{Status: StatusFailed, ExitCode: 1, Error: fmt.Sprintf(format, args...)}
	}
	added, err := d.AddDirectory(ctx, dir)
	if err != nil {
		return fail("register %s with the daemon: %v", dir, err)
	}
	si, err := d.Launch(ctx, wire.LaunchRequest{Directory: added.Directory.ID, Prompt: job.Prompt, Agent: job.Agent, Model: job.Model, Mode: job.Mode})
	if err != nil {
		return fail("launch the agent: %v", err)
	}
	logf("run %s: session %s started (agent %s in %s)", job.RunID, si.ID, si.Agent, si.Workdir)
	out := Outcome{SessionID: si.ID}
	// The run is reported running before the follow starts: a refusal
	// here (the lease is gone) ends the session at once.
	if err := gov.Running(ctx, si.ID); err != nil {
		logf("run %s: report running: %v", job.RunID, err)
	}
	stream, err := d.Follow(ctx, si.ID)
	if err != nil {
		d.Kill(context.WithoutCancel(ctx), si.ID)
		o := fail("follow session %s: %v", si.ID, err)
		o.SessionID = si.ID
		return o
	}

	var (
		mu      sync.Mutex
		waiting = map[string]context.CancelFunc{} // permission requests being decided remotely
		wg      sync.WaitGroup
	)
	defer func() {
		mu.Lock()
		for _, c := range waiting {
			c()
		}
		mu.Unlock()
		wg.Wait()
	}()
	killed := false
	for {
		select {
		case <-ctx.Done():
			if !killed {
				killed = true
				logf("run %s: stopping session %s: %v", job.RunID, si.ID, context.Cause(ctx))
				if err := d.Kill(context.WithoutCancel(ctx), si.ID); err != nil {
					logf("run %s: kill session %s: %v", job.RunID, si.ID, err)
				}
			}
			// Keep reading until the session ends, so that its end and
			// evidence are reported.
			ctx = context.WithoutCancel(ctx)
			continue
		case u, ok := <-stream.Updates():
			if !ok {
				return finish(ctx, d, out, stream, killed)
			}
			gov.Record(u.SessionUpdate)
			switch u.Kind {
			case wire.KindUsage:
				var us wire.Usage
				if json.Unmarshal(u.Data, &us) == nil {
					out.Usage.add(us)
				}
			case wire.KindCheckpoint:
				var cp wire.Checkpoint
				if json.Unmarshal(u.Data, &cp) == nil {
					out.Checkpoints = append(out.Checkpoints, wire.CheckpointInfo{SHA: cp.SHA, SessionID: si.ID, Turn: cp.Turn, Action: cp.Action, At: u.TS, Files: cp.Files})
				}
			case wire.KindPermissionRequest:
				var req wire.PermissionRequest
				if json.Unmarshal(u.Data, &req) != nil || req.ID == "" {
					continue
				}
				actx, cancel := context.WithCancel(ctx)
				mu.Lock()
				waiting[req.ID] = cancel
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer cancel()
					decide(actx, d, gov, req, logf)
				}()
			case wire.KindPermissionDecision:
				var dec wire.PermissionDecision
				if json.Unmarshal(u.Data, &dec) == nil {
					mu.Lock()
					if c, ok := waiting[dec.RequestID]; ok {
						c() // decided here or elsewhere: stop waiting for the server
						delete(waiting, dec.RequestID)
					}
					mu.Unlock()
				}
			}
		}
	}
}

// decide raises a permission request on the control plane and answers
// the daemon with the human's decision, or with deny when none comes.
func decide(ctx context.Context, d Daemon, gov Governor, req wire.PermissionRequest, logf func(string, ...any)) {
	decision, reason, err := gov.Approve(ctx, req)
	if ctx.Err() != nil {
		return // decided another way, or the run is over
	}
	if err != nil {
		decision, reason = "deny", fmt.Sprintf("no approval decision from the control plane: %v", err)
	}
	if decision != "allow" && decision != "deny" {
		decision, reason = "deny", fmt.Sprintf("unknown approval decision %q", decision)
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := d.RespondPermission(actx, wire.RespondPermissionRequest{RequestID: req.ID, Decision: decision, Reason: reason}); err != nil {
		logf("answer permission request %s: %v", req.ID, err)
	}
}

// finish turns a session's end into the run's outcome, with the diff and
// the checkpoints of its worktree.
func finish(ctx context.Context, d Daemon, out Outcome, stream Stream, killed bool) Outcome {
	end := stream.Ended()
	if end == nil {
		out.Status, out.ExitCode = StatusFailed, 1
		out.Error = fmt.Sprintf("lost the session's event stream: %v", stream.Err())
		return out
	}
	out.SessionStatus = end.Status
	switch {
	case end.Status == "completed":
		out.Status, out.ExitCode = StatusSucceeded, 0
	case killed:
		out.Status, out.ExitCode = StatusCancelled, 130
		out.Error = "the agent was stopped"
	default:
		out.Status, out.ExitCode = StatusFailed, 1
		out.Error = fmt.Sprintf("session %s", end.Status)
		if end.Reason != "" {
			out.Error += ": " + end.Reason
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if sum, err := d.WorktreeSummary(sctx, out.SessionID); err == nil {
		out.Diff = sum.DiffStat
		if len(sum.Checkpoints) > 0 {
			out.Checkpoints = sum.Checkpoints
		}
	}
	return out
}

func (u *Usage) add(us wire.Usage) {
	if us.Model != "" {
		u.Model = us.Model
	}
	u.InputTokens += us.InputTokens
	u.OutputTokens += us.OutputTokens
	if us.CostUSD != nil {
		u.CostUSD += *us.CostUSD
		u.HasCost = true
	}
}
