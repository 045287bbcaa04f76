package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"reeve.dev/reeve/daemon/wire"
)

// ackExit maps a refused control request to an exit code; other failures
// go to apiExit.
func (h homeFlag) ackExit(err error) error {
	var ae *wire.AckError
	if !errors.As(err, &ae) {
		return h.apiExit(err)
	}
	err = h.fromDaemon(err)
	switch ae.Code {
	case wire.CodeNotFound:
		return withExit(ExitNotFound, err)
	case wire.CodeBadFrame, wire.CodeUnknownAgent, wire.CodeInvalidMode:
		return withExit(ExitUsage, err)
	case wire.CodeUnknownRequest:
		return withExit(ExitNotFound, err)
	case wire.CodeLaunchFailed:
		// The session was recorded and ended failed before its agent ran.
		return withExit(ExitSessionBad, err)
	case wire.CodeBusy, wire.CodeNotRunning, wire.CodeNotResumable, wire.CodeShuttingDown, wire.CodeAlreadyWatched, wire.CodeAlreadyDecided:
		return withExit(ExitConflict, err)
	}
	return withExit(ExitFailure, err)
}

// sessionExit is the exit code of a command that waited for a session: 0
// when it completed, ExitSessionBad when it failed, was killed or was
// interrupted.
func sessionExit(status string) error {
	if status == "completed" {
		return nil
	}
	return silentExit(ExitSessionBad)
}

// renderer prints session events for a person at a terminal.
type renderer struct {
	w        io.Writer
	midLine  bool // terminal output left the cursor mid-line
	lastKind string
}

func (r *renderer) line(format string, args ...any) {
	if r.midLine {
		fmt.Fprintln(r.w)
		r.midLine = false
	}
	fmt.Fprintf(r.w, format+"\n", args...)
}

func (r *renderer) finish() {
	if r.midLine {
		fmt.Fprintln(r.w)
		r.midLine = false
	}
}

func (r *renderer) render(u wire.SessionUpdate) {
	switch u.Kind {
	case wire.KindUserPrompt:
		var d wire.UserPrompt
		json.Unmarshal(u.Data, &d)
		r.line("> %s", d.Text)
	case wire.KindAgentMessage:
		var d wire.AgentMessage
		json.Unmarshal(u.Data, &d)
		r.line("%s", strings.TrimRight(d.Text, "\n"))
	case wire.KindToolCall:
		var d wire.ToolCall
		json.Unmarshal(u.Data, &d)
		r.line("[tool %s] %s", d.Name, clip(string(d.Input), 300))
	case wire.KindToolResult:
		var d wire.ToolResult
		json.Unmarshal(u.Data, &d)
		label := "result"
		if d.IsError {
			label = "result, error"
		}
		out := strings.TrimRight(d.Output, "\n")
		if out == "" {
			out = "(no output)"
		}
		r.line("[%s] %s", label, clip(out, 2000))
	case wire.KindTerminalOutput:
		var d wire.TerminalOutput
		json.Unmarshal(u.Data, &d)
		b, err := d.Bytes()
		if err != nil {
			b = nil // undecodable output shows as nothing, not as a fragment
		}
		if text := string(b); text != "" {
			io.WriteString(r.w, text)
			r.midLine = !strings.HasSuffix(text, "\n")
		}
	case wire.KindUsage:
		var d wire.Usage
		json.Unmarshal(u.Data, &d)
		cost := ""
		if d.CostUSD != nil {
			cost = fmt.Sprintf(", $%.4f", *d.CostUSD)
		}
		r.line("[usage] %d input, %d output tokens%s", d.InputTokens, d.OutputTokens, cost)
	case wire.KindStatus:
		var d wire.Status
		json.Unmarshal(u.Data, &d)
		if d.Reason != "" {
			r.line("[%s] %s", d.Status, d.Reason)
		} else {
			r.line("[%s]", d.Status)
		}
	case wire.KindError:
		var d wire.Error
		json.Unmarshal(u.Data, &d)
		r.line("[error] %s", d.Message)
	case wire.KindOutputLost:
		var d wire.OutputLost
		json.Unmarshal(u.Data, &d)
		what := "events"
		if d.Events > 0 {
			what = fmt.Sprintf("%d events", d.Events)
		}
		r.line("[output lost] %s were not recorded (%s to %s): %s", what,
			d.From.Local().Format("15:04:05"), d.To.Local().Format("15:04:05"), d.Reason)
	case wire.KindHookEvent:
		// The decisions below say what matters; the raw hook calls are in
		// --json.
	case wire.KindPermissionRequest:
		var d wire.PermissionRequest
		json.Unmarshal(u.Data, &d)
		r.line("[permission] %s %s waits for a decision (request %s)", d.Tool, clip(string(d.Input), 200), d.ID)
	case wire.KindPermissionDecision:
		var d wire.PermissionDecision
		json.Unmarshal(u.Data, &d)
		r.line("[%s] %s, by %s: %s", pastTense(d.Decision), d.Tool, d.DecidedBy, d.Reason)
	case wire.KindMode:
		var d wire.ModeChange
		json.Unmarshal(u.Data, &d)
		r.line("[mode] %s", d.Mode)
	case wire.KindLaunch:
		var d wire.Launch
		json.Unmarshal(u.Data, &d)
		r.line("[launch] turn %d: %s", d.Turn, clip(strings.Join(d.Argv, " "), 300))
	case wire.KindPolicy:
		var d wire.PolicyInForce
		json.Unmarshal(u.Data, &d)
		if d.Previous != "" {
			r.line("[policy] %s: %s (was %s)", d.Change, d.Hash, d.Previous)
		} else {
			r.line("[policy] %s: %s", d.Change, d.Hash)
		}
	default:
		r.line("[%s] %s", u.Kind, clip(string(u.Data), 300))
	}
	r.lastKind = u.Kind
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// withTimeout bounds ctx by seconds when seconds > 0.
func withTimeout(ctx context.Context, seconds int) (context.Context, context.CancelFunc) {
	if seconds > 0 {
		return context.WithTimeout(ctx, time.Duration(seconds)*time.Second)
	}
	return context.WithCancel(ctx)
}

// timeoutExit turns the deadline of a wait (ctx, from --timeout) into the
// documented timeout exit; a call to the daemon that ran out of time is
// another failure (apiExit).
func timeoutExit(ctx context.Context, err error, what string) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return exitf(ExitTimeout, "timed out waiting for %s (it keeps running)", what)
	case errors.Is(ctx.Err(), context.Canceled):
		// Only a signal cancels a command's context; its cause says which.
		return exitf(ExitInterrupted, "stopped waiting for %s: %v (it keeps running)", what, context.Cause(ctx))
	}
	return err
}

// since is how long ago t was, for people.
func since(t time.Time) string {
	return time.Since(t).Round(time.Second).String()
}
