package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/server/relay/relaywire"
	"reeve.dev/reeve/server/sdk"
)

// Who ended a channel, and so which sides still need telling.
type side int

const (
	fromClient side = iota // the local client closed or left
	fromDaemon             // the local daemon closed it or left
	fromRemote             // the other instance's side ended it
	fromRelay              // the relay itself (replacement, bus failure)
)

var emptyPayload = []byte(`""`)

// readLoop reads envelopes until the socket closes. Frames of a closed
// connection are dropped while the close handshake finishes.
func (c *conn) readLoop() {
	for {
		// No context deadline: one would cost a timer registration per
		// frame. Kills and shutdown close the socket instead.
		typ, rd, err := c.ws.Reader(context.Background())
		var buf *bytes.Buffer
		if err == nil {
			buf = getReadBuf()
			_, err = buf.ReadFrom(rd)
		}
		if err != nil {
			if websocket.CloseStatus(err) == -1 && !errors.Is(err, context.Canceled) {
				c.r.log.Debug("relay read ended", "role", c.role, "err", err)
			}
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		c.r.m.framesIn.Add(1)
		select {
		case <-c.done:
			putReadBuf(buf)
			continue
		default:
		}
		if typ != websocket.MessageText {
			putReadBuf(buf)
			c.kill(CloseBadEnvelope, "relay envelopes are JSON text frames")
			continue
		}
		// route copies what it forwards; the buffer is reused.
		err = c.r.route(c, buf.Bytes())
		putReadBuf(buf)
		if err != nil {
			c.r.m.badEnvelopes.Add(1)
			c.kill(CloseBadEnvelope, err.Error())
		}
	}
}

// route forwards one envelope from c. It reads t, ch and reason, and moves
// p along as the bytes it came in.
func (r *Relay) route(c *conn, data []byte) error {
	e, err := decodeEnvelope(data)
	if err != nil {
		return err
	}
	p := e.Payload
	if p == nil {
		p = emptyPayload
	}
	e.Reason = relaywire.CutReason(e.Reason)
	if c.role == RoleClient {
		ch := c.ch
		if ch == nil || ch.ended.Load() {
			return nil
		}
		switch e.Type {
		case TypeData:
			if len(p) > relaywire.MaxPayload {
				// Only this client's channel (its connection) ends.
				c.r.m.tooLarge.Add(1)
				c.kill(websocket.StatusMessageTooBig, "the payload is over the relay's limit")
				r.endChannel(ch, fromClient, TypeClose, "the client sent a payload over the relay's limit", CloseNormal)
				return nil
			}
			if ch.daemon != nil {
				ch.daemon.send(frameDaemonData(ch.id, p))
				return nil
			}
			r.publish(sdk.RelayBusMessage{To: ch.daemonInst, Type: TypeData, Channel: ch.id, Payload: payloadString(p)})
			return nil
		case TypeClose:
			r.endChannel(ch, fromClient, TypeClose, reasonOr(e.Reason, "the client closed the channel"), CloseNormal)
			return nil
		}
		return fmt.Errorf("a client sends data or close envelopes, not %q", e.Type)
	}
	if e.Channel == "" {
		return errors.New("a daemon's envelope names its channel (ch)")
	}
	if len(e.Channel) > relaywire.MaxChannelID {
		return nil // no channel has such an id; echoing it would not fit
	}
	c.mu.Lock()
	ch := c.chans[e.Channel]
	c.mu.Unlock()
	switch e.Type {
	case TypeData:
		if ch == nil {
			// The channel ended while the daemon was writing to it.
			c.send(frameEnd(TypeClose, e.Channel, "no such channel"))
			return nil
		}
		if len(p) > relaywire.MaxPayload {
			// The channel ends, not the daemon's connection.
			r.m.tooLarge.Add(1)
			r.endChannel(ch, fromRelay, TypeError, "the daemon sent a payload over the relay's limit", websocket.StatusMessageTooBig)
			return nil
		}
		if ch.client != nil {
			ch.client.send(frameClientData(p))
			return nil
		}
		r.publish(sdk.RelayBusMessage{To: ch.clientInst, Type: TypeData, Channel: ch.id, Payload: payloadString(p)})
		return nil
	case TypeClose, TypeError:
		if ch != nil {
			r.endChannel(ch, fromDaemon, e.Type, reasonOr(e.Reason, "the daemon closed the channel"), CloseNormal)
		}
		return nil
	}
	return fmt.Errorf("a daemon sends data, close or error envelopes, not %q", e.Type)
}

func reasonOr(r, d string) string {
	if r != "" {
		return r
	}
	return d
}

// attachDaemon makes c the daemon of its runtime target, replacing an
// older connection, and reports it in presence.
func (r *Relay) attachDaemon(c *conn) {
	r.mu.Lock()
	old := r.daemons[c.t]
	r.daemons[c.t] = c
	r.mu.Unlock()
	if old != nil {
		r.m.replaced.Add(1)
		r.dropDaemon(old, CloseReplaced, "replaced by a newer connection of the same daemon")
	}
	// Clients here whose channels lead to this daemon's connection on
	// another instance are following an older connection (that instance
	// may have died without a word): they end, and reconnect to this one.
	r.mu.Lock()
	var stale []*channel
	for _, ch := range r.chans {
		if ch.t == c.t && ch.daemonInst != "" && ch.client != nil {
			stale = append(stale, ch)
		}
	}
	r.mu.Unlock()
	for _, ch := range stale {
		r.endChannel(ch, fromRemote, TypeError, "the daemon reconnected", CloseNoDaemon)
	}
	r.upsert(context.Background(), []sdk.RelayPresence{c.presence()}, nil)
}

// dropDaemon closes a daemon connection and ends its channels at once
// (the reading goroutine's detach finds nothing left to do).
func (r *Relay) dropDaemon(d *conn, code websocket.StatusCode, reason string) {
	d.kill(code, reason)
	r.mu.Lock()
	if r.daemons[d.t] == d {
		delete(r.daemons, d.t)
	}
	d.mu.Lock()
	chans := d.chans
	d.chans = nil
	d.mu.Unlock()
	r.mu.Unlock()
	for _, ch := range chans {
		r.endChannel(ch, fromDaemon, TypeError, "the daemon connection was "+closeWord(code), CloseNoDaemon)
	}
}

func closeWord(code websocket.StatusCode) string {
	switch code {
	case CloseReplaced:
		return "replaced"
	case CloseRevoked:
		return "revoked"
	}
	return "closed"
}

func (c *conn) presence() sdk.RelayPresence {
	return sdk.RelayPresence{WorkspaceID: c.t.workspace, RuntimeTargetID: c.t.runtime, ConnID: c.id, ConnectedAt: c.at}
}

// attachClient opens the client's channel to its runtime target's daemon,
// here or on another instance. Without a daemon the client gets an error
// envelope and the connection closes with CloseNoDaemon.
func (r *Relay) attachClient(c *conn) bool {
	ch := &channel{id: r.newChannelID(), t: c.t, client: c}
	r.mu.Lock()
	if d := r.daemons[c.t]; d != nil {
		d.mu.Lock()
		if d.chans != nil { // nil: the daemon is leaving
			d.chans[ch.id] = ch
			ch.daemon = d
			r.chans[ch.id] = ch
		}
		d.mu.Unlock()
	}
	r.mu.Unlock()
	c.ch = ch
	if ch.daemon != nil {
		r.m.channels.Add(1)
		if ch.daemon.send(frameOpen(ch.id)) != nil {
			r.endChannel(ch, fromDaemon, TypeError, "the daemon disconnected", CloseNoDaemon)
		}
		return true
	}
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	res, err := r.ctl.Resolve(ctx, sdk.RelayPresenceResolveRequest{WorkspaceID: c.t.workspace, RuntimeTargetID: c.t.runtime})
	cancel()
	if err != nil {
		r.log.Warn("relay presence resolve failed", "err", err)
	}
	if err == nil && res.Found && res.Presence != nil && res.Presence.InstanceID != "" && res.Presence.InstanceID != r.opts.InstanceID {
		ch.daemonInst = res.Presence.InstanceID
		r.mu.Lock()
		r.chans[ch.id] = ch
		r.mu.Unlock()
		r.m.channels.Add(1)
		r.m.remoteChannels.Add(1)
		r.publish(sdk.RelayBusMessage{To: ch.daemonInst, Type: TypeOpen, Channel: ch.id, WorkspaceID: c.t.workspace, RuntimeTargetID: c.t.runtime})
		return true
	}
	c.ch = nil
	r.m.noDaemon.Add(1)
	c.send(frameEnd(TypeError, "", "no daemon is connected for this runtime target"))
	c.finish(CloseNoDaemon, "no daemon connected")
	return false
}

// endChannel ends a channel once and tells the sides that did not end it.
// code is the close code a local client gets.
func (r *Relay) endChannel(ch *channel, from side, typ, reason string, code websocket.StatusCode) {
	if !ch.ended.CompareAndSwap(false, true) {
		return
	}
	r.mu.Lock()
	delete(r.chans, ch.id)
	r.mu.Unlock()
	r.m.channels.Add(-1)
	if ch.daemon != nil {
		ch.daemon.mu.Lock()
		delete(ch.daemon.chans, ch.id)
		ch.daemon.mu.Unlock()
	}
	// The daemon's side.
	if from != fromDaemon {
		switch {
		case ch.daemon != nil:
			ch.daemon.send(frameEnd(TypeClose, ch.id, reason))
		case ch.daemonInst != "" && from != fromRemote:
			r.publish(sdk.RelayBusMessage{To: ch.daemonInst, Type: TypeClose, Channel: ch.id, Reason: reason})
		}
	}
	// The client's side. A client's connection is its channel: it ends
	// with it, whoever ended it.
	if from == fromClient && ch.client != nil {
		ch.client.finish(CloseNormal, reason)
	}
	if from != fromClient {
		switch {
		case ch.client != nil:
			ch.client.send(frameEnd(typ, "", reason))
			ch.client.finish(code, reason)
		case ch.clientInst != "" && from != fromRemote:
			r.publish(sdk.RelayBusMessage{To: ch.clientInst, Type: typ, Channel: ch.id, Reason: reason})
		}
	}
}

// detach forgets a connection whose socket has closed.
func (r *Relay) detach(c *conn) {
	c.kill(websocket.StatusAbnormalClosure, "")

	r.mu.Lock()
	delete(r.conns, c)
	current := false
	if c.role == RoleDaemon && r.daemons[c.t] == c {
		delete(r.daemons, c.t)
		current = true
	}
	var chans map[string]*channel
	if c.role == RoleDaemon {
		c.mu.Lock()
		chans, c.chans = c.chans, nil
		c.mu.Unlock()
	}
	r.mu.Unlock()
	if c.role == RoleDaemon {
		r.m.daemons.Add(-1)
		for _, ch := range chans {
			r.endChannel(ch, fromDaemon, TypeError, "the daemon disconnected", CloseNoDaemon)
		}
		if current {
			select {
			case r.presence <- c.presence():
			default: // the periodic refresh stops reporting it; it expires
			}
		}
		return
	}
	r.m.clients.Add(-1)
	if c.ch != nil {
		r.endChannel(c.ch, fromClient, TypeClose, "the client disconnected", CloseNormal)
	}
}
