package claude

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"reeve.dev/reeve/agents"
)

// initializeID is the request id of the control channel's handshake.
const initializeID = "reeve-initialize"

// DefaultInitTimeout bounds the handshake that proves the permission
// channel works before a turn is given its prompt. Claude Code answers in
// well under a second; the margin is for loaded machines.
const DefaultInitTimeout = 90 * time.Second

// control speaks Claude Code's control protocol on the process's stdin
// and stdout (--input-format stream-json, --permission-prompt-tool stdio):
// reeve sends the prompt and answers every can_use_tool request through
// the decision gate. It fails closed: a request it cannot decide, a panic
// in the gate and a request withdrawn are all denies, and a channel that
// is gone leaves Claude Code without an answer, so the tool does not run.
type control struct {
	decide func(context.Context, agents.ToolUse) agents.Verdict // nil: nothing may run that asks

	ctx    context.Context // ends when the turn has ended
	cancel context.CancelFunc

	mu       sync.Mutex
	w        io.WriteCloser
	closed   bool
	inflight map[string]context.CancelFunc // can_use_tool requests being decided
	initDone chan error                    // receives the handshake's outcome once
	wg       sync.WaitGroup
}

func newControl(decide func(context.Context, agents.ToolUse) agents.Verdict) *control {
	ctx, cancel := context.WithCancel(context.Background())
	return &control{decide: decide, ctx: ctx, cancel: cancel, inflight: map[string]context.CancelFunc{}, initDone: make(chan error, 1)}
}

// attach gives the channel the process's stdin.
func (c *control) attach(w io.WriteCloser) {
	c.mu.Lock()
	c.w = w
	c.mu.Unlock()
}

// send writes one JSON line to Claude Code's stdin.
func (c *control) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.w == nil {
		return errors.New("the control channel is closed")
	}
	_, err = c.w.Write(append(b, '\n'))
	return err
}

// initialize runs the handshake and waits for its answer: the check at
// launch that the decision channel works. exited is closed when the
// process has ended.
func (c *control) initialize(timeout time.Duration, exited <-chan struct{}) error {
	if err := c.send(map[string]any{"type": "control_request", "request_id": initializeID,
		"request": map[string]any{"subtype": "initialize"}}); err != nil {
		return fmt.Errorf("send initialize: %w", err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-c.initDone:
		return err
	case <-exited:
		return errors.New("claude exited before it answered initialize")
	case <-t.C:
		return fmt.Errorf("no answer to initialize within %s", timeout)
	}
}

// prompt sends the turn's prompt as a user message.
func (c *control) prompt(text string) error {
	return c.send(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
}

// closeInput ends the conversation: Claude Code exits once its stdin is
// closed and the turn is over.
func (c *control) closeInput() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed && c.w != nil {
		c.w.Close()
	}
	c.closed = true
}

// shutdown withdraws every request still being decided (deny) and waits
// for their deciders to return.
func (c *control) shutdown() {
	c.closeInput()
	c.cancel()
	c.wg.Wait()
}

// controlLine is the part of a control line the channel reads.
type controlLine struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	Request   *struct {
		Subtype   string          `json:"subtype"`
		ToolName  string          `json:"tool_name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
	} `json:"request"`
	Response *struct {
		Subtype   string `json:"subtype"`
		RequestID string `json:"request_id"`
		Error     string `json:"error"`
	} `json:"response"`
}

// handle takes a control_request, control_response or
// control_cancel_request line from Claude Code.
func (c *control) handle(raw []byte, agentSession string) error {
	var l controlLine
	if err := json.Unmarshal(raw, &l); err != nil {
		return fmt.Errorf("unreadable %s: %w", "control line", err)
	}
	switch l.Type {
	case "control_response":
		if l.Response != nil && l.Response.RequestID == initializeID {
			var err error
			if l.Response.Subtype != "success" {
				err = fmt.Errorf("initialize refused: %s", l.Response.Error)
			}
			select {
			case c.initDone <- err:
			default:
			}
		}
	case "control_cancel_request":
		c.mu.Lock()
		if cancel, ok := c.inflight[l.RequestID]; ok {
			cancel()
		}
		c.mu.Unlock()
	case "control_request":
		if l.Request == nil || l.RequestID == "" {
			return errors.New("a control_request without a request or request_id")
		}
		if l.Request.Subtype != "can_use_tool" {
			// Nothing else is asked of reeve; say so rather than leave
			// Claude Code waiting.
			return c.send(map[string]any{"type": "control_response", "response": map[string]any{
				"subtype": "error", "request_id": l.RequestID, "error": "reeve does not handle " + l.Request.Subtype}})
		}
		u := agents.ToolUse{ToolUseID: l.Request.ToolUseID, Tool: l.Request.ToolName, Input: compact(l.Request.Input),
			AgentSessionID: agentSession, Channel: "can_use_tool"}
		ctx, cancel := context.WithCancel(c.ctx)
		c.mu.Lock()
		c.inflight[l.RequestID] = cancel
		c.mu.Unlock()
		c.wg.Add(1)
		// Decided off the reading goroutine: a human may take minutes, and
		// Claude Code may ask about parallel tool uses meanwhile.
		go func() {
			defer c.wg.Done()
			defer cancel()
			v := c.verdict(ctx, u)
			c.mu.Lock()
			delete(c.inflight, l.RequestID)
			c.mu.Unlock()
			resp := map[string]any{"behavior": "deny", "message": denyMessage(v)}
			if v.Allow {
				input := u.Input
				if len(input) == 0 {
					input = json.RawMessage("{}")
				}
				resp = map[string]any{"behavior": "allow", "updatedInput": input}
			}
			// A failed write leaves Claude Code without an answer: the tool
			// does not run.
			_ = c.send(map[string]any{"type": "control_response", "response": map[string]any{
				"subtype": "success", "request_id": l.RequestID, "response": resp}})
		}()
	}
	return nil
}

// verdict asks the gate, failing closed.
func (c *control) verdict(ctx context.Context, u agents.ToolUse) (v agents.Verdict) {
	if c.decide == nil {
		return agents.Verdict{Reason: "this turn has no decision channel, so reeve denies every tool use that asks"}
	}
	defer func() {
		if r := recover(); r != nil {
			v = agents.Verdict{Reason: fmt.Sprintf("reeve failed while deciding (%v), so it denies the tool use", r), DecidedBy: "daemon"}
		}
	}()
	v = c.decide(ctx, u)
	if ctx.Err() != nil && v.Allow {
		// Withdrawn while the gate allowed: Claude Code no longer waits,
		// but say deny all the same.
		v = agents.Verdict{Reason: "the request was withdrawn", DecidedBy: "daemon"}
	}
	return v
}

func denyMessage(v agents.Verdict) string {
	msg := v.Reason
	if msg == "" {
		msg = "reeve denied this tool use"
	}
	if v.DecidedBy != "" {
		msg = fmt.Sprintf("%s (decided by %s)", msg, v.DecidedBy)
	}
	return msg
}
