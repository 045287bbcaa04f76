// Package relaylink is the daemon's side of the relay (profile relay): it
// exchanges the install's issue token for short-lived relay JWTs, keeps a
// connection to the relay as role workspace-daemon, and serves each remote
// client's channel — after an end-to-end key exchange against the daemon's
// anchor key — with the same control protocol as the local /ws. Remote
// control is locked until the machine unlocks it or auto-unlock is on
// (Lock).
package relaylink

import (
	"context"
	"crypto/ecdh"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/daemon/control"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/pairing"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/relay/relaywire"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/remote"
)

// Options configure a Link.
type Options struct {
	Credentials home.RelayCredentials
	// Anchor is the daemon's static X25519 key (home.Dir.EnsureAnchor).
	Anchor *ecdh.PrivateKey
	// Serve runs the control protocol over one admitted channel:
	// (*control.API).ServeControl.
	Serve func(ctx context.Context, fc control.FrameConn)
	// DaemonID is told to admitted clients.
	DaemonID string
	// Log receives the link's diagnostics.
	Log        io.Writer
	HTTPClient *http.Client
	// Now is the lock's clock (default time.Now).
	Now func() time.Time
	// MinBackoff and MaxBackoff bound the wait between connection
	// attempts (defaults 500ms and 30s).
	MinBackoff, MaxBackoff time.Duration
	// LockCheck is how often an admitted channel checks whether its
	// unlock has ended (default 1s).
	LockCheck time.Duration
	// ServerKeys are the control plane's signing keys, which verify
	// remote clients' access tokens (learned at pairing). When nil and
	// Home is set, the link learns them from the paired server before it
	// connects (a daemon paired before keys were kept).
	ServerKeys *sdk.JWKS
	Home       home.Dir
}

// Link is the daemon's connection to the relay.
type Link struct {
	opts Options
	lock *Lock
	api  *sdk.Client

	tokMu sync.Mutex
	tok   sdk.RelayToken
	// renewAt is when tok is replaced (renewalPoint).
	renewAt time.Time
	// newToken wakes the refresher when the connection loop obtains a
	// token, so it plans that token's renewal at once.
	newToken chan struct{}

	keyMu sync.Mutex
	keys  *sdk.JWKS

	mu       sync.Mutex
	status   wire.RemoteStatus
	channels int
}

var _ control.Remote = (*Link)(nil)

// New builds a link from the credentials pairing wrote.
func New(opts Options) (*Link, error) {
	c := opts.Credentials
	if c.InstallID == "" || c.WorkspaceID == "" || c.IssueToken == "" || c.ServerURL == "" {
		return nil, errors.New("relay credentials are incomplete (install, workspace, issue token and server URL are required); pair again")
	}
	if opts.Anchor == nil || opts.Serve == nil {
		return nil, errors.New("relay link needs the anchor key and a control server")
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 500 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	if opts.LockCheck <= 0 {
		opts.LockCheck = time.Second
	}
	l := &Link{
		opts: opts,
		lock: NewLock(c.AutoUnlock, c.AutoUnlockTTL, opts.Now),
		api:  &sdk.Client{BaseURL: c.ServerURL, Token: c.IssueToken, HTTP: opts.HTTPClient},
		keys: opts.ServerKeys,

		newToken: make(chan struct{}, 1),
	}
	l.status = wire.RemoteStatus{Link: wire.RelayConnecting, Since: time.Now().UTC(), RelayURL: c.RelayURL, WorkspaceID: c.WorkspaceID, InstallID: c.InstallID}
	return l, nil
}

// Lock is the link's remote-control lock.
func (l *Link) Lock() *Lock { return l.lock }

// Unlock opens remote control from the machine (control.Remote).
func (l *Link) Unlock(ttlSeconds int) wire.RemoteStatus {
	until := l.lock.Unlock(ttlSeconds)
	l.logf("remote control unlocked on the machine until %s", until.UTC().Format(time.RFC3339))
	return l.Status()
}

// Status reports the link and the lock (control.Remote, /health).
func (l *Link) Status() wire.RemoteStatus {
	l.mu.Lock()
	s := l.status
	s.Channels = l.channels
	l.mu.Unlock()
	l.tokMu.Lock()
	s.TokenExpiresAt = l.tok.ExpiresAt
	l.tokMu.Unlock()
	l.lock.state(&s)
	return s
}

func (l *Link) logf(format string, args ...any) {
	fmt.Fprintf(l.opts.Log, "relay link: "+format+"\n", args...)
}

func (l *Link) setState(state string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.status.Link != state {
		l.status.Since = time.Now().UTC()
	}
	l.status.Link = state
	if err != nil {
		l.status.LastError = err.Error()
	} else if state == wire.RelayConnected {
		l.status.LastError = ""
	}
}

// Run keeps the link up until ctx ends.
func (l *Link) Run(ctx context.Context) error {
	defer l.setState(wire.RelayStopped, nil)
	go l.refresh(ctx)
	wait := l.opts.MinBackoff
	for ctx.Err() == nil {
		l.setState(wire.RelayConnecting, nil)
		began := time.Now()
		err := l.connectAndServe(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(began) > time.Minute {
			wait = l.opts.MinBackoff // it was up for a while: a fresh failure
		}
		d := wait/2 + rand.N(wait/2+1)
		l.setState(wire.RelayBackoff, err)
		l.logf("%v; reconnecting in %s", err, d.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
		wait = min(2*wait, l.opts.MaxBackoff)
	}
	return nil
}

// token returns the relay JWT in hand while it is before its renewal
// point, and otherwise exchanges the issue token for a fresh one. When the
// exchange fails and the token in hand has not expired yet, a connection
// can still use it (the refresher keeps trying).
func (l *Link) token(ctx context.Context, force bool) (sdk.RelayToken, error) {
	l.tokMu.Lock()
	defer l.tokMu.Unlock()
	if !force && l.tok.Token != "" && time.Now().Before(l.renewAt) {
		return l.tok, nil
	}
	got := time.Now()
	t, err := l.api.RuntimeRelayToken(ctx)
	if err != nil {
		var ae *sdk.APIError
		if errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden) {
			return t, fmt.Errorf("the control plane refused this install's issue token (%v): the install may have been detached; pair again", err)
		}
		err = fmt.Errorf("exchange the issue token for a relay token: %w", err)
		if !force && l.tok.Token != "" && time.Until(l.tok.ExpiresAt) > time.Second {
			l.logf("%v; connecting with the token in hand, which expires in %s", err, time.Until(l.tok.ExpiresAt).Round(time.Second))
			return l.tok, nil
		}
		return t, err
	}
	l.tok = t
	l.renewAt = renewalPoint(got, t.ExpiresAt, rand.Float64())
	select {
	case l.newToken <- struct{}{}:
	default:
	}
	return t, nil
}

// minRenewWait is the least time between obtaining a relay token and
// renewing it, whatever its lifetime says, so that a token that looks
// already expired (a clock far off the server's) cannot make the refresher
// spin.
const minRenewWait = time.Second

// renewalPoint is when a relay token obtained at got and expiring at
// expires is replaced: two thirds into its lifetime, up to a tenth of the
// lifetime earlier at random (jitter in [0,1)) so daemons restarted
// together do not renew in step. A 10-second token (the shortest the
// server issues) is renewed 3 to 4 seconds before it expires, a 24-hour one
// about 8 hours before; the lifetime is measured on this machine's clock
// from the moment of the request, so a clock offset from the server's does
// not shift the point.
func renewalPoint(got, expires time.Time, jitter float64) time.Time {
	life := expires.Sub(got)
	wait := life*2/3 - time.Duration(jitter*float64(life/10))
	return got.Add(max(wait, minRenewWait))
}

// refresh replaces the relay JWT at its renewal point, so that a
// reconnection (or a relay that checks expiry on live connections) always
// has a valid one in hand. A failed renewal is retried with an exponential
// backoff (MinBackoff doubling up to MaxBackoff, jittered).
func (l *Link) refresh(ctx context.Context) {
	backoff := l.opts.MinBackoff
	failures := 0
	for {
		l.tokMu.Lock()
		t, at := l.tok, l.renewAt
		l.tokMu.Unlock()
		wait := time.Hour // no token yet: the connection loop gets one
		if t.Token != "" {
			wait = time.Until(at)
		}
		if failures > 0 {
			wait = backoff/2 + rand.N(backoff/2+1)
		}
		if !l.sleep(ctx, wait) {
			return
		}
		l.tokMu.Lock()
		// Renew only the token this round looked at, and only once its
		// point has come: the connection loop may have replaced it.
		due := t.Token != "" && l.tok.Token == t.Token && !time.Now().Before(l.renewAt)
		l.tokMu.Unlock()
		if !due {
			failures, backoff = 0, l.opts.MinBackoff
			continue
		}
		nt, err := l.token(ctx, true)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			if failures > 1 {
				backoff = min(2*backoff, l.opts.MaxBackoff)
			}
			left := "has expired"
			if d := time.Until(t.ExpiresAt); d > 0 {
				left = "expires in " + d.Round(time.Millisecond).String()
			}
			l.logf("renewing the relay token failed (attempt %d): %v; the token in hand %s; trying again within %s", failures, err, left, backoff.Round(time.Millisecond))
			continue
		}
		if failures > 0 {
			l.logf("renewed the relay token after %d failed attempts", failures)
		}
		failures, backoff = 0, l.opts.MinBackoff
		l.logf("renewed the relay token; it expires at %s", nt.ExpiresAt.UTC().Format(time.RFC3339))
	}
}

// sleep waits d (nothing when d <= 0) or until a new token arrives, and
// reports whether ctx is still live.
func (l *Link) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
	case <-l.newToken:
	}
	return true
}

func (l *Link) relayURL(t sdk.RelayToken) string {
	switch {
	case l.opts.Credentials.RelayURL != "":
		return l.opts.Credentials.RelayURL
	case t.RelayURL != "":
		return t.RelayURL
	}
	return l.opts.Credentials.ServerURL
}

func (l *Link) connectAndServe(ctx context.Context) error {
	l.learnKeys(ctx)
	t, err := l.token(ctx, false)
	if err != nil {
		return err
	}
	c := l.opts.Credentials
	u, err := remote.WSURL(l.relayURL(t), relaywire.RoleDaemon, c.WorkspaceID, c.InstallID)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ws, err := remote.DialRelay(dctx, l.opts.HTTPClient, u, t.Token)
	cancel()
	if err != nil {
		var ue *remote.UpgradeError
		if errors.As(err, &ue) && (ue.Status == http.StatusUnauthorized || ue.Status == http.StatusForbidden) {
			// The token may have been revoked or expired early: get
			// another before the next attempt.
			l.tokMu.Lock()
			l.tok = sdk.RelayToken{}
			l.tokMu.Unlock()
		}
		return fmt.Errorf("connect to the relay at %s: %w", l.relayURL(t), err)
	}
	defer ws.CloseNow()
	// The relay forwards nothing larger (relaywire.MaxEnvelope), so no
	// client can make this read fail for every channel.
	ws.SetReadLimit(relaywire.MaxEnvelope)
	l.setState(wire.RelayConnected, nil)
	l.logf("connected to %s as install %s", l.relayURL(t), c.InstallID)
	err = l.serveRelay(ctx, ws)
	if ctx.Err() != nil {
		ws.Close(websocket.StatusGoingAway, "daemon stopping")
	}
	return fmt.Errorf("relay connection lost: %w", err)
}

// serveRelay reads the relay connection and dispatches envelopes to
// channels until it fails.
func (l *Link) serveRelay(ctx context.Context, ws *websocket.Conn) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := &mux{link: l, ws: ws, ctx: ctx, channels: map[string]*channel{}}
	defer m.closeAll()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return err
		}
		var env relaywire.Envelope
		if err := json.Unmarshal(b, &env); err != nil {
			l.logf("ignoring a relay message that is not an envelope: %v", err)
			continue
		}
		switch env.Type {
		case relaywire.TypeOpen:
			m.open(env.Channel)
		case relaywire.TypeData:
			m.data(env.Channel, env.Payload)
		case relaywire.TypeClose:
			m.closed(env.Channel, env.Reason)
		case relaywire.TypeError:
			l.logf("relay error: %s", env.Reason)
		}
	}
}

// mux is one relay connection's channels.
type mux struct {
	link *Link
	ws   *websocket.Conn
	ctx  context.Context

	mu       sync.Mutex
	channels map[string]*channel
}

// inbox bounds the frames waiting for one channel; a client that sends
// faster than the daemon answers is cut off rather than stall the others.
const inbox = 64

func (m *mux) open(id string) {
	if id == "" {
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	ch := &channel{mux: m, id: id, in: make(chan []byte, inbox), ctx: ctx, cancel: cancel}
	m.mu.Lock()
	if old := m.channels[id]; old != nil {
		old.cancel()
	}
	m.channels[id] = ch
	m.mu.Unlock()
	m.link.mu.Lock()
	m.link.channels++
	m.link.mu.Unlock()
	go func() {
		defer func() {
			m.mu.Lock()
			if m.channels[id] == ch {
				delete(m.channels, id)
			}
			m.mu.Unlock()
			m.link.mu.Lock()
			m.link.channels--
			m.link.mu.Unlock()
		}()
		ch.run()
	}()
}

func (m *mux) data(id, payload string) {
	m.mu.Lock()
	ch := m.channels[id]
	m.mu.Unlock()
	if ch == nil {
		return
	}
	p, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		ch.Close("relay payload is not base64")
		return
	}
	select {
	case ch.in <- p:
	default:
		ch.Close("too many frames in flight")
	}
}

func (m *mux) closed(id, reason string) {
	m.mu.Lock()
	ch := m.channels[id]
	m.mu.Unlock()
	if ch != nil {
		ch.peerClosed()
	}
}

func (m *mux) closeAll() {
	m.mu.Lock()
	chans := m.channels
	m.channels = map[string]*channel{}
	m.mu.Unlock()
	for _, ch := range chans {
		ch.cancel()
	}
}

func (m *mux) send(env relaywire.Envelope) error {
	env.Reason = relaywire.CutReason(env.Reason)
	b, err := json.Marshal(env)
	if err != nil {
		return err
	}
	if len(b) > relaywire.MaxEnvelope {
		// The relay would end the channel; end it here, with a reason.
		return fmt.Errorf("a relay envelope of %d bytes is over the limit of %d", len(b), relaywire.MaxEnvelope)
	}
	ctx, cancel := context.WithTimeout(m.ctx, 60*time.Second)
	defer cancel()
	return m.ws.Write(ctx, websocket.MessageText, b)
}

// FromHome builds the link of a paired daemon from its home: the relay
// credentials pairing wrote and the anchor key. It fails with an error
// wrapping fs.ErrNotExist when the daemon is not paired.
func FromHome(dir home.Dir, opts Options) (*Link, error) {
	creds, err := dir.ReadRelayCredentials()
	if err != nil {
		return nil, fmt.Errorf("read relay credentials: %w", err)
	}
	anchor, err := dir.EnsureAnchor()
	if err != nil {
		return nil, fmt.Errorf("anchor key: %w", err)
	}
	opts.Credentials, opts.Anchor, opts.Home = creds, anchor, dir
	if opts.ServerKeys == nil {
		if k, err := pairing.ReadServerKeys(dir); err == nil {
			opts.ServerKeys = &k.Keys
		}
	}
	return New(opts)
}

// Health is what /health reports for the relay profile: the link's status,
// or not-paired (and locked) when there is no link; nil for other profiles.
func Health(l *Link, profile string) *wire.RemoteStatus {
	if l != nil {
		s := l.Status()
		return &s
	}
	if profile == "relay" {
		return &wire.RemoteStatus{Link: wire.RelayNotPaired, Locked: true}
	}
	return nil
}
