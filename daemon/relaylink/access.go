package relaylink

import (
	"context"
	"time"

	"reeve.dev/reeve/daemon/control"
	"reeve.dev/reeve/daemon/pairing"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/accesstoken"
)

// A relayed channel verifies its client's access token (control's
// AccessGate) with the control plane's keys the daemon learned at pairing,
// for this daemon's workspace and install.

var _ control.AccessGate = (*channel)(nil)

// VerifyAccess implements control.AccessGate.
func (ch *channel) VerifyAccess(token string) (*accesstoken.Claims, error) {
	l := ch.mux.link
	keys := l.serverKeys()
	if keys == nil {
		return nil, errNoKeys
	}
	c := l.opts.Credentials
	claims, err := accesstoken.Verify(token, *keys, c.WorkspaceID, c.InstallID, l.now())
	if err != nil {
		l.logf("channel %s: %v", ch.id, err)
		return nil, err
	}
	l.logf("channel %s: remote client %s (workspace role %s)", ch.id, claims.Subject, claims.WorkspaceRole)
	return claims, nil
}

// Refused implements control.AccessGate: the daemon's log keeps each
// refusal.
func (ch *channel) Refused(r control.Refusal) {
	who := r.Subject
	if who == "" {
		who = "an unverified client"
	}
	session := ""
	if r.SessionID != "" {
		session = " on session " + r.SessionID
	}
	ch.mux.link.logf("channel %s: refused %s from %s%s: %s", ch.id, r.Frame, who, session, r.Reason)
}

type keysError string

func (e keysError) Error() string { return string(e) }

const errNoKeys = keysError("this daemon has not learned its control plane's signing keys, so it cannot check a remote client's access: pair it again (reeve pair)")

func (l *Link) now() time.Time {
	if l.opts.Now != nil {
		return l.opts.Now()
	}
	return time.Now()
}

func (l *Link) serverKeys() *sdk.JWKS {
	l.keyMu.Lock()
	defer l.keyMu.Unlock()
	return l.keys
}

// learnKeys fetches the keys of a daemon paired before they were kept,
// from the server it paired with.
func (l *Link) learnKeys(ctx context.Context) {
	if l.serverKeys() != nil || l.opts.Home == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	k, err := pairing.LearnServerKeys(ctx, l.opts.Home, l.opts.Credentials.ServerURL, l.opts.HTTPClient)
	if err != nil {
		l.logf("%v; remote clients are refused until it succeeds", err)
		return
	}
	l.keyMu.Lock()
	l.keys = &k.Keys
	l.keyMu.Unlock()
	l.logf("learned the control plane's signing keys (%d)", len(k.Keys.Keys))
}
