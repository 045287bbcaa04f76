package api

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// On PostgreSQL several replicas serve one control plane, and the relay
// instances behind them must meet: presence and the bus live in the
// database, and notices (LISTEN/NOTIFY) wake a replica's waiting pulls
// when a message for their instance is published on any replica. The
// same notices tell every replica to drop its cached credentials when one
// of them revokes something (authn.go).

// sharedStore is what replicas share beyond the Store: notices, cache
// generations, relay presence and the relay bus (store/bus.go,
// store/presence.go).
type sharedStore interface {
	Engine() string
	Listen(ctx context.Context, l store.Listener, channels ...string) error
	BumpGeneration(ctx context.Context, name string) (int64, error)
	Generation(ctx context.Context, name string) (int64, error)
	ReportPresence(ctx context.Context, instance string, entries, removed []store.RelayPresence, expires, now time.Time) (store.PresenceReport, error)
	ResolvePresence(ctx context.Context, workspace, target string, now, aliveSince time.Time) (store.RelayPresence, bool, error)
	PublishBus(ctx context.Context, msgs []store.BusMessage, inboxCap int, aliveSince, now time.Time) ([]error, error)
	PullBus(ctx context.Context, instance string, ack int64, max int) ([]store.BusMessage, error)
	TouchRelayInstance(ctx context.Context, instance string, now time.Time) error
	PruneRelay(ctx context.Context, before time.Time) (int64, error)
}

// sharedOf returns the store's shared state when replicas may share it
// (PostgreSQL), else nil: SQLite is one process, whose memory is faster.
func sharedOf(st store.Store) sharedStore {
	sh, ok := st.(sharedStore)
	if !ok || sh.Engine() != store.EnginePostgres {
		return nil
	}
	return sh
}

const (
	// instanceAlive: an instance that has not pulled or reported presence
	// for this long is treated as gone (its pulls touch it every
	// touchEvery while they wait, its presence every 10s).
	instanceAlive = 15 * time.Second
	touchEvery    = 2 * time.Second
	// pullRecheck bounds how long a waiting pull trusts notices alone.
	pullRecheck = 2 * time.Second
	// generationCredentials is the cache generation of credentials and
	// roles (authn.go).
	generationCredentials = "credentials"
)

// sharedRelay is relayState in the database.
type sharedRelay struct {
	st  sharedStore
	now func() time.Time

	mu      sync.Mutex
	wake    map[string]chan struct{} // instance → its waiting pulls' wake-up
	waiters map[string]int
	touched map[string]time.Time
}

func newSharedRelay(s *Server) *sharedRelay {
	sh := sharedOf(s.st)
	if sh == nil {
		return nil
	}
	return &sharedRelay{st: sh, now: s.opts.Now, wake: map[string]chan struct{}{}, waiters: map[string]int{}, touched: map[string]time.Time{}}
}

// touch marks instance alive, at most once per touchEvery from here.
func (h *sharedRelay) touch(ctx context.Context, instance string, now time.Time) error {
	h.mu.Lock()
	due := now.Sub(h.touched[instance]) >= touchEvery
	if due {
		if len(h.touched) > 10000 {
			clear(h.touched)
		}
		h.touched[instance] = now
	}
	h.mu.Unlock()
	if !due {
		return nil
	}
	if err := h.st.TouchRelayInstance(ctx, instance, now); err != nil {
		h.mu.Lock()
		delete(h.touched, instance)
		h.mu.Unlock()
		return err
	}
	return nil
}

func toStorePresence(p sdk.RelayPresence) store.RelayPresence {
	return store.RelayPresence{WorkspaceID: p.WorkspaceID, RuntimeTargetID: p.RuntimeTargetID, InstanceID: p.InstanceID, ConnID: p.ConnID, ConnectedAt: p.ConnectedAt}
}

func fromStorePresence(p store.RelayPresence) sdk.RelayPresence {
	return sdk.RelayPresence{WorkspaceID: p.WorkspaceID, RuntimeTargetID: p.RuntimeTargetID, InstanceID: p.InstanceID, ConnID: p.ConnID, ConnectedAt: p.ConnectedAt.UTC()}
}

func (h *sharedRelay) report(ctx context.Context, instance string, live, removed []sdk.RelayPresence, ttl time.Duration, now time.Time) ([]sdk.RelayPresence, int, error) {
	entries := make([]store.RelayPresence, len(live))
	for i, e := range live {
		entries[i] = toStorePresence(e)
	}
	gone := make([]store.RelayPresence, len(removed))
	for i, e := range removed {
		gone[i] = toStorePresence(e)
	}
	rep, err := h.st.ReportPresence(ctx, instance, entries, gone, now.Add(ttl), now)
	if err != nil {
		return nil, 0, err
	}
	h.mu.Lock()
	h.touched[instance] = now
	h.mu.Unlock()
	superseded := make([]sdk.RelayPresence, len(rep.Superseded))
	for i, p := range rep.Superseded {
		superseded[i] = fromStorePresence(p)
	}
	// The instances holding replaced connections learn it on the bus.
	if len(rep.Replaced) > 0 {
		msgs := make([]store.BusMessage, 0, len(rep.Replaced))
		for _, p := range rep.Replaced {
			m := replacedMessage(fromStorePresence(p))
			m.From = instance
			body, err := json.Marshal(m)
			if err != nil {
				return nil, 0, err
			}
			msgs = append(msgs, store.BusMessage{To: m.To, Body: body})
		}
		if _, err := h.st.PublishBus(ctx, msgs, inboxCap, now.Add(-instanceAlive), now); err != nil {
			return nil, 0, err
		}
	}
	return superseded, rep.Accepted, nil
}

func (h *sharedRelay) resolve(ctx context.Context, workspace, target string, now time.Time) (*sdk.RelayPresence, error) {
	p, ok, err := h.st.ResolvePresence(ctx, workspace, target, now, now.Add(-instanceAlive))
	if err != nil || !ok {
		return nil, err
	}
	sp := fromStorePresence(p)
	return &sp, nil
}

func (h *sharedRelay) publish(ctx context.Context, instance string, msgs []sdk.RelayBusMessage, now time.Time) (sdk.RelayBusPublishResult, error) {
	if err := h.touch(ctx, instance, now); err != nil {
		return sdk.RelayBusPublishResult{}, err
	}
	out := make([]store.BusMessage, len(msgs))
	for i, m := range msgs {
		body, err := json.Marshal(m)
		if err != nil {
			return sdk.RelayBusPublishResult{}, err
		}
		out[i] = store.BusMessage{To: m.To, Body: body}
	}
	refused, err := h.st.PublishBus(ctx, out, inboxCap, now.Add(-instanceAlive), now)
	if err != nil {
		return sdk.RelayBusPublishResult{}, err
	}
	res := sdk.RelayBusPublishResult{Rejected: []sdk.RelayBusRejection{}}
	for i, r := range refused {
		if r == nil {
			res.Accepted++
			continue
		}
		reason := r.Error()
		if errors.Is(r, store.ErrUnknownInstance) {
			reason = "unknown relay instance"
		}
		res.Rejected = append(res.Rejected, sdk.RelayBusRejection{Index: i, Reason: reason})
	}
	return res, nil
}

func (h *sharedRelay) pull(ctx context.Context, instance string, ack int64, n int, wait time.Duration) ([]sdk.RelayBusMessage, error) {
	wake := h.waitFor(instance)
	defer h.doneWaiting(instance)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	recheck := time.NewTicker(pullRecheck)
	defer recheck.Stop()
	for {
		if err := h.touch(ctx, instance, h.now()); err != nil {
			return nil, err
		}
		got, err := h.st.PullBus(ctx, instance, ack, n)
		if err != nil {
			return nil, err
		}
		if len(got) > 0 {
			out := make([]sdk.RelayBusMessage, 0, len(got))
			for _, m := range got {
				var bm sdk.RelayBusMessage
				if err := json.Unmarshal(m.Body, &bm); err != nil {
					continue // not ours to deliver; acknowledged with the rest
				}
				bm.Seq = m.Seq
				out = append(out, bm)
			}
			if len(out) == 0 {
				// Only undecodable messages: acknowledge them and go on.
				ack = got[len(got)-1].Seq
				continue
			}
			return out, nil
		}
		if wait <= 0 {
			return nil, nil
		}
		select {
		case <-wake:
		case <-recheck.C:
		case <-deadline.C:
			return nil, nil
		case <-ctx.Done():
			return nil, nil
		}
	}
}

func (h *sharedRelay) waitFor(instance string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.wake[instance]
	if ch == nil {
		ch = make(chan struct{}, 1)
		h.wake[instance] = ch
	}
	h.waiters[instance]++
	return ch
}

func (h *sharedRelay) doneWaiting(instance string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiters[instance]--; h.waiters[instance] <= 0 {
		delete(h.waiters, instance)
		delete(h.wake, instance)
	}
}

// signal wakes instance's waiting pull (all of them for "").
func (h *sharedRelay) signal(instance string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, ch := range h.wake {
		if instance == "" || id == instance {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// RunShared keeps this replica in step with the others while ctx lasts:
// it listens for notices (bus wake-ups, credential revocations), checks
// the credential generation now and then in case a notice was missed,
// and prunes relay instances gone for good. Until it runs, or while its
// listener is disconnected, credentials are not cached (every request
// reads the store), so a revocation on another replica is never missed.
// On SQLite it returns at once: one process has nothing to share.
func (s *Server) RunShared(ctx context.Context) {
	sh := sharedOf(s.st)
	if sh == nil {
		return
	}
	relay, _ := s.relay.state.(*sharedRelay)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sh.Listen(ctx, store.Listener{
			Notice: func(channel, payload string) {
				switch channel {
				case store.NoticeRelayBus:
					if relay != nil {
						relay.signal(payload)
					}
				case store.NoticeGeneration:
					if payload == generationCredentials {
						s.creds.dropAll()
					}
				}
			},
			Up: func(up bool) {
				if up {
					// Notices may have been missed while down.
					s.creds.dropAll()
					if relay != nil {
						relay.signal("")
					}
				}
				s.creds.setTrusted(up)
			},
		}, store.NoticeRelayBus, store.NoticeGeneration)
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last int64 = -1
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		if g, err := sh.Generation(ctx, generationCredentials); err == nil {
			if last >= 0 && g != last {
				s.creds.dropAll()
			}
			last = g
		}
		if n%60 == 0 {
			if _, err := sh.PruneRelay(ctx, s.opts.Now().Add(-instanceIdle)); err != nil && ctx.Err() == nil {
				s.log.Warn("prune relay state", "err", err)
			}
		}
	}
}
