package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/hookbridge/policy"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/accesstoken"
)

// Who may do what, decided on the daemon (design 10). A relayed channel
// carries a remote client; its hello presents an access token signed by
// the control plane (server/sdk AccessClaims), which the channel verifies
// with the keys the daemon learned at pairing (AccessGate). Every request
// of the channel is then checked here, before the dispatch table runs it,
// against the permission its entry in the dispatch table declares:
//
//   - the client's role on the session, from the token (the session's
//     owner, visibility and ACL on the control plane);
//   - capped by the project's .reeve/access.yaml, in the checkout the
//     session runs in, when the project has one.
//
// A refused request gets a failed ack with code forbidden and the reason,
// and the refusal is audited: told to the gate (the daemon's log) and,
// for a request about a session, written to the session's log as an
// access-refused event. Local connections (the guard's token, on this
// machine) are not checked; the machine unlock still applies to relayed
// ones before any of this.

// AccessGate is a relayed connection that verifies its client's access
// tokens.
type AccessGate interface {
	// VerifyAccess checks an access token for this daemon; the error says
	// why it is refused.
	VerifyAccess(token string) (*accesstoken.Claims, error)
	// Refused hears each refused request.
	Refused(r Refusal)
}

// Refusal is one refused request, as audited.
type Refusal struct {
	Frame     string `json:"frame"`
	SessionID string `json:"session_id,omitempty"`
	Subject   string `json:"subject,omitempty"`
	Reason    string `json:"reason"`
}

// EventAccessRefused is the session-log event kind of a refusal.
const EventAccessRefused = "access-refused"

// scope is what a frame type's permission is about.
type scope int

const (
	scopeNone       scope = iota // any admitted client (unsubscribe)
	scopeMachine                 // the machine as a whole (list)
	scopeSession                 // the frame's session_id
	scopeSessionOpt              // the frame's session_id, or the machine when empty
	scopeRequest                 // the session of the frame's permission request
	scopeDirectory               // the checkout a launch names
)

// permission is what a request type needs of a remote client: a session
// role (sdk.Session*) on its scope. The table (table.go) declares one per
// request type.
type permission struct {
	role     string
	scope    scope
	declared bool
}

func need(role string, sc scope) permission { return permission{role: role, scope: sc, declared: true} }

// anyClient is the permission of a request any admitted client may make.
func anyClient() permission { return permission{scope: scopeNone, declared: true} }

// connAccess is a remote connection's verified client.
type connAccess struct {
	gate AccessGate // nil: the channel cannot verify tokens

	mu     sync.Mutex
	claims *accesstoken.Claims
	err    error       // why the last token presented was refused
	expiry *time.Timer // closes the channel when claims expire
}

// presentAccess verifies the token of a hello; a later hello replaces it.
func (c *wsConn) presentAccess(token string) {
	a := c.access
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gate == nil {
		a.claims, a.err = nil, errors.New("this daemon cannot check remote clients' access: it has not learned its control plane's keys (pair it again)")
		return
	}
	a.claims, a.err = a.gate.VerifyAccess(token)
}

func forbidden(format string, args ...any) error {
	return &frameError{code: wire.CodeForbidden, msg: fmt.Sprintf(format, args...)}
}

// authorize decides one request of a remote client; nil lets it through.
func (c *wsConn) authorize(typ string, p permission, frame []byte) error {
	var target struct {
		SessionID string `json:"session_id"`
		RequestID string `json:"request_id"`
		Directory string `json:"directory"`
	}
	_ = json.Unmarshal(frame, &target)
	sessionID, err := c.allowed(typ, p, target.SessionID, target.RequestID, target.Directory)
	if err == nil {
		return nil
	}
	c.audit(typ, sessionID, err)
	return err
}

// allowed returns nil or the refusal; sessionID is the session the
// decision was about, for the audit.
func (c *wsConn) allowed(typ string, p permission, sessionID, requestID, directory string) (string, error) {
	a := c.access
	a.mu.Lock()
	claims, verr := a.claims, a.err
	a.mu.Unlock()
	if claims == nil {
		if verr == nil {
			verr = errors.New("no access token was presented in the hello")
		}
		return sessionID, forbidden("%v", verr)
	}
	if exp := claims.ExpiresAt; exp != nil && !c.srv.now().Before(exp.Time) {
		return sessionID, forbidden("the access token expired at %s; get a new one and reconnect", exp.Time.UTC().Format(time.RFC3339))
	}
	if !p.declared {
		return sessionID, forbidden("%s requests have no declared permission; refused", typ)
	}
	ctx := c.ctx
	switch p.scope {
	case scopeNone:
		return "", nil
	case scopeMachine:
		if sdk.SessionRank(claims.DefaultSessionRole) < sdk.SessionRank(p.role) {
			return "", forbidden("%s needs the %s role on this machine's sessions; you are %s", typ, p.role, roleName(claims.DefaultSessionRole))
		}
		return "", nil
	case scopeDirectory:
		return "", c.allowLaunch(ctx, claims, directory)
	case scopeRequest:
		sid, ok := c.requestSession(requestID)
		if !ok {
			// Unknown or already decided: nothing to decide, and nothing
			// that can be let through on a role not checked.
			return "", forbidden("no pending permission request %q to decide (it may have been decided already)", requestID)
		}
		sessionID = sid
	case scopeSessionOpt:
		if sessionID == "" {
			if claims.DefaultSessionRole != sdk.SessionOwner {
				return "", forbidden("%s of the whole machine needs the owner role (workspace owner or admin); name a session", typ)
			}
			return "", nil
		}
	}
	if sessionID == "" {
		return "", forbidden("%s names no session", typ)
	}
	have, why := c.sessionRole(ctx, claims, sessionID)
	if sdk.SessionRank(have) < sdk.SessionRank(p.role) {
		return sessionID, forbidden("%s needs the %s role on session %s; you are %s%s", typ, p.role, sessionID, roleName(have), why)
	}
	return sessionID, nil
}

// sessionRole is the client's role on a session: the token's, capped by
// the project's access.yaml. why explains a cap.
func (c *wsConn) sessionRole(ctx context.Context, claims *accesstoken.Claims, sessionID string) (role, why string) {
	si, err := c.srv.sessions.Session(ctx, sessionID)
	if err != nil || si.Directory == "" {
		return claims.SessionRole(sessionID), "" // no such session: the handler will say so
	}
	return roleIn(claims, sessionID, si.Directory, nil)
}

// fileRole is a project's access.yaml as it applies to one client.
type fileRole struct {
	role string // "" when the project has no file
	err  error
}

// roleIn is the client's role on a session that runs in dir; files, when
// not nil, keeps each directory's file for one pass over many sessions.
func roleIn(claims *accesstoken.Claims, sessionID, dir string, files map[string]fileRole) (role, why string) {
	role = claims.SessionRole(sessionID)
	if dir == "" {
		return role, ""
	}
	f, ok := files[dir]
	if !ok {
		f.role, f.err = projectRole(dir, claims)
		if files != nil {
			files[dir] = f
		}
	}
	if f.err != nil {
		return sdk.SessionNone, " (" + f.err.Error() + ")"
	}
	if f.role != "" && sdk.SessionRank(f.role) < sdk.SessionRank(role) {
		return f.role, " (capped by the project's .reeve/access.yaml)"
	}
	return role, ""
}

// allowLaunch decides a launch: the project's access.yaml, when the
// checkout has one, must make the user an operator; without one, only the
// workspace's owners and admins (owners of every session) may launch on
// the machine.
func (c *wsConn) allowLaunch(ctx context.Context, claims *accesstoken.Claims, directory string) error {
	dir := c.checkout(ctx, directory)
	if dir != "" {
		file, err := projectRole(dir, claims)
		if err != nil {
			return forbidden("launch refused: %v", err)
		}
		if file != "" {
			if sdk.SessionRank(file) < sdk.SessionRank(sdk.SessionSteerer) {
				return forbidden("launch needs the operator role in %s's .reeve/access.yaml; you are %s", dir, roleName(file))
			}
			return nil
		}
	}
	if claims.DefaultSessionRole != sdk.SessionOwner {
		return forbidden("launch needs a workspace owner or admin, or the operator role in the project's .reeve/access.yaml")
	}
	return nil
}

// checkout is the registered checkout a launch names, by id or path; ""
// when it is not registered (the launch then fails on its own).
func (c *wsConn) checkout(ctx context.Context, directory string) string {
	if c.srv.directories == nil || directory == "" {
		return ""
	}
	dirs, err := c.srv.directories.ListDirectories(ctx)
	if err != nil {
		return ""
	}
	clean := directory
	if filepath.IsAbs(directory) {
		if real, err := filepath.EvalSymlinks(filepath.Clean(directory)); err == nil {
			clean = real
		}
	}
	for _, d := range dirs {
		if d.ID == directory || d.Path == clean {
			return d.Path
		}
	}
	return ""
}

// projectRole is the session role the project's access.yaml gives the
// client ("" when the project has no file); an invalid file is an error,
// so that a broken file refuses rather than opens. The rule is
// sdk.ProjectAccess's, the one the control plane applies to the same
// session synced (server/api roleOf).
func projectRole(dir string, claims *accesstoken.Claims) (string, error) {
	a := policy.LoadProjectAccess(dir)
	if a == nil {
		return "", nil
	}
	if a.Invalid != "" {
		return sdk.SessionNone, errors.New(a.Invalid)
	}
	return a.SessionRole(claims.Email, claims.Teams), nil
}

// requestSession is the session of a pending permission request.
func (c *wsConn) requestSession(requestID string) (string, bool) {
	if c.srv.permissions == nil || requestID == "" {
		return "", false
	}
	for _, p := range c.srv.permissions.Pending("") {
		if p.ID == requestID {
			return p.SessionID, true
		}
	}
	return "", false
}

func roleName(r string) string {
	if r == "" || r == sdk.SessionNone {
		return "without access"
	}
	return r
}

// sessionAppender is the event log's write side, when it has one (the
// daemon's store): refusals about a session go into its log.
type sessionAppender interface {
	Append(ctx context.Context, sessionID, kind string, data json.RawMessage) (store.Event, error)
}

// audit records a refusal.
func (c *wsConn) audit(typ, sessionID string, err error) {
	r := Refusal{Frame: typ, SessionID: sessionID, Reason: err.Error()}
	c.access.mu.Lock()
	if c.access.claims != nil {
		r.Subject = c.access.claims.Subject
	}
	gate := c.access.gate
	c.access.mu.Unlock()
	if gate != nil {
		gate.Refused(r)
	}
	if sessionID == "" {
		return
	}
	if app, ok := c.srv.log.(sessionAppender); ok {
		if _, err := c.srv.sessions.Session(c.ctx, sessionID); err != nil {
			return // no such session: nothing to write into
		}
		data, _ := json.Marshal(r)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 10*time.Second)
		defer cancel()
		app.Append(ctx, sessionID, EventAccessRefused, data)
	}
}
