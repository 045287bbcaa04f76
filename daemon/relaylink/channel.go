package relaylink

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"reeve.dev/reeve/daemon/control"
	"reeve.dev/reeve/server/relay/relaywire"
	"reeve.dev/reeve/server/sdk/e2e"
)

// maxControlFrame bounds one control-protocol frame from a remote client,
// as the local /ws does.
const maxControlFrame = 1 << 20

// handshakeTimeout bounds how long a channel may take to finish the key
// exchange.
const handshakeTimeout = 30 * time.Second

// channel is one remote client through the relay. After the key exchange
// it is the control protocol's FrameConn.
type channel struct {
	mux    *mux
	id     string
	in     chan []byte
	ctx    context.Context
	cancel context.CancelFunc
	sess   *e2e.Session

	closeOnce sync.Once
	mu        sync.Mutex
	reason    string // why it closed, once it has
}

var _ control.FrameConn = (*channel)(nil)

func (ch *channel) run() {
	defer ch.cancel()
	l := ch.mux.link
	sess, grant, err := ch.handshake()
	if err != nil {
		l.logf("channel %s: %v", ch.id, err)
		ch.Close(err.Error())
		return
	}
	if sess == nil {
		return // refused; already closed with the reason
	}
	ch.sess = sess
	l.logf("channel %s: remote client admitted until %s", ch.id, l.lock.Until(grant).UTC().Format(time.RFC3339))
	go ch.watchLock(grant)
	l.opts.Serve(ch.ctx, ch)
	ch.Close("the daemon ended the control session")
	l.logf("channel %s closed: %s", ch.id, ch.closeReason())
}

// handshake answers anchor requests, runs the key exchange and tells the
// client whether it is admitted. A refused client gets a sealed refusal
// (so it knows the daemon itself said so) and then a close with the same
// reason; sess is nil then.
func (ch *channel) handshake() (*e2e.Session, Grant, error) {
	l := ch.mux.link
	ctx, cancel := context.WithTimeout(ch.ctx, handshakeTimeout)
	defer cancel()
	anchor := l.opts.Anchor
	for {
		var msg []byte
		select {
		case <-ctx.Done():
			return nil, Grant{}, errors.New("e2e handshake did not complete in time")
		case msg = <-ch.in:
		}
		kind, err := e2e.Kind(msg)
		if err != nil {
			return nil, Grant{}, err
		}
		switch kind {
		case e2e.KindAnchorRequest:
			if err := ch.sendPayload(e2e.AnchorAnswer(anchor.PublicKey().Bytes())); err != nil {
				return nil, Grant{}, err
			}
			continue
		case e2e.KindHello1:
		default:
			return nil, Grant{}, fmt.Errorf("e2e handshake expected, got a message of kind %d", kind)
		}
		c := l.opts.Credentials
		hs, _, err := e2e.Accept(anchor, e2e.Prologue(c.WorkspaceID, c.InstallID), msg)
		if err != nil {
			return nil, Grant{}, fmt.Errorf("refused the key exchange: %w", err)
		}
		grant, reason, ok := l.lock.Admit()
		adm := e2e.Admission{Admitted: ok, Reason: reason, DaemonID: l.opts.DaemonID}
		if ok {
			adm.Until = l.lock.Until(grant).UTC()
		}
		m2, sess, err := hs.Reply(adm.Encode())
		if err != nil {
			return nil, Grant{}, err
		}
		if err := ch.sendPayload(m2); err != nil {
			return nil, Grant{}, err
		}
		if !ok {
			l.logf("channel %s: refused a remote client: remote control is locked", ch.id)
			ch.Close(reason)
			return nil, Grant{}, nil
		}
		sess.SetMaxMessage(maxControlFrame)
		return sess, grant, nil
	}
}

// watchLock closes the channel when its unlock ends.
func (ch *channel) watchLock(g Grant) {
	l := ch.mux.link
	t := time.NewTicker(l.opts.LockCheck)
	defer t.Stop()
	for {
		select {
		case <-ch.ctx.Done():
			return
		case <-t.C:
			if l.lock.Expired(g) {
				l.logf("channel %s: unlock expired; closing it", ch.id)
				ch.Close("remote control unlock expired: unlock again on the machine (reeve pair unlock), or reconnect when auto-unlock is on")
				return
			}
		}
	}
}

func (ch *channel) sendPayload(p []byte) error {
	return ch.mux.send(relaywire.Envelope{Type: relaywire.TypeData, Channel: ch.id, Payload: base64.StdEncoding.EncodeToString(p)})
}

// ReadFrame returns the next whole control frame from the client. A frame
// that fails authentication, or comes out of order, closes the channel.
func (ch *channel) ReadFrame(ctx context.Context) ([]byte, error) {
	for {
		var p []byte
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch.ctx.Done():
			return nil, fmt.Errorf("channel closed: %s", ch.closeReason())
		case p = <-ch.in:
		}
		msg, done, err := ch.sess.Open(p)
		if err != nil {
			ch.mux.link.logf("channel %s: %v", ch.id, err)
			ch.Close(err.Error())
			return nil, err
		}
		if done {
			return msg, nil
		}
	}
}

// WriteFrame seals one control frame for the client.
func (ch *channel) WriteFrame(ctx context.Context, frame []byte) error {
	if ch.ctx.Err() != nil {
		return fmt.Errorf("channel closed: %s", ch.closeReason())
	}
	return ch.sess.Seal(frame, ch.sendPayload)
}

// Close ends the channel and tells the client why (through the relay).
func (ch *channel) Close(reason string) error {
	ch.closeOnce.Do(func() {
		ch.mu.Lock()
		ch.reason = reason
		ch.mu.Unlock()
		ch.mux.send(relaywire.Envelope{Type: relaywire.TypeClose, Channel: ch.id, Reason: reason})
		ch.cancel()
	})
	return nil
}

// peerClosed is the client leaving: no close goes back.
func (ch *channel) peerClosed() {
	ch.closeOnce.Do(func() {
		ch.mu.Lock()
		ch.reason = "the client left"
		ch.mu.Unlock()
		ch.cancel()
	})
}

func (ch *channel) closeReason() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.reason
}
