package codex

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"mvdan.cc/sh/v3/syntax"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/ptyrun"
	"reeve.dev/reeve/daemon/wire"
)

// DefaultInitTimeout bounds each step of opening the channel (the
// handshake, the thread's start or resume, the turn's start). Codex
// answers in about a second; the margin is for loaded machines.
const DefaultInitTimeout = 90 * time.Second

// exitGrace is how long the app-server may take to exit once its turn
// completed and its stdin closed, before it is stopped.
const exitGrace = 30 * time.Second

// The app-server's requests reeve answers by deciding a tool use.
const (
	methodCommandApproval = "item/commandExecution/requestApproval"
	methodFileApproval    = "item/fileChange/requestApproval"
	methodPermissions     = "item/permissions/requestApproval"
	methodLegacyExec      = "execCommandApproval"
	methodLegacyPatch     = "applyPatchApproval"
)

// channel speaks the app-server's JSON-RPC (one JSON object per line, no
// "jsonrpc" member) on the process's stdin and stdout: reeve's requests
// open the thread and start the turn, and every approval the app-server
// asks for is decided through the gate. It fails closed: a request it
// cannot decide, a panic in the gate and a turn that ends while a decision
// is pending are all declines, and a channel that is gone leaves Codex
// without an answer, so the call does not run.
type channel struct {
	m      *mapper
	decide func(context.Context, agents.ToolUse) agents.Verdict // nil: nothing that asks may run
	dir    string

	ctx    context.Context // ends when the turn has ended
	cancel context.CancelFunc

	mu      sync.Mutex
	w       io.WriteCloser
	proc    *ptyrun.Process
	closed  bool
	nextID  int64
	waiting map[string]chan rpcReply // reeve's requests awaiting their response, by id
	wg      sync.WaitGroup
}

type rpcReply struct {
	Result json.RawMessage
	Err    *rpcError
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// envelope is any JSON-RPC message of the app-server.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *rpcError       `json:"error"`
}

func newChannel(m *mapper, decide func(context.Context, agents.ToolUse) agents.Verdict, dir string) *channel {
	ctx, cancel := context.WithCancel(context.Background())
	return &channel{m: m, decide: decide, dir: dir, ctx: ctx, cancel: cancel, waiting: map[string]chan rpcReply{}}
}

// attach gives the channel the process and its stdin.
func (c *channel) attach(p *ptyrun.Process) {
	c.mu.Lock()
	c.w, c.proc = p.Stdin(), p
	c.mu.Unlock()
}

func (c *channel) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.w == nil {
		return errors.New("the channel to codex is closed")
	}
	_, err = c.w.Write(append(b, '\n'))
	return err
}

// call sends a request and waits for its response.
func (c *channel) call(method string, params any, timeout time.Duration, exited <-chan struct{}) (json.RawMessage, error) {
	c.mu.Lock()
	c.nextID++
	id := fmt.Sprint(c.nextID)
	reply := make(chan rpcReply, 1)
	c.waiting[id] = reply
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, id)
		c.mu.Unlock()
	}()
	if err := c.send(map[string]any{"id": json.RawMessage(id), "method": method, "params": params}); err != nil {
		return nil, fmt.Errorf("send %s: %w", method, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-reply:
		if r.Err != nil {
			return nil, fmt.Errorf("%s refused: %s", method, r.Err.Message)
		}
		return r.Result, nil
	case <-exited:
		return nil, fmt.Errorf("codex exited before it answered %s", method)
	case <-t.C:
		return nil, fmt.Errorf("no answer to %s within %s", method, timeout)
	}
}

// open runs the handshake, starts or resumes the thread and starts the
// turn: the check at launch that the channel works.
func (c *channel) open(t agents.Turn, timeout time.Duration, exited <-chan struct{}) error {
	if _, err := c.call("initialize", map[string]any{"clientInfo": map[string]any{"name": "reeve", "title": "reeve", "version": "1"}}, timeout, exited); err != nil {
		return err
	}
	if err := c.send(map[string]any{"method": "initialized"}); err != nil {
		return err
	}
	params := map[string]any{"cwd": t.Dir, "sandbox": Sandbox, "approvalPolicy": unguardedApproval}
	if t.Hook != nil {
		params["approvalPolicy"] = governedApproval
		// The hooks on the command line are reeve's own; without this
		// Codex skips hooks nobody has reviewed.
		params["config"] = map[string]any{"bypass_hook_trust": true}
	}
	if t.Model != "" {
		params["model"] = t.Model
	}
	if t.Context != "" {
		params["developerInstructions"] = t.Context
	}
	method := "thread/start"
	if t.Resume != "" {
		method, params["threadId"] = "thread/resume", t.Resume
	}
	raw, err := c.call(method, params, timeout, exited)
	if err != nil {
		return err
	}
	var started struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
		Model string `json:"model"`
	}
	if err := json.Unmarshal(raw, &started); err != nil || started.Thread.ID == "" {
		return fmt.Errorf("%s answered without a thread id", method)
	}
	c.m.mu.Lock()
	c.m.threadID = started.Thread.ID
	if c.m.model == "" {
		c.m.model = started.Model
	}
	c.m.mu.Unlock()
	_, err = c.call("turn/start", map[string]any{"threadId": started.Thread.ID,
		"input": []any{map[string]any{"type": "text", "text": t.Prompt}}}, timeout, exited)
	return err
}

// closeInput ends the conversation: the app-server exits once its stdin
// is closed.
func (c *channel) closeInput() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed && c.w != nil {
		c.w.Close()
	}
	c.closed = true
}

// shutdown withdraws every decision still pending and waits for the
// deciders to return.
func (c *channel) shutdown() {
	c.closeInput()
	c.cancel()
	c.wg.Wait()
}

// line handles one line of the app-server's stdout, on the reading
// goroutine.
func (c *channel) line(raw []byte) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return
	}
	var e envelope
	if err := json.Unmarshal(raw, &e); err != nil {
		c.m.emit(agents.Event{Kind: wire.KindError, Data: wire.Error{
			Message: fmt.Sprintf("codex printed a line that is not JSON: %s", clip(string(raw), 300)),
		}})
		return
	}
	hasID := len(e.ID) > 0 && string(e.ID) != "null"
	switch {
	case e.Method != "" && hasID:
		c.request(e)
	case e.Method != "":
		c.m.notify(raw)
		if e.Method == "turn/completed" {
			c.finish()
		}
	case hasID:
		c.mu.Lock()
		reply, ok := c.waiting[idKey(e.ID)]
		c.mu.Unlock()
		if ok {
			select {
			case reply <- rpcReply{Result: e.Result, Err: e.Error}:
			default: // a second response to one request; the first counts
			}
		}
	}
}

// finish ends the app-server once its one turn completed.
func (c *channel) finish() {
	c.closeInput()
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p == nil {
		return
	}
	go func() {
		select {
		case <-p.Done():
		case <-time.After(exitGrace):
			_ = p.Terminate(5 * time.Second)
		}
	}()
}

func idKey(id json.RawMessage) string {
	var s string
	if json.Unmarshal(id, &s) == nil {
		return s
	}
	return string(bytes.TrimSpace(id))
}

// request answers one request of the app-server. Approvals are decided
// off the reading goroutine: a human may take minutes, and Codex may ask
// about parallel calls meanwhile.
func (c *channel) request(e envelope) {
	var u agents.ToolUse
	var answer func(agents.Verdict) any
	var err error
	switch e.Method {
	case methodCommandApproval:
		u, err = c.commandUse(e.Params)
		answer = func(v agents.Verdict) any { return map[string]any{"decision": acceptOrDecline(v)} }
	case methodFileApproval:
		u, err = c.fileChangeUse(e.Params)
		answer = func(v agents.Verdict) any { return map[string]any{"decision": acceptOrDecline(v)} }
	case methodPermissions:
		var p struct {
			ItemID      string          `json:"itemId"`
			Cwd         string          `json:"cwd"`
			Permissions json.RawMessage `json:"permissions"`
		}
		err = json.Unmarshal(e.Params, &p)
		u = agents.ToolUse{ToolUseID: p.ItemID, Tool: "request_permissions", Input: compactJSON(p.Permissions), Cwd: p.Cwd}
		answer = func(v agents.Verdict) any {
			if v.Allow {
				return map[string]any{"permissions": p.Permissions, "scope": "turn"}
			}
			return map[string]any{"permissions": map[string]any{}, "scope": "turn"}
		}
	case methodLegacyExec, methodLegacyPatch:
		u, err = c.legacyUse(e.Method, e.Params)
		answer = func(v agents.Verdict) any {
			if v.Allow {
				return map[string]any{"decision": "approved"}
			}
			return map[string]any{"decision": "denied"}
		}
	default:
		// Nothing else is asked of reeve (user input, MCP elicitations,
		// dynamic tools, account tokens): say so rather than leave Codex
		// waiting.
		_ = c.send(map[string]any{"id": e.ID, "error": rpcError{Code: -32601, Message: "reeve does not handle " + e.Method}})
		return
	}
	u.Channel = e.Method
	c.m.mu.Lock()
	u.AgentSessionID = c.m.threadID
	c.m.mu.Unlock()
	if u.ToolUseID != "" {
		c.m.markDecided(u.ToolUseID)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		v := agents.Verdict{Reason: "reeve cannot read the approval request: " + errText(err), DecidedBy: "daemon"}
		if err == nil {
			v = c.verdict(u)
		}
		// A failed write leaves Codex without an answer: the call does
		// not run.
		_ = c.send(map[string]any{"id": e.ID, "result": answer(v)})
	}()
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func acceptOrDecline(v agents.Verdict) string {
	if v.Allow {
		return "accept"
	}
	return "decline"
}

// verdict asks the gate, failing closed.
func (c *channel) verdict(u agents.ToolUse) (v agents.Verdict) {
	if c.decide == nil {
		return agents.Verdict{Reason: "this turn has no decision channel, so reeve denies every call that asks"}
	}
	defer func() {
		if r := recover(); r != nil {
			v = agents.Verdict{Reason: fmt.Sprintf("reeve failed while deciding (%v), so it denies the call", r), DecidedBy: "daemon"}
		}
	}()
	v = c.decide(c.ctx, u)
	if c.ctx.Err() != nil && v.Allow {
		v = agents.Verdict{Reason: "the turn ended while the call waited for a decision", DecidedBy: "daemon"}
	}
	return v
}

// commandUse is the tool use of a command approval: the command as the
// model wrote it (Codex runs it as `/bin/bash -lc '<command>'`), as its
// PreToolUse hook sees it, so that a call decided by the hook is not
// decided twice; and the directory it runs in.
func (c *channel) commandUse(params json.RawMessage) (agents.ToolUse, error) {
	var p struct {
		ItemID  string `json:"itemId"`
		Command string `json:"command"`
		Cwd     string `json:"cwd"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return agents.ToolUse{}, err
	}
	if p.Command == "" {
		return agents.ToolUse{}, errors.New("it names no command")
	}
	return agents.ToolUse{ToolUseID: p.ItemID, Tool: "Bash", Input: mustJSON(map[string]string{"command": unwrapShell(p.Command)}), Cwd: p.Cwd}, nil
}

// fileChangeUse is the tool use of a patch approval. The request names
// only its item; the item (started just before) holds the changes, which
// become an apply_patch envelope naming each file, so that the policy's
// path rules see every file the patch touches.
func (c *channel) fileChangeUse(params json.RawMessage) (agents.ToolUse, error) {
	var p struct {
		ItemID    string `json:"itemId"`
		GrantRoot string `json:"grantRoot"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return agents.ToolUse{}, err
	}
	it := c.m.itemFor(p.ItemID)
	if it == nil || len(it.Changes) == 0 {
		return agents.ToolUse{}, fmt.Errorf("the changes of item %q were not announced", p.ItemID)
	}
	if p.GrantRoot != "" {
		// Accepting would let Codex write under that root for the rest
		// of the session, which no policy decision covers.
		return agents.ToolUse{}, fmt.Errorf("it asks for write access to all of %s", p.GrantRoot)
	}
	files := make([]envelopeFile, 0, len(it.Changes))
	for _, ch := range it.Changes {
		files = append(files, envelopeFile{path: ch.Path, kind: ch.Kind.Type, moveTo: ch.Kind.MovePath})
	}
	return agents.ToolUse{ToolUseID: p.ItemID, Tool: "apply_patch", Input: mustJSON(map[string]string{"command": envelopeOf(files)}), Cwd: c.dir}, nil
}

// legacyUse reads the protocol's first version of the approvals.
func (c *channel) legacyUse(method string, params json.RawMessage) (agents.ToolUse, error) {
	var p struct {
		CallID      string                     `json:"callId"`
		Command     []string                   `json:"command"`
		Cwd         string                     `json:"cwd"`
		FileChanges map[string]json.RawMessage `json:"fileChanges"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return agents.ToolUse{}, err
	}
	if method == methodLegacyExec {
		if len(p.Command) == 0 {
			return agents.ToolUse{}, errors.New("it names no command")
		}
		return agents.ToolUse{ToolUseID: p.CallID, Tool: "Bash", Input: mustJSON(map[string]any{"command": p.Command}), Cwd: p.Cwd}, nil
	}
	if len(p.FileChanges) == 0 {
		return agents.ToolUse{}, errors.New("it names no file")
	}
	files := make([]envelopeFile, 0, len(p.FileChanges))
	for path, raw := range p.FileChanges {
		var k struct {
			Type     string `json:"type"`
			MovePath string `json:"move_path"`
		}
		_ = json.Unmarshal(raw, &k)
		files = append(files, envelopeFile{path: path, kind: k.Type, moveTo: k.MovePath})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	return agents.ToolUse{ToolUseID: p.CallID, Tool: "apply_patch", Input: mustJSON(map[string]string{"command": envelopeOf(files)}), Cwd: c.dir}, nil
}

type envelopeFile struct{ path, kind, moveTo string }

// envelopeOf writes an apply_patch envelope that names the files (their
// contents are not what a path rule decides on).
func envelopeOf(files []envelopeFile) string {
	var b strings.Builder
	b.WriteString("*** Begin Patch\n")
	for _, f := range files {
		switch f.kind {
		case "add":
			b.WriteString("*** Add File: " + f.path + "\n")
		case "delete":
			b.WriteString("*** Delete File: " + f.path + "\n")
		default:
			b.WriteString("*** Update File: " + f.path + "\n")
			if f.moveTo != "" {
				b.WriteString("*** Move to: " + f.moveTo + "\n")
			}
			b.WriteString("@@\n")
		}
	}
	b.WriteString("*** End Patch")
	return b.String()
}

// unwrapShell returns the script of `<shell> -lc '<script>'` or
// `<shell> -c '<script>'` when the command line is exactly that, with
// only quoted literals; otherwise the command line as it is (the policy
// resolves sh -c by itself).
func unwrapShell(cmd string) string {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(cmd), "")
	if err != nil || len(f.Stmts) != 1 {
		return cmd
	}
	st := f.Stmts[0]
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || len(st.Redirs) > 0 || st.Negated || st.Background || len(call.Assigns) > 0 || len(call.Args) != 3 {
		return cmd
	}
	words := make([]string, 0, 3)
	for _, w := range call.Args {
		s, ok := literal(w)
		if !ok {
			return cmd
		}
		words = append(words, s)
	}
	shell := words[0][strings.LastIndexByte(words[0], '/')+1:]
	if (shell != "bash" && shell != "sh" && shell != "zsh") || (words[1] != "-lc" && words[1] != "-c") {
		return cmd
	}
	return words[2]
}

// literal is the value of a word made only of plain text and quotes.
func literal(w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			if strings.ContainsAny(p.Value, `\$*?[~{`) {
				return "", false
			}
			b.WriteString(p.Value)
		case *syntax.SglQuoted:
			if p.Dollar {
				return "", false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				lit, ok := q.(*syntax.Lit)
				if !ok || strings.ContainsAny(lit.Value, `\$`+"`") {
					return "", false
				}
				b.WriteString(lit.Value)
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}
