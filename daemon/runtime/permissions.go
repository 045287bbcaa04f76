package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/control"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/hookbridge"
	"reeve.dev/reeve/hookbridge/policy"
	"reeve.dev/reeve/hookbridge/policy/cmdline"
	"reeve.dev/reeve/hookbridge/policy/patch"
)

// launchMode picks a new session's operator mode: the one asked for, else
// the configured default, else detect. Bypass is never chosen implicitly.
func (m *Manager) launchMode(asked string) (string, error) {
	mode := asked
	if mode == "" {
		mode = m.opts.DefaultMode
	}
	if mode == "" {
		mode = hookbridge.ModeDetect
	}
	if !hookbridge.ValidMode(mode) {
		return "", sessionErr(wire.CodeInvalidMode, "mode must be detect or bypass, not %q", mode)
	}
	return mode, nil
}

// guardOf says whether sessions of an agent are governed, and how. What
// an agent lets reeve decide is the adapter's to say (agents.Info), never
// inferred here from its id.
func guardOf(info agents.Info, hooked bool) (bool, string) {
	switch {
	case !info.Structured:
		return false, "unguarded: terminal programs have no permission callbacks"
	case !hooked:
		return false, "unguarded: the agent ran with its own permission bypass; no policy or human decided its tool use"
	case info.Governance != "":
		return true, "governed: " + info.Governance
	default:
		return true, "governed: each tool use passes the agent's PreToolUse hook to reeve, where the project policy, the session's rules and mode, or a human decide"
	}
}

// verifiedHook is the hook configuration of a session's next turn, after
// checking that the hook program is still the one installed: a governed
// turn whose hooks could not run must not start, since an agent treats a
// hook that fails to start as no verdict and runs the tool. nil (no error)
// when the manager has no hook program (agents then run unguarded, and
// the manifest says so).
func (m *Manager) verifiedHook(sessionID string) (*agents.Hook, error) {
	if m.opts.HookProgram.Path == "" {
		return nil, nil
	}
	if err := m.opts.HookProgram.Verify(); err != nil {
		return nil, fmt.Errorf("the session is governed but its decision channel is not working, so it does not start: %w (restart the daemon to reinstall it)", err)
	}
	return m.hookFor(sessionID), nil
}

// hookFor is the hook configuration of a session's turns.
func (m *Manager) hookFor(sessionID string) *agents.Hook {
	timeout := m.opts.HookTimeout
	// The hook gives the daemon the decision timeout plus a margin, then
	// denies by itself; the agent waits longer still before killing it.
	hookWait := int((timeout + 15*time.Second).Seconds())
	return &agents.Hook{
		Command: func(event string) string {
			return fmt.Sprintf("%s hook %s --home %s --session %s --timeout %d",
				shellQuote(m.opts.HookProgram.Path), shellQuote(event), shellQuote(string(m.opts.Home)), shellQuote(sessionID), hookWait)
		},
		Timeout: timeout + 30*time.Second,
		Decide: func(ctx context.Context, u agents.ToolUse) agents.Verdict {
			return m.decideInBand(ctx, sessionID, u)
		},
	}
}

// Hook handles one call of an agent's hook: it records it and, for
// PreToolUse, decides the tool use.
func (m *Manager) Hook(ctx context.Context, sessionID string, payload []byte) (wire.HookAnswer, error) {
	in, err := hookbridge.ParseInput(payload)
	if err != nil {
		return wire.HookAnswer{}, sessionErr(wire.CodeBadFrame, "%v", err)
	}
	sess, err := m.session(ctx, sessionID)
	if err != nil {
		return wire.HookAnswer{}, err
	}
	if sess.Status.Terminal() {
		return wire.HookAnswer{}, sessionErr(wire.CodeNotRunning, "session %s has ended (%s)", sessionID, sess.Status)
	}
	if err := m.bindAgentSession(ctx, sessionID, in.SessionID); err != nil {
		return wire.HookAnswer{}, err
	}
	m.recordAgent(sessionID, wire.KindHookEvent, wire.HookEvent{Event: in.HookEventName, Tool: in.ToolName, ToolUseID: in.ToolUseID, Input: in.ToolInput})
	if in.HookEventName != "PreToolUse" {
		return wire.HookAnswer{}, nil
	}
	d := m.decideToolUse(ctx, sess, toolQuery{Tool: in.ToolName, Input: in.ToolInput, ToolUseID: in.ToolUseID, Cwd: in.Cwd, Channel: "PreToolUse"})
	return wire.HookAnswer{Decision: d.Decision, Reason: d.Reason, DecidedBy: d.DecidedBy}, nil
}

// toolQuery is one tool use to decide, from whichever channel asked.
type toolQuery struct {
	Tool      string
	Input     json.RawMessage
	ToolUseID string
	Cwd       string
	Channel   string
}

// decideInBand answers a permission request an agent made on its own
// control channel (agents.Hook.Decide). A tool use its PreToolUse hook
// already decided gets that decision, so that one tool use is decided
// once whichever layers it passes; otherwise the gate decides it.
func (m *Manager) decideInBand(ctx context.Context, sessionID string, u agents.ToolUse) agents.Verdict {
	sess, err := m.session(ctx, sessionID)
	if err != nil {
		return agents.Verdict{Reason: "reeve cannot find the session: " + err.Error(), DecidedBy: "daemon"}
	}
	if sess.Status.Terminal() {
		return agents.Verdict{Reason: fmt.Sprintf("session %s has ended (%s)", sessionID, sess.Status), DecidedBy: "daemon"}
	}
	if u.AgentSessionID != "" {
		if err := m.bindAgentSession(ctx, sessionID, u.AgentSessionID); err != nil {
			return agents.Verdict{Reason: err.Error(), DecidedBy: "daemon"}
		}
	}
	q := toolQuery{Tool: u.Tool, Input: u.Input, ToolUseID: u.ToolUseID, Cwd: u.Cwd, Channel: u.Channel}
	if d, ok := m.takeDecided(sessionID, q); ok {
		return agents.Verdict{Allow: d.Decision == hookbridge.Allow, Reason: d.Reason, DecidedBy: d.DecidedBy}
	}
	d := m.decideToolUse(ctx, sess, q)
	return agents.Verdict{Allow: d.Decision == hookbridge.Allow, Reason: d.Reason, DecidedBy: d.DecidedBy}
}

// decideToolUse runs the gate for one tool use and puts the decision on
// the record, linked to the call by its tool-use id.
func (m *Manager) decideToolUse(ctx context.Context, sess store.Session, q toolQuery) hookbridge.Decision {
	sessionID := sess.ID
	gate := hookbridge.Gate{
		Policy: m.policyFor(ctx, sess, q.Cwd),
		Mode:   m.mode(ctx, sessionID),
		Broker: m.broker,
		Asked: func(req hookbridge.Request) {
			m.recordAgent(sessionID, wire.KindPermissionRequest, req)
			m.logFailure(sessionID, "set status", m.setStatusFrom(m.ctx, sessionID, store.StatusRunning, store.StatusWaitingPermission, "waiting for a decision on "+req.Tool))
			m.Notify(control.Notice{SessionID: sessionID, Frame: wire.HookPermissionRequest{Type: wire.TypeHookPermissionRequest, Request: req}})
		},
	}
	d := gate.Decide(ctx, hookbridge.Request{SessionID: sessionID, Agent: sess.Agent, Tool: q.Tool, Input: q.Input, ToolUseID: q.ToolUseID})
	d.SessionID, d.Tool, d.ToolUseID, d.Channel = sessionID, q.Tool, q.ToolUseID, q.Channel
	d.Command, d.Paths = whatIsDecided(q.Input)
	m.recordDecision(sessionID, d)
	if q.ToolUseID != "" && q.Channel == "PreToolUse" {
		m.rememberDecided(sessionID, q, d)
	}
	return d
}

// decidedKey names a decided tool use of a session.
func decidedKey(sessionID, toolUseID string) string { return sessionID + "\x00" + toolUseID }

// maxDecided bounds the hook decisions kept for the in-band channel to
// confirm, per worker; the oldest go first.
const maxDecided = 4096

// rememberDecided keeps a hook's decision until the in-band request for
// the same tool use comes (Claude Code asks both ways).
func (m *Manager) rememberDecided(sessionID string, q toolQuery, d hookbridge.Decision) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.decided) >= maxDecided {
		for k := range m.decided {
			delete(m.decided, k)
			break
		}
	}
	m.decided[decidedKey(sessionID, q.ToolUseID)] = decidedUse{tool: q.Tool, input: compactJSON(q.Input), files: patchTargets(q), d: d}
}

// patchTargets is the set of files a patch of the tool use touches, as
// absolute paths (relative ones are under its cwd); nil when it is no
// patch. Codex's hook sees apply_patch's own text while its approval
// request names the files it will change, so the two layers' inputs
// differ in form; the same call id with the same files is the same use.
func patchTargets(q toolQuery) map[string]bool {
	command, paths := whatIsDecided(q.Input)
	if command != "" || len(paths) == 0 || !patch.IsEnvelope(patchText(q.Input)) {
		return nil
	}
	out := make(map[string]bool, len(paths))
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			if q.Cwd == "" {
				return nil
			}
			p = filepath.Join(q.Cwd, p)
		}
		out[filepath.Clean(p)] = true
	}
	return out
}

// patchText is the apply_patch envelope of a tool input, "" when none.
func patchText(input json.RawMessage) string {
	var in map[string]json.RawMessage
	if json.Unmarshal(input, &in) != nil {
		return ""
	}
	for _, key := range []string{"input", "patch", "command"} {
		var s string
		if json.Unmarshal(in[key], &s) == nil && patch.IsEnvelope(s) {
			return s
		}
	}
	return ""
}

func sameFiles(a, b map[string]bool) bool {
	if len(a) == 0 || len(a) != len(b) {
		return false
	}
	for p := range a {
		if !b[p] {
			return false
		}
	}
	return true
}

// takeDecided returns (and forgets) the hook's decision of the same tool
// use: same id, same tool and the same input, so an input changed between
// the two layers is decided afresh.
func (m *Manager) takeDecided(sessionID string, q toolQuery) (hookbridge.Decision, bool) {
	if q.ToolUseID == "" {
		return hookbridge.Decision{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := decidedKey(sessionID, q.ToolUseID)
	du, ok := m.decided[k]
	if !ok {
		return hookbridge.Decision{}, false
	}
	delete(m.decided, k)
	if du.tool != q.Tool || (du.input != compactJSON(q.Input) && !sameFiles(du.files, patchTargets(q))) {
		return hookbridge.Decision{}, false
	}
	return du.d, true
}

// forgetDecided drops a session's kept decisions (its turn ended).
func (m *Manager) forgetDecided(sessionID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prefix := sessionID + "\x00"
	for k := range m.decided {
		if strings.HasPrefix(k, prefix) {
			delete(m.decided, k)
		}
	}
}

type decidedUse struct {
	tool, input string
	files       map[string]bool // a patch's files (patchTargets)
	d           hookbridge.Decision
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// whatIsDecided names what a tool use does, for the record: the command
// of a shell tool, the files of a write, an edit or a patch.
func whatIsDecided(input json.RawMessage) (string, []string) {
	var in struct {
		Command  json.RawMessage `json:"command"`
		Cmd      json.RawMessage `json:"cmd"`
		FilePath string          `json:"file_path"`
		Path     string          `json:"path"`
		Notebook string          `json:"notebook_path"`
		Patch    string          `json:"patch"`
		Input    string          `json:"input"`
	}
	if json.Unmarshal(input, &in) != nil {
		return "", nil
	}
	command, last := "", ""
	for _, raw := range []json.RawMessage{in.Command, in.Cmd} {
		if len(raw) == 0 {
			continue
		}
		var s string
		var argv []string
		if json.Unmarshal(raw, &s) == nil {
			command = s
		} else if json.Unmarshal(raw, &argv) == nil && len(argv) > 0 {
			command, last = strings.Join(argv, " "), argv[len(argv)-1]
		}
		if command != "" {
			break
		}
	}
	var paths []string
	for _, p := range []string{in.FilePath, in.Path, in.Notebook} {
		if p != "" {
			paths = append(paths, p)
		}
	}
	// A patch (Codex apply_patch, as its own input, as the "command", or
	// as a here-document given to a patch program) names its files.
	for _, text := range []string{in.Patch, in.Input} {
		paths = append(paths, patchFiles(text)...)
	}
	files := patchFiles(command)
	if len(files) == 0 && last != "" {
		files = patchFiles(last) // ["apply_patch", PATCH]
	}
	if len(files) > 0 {
		paths = append(paths, files...)
		command = "" // the patch is named by its files, not its text
	}
	return clipText(command, 2000), paths
}

// patchFiles lists the files a patch touches, through the one patch
// parser the policy uses (hookbridge/policy/patch): an apply_patch
// envelope, a unified diff, or a command line that feeds either to a
// patch program (apply_patch <<EOF, git apply, patch). Text that is none
// of these, or a patch that does not parse (the policy denied it for
// that), names no files.
func patchFiles(text string) []string {
	text = strings.TrimSpace(text)
	if text == "" {
		return nil
	}
	var texts []string
	switch {
	case patch.IsEnvelope(text):
		texts = []string{text}
	case strings.HasPrefix(text, "--- ") || strings.HasPrefix(text, "diff "):
		texts = []string{text}
	case strings.Contains(text, "<<"):
		res, err := cmdline.Parse(text)
		if err != nil {
			return nil
		}
		for _, p := range res.Patches {
			texts = append(texts, p.Text)
		}
	}
	var out []string
	for _, t := range texts {
		files, err := patch.Parse(t)
		if err != nil {
			continue
		}
		for _, f := range files {
			out = append(out, f.Path)
		}
	}
	return out
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// recordDecision puts a decision on the record: an event in the log and
// a frame to the session's followers. The manifest's approvals are a view
// of those events (approvals), so a decision costs one append however
// many came before it.
func (m *Manager) recordDecision(sessionID string, d hookbridge.Decision) {
	m.recordAgent(sessionID, wire.KindPermissionDecision, d)
	if d.RequestID != "" {
		if len(m.broker.Pending(sessionID)) == 0 {
			m.logFailure(sessionID, "set status", m.setStatusFrom(m.ctx, sessionID, store.StatusWaitingPermission, store.StatusRunning, ""))
		}
		m.Notify(control.Notice{SessionID: sessionID, Frame: wire.HookPermissionResolved{Type: wire.TypeHookPermissionResolved, Decision: d}})
	}
}

// approvalsPage is how many decision events approvals reads at a time.
const approvalsPage = 1000

// approvals is the manifest's list of decisions, built from the session's
// permission-decision events in log order: reeve's own (policy, rules,
// mode, human, timeout, daemon) and those the agent took by itself
// (decided_by agent). The log is the one record; manifests written before
// this view existed also hold a copy, which it replaces.
func (m *Manager) approvals(ctx context.Context, sessionID string) ([]wire.Approval, error) {
	out := []wire.Approval{}
	after := int64(0)
	for {
		// Only the decisions: a long session's log is mostly output, and a
		// manifest read must not cost a scan of it.
		evs, err := m.opts.Store.EventsOfKind(ctx, sessionID, wire.KindPermissionDecision, after, approvalsPage)
		if err != nil {
			return nil, fmt.Errorf("read the decisions of session %s: %w", sessionID, err)
		}
		for _, e := range evs {
			after = e.Seq
			var d wire.PermissionDecision
			if json.Unmarshal(e.Data, &d) != nil {
				continue
			}
			out = append(out, wire.Approval{
				RequestID: d.RequestID, Tool: d.Tool, Decision: d.Decision, DecidedBy: d.DecidedBy, Reason: d.Reason, At: d.At,
				ToolUseID: d.ToolUseID, Channel: d.Channel, Command: d.Command, Paths: d.Paths,
			})
		}
		if len(evs) < approvalsPage {
			return out, nil
		}
	}
}

// bindAgentSession ties a reeve session to the agent's own session on the
// first hook call, and refuses hook calls from any other agent session.
func (m *Manager) bindAgentSession(ctx context.Context, sessionID, agentSession string) error {
	if agentSession == "" {
		return sessionErr(wire.CodeBadFrame, "hook input names no session_id")
	}
	m.mu.Lock()
	bound, ok := m.agentSessions[sessionID]
	m.mu.Unlock()
	if !ok {
		mf, err := m.manifest(ctx, sessionID)
		if err != nil {
			return err
		}
		bound = mf.AgentSessionID
	}
	if bound != "" && bound != agentSession {
		return sessionErr(wire.CodeSessionMismatch, "hook from agent session %s, but session %s belongs to agent session %s", agentSession, sessionID, bound)
	}
	m.mu.Lock()
	m.agentSessions[sessionID] = agentSession
	m.mu.Unlock()
	if bound == "" {
		return m.updateManifest(ctx, sessionID, func(mf *wire.Manifest) {
			mf.AgentSessionID = agentSession
			// The structured agents (Claude Code, Codex, Gemini CLI) all
			// resume by their own session id. Kept now rather than only
			// when the turn ends, so that a session whose worker died
			// mid-turn (kill -9) can still be continued: its next turn
			// resumes the agent's session through a new channel.
			if mf.Resumable && mf.ResumeToken == "" {
				mf.ResumeToken = agentSession
			}
		})
	}
	return nil
}

// mode is a session's operator mode.
func (m *Manager) mode(ctx context.Context, sessionID string) string {
	m.mu.Lock()
	mode, ok := m.modes[sessionID]
	m.mu.Unlock()
	if ok {
		return mode
	}
	if mf, err := m.manifest(ctx, sessionID); err == nil && hookbridge.ValidMode(mf.PermissionMode) {
		return mf.PermissionMode
	}
	return hookbridge.ModeDetect
}

// SetMode changes a session's operator mode; the next tool use sees it.
func (m *Manager) SetMode(ctx context.Context, req wire.SetModeRequest) error {
	sessionID, mode := req.SessionID, req.Mode
	if !hookbridge.ValidMode(mode) {
		return sessionErr(wire.CodeInvalidMode, "mode must be detect or bypass, not %q", mode)
	}
	if _, err := m.session(ctx, sessionID); err != nil {
		return err
	}
	if err := m.updateManifest(ctx, sessionID, func(mf *wire.Manifest) { mf.PermissionMode = mode }); err != nil {
		return err
	}
	m.mu.Lock()
	m.modes[sessionID] = mode
	m.mu.Unlock()
	return m.appendEvent(sessionID, wire.KindMode, wire.ModeChange{Mode: mode, By: "human"})
}

// RespondPermission decides a pending permission request.
func (m *Manager) RespondPermission(ctx context.Context, req wire.RespondPermissionRequest) (wire.PermissionDecision, error) {
	d, _, err := m.broker.Decide(req.RequestID, req.Decision, "human", req.Reason, req.Remember)
	switch {
	case errors.Is(err, hookbridge.ErrUnknownRequest):
		return d, sessionErr(wire.CodeUnknownRequest, "%v", err)
	case errors.Is(err, hookbridge.ErrAlreadyDecided):
		return d, sessionErr(wire.CodeAlreadyDecided, "%v", err)
	case err != nil:
		return d, sessionErr(wire.CodeBadFrame, "%v", err)
	}
	return d, nil
}

// Pending lists permission requests waiting for a human.
func (m *Manager) Pending(sessionID string) []wire.PermissionRequest {
	return m.broker.Pending(sessionID)
}

// shellQuote quotes s for a POSIX shell, which is how agents run hook
// commands.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// policyFor is the project policy of a session's tool use, from the source
// the session started with (its manifest): the registered directory, the
// developer's checkout, never the agent's working copy, which the agent could
// rewrite to allow itself. Unregistering the directory does not change it.
// Whatever goes wrong here denies; it never leaves the decision to the mode.
// cwd is where the agent says the tool runs (the hook's cwd).
func (m *Manager) policyFor(ctx context.Context, sess store.Session, cwd string) func(string, json.RawMessage) hookbridge.PolicyVerdict {
	if m.opts.Policy == nil {
		return nil
	}
	mf, err := m.manifest(ctx, sess.ID)
	if err != nil || mf.Directory == "" {
		reason := "reeve cannot tell which project policy governs this session, so it denies the tool use"
		if err != nil {
			reason += ": " + err.Error()
		}
		return func(string, json.RawMessage) hookbridge.PolicyVerdict {
			return hookbridge.PolicyVerdict{Action: hookbridge.PolicyDeny, Rule: policy.RuleNoSource, Reason: reason}
		}
	}
	src := policy.Source{Project: mf.Directory, Required: mf.PolicyFile != ""}
	return func(tool string, input json.RawMessage) hookbridge.PolicyVerdict {
		m.notePolicy(ctx, sess.ID) // the receipt records a policy edited mid-session
		return m.opts.Policy(src, policy.Request{Tool: tool, Input: input, Workdir: sess.Workdir, Cwd: cwd})
	}
}

// projectPolicy evaluates a tool use by the source's policy, read afresh
// for each tool use so that an edit takes effect at once; a policy that
// cannot be loaded denies (policy.Source.Decide).
func projectPolicy(src policy.Source, req policy.Request) hookbridge.PolicyVerdict {
	d := src.Decide(req)
	return hookbridge.PolicyVerdict{Action: string(d.Action), Rule: d.Rule, Reason: d.Reason}
}
