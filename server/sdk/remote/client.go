// Package remote is the Go client of a paired daemon through the relay: it
// connects to the relay with a relay JWT, verifies the daemon's trust
// anchor in an end-to-end key exchange (server/sdk/e2e), and then speaks
// the daemon's own control protocol inside sealed frames the relay cannot
// read. The protocol is daemon/wire's, and its client is
// daemon/wireclient's, over the relayed channel as a transport: the same
// requests, and subscriptions that resume losslessly when the client dials
// again after a drop (with a new key exchange).
package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"reeve.dev/reeve/daemon/wireclient"
	"reeve.dev/reeve/server/relay/relaywire"
	"reeve.dev/reeve/server/sdk/e2e"
)

// Version is what the client reports in its hello.
const Version = "reeve-remote/1"

// TokenSource returns a relay JWT for the next connection.
type TokenSource func(ctx context.Context) (string, error)

// Options configure a Client.
type Options struct {
	// RelayURL is the relay's origin (http, https, ws or wss).
	RelayURL        string
	WorkspaceID     string
	RuntimeTargetID string // the daemon's install id
	// Anchor is the daemon's anchor public key (32 bytes). Fingerprint
	// may be given instead: the daemon is then asked for its key, which
	// must have this fingerprint. When both are given they must agree.
	Anchor      []byte
	Fingerprint string
	// Token supplies relay JWTs; see WorkspaceToken, which also supplies
	// the access token the daemon decides requests with.
	Token TokenSource
	// AccessToken, when set, supplies the access token instead of Token
	// (see server/sdk AccessClaims).
	AccessToken TokenSource
	HTTPClient  *http.Client
	// NoReconnect makes a dropped connection final instead of dialling
	// again.
	NoReconnect bool
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts (defaults 200ms and 10s).
	MinBackoff, MaxBackoff time.Duration
	// Logf receives reconnection notes; nil drops them.
	Logf func(format string, args ...any)
	// Name is sent to the daemon in the handshake.
	Name string
}

// Client is a connection to one daemon through the relay. Its requests,
// subscriptions and events are those of the embedded protocol client.
type Client struct {
	*wireclient.Conn

	mu        sync.Mutex
	anchor    []byte
	admission e2e.Admission
	refreshes int
	// refused is the control plane's refusal of the credentials
	// (ErrSignInAgain), which ends the client.
	refused error
}

// Dial connects, verifies the daemon's anchor and exchanges hellos. A
// daemon that refuses remote control (locked) fails here with an error
// wrapping e2e.ErrRefused; a wrong anchor with e2e.ErrAnchor or
// e2e.ErrFingerprint.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	if opts.Token == nil {
		return nil, errors.New("remote: Options.Token is required")
	}
	if opts.WorkspaceID == "" || opts.RuntimeTargetID == "" {
		return nil, errors.New("remote: WorkspaceID and RuntimeTargetID are required")
	}
	if opts.Anchor == nil && opts.Fingerprint == "" {
		return nil, errors.New("remote: the daemon's Anchor or its Fingerprint is required")
	}
	if opts.Anchor != nil && opts.Fingerprint != "" && !e2e.FingerprintMatches(opts.Anchor, opts.Fingerprint) {
		return nil, fmt.Errorf("remote: %w: the given anchor has fingerprint %s", e2e.ErrFingerprint, e2e.Fingerprint(opts.Anchor))
	}
	if opts.Name == "" {
		opts.Name = Version
	}
	c := &Client{anchor: opts.Anchor}
	conn, err := wireclient.Dial(ctx, wireclient.Options{
		Dial:       func(ctx context.Context) (wireclient.Transport, error) { return c.connect(ctx, opts) },
		Version:    Version,
		Reconnect:  !opts.NoReconnect,
		MinBackoff: opts.MinBackoff, MaxBackoff: opts.MaxBackoff,
		Permanent: permanent,
		IDPrefix:  "r",
		Logf:      opts.Logf,
	})
	if err != nil {
		return nil, err
	}
	c.Conn = conn
	return c, nil
}

// Admission is what the daemon said when it admitted the current channel,
// including when its unlock ends.
func (c *Client) Admission() e2e.Admission {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.admission
}

// Anchor is the anchor public key the channel was verified against.
func (c *Client) Anchor() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.anchor...)
}

// connect dials the relay and runs the key exchange: one transport of the
// protocol client.
func (c *Client) connect(ctx context.Context, opts Options) (wireclient.Transport, error) {
	c.mu.Lock()
	refused := c.refused
	c.mu.Unlock()
	if refused != nil {
		return nil, refused
	}
	got := time.Now()
	tok, access, err := tokens(ctx, opts, false)
	if err != nil {
		return nil, err
	}
	u, err := WSURL(opts.RelayURL, relaywire.RoleClient, opts.WorkspaceID, opts.RuntimeTargetID)
	if err != nil {
		return nil, err
	}
	ws, err := DialRelay(ctx, opts.HTTPClient, u, tok)
	if err != nil {
		return nil, err
	}
	hello := []byte(`{"client":` + quoteJSON(opts.Name) + `}`)
	c.mu.Lock()
	known := c.anchor
	c.mu.Unlock()
	ch, adm, anchor, err := handshake(ctx, ws, known, opts.Fingerprint, opts.WorkspaceID, opts.RuntimeTargetID, hello)
	if err != nil {
		ws.CloseNow()
		return nil, err
	}
	ch.access = access
	c.mu.Lock()
	c.anchor, c.admission = anchor, adm
	c.mu.Unlock()
	go c.keepAccessFresh(ch, opts, got)
	return ch, nil
}

// permanent reports whether a connection failure will not cure itself by
// dialling again.
func permanent(err error) bool {
	return errors.Is(err, e2e.ErrAnchor) || errors.Is(err, e2e.ErrFingerprint) || errors.Is(err, e2e.ErrRefused) || errors.Is(err, ErrSignInAgain)
}
