package relay

import (
	"context"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/server/relay/relaywire"
	"reeve.dev/reeve/server/sdk"
)

// Reaching other instances. Presence tells the control plane which daemon
// connections this instance holds; a client whose daemon is elsewhere gets
// a channel whose far end is that instance, and the envelopes of the
// channel travel as bus messages: published to the other instance's inbox
// on the control plane, pulled from ours by a long poll.

const (
	// maxBatchBytes keeps a publish under the control plane's 1 MiB body
	// limit (payloads are base64, so the JSON barely grows).
	maxBatchBytes = 768 << 10
	maxBatch      = 512
	pullMax       = 1024
)

// publish queues a bus message without waiting (it is called from
// connections' read loops). Data counts against the relay's buffered bytes;
// when the bus queue or the buffers are full the message's channel ends.
// A close or error that finds the queue full gets SlowTimeout on its own
// goroutine: it is small, and the far side should learn of the end.
func (r *Relay) publish(m sdk.RelayBusMessage) {
	m.From = r.opts.InstanceID
	size := busSize(m)
	if !r.reserve(size) {
		r.m.busDropped.Add(1)
		r.failChannel(m.Channel, "the relay bus is congested")
		return
	}
	select {
	case r.bus <- m:
		return
	default:
	}
	if m.Type == TypeData {
		r.release(size)
		r.m.busDropped.Add(1)
		r.failChannel(m.Channel, "the relay bus is congested")
		return
	}
	go func() {
		t := time.NewTimer(r.opts.SlowTimeout)
		defer t.Stop()
		select {
		case r.bus <- m:
		case <-t.C:
			r.release(size)
			r.m.busDropped.Add(1)
		case <-r.ctx.Done():
			r.release(size)
		}
	}()
}

// busSize is what a bus message counts against the relay's buffers.
func busSize(m sdk.RelayBusMessage) int64 { return int64(len(m.Payload) + len(m.Reason) + 256) }

// failChannel ends a channel whose far instance cannot be reached.
func (r *Relay) failChannel(id, reason string) {
	if id == "" {
		return
	}
	r.mu.Lock()
	ch := r.chans[id]
	r.mu.Unlock()
	if ch != nil {
		r.endChannel(ch, fromRemote, TypeError, reason, CloseNoDaemon)
	}
}

func (r *Relay) publishLoop(ctx context.Context) {
	batch := make([]sdk.RelayBusMessage, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return
		case m := <-r.bus:
			batch = append(batch, m)
		}
		size := len(batch[0].Payload) + 256
	fill:
		for len(batch) < maxBatch && size < maxBatchBytes {
			select {
			case m := <-r.bus:
				batch = append(batch, m)
				size += len(m.Payload) + 256
			default:
				break fill
			}
		}
		r.publishBatch(ctx, batch)
		for i := range batch {
			r.release(busSize(batch[i]))
			batch[i] = sdk.RelayBusMessage{}
		}
	}
}

func (r *Relay) publishBatch(ctx context.Context, batch []sdk.RelayBusMessage) {
	var (
		res sdk.RelayBusPublishResult
		err error
	)
	for attempt := 0; attempt < 3; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err = r.ctl.Publish(cctx, sdk.RelayBusPublishRequest{InstanceID: r.opts.InstanceID, Messages: batch})
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		sleep(ctx, time.Duration(100<<attempt)*time.Millisecond)
	}
	if err != nil {
		r.log.Warn("relay bus publish failed", "messages", len(batch), "err", err)
		r.m.busDropped.Add(uint64(len(batch)))
		for _, m := range batch {
			r.failChannel(m.Channel, "the other relay instance is unreachable")
		}
		return
	}
	r.m.busOut.Add(uint64(res.Accepted))
	for _, rj := range res.Rejected {
		if rj.Index >= 0 && rj.Index < len(batch) {
			r.m.busDropped.Add(1)
			if m := batch[rj.Index]; m.Type != TypeClose && m.Type != TypeError {
				r.failChannel(m.Channel, "the other relay instance is unreachable: "+rj.Reason)
			}
		}
	}
}

func (r *Relay) pullLoop(ctx context.Context) {
	wait := r.opts.PullWait
	// ack is the last numbered message received: a bus in the database
	// keeps the messages of a pull until the next one acknowledges them,
	// so a pull whose answer is lost (its server replica killed) is
	// answered again.
	var ack int64
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, wait+15*time.Second)
		res, err := r.ctl.Pull(cctx, sdk.RelayBusPullRequest{InstanceID: r.opts.InstanceID, WaitMS: int(wait / time.Millisecond), Max: pullMax, Ack: ack})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("relay bus pull failed", "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		for _, m := range res.Messages {
			if m.Seq != 0 {
				if m.Seq <= ack {
					continue // delivered already
				}
				ack = m.Seq
			}
			r.m.busIn.Add(1)
			r.deliver(m)
		}
	}
}

// deliver acts on one bus message from another instance.
func (r *Relay) deliver(m sdk.RelayBusMessage) {
	switch m.Type {
	case TypeOpen:
		t := target{m.WorkspaceID, m.RuntimeTargetID}
		ch := &channel{id: m.Channel, t: t, clientInst: m.From}
		r.mu.Lock()
		if d := r.daemons[t]; d != nil && m.Channel != "" && r.chans[m.Channel] == nil {
			d.mu.Lock()
			if d.chans != nil {
				d.chans[ch.id] = ch
				ch.daemon = d
				r.chans[ch.id] = ch
			}
			d.mu.Unlock()
		}
		r.mu.Unlock()
		if ch.daemon == nil {
			r.publish(sdk.RelayBusMessage{To: m.From, Type: TypeError, Channel: m.Channel, Reason: "no daemon is connected for this runtime target"})
			return
		}
		r.m.channels.Add(1)
		r.m.remoteChannels.Add(1)
		if ch.daemon.send(frameOpen(ch.id)) != nil {
			r.endChannel(ch, fromDaemon, TypeError, "the daemon disconnected", CloseNoDaemon)
		}
	case TypeData:
		r.mu.Lock()
		ch := r.chans[m.Channel]
		r.mu.Unlock()
		if ch == nil || ch.ended.Load() || (ch.clientInst != m.From && ch.daemonInst != m.From) {
			r.publish(sdk.RelayBusMessage{To: m.From, Type: TypeClose, Channel: m.Channel, Reason: "no such channel"})
			return
		}
		p := rawPayload(m.Payload)
		if p == nil {
			p = emptyPayload
		}
		if ch.daemon != nil {
			ch.daemon.send(frameDaemonData(ch.id, p))
		} else if ch.client != nil {
			ch.client.send(frameClientData(p))
		}
	case TypeClose, TypeError:
		r.mu.Lock()
		ch := r.chans[m.Channel]
		r.mu.Unlock()
		if ch != nil && (ch.clientInst == m.From || ch.daemonInst == m.From) {
			code := CloseNormal
			if m.Type == TypeError {
				code = CloseNoDaemon
			}
			r.endChannel(ch, fromRemote, m.Type, relaywire.CutReason(m.Reason), code)
		}
	case sdk.RelayBusReplaced:
		r.mu.Lock()
		d := r.daemons[target{m.WorkspaceID, m.RuntimeTargetID}]
		r.mu.Unlock()
		if d != nil && d.id == m.ConnID {
			r.m.replaced.Add(1)
			r.dropDaemon(d, CloseReplaced, "replaced by a newer connection of the same daemon")
		}
	}
}

// upsert reports daemon connections held and lost, then drops those the
// control plane says were superseded or revoked.
func (r *Relay) upsert(ctx context.Context, entries, removed []sdk.RelayPresence) {
	if len(entries) == 0 && len(removed) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := r.ctl.Upsert(ctx, sdk.RelayPresenceUpsertRequest{
		InstanceID: r.opts.InstanceID, Entries: entries, Removed: removed,
		TTLSeconds: int(3 * r.opts.PresenceInterval / time.Second),
	})
	if err != nil {
		r.log.Warn("relay presence upsert failed", "err", err)
		return
	}
	r.dropListed(res.Superseded, CloseReplaced, "replaced by a newer connection of the same daemon")
	r.dropListed(res.Revoked, CloseRevoked, "the install was detached")
}

func (r *Relay) dropListed(list []sdk.RelayPresence, code websocket.StatusCode, reason string) {
	for _, p := range list {
		r.mu.Lock()
		d := r.daemons[target{p.WorkspaceID, p.RuntimeTargetID}]
		r.mu.Unlock()
		if d != nil && d.id == p.ConnID {
			if code == CloseReplaced {
				r.m.replaced.Add(1)
			} else {
				r.m.revoked.Add(1)
			}
			r.dropDaemon(d, code, reason)
		}
	}
}

// presenceLoop re-reports every daemon connection each interval, with the
// removals queued since.
func (r *Relay) presenceLoop(ctx context.Context) {
	tick := time.NewTicker(r.opts.PresenceInterval)
	defer tick.Stop()
	for {
		var removed []sdk.RelayPresence
		select {
		case <-ctx.Done():
			return
		case p := <-r.presence:
			removed = append(removed, p)
		drain:
			for len(removed) < 1000 {
				select {
				case p := <-r.presence:
					removed = append(removed, p)
				default:
					break drain
				}
			}
			r.upsert(ctx, nil, removed)
		case <-tick.C:
			r.mu.Lock()
			all := make([]sdk.RelayPresence, 0, len(r.daemons))
			for _, d := range r.daemons {
				all = append(all, d.presence())
			}
			r.mu.Unlock()
			for len(all) > 0 {
				n := min(len(all), 1000)
				r.upsert(ctx, all[:n], nil)
				all = all[n:]
			}
			r.checkRemote(ctx)
		}
	}
}

// maxRemoteChecks bounds the runtime targets checkRemote resolves per
// presence interval; the rest wait for a later one (map order varies).
const maxRemoteChecks = 256

// checkRemote ends the channels of local clients whose daemon connection
// is no longer where the channel leads: the daemon moved to another
// instance, or its instance died without a word (a killed server) and its
// presence lapsed. Their clients get an error and reconnect, instead of
// waiting on a channel nobody serves. A control plane that does not
// answer is no evidence: nothing ends then.
func (r *Relay) checkRemote(ctx context.Context) {
	byTarget := map[target][]*channel{}
	r.mu.Lock()
	for _, ch := range r.chans {
		if ch.client != nil && ch.daemonInst != "" && !ch.ended.Load() {
			byTarget[ch.t] = append(byTarget[ch.t], ch)
		}
	}
	r.mu.Unlock()
	checked := 0
	for t, chans := range byTarget {
		if checked++; checked > maxRemoteChecks {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := r.ctl.Resolve(cctx, sdk.RelayPresenceResolveRequest{WorkspaceID: t.workspace, RuntimeTargetID: t.runtime})
		cancel()
		if err != nil {
			return
		}
		for _, ch := range chans {
			switch {
			case !res.Found || res.Presence == nil:
				r.endChannel(ch, fromRemote, TypeError, "the daemon disconnected", CloseNoDaemon)
			case res.Presence.InstanceID != ch.daemonInst:
				r.endChannel(ch, fromRemote, TypeError, "the daemon reconnected", CloseNoDaemon)
			}
		}
	}
}

// pingLoop pings connections that have been silent for PingInterval and
// closes those whose pong does not come back in time.
func (r *Relay) pingLoop(ctx context.Context) {
	tick := time.NewTicker(r.opts.PingInterval / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cutoff := time.Now().Add(-r.opts.PingInterval).UnixNano()
		r.mu.Lock()
		var idle []*conn
		for c := range r.conns {
			if c.lastRead.Load() < cutoff {
				idle = append(idle, c)
			}
		}
		r.mu.Unlock()
		for _, c := range idle {
			c.mu.Lock()
			ws := c.ws
			c.mu.Unlock()
			if ws == nil {
				continue
			}
			go func() {
				pctx, cancel := context.WithTimeout(ctx, r.opts.PingInterval)
				defer cancel()
				if err := ws.Ping(pctx); err != nil {
					if ctx.Err() == nil {
						r.m.keepaliveTimeouts.Add(1)
						c.kill(CloseKeepalive, "keepalive timeout")
						ws.CloseNow()
					}
					return
				}
				c.lastRead.Store(time.Now().UnixNano())
			}()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
