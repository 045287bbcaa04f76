package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/wire"
)

// dial opens the control protocol of the daemon running from the home.
func dial(ctx context.Context, cmd *cobra.Command, env *Env) (*controlclient.Client, *controlclient.Conn, error) {
	c, _, err := connect(cmd, env)
	if err != nil {
		return nil, nil, err
	}
	k, err := c.Dial(ctx)
	if err != nil {
		return nil, nil, apiExit(err)
	}
	return c, k, nil
}

// ackExit maps a refused control request to an exit code.
func ackExit(err error) error {
	var ae *controlclient.AckError
	if !errors.As(err, &ae) {
		return apiExit(err)
	}
	switch ae.Code {
	case wire.CodeNotFound:
		return withExit(ExitNotFound, err)
	case wire.CodeBadFrame, wire.CodeUnknownAgent, wire.CodeInvalidMode:
		return withExit(ExitUsage, err)
	case wire.CodeUnknownRequest:
		return withExit(ExitNotFound, err)
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

// streamOptions shape how a session's frames are shown.
type streamOptions struct {
	json  bool // one JSON frame per line on stdout
	quiet bool // show nothing, only wait for the end
}

// streamSession prints a subscribed session's frames until its
// session-ended frame, and returns that frame.
func streamSession(ctx context.Context, env *Env, k *controlclient.Conn, sessionID string, so streamOptions) (wire.SessionEnded, error) {
	r := &renderer{w: env.Out}
	for {
		select {
		case <-ctx.Done():
			return wire.SessionEnded{}, ctx.Err()
		case f, ok := <-k.Events():
			if !ok {
				return wire.SessionEnded{}, withExit(ExitNotRunning, fmt.Errorf("lost the daemon while following %s: %v", sessionID, k.Err()))
			}
			switch f.Type {
			case wire.TypeSessionUpdate:
				var u wire.SessionUpdate
				if json.Unmarshal(f.Raw, &u) != nil || u.SessionID != sessionID {
					continue
				}
				if so.quiet {
					continue
				}
				if so.json {
					env.Out.Write(append(append([]byte{}, f.Raw...), '\n'))
				} else {
					r.render(u)
				}
			case wire.TypeSessionEnded:
				var e wire.SessionEnded
				if json.Unmarshal(f.Raw, &e) != nil || e.SessionID != sessionID {
					continue
				}
				if so.json && !so.quiet {
					env.Out.Write(append(append([]byte{}, f.Raw...), '\n'))
				}
				r.finish()
				return e, nil
			}
		}
	}
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
		text := d.Text
		if d.Base64 != "" {
			text = decodeBase64(d.Base64)
		}
		if text != "" {
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
	case wire.KindHookEvent:
		// The decisions below say what matters; the raw hook calls are in
		// --json.
	case wire.KindPermissionRequest:
		var d wire.PermissionRequest
		json.Unmarshal(u.Data, &d)
		r.line("[permission] %s %s waits for you: reeve permit allow %s  (or: reeve permit deny %s --reason ...)", d.Tool, clip(string(d.Input), 200), d.ID, d.ID)
	case wire.KindPermissionDecision:
		var d wire.PermissionDecision
		json.Unmarshal(u.Data, &d)
		r.line("[%s] %s, by %s: %s", pastTense(d.Decision), d.Tool, d.DecidedBy, d.Reason)
	case wire.KindMode:
		var d wire.ModeChange
		json.Unmarshal(u.Data, &d)
		r.line("[mode] %s", d.Mode)
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

// timeoutExit turns a deadline into the documented timeout exit.
func timeoutExit(ctx context.Context, err error, what string) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return exitf(ExitTimeout, "timed out waiting for %s (it keeps running)", what)
	}
	return err
}

// since is how long ago t was, for people.
func since(t time.Time) string {
	return time.Since(t).Round(time.Second).String()
}
