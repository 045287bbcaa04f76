package control

import (
	"time"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/accesstoken"
)

// What a remote client is shown besides the answers to its requests
// (design 10): the sessions a list names, the notices pushed to it, and
// what happens when its access token is replaced or runs out.
//
//   - list names only the sessions the client may view (viewer on the
//     session, by its token capped by the project's access.yaml); sessions
//     discovered on disk (run outside reeve, unknown to the control plane)
//     only to the machine's owners (workspace owners and admins).
//   - session-started reaches only the clients that may view the session.
//   - A permission request and its decision reach every client that may
//     decide it (approver on the session), whether or not it follows the
//     session, so that any page of that person can notify them; a client
//     that follows the session gets them too, as before.
//   - Each hello that presents an access token (the first, and every
//     refresh) sends the requests waiting that the client may decide. A
//     refresh takes effect at once: a subscription the new token no longer
//     allows ends with a session-ended that says why.
//   - When the token expires without a refresh the channel is closed with
//     that reason; a client reconnects with a fresh token.

// accessExpired is the close reason of a channel whose token ran out.
const accessExpired = "the access token expired; reconnect with a fresh one"

// currentClaims is the verified, unexpired token; nil when there is none.
func (c *wsConn) currentClaims() *accesstoken.Claims {
	a := c.access
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.claims == nil {
		return nil
	}
	if exp := a.claims.ExpiresAt; exp != nil && !c.srv.now().Before(exp.Time) {
		return nil
	}
	return a.claims
}

// hasRole reports whether the client holds at least role on a session.
func (c *wsConn) hasRole(sessionID, role string) bool {
	claims := c.currentClaims()
	if claims == nil {
		return false
	}
	have, _ := c.sessionRole(c.ctx, claims, sessionID)
	return sdk.SessionRank(have) >= sdk.SessionRank(role)
}

// visibleSessions keeps the sessions of a list the client may view.
func (c *wsConn) visibleSessions(list []wire.SessionInfo) []wire.SessionInfo {
	out := []wire.SessionInfo{}
	claims := c.currentClaims()
	if claims == nil {
		return out
	}
	files := map[string]fileRole{}
	for _, si := range list {
		if role, _ := roleIn(claims, si.ID, si.Directory, files); sdk.SessionRank(role) >= sdk.SessionRank(sdk.SessionViewer) {
			out = append(out, si)
		}
	}
	return out
}

// seesDiscovered reports whether the client is shown sessions discovered
// on disk: the machine's owners only.
func (c *wsConn) seesDiscovered() bool {
	if c.access == nil {
		return true
	}
	claims := c.currentClaims()
	return claims != nil && claims.DefaultSessionRole == sdk.SessionOwner
}

// queues reports whether a notice is queued for this connection. It runs
// under the session manager's lock, so it must not call back into the
// manager: a remote connection queues every permission notice, and
// forwardNotices asks shows whether it goes out.
func (c *wsConn) queues(n Notice) bool {
	if n.SessionID == "" || c.follows(n.SessionID) {
		return true
	}
	if c.access == nil {
		return false
	}
	switch n.Frame.(type) {
	case wire.HookPermissionRequest, wire.HookPermissionResolved:
		return true
	}
	return false
}

// shows decides whether a queued notice goes out to this connection.
func (c *wsConn) shows(n Notice) bool {
	if c.access == nil {
		return true
	}
	switch f := n.Frame.(type) {
	case wire.SessionStarted:
		return c.hasRole(f.Session.ID, sdk.SessionViewer)
	case wire.HookPermissionRequest, wire.HookPermissionResolved:
		return c.follows(n.SessionID) || c.hasRole(n.SessionID, sdk.SessionApprover)
	}
	return n.SessionID == "" || c.follows(n.SessionID)
}

// accessPresented runs after each hello of a remote client; refresh is
// true for every hello after the first.
func (c *wsConn) accessPresented(refresh bool) {
	if refresh {
		c.recheckSubscriptions()
	}
	c.armExpiry()
	if c.srv.permissions == nil || c.currentClaims() == nil {
		return
	}
	for _, p := range c.srv.permissions.Pending("") {
		if c.follows(p.SessionID) || c.hasRole(p.SessionID, sdk.SessionApprover) {
			if c.write(wire.HookPermissionRequest{Type: wire.TypeHookPermissionRequest, Request: p}) != nil {
				return
			}
		}
	}
}

// recheckSubscriptions ends each subscription the client's token no
// longer allows, saying why.
func (c *wsConn) recheckSubscriptions() {
	c.subMu.Lock()
	ids := make([]string, 0, len(c.subs))
	for id := range c.subs {
		ids = append(ids, id)
	}
	c.subMu.Unlock()
	for _, id := range ids {
		// Following a session needs what subscribing to it needs.
		_, err := c.allowed("following a session", need(sdk.SessionViewer, scopeSession), id, "", "")
		if err == nil {
			continue
		}
		c.subMu.Lock()
		sub := c.subs[id]
		delete(c.subs, id)
		c.subMu.Unlock()
		if sub == nil {
			continue
		}
		sub.cancel()
		<-sub.done
		c.audit("following a session", id, err)
		si, _ := c.srv.sessions.Session(c.ctx, id)
		c.write(wire.SessionEnded{Type: wire.TypeSessionEnded, SessionID: id, Status: si.Status, Reason: "your access to this session ended: " + err.Error(), LastSeq: si.LastSeq})
	}
}

// disarmExpiry stops the expiry timer once the channel has ended, so a
// closed connection is not kept alive until its token would have expired.
func (c *wsConn) disarmExpiry() {
	a := c.access
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.expiry != nil {
		a.expiry.Stop()
		a.expiry = nil
	}
}

// armExpiry closes the channel when the token now presented expires,
// unless a refresh replaced it by then.
func (c *wsConn) armExpiry() {
	a := c.access
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.expiry != nil {
		a.expiry.Stop()
		a.expiry = nil
	}
	claims := a.claims
	if claims == nil || claims.ExpiresAt == nil {
		return
	}
	a.expiry = time.AfterFunc(max(claims.ExpiresAt.Time.Sub(c.srv.now()), 0), func() {
		a.mu.Lock()
		same := a.claims == claims
		a.mu.Unlock()
		if same && c.ctx.Err() == nil {
			c.c.Close(accessExpired)
		}
	})
}
