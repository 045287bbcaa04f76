package remote

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"reeve.dev/reeve/daemon/wireclient"
	"reeve.dev/reeve/server/relay/relaywire"
	"reeve.dev/reeve/server/sdk/e2e"
)

// ClosedError is the relay or the daemon ending the channel, with the
// reason it gave (an "error" envelope from the relay, a "close" from the
// daemon, or a WebSocket close).
type ClosedError struct {
	By     string // relay or daemon
	Reason string
}

func (e *ClosedError) Error() string {
	if e.Reason == "" {
		return "the " + e.By + " closed the channel"
	}
	return "the " + e.By + " closed the channel: " + e.Reason
}

// maxEnvelope bounds one relay message: the one limit of the relay and
// both its ends.
const maxEnvelope = relaywire.MaxEnvelope

// An end-to-end frame in base64, quoted, fits a relay payload; this fails
// to compile the day it does not.
const _ uint = relaywire.MaxPayload - (4*((e2e.MaxFrame+2)/3) + 2)

// channel is one relayed, end-to-end encrypted connection to the daemon:
// a transport of the protocol client.
type channel struct {
	ws     *websocket.Conn
	sess   *e2e.Session
	access string // the access token the hello presents

	// wmu orders frames: the protocol client's and the access refresher's
	// hellos share the channel's sealing counter.
	wmu sync.Mutex
	// ctx ends (and done closes) when the channel does, which stops its
	// access refresher.
	ctx    context.Context
	cancel context.CancelFunc
	done   <-chan struct{}

	// failure, once set (fail), is what reading the channel returns: why
	// the client ended it.
	failMu  sync.Mutex
	failure error
}

// fail ends the channel for err, which its reader then returns.
func (c *channel) fail(err error) {
	c.failMu.Lock()
	if c.failure == nil {
		c.failure = err
	}
	c.failMu.Unlock()
	c.Close("the control plane refused the client's credentials")
}

// failed is the reason fail gave, or err.
func (c *channel) failed(err error) error {
	c.failMu.Lock()
	defer c.failMu.Unlock()
	if c.failure != nil {
		return c.failure
	}
	return err
}

// AccessToken implements wireclient.AccessTokenHolder.
func (c *channel) AccessToken() string { return c.access }

var _ wireclient.Transport = (*channel)(nil)

// WSURL turns a relay URL (http, https, ws or wss, with or without /ws)
// into the relay's WebSocket endpoint for a client of one runtime target.
func WSURL(relayURL, role, workspaceID, runtimeTargetID string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(relayURL))
	if err != nil {
		return "", fmt.Errorf("relay URL %q: %w", relayURL, err)
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	case "ws", "wss":
	default:
		return "", fmt.Errorf("relay URL %q: want http, https, ws or wss", relayURL)
	}
	if !strings.HasSuffix(u.Path, "/ws") {
		u.Path = strings.TrimRight(u.Path, "/") + "/ws"
	}
	q := url.Values{"role": {role}, "workspaceId": {workspaceID}}
	if runtimeTargetID != "" {
		q.Set("runtimeTargetId", runtimeTargetID)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// DialRelay opens a relay WebSocket presenting token as a bearer
// credential. A refused upgrade is an error naming the HTTP status.
func DialRelay(ctx context.Context, hc *http.Client, wsURL, token string) (*websocket.Conn, error) {
	opts := &websocket.DialOptions{HTTPClient: hc, HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}}
	ws, resp, err := websocket.Dial(ctx, wsURL, opts)
	if err != nil {
		if resp != nil {
			return nil, &UpgradeError{Status: resp.StatusCode}
		}
		return nil, fmt.Errorf("dial relay: %w", err)
	}
	ws.SetReadLimit(maxEnvelope)
	return ws, nil
}

// UpgradeError is a relay that refused the WebSocket upgrade.
type UpgradeError struct{ Status int }

func (e *UpgradeError) Error() string {
	return fmt.Sprintf("the relay refused the connection: %d %s", e.Status, http.StatusText(e.Status))
}

func writeEnvelope(ctx context.Context, ws *websocket.Conn, env relaywire.Envelope) error {
	b, err := json.Marshal(env)
	if err != nil {
		return err
	}
	return ws.Write(ctx, websocket.MessageText, b)
}

// readPayload reads the next data envelope's payload; close and error
// envelopes and WebSocket closes become a *ClosedError.
func readPayload(ctx context.Context, ws *websocket.Conn) ([]byte, error) {
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			if st := websocket.CloseStatus(err); st != -1 {
				var ce websocket.CloseError
				errors.As(err, &ce)
				return nil, &ClosedError{By: "relay", Reason: ce.Reason}
			}
			return nil, err
		}
		var env relaywire.Envelope
		if err := json.Unmarshal(b, &env); err != nil {
			return nil, fmt.Errorf("relay sent a message that is not an envelope: %w", err)
		}
		switch env.Type {
		case relaywire.TypeData:
			p, err := base64.StdEncoding.DecodeString(env.Payload)
			if err != nil {
				return nil, fmt.Errorf("relay envelope payload is not base64: %w", err)
			}
			return p, nil
		case relaywire.TypeClose:
			return nil, &ClosedError{By: "daemon", Reason: env.Reason}
		case relaywire.TypeError:
			return nil, &ClosedError{By: "relay", Reason: env.Reason}
		}
		// open is for daemons; anything newer is skipped.
	}
}

func writePayload(ctx context.Context, ws *websocket.Conn, p []byte) error {
	return writeEnvelope(ctx, ws, relaywire.Envelope{Type: relaywire.TypeData, Payload: base64.StdEncoding.EncodeToString(p)})
}

// handshake runs the end-to-end key exchange on a fresh relay connection.
// anchor may be nil when fingerprint is set: the daemon is then asked for
// its key, which must match. It returns the anchor it verified.
func handshake(ctx context.Context, ws *websocket.Conn, anchor []byte, fingerprint, workspaceID, targetID string, hello []byte) (*channel, e2e.Admission, []byte, error) {
	var adm e2e.Admission
	if anchor == nil {
		if err := writePayload(ctx, ws, e2e.AnchorRequest()); err != nil {
			return nil, adm, nil, err
		}
		ans, err := readPayload(ctx, ws)
		if err != nil {
			return nil, adm, nil, fmt.Errorf("ask for the daemon's anchor: %w", err)
		}
		if anchor, err = e2e.VerifyAnchorAnswer(ans, fingerprint); err != nil {
			return nil, adm, nil, err
		}
	}
	hs, err := e2e.NewClient(anchor, e2e.Prologue(workspaceID, targetID))
	if err != nil {
		return nil, adm, nil, err
	}
	m1, err := hs.Hello(hello)
	if err != nil {
		return nil, adm, nil, err
	}
	if err := writePayload(ctx, ws, m1); err != nil {
		return nil, adm, nil, err
	}
	m2, err := readPayload(ctx, ws)
	if err != nil {
		return nil, adm, nil, fmt.Errorf("e2e handshake: %w", err)
	}
	sess, payload, err := hs.Finish(m2)
	if err != nil {
		return nil, adm, nil, err
	}
	if adm, err = e2e.DecodeAdmission(payload); err != nil {
		return nil, adm, nil, err
	}
	sess.SetMaxMessage(maxMessage)
	cctx, cancel := context.WithCancel(context.Background())
	return &channel{ws: ws, sess: sess, ctx: cctx, cancel: cancel, done: cctx.Done()}, adm, anchor, nil
}

// maxMessage bounds one control-protocol frame from the daemon.
const maxMessage = 16 << 20

// ReadFrame returns the next whole control-protocol frame
// (wireclient.Transport).
func (c *channel) ReadFrame(ctx context.Context) ([]byte, error) {
	for {
		p, err := readPayload(ctx, c.ws)
		if err != nil {
			c.cancel()
			return nil, c.failed(err)
		}
		msg, done, err := c.sess.Open(p)
		if err != nil {
			c.ws.Close(websocket.StatusPolicyViolation, "e2e frame refused")
			return nil, err
		}
		if done {
			return msg, nil
		}
	}
}

// WriteFrame seals one control-protocol frame and sends it.
func (c *channel) WriteFrame(ctx context.Context, msg []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.sess.Seal(msg, func(f []byte) error { return writePayload(ctx, c.ws, f) })
}

// Close ends the relayed connection.
func (c *channel) Close(reason string) error {
	c.cancel()
	return c.ws.Close(websocket.StatusNormalClosure, reason)
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
