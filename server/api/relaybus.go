package api

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// The internal relay routes (spec 4.11): admission of a relay upgrade, and
// the presence and bus that let several relay instances route between a
// daemon on one and a client on another.
//
// Where presence and the bus live is a relayState: on SQLite (one server
// process) in this server's memory, the fast path; on PostgreSQL in the
// database (relayshared.go), so that relay instances talking to different
// replicas meet.

func (s *Server) relayBusHandlers() map[string]handlerFunc {
	return map[string]handlerFunc{
		// Replaces runtime.go's relayValidate: it also checks a client's
		// runtime target and answers the target the connection gets.
		"postApiRuntimeInternalRelayValidate":        s.relayAdmit,
		"postApiRuntimeInternalRelayPresenceUpsert":  s.presenceUpsert,
		"postApiRuntimeInternalRelayPresenceResolve": s.presenceResolve,
		"postApiRuntimeInternalRelayBusPublish":      s.busPublish,
		"postApiRuntimeInternalRelayBusPull":         s.busPull,
	}
}

const (
	// inboxCap bounds an instance's undelivered bus messages; beyond it a
	// publish is rejected and the publisher ends that channel.
	inboxCap = 16384
	// instanceIdle: an instance that neither pulls nor reports presence
	// for this long is gone, with its inbox and presence.
	instanceIdle = 2 * time.Minute
	maxPullWait  = 30 * time.Second
	maxPull      = 1024
)

// relayHub holds the relay service key and where presence and the bus
// live.
type relayHub struct {
	keyOnce sync.Once
	key     []byte
	keyErr  error

	state relayState
}

// relayState keeps presence and the instances' inboxes.
type relayState interface {
	// report records the daemon connections instance holds (live) and
	// lost (removed): it answers those of live that a newer connection
	// superseded, and how many it advertises.
	report(ctx context.Context, instance string, live, removed []sdk.RelayPresence, ttl time.Duration, now time.Time) (superseded []sdk.RelayPresence, accepted int, err error)
	// resolve finds the live daemon connection of a runtime target.
	resolve(ctx context.Context, workspace, target string, now time.Time) (*sdk.RelayPresence, error)
	publish(ctx context.Context, instance string, msgs []sdk.RelayBusMessage, now time.Time) (sdk.RelayBusPublishResult, error)
	// pull takes up to max messages for instance, after acknowledging
	// those up to ack, waiting up to wait for the first.
	pull(ctx context.Context, instance string, ack int64, max int, wait time.Duration) ([]sdk.RelayBusMessage, error)
}

func newRelayHub(s *Server) *relayHub {
	if sh := newSharedRelay(s); sh != nil {
		return &relayHub{state: sh}
	}
	return &relayHub{state: newMemRelay(s.opts.Now)}
}

// memRelay is relayState in one server's memory: it describes live
// connections, which a restart ends anyway.
type memRelay struct {
	now      func() time.Time
	mu       sync.Mutex
	presence map[presenceKey]presenceEntry
	inboxes  map[string]*inbox
	swept    time.Time
}

type presenceKey struct{ workspace, target string }

type presenceEntry struct {
	p       sdk.RelayPresence // with InstanceID
	expires time.Time
}

type inbox struct {
	msgs []sdk.RelayBusMessage
	wake chan struct{}
	seen time.Time
}

func newMemRelay(now func() time.Time) *memRelay {
	return &memRelay{now: now, presence: map[presenceKey]presenceEntry{}, inboxes: map[string]*inbox{}}
}

// inbox returns an instance's inbox, creating it; the caller holds mu.
func (h *memRelay) inbox(id string, now time.Time) *inbox {
	ib := h.inboxes[id]
	if ib == nil {
		ib = &inbox{wake: make(chan struct{}, 1)}
		h.inboxes[id] = ib
	}
	ib.seen = now
	return ib
}

// sweep forgets idle instances and expired presence; the caller holds mu.
func (h *memRelay) sweep(now time.Time) {
	if now.Sub(h.swept) < 10*time.Second {
		return
	}
	h.swept = now
	for id, ib := range h.inboxes {
		if now.Sub(ib.seen) > instanceIdle {
			delete(h.inboxes, id)
		}
	}
	for k, e := range h.presence {
		if now.After(e.expires) || h.inboxes[e.p.InstanceID] == nil {
			delete(h.presence, k)
		}
	}
}

func (ib *inbox) signal() {
	select {
	case ib.wake <- struct{}{}:
	default:
	}
}

func (h *memRelay) report(_ context.Context, instance string, live, removed []sdk.RelayPresence, ttl time.Duration, now time.Time) ([]sdk.RelayPresence, int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	h.inbox(instance, now)
	for _, e := range removed {
		k := presenceKey{e.WorkspaceID, e.RuntimeTargetID}
		if cur, ok := h.presence[k]; ok && cur.p.InstanceID == instance && cur.p.ConnID == e.ConnID {
			delete(h.presence, k)
		}
	}
	var superseded []sdk.RelayPresence
	accepted := 0
	for _, e := range live {
		e.InstanceID = instance
		k := presenceKey{e.WorkspaceID, e.RuntimeTargetID}
		cur, ok := h.presence[k]
		switch {
		case !ok || now.After(cur.expires) || cur.p.ConnID == e.ConnID:
		case e.ConnectedAt.Before(cur.p.ConnectedAt):
			// An older connection still reporting: a newer one replaced it.
			superseded = append(superseded, e)
			continue
		default:
			// A newer connection replaces the one another instance holds.
			if cur.p.InstanceID != instance {
				if ib := h.inboxes[cur.p.InstanceID]; ib != nil && len(ib.msgs) < inboxCap {
					ib.msgs = append(ib.msgs, replacedMessage(cur.p))
					ib.signal()
				}
			}
		}
		h.presence[k] = presenceEntry{p: e, expires: now.Add(ttl)}
		accepted++
	}
	return superseded, accepted, nil
}

// replacedMessage tells p's instance that a newer connection replaced p.
func replacedMessage(p sdk.RelayPresence) sdk.RelayBusMessage {
	return sdk.RelayBusMessage{To: p.InstanceID, Type: sdk.RelayBusReplaced,
		WorkspaceID: p.WorkspaceID, RuntimeTargetID: p.RuntimeTargetID, ConnID: p.ConnID}
}

func (h *memRelay) resolve(_ context.Context, workspace, target string, now time.Time) (*sdk.RelayPresence, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.presence[presenceKey{workspace, target}]
	if !ok || now.After(e.expires) || h.inboxes[e.p.InstanceID] == nil {
		return nil, nil
	}
	p := e.p
	return &p, nil
}

func (h *memRelay) publish(_ context.Context, instance string, msgs []sdk.RelayBusMessage, now time.Time) (sdk.RelayBusPublishResult, error) {
	res := sdk.RelayBusPublishResult{Rejected: []sdk.RelayBusRejection{}}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	h.inbox(instance, now)
	for i, m := range msgs {
		ib := h.inboxes[m.To]
		switch {
		case ib == nil:
			res.Rejected = append(res.Rejected, sdk.RelayBusRejection{Index: i, Reason: "unknown relay instance"})
		case len(ib.msgs) >= inboxCap:
			res.Rejected = append(res.Rejected, sdk.RelayBusRejection{Index: i, Reason: "the relay instance's inbox is full"})
		default:
			ib.msgs = append(ib.msgs, m)
			ib.signal()
			res.Accepted++
		}
	}
	return res, nil
}

// pull ignores ack: messages leave the inbox when pulled (one process,
// no answer lost between the store and the caller but the caller's own).
func (h *memRelay) pull(ctx context.Context, instance string, _ int64, n int, wait time.Duration) ([]sdk.RelayBusMessage, error) {
	var timer <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	for {
		now := h.now()
		h.mu.Lock()
		h.sweep(now)
		ib := h.inbox(instance, now)
		if len(ib.msgs) > 0 {
			k := min(n, len(ib.msgs))
			out := make([]sdk.RelayBusMessage, k)
			copy(out, ib.msgs)
			rest := copy(ib.msgs, ib.msgs[k:])
			clear(ib.msgs[rest:])
			ib.msgs = ib.msgs[:rest]
			if rest == 0 && cap(ib.msgs) > 1024 {
				ib.msgs = nil // an idle inbox keeps no buffer
			}
			h.mu.Unlock()
			return out, nil
		}
		wake := ib.wake
		h.mu.Unlock()
		if timer == nil {
			return nil, nil
		}
		select {
		case <-wake:
			continue
		case <-timer:
		case <-ctx.Done():
		}
		return nil, nil
	}
}

// relayServicePrincipal accepts the relay service credential, derived from
// a secret in the store (shared by every replica of the database).
func (s *Server) relayServicePrincipal(c *call, tok string) (auth.Principal, error) {
	h := s.relay
	h.keyOnce.Do(func() {
		h.key, h.keyErr = s.secret(c.ctx(), auth.RelayServiceSecret, randomKey)
	})
	if h.keyErr != nil {
		return auth.Principal{}, h.keyErr
	}
	if !auth.VerifyRelayService(h.key, tok) {
		return auth.Principal{}, errBadCredential
	}
	return auth.Principal{Kind: auth.KindRelayService}, nil
}

func randomKey() ([]byte, error) {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	return b, err
}

// decodeBody reads the raw body into v: 422 when it does not fit.
func decodeBody(c *call, v any) error {
	if err := json.Unmarshal(c.rawBody, v); err != nil {
		return invalid(sdk.ErrorDetail{Message: "the body does not have the expected shape: " + err.Error()})
	}
	return nil
}

// relayAdmit answers whether the bearer relay JWT (verified by
// authentication) admits the connection the relay describes, and which
// runtime target it joins: a daemon always its own install; a client the
// one it names, which must be a machine of the workspace, or the
// workspace's only machine when it names none.
func (s *Server) relayAdmit(c *call) (int, any, error) {
	var req sdk.RelayValidateRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	if req.WorkspaceID != "" && req.WorkspaceID != c.p.Workspace {
		return 0, nil, forbidden("the relay token is for another workspace")
	}
	if req.Role != "" && req.Role != c.p.Role {
		return 0, nil, forbidden("the relay token is for role %s", c.p.Role)
	}
	target := req.RuntimeTargetID
	switch c.p.Role {
	case auth.RelayRoleDaemon:
		if target != "" && target != c.p.InstallID {
			return 0, nil, forbidden("the relay token is for another runtime target")
		}
		target = c.p.InstallID
		if _, err := s.st.Install(c.ctx(), c.p.Workspace, target); errors.Is(err, store.ErrNotFound) {
			return 0, nil, forbidden("the install of this relay token has been detached")
		} else if err != nil {
			return 0, nil, err
		}
	case auth.RelayRoleClient:
		if target == "" {
			ins, err := s.st.Installs(c.ctx(), c.p.Workspace)
			if err != nil {
				return 0, nil, err
			}
			if len(ins) != 1 {
				return 0, nil, invalid(sdk.ErrorDetail{Field: "/runtime_target_id", Message: "is required: the workspace does not have exactly one machine"})
			}
			target = ins[0].ID
		} else if _, err := s.st.Install(c.ctx(), c.p.Workspace, target); errors.Is(err, store.ErrNotFound) {
			return 0, nil, forbidden("the runtime target is not a machine of this workspace")
		} else if err != nil {
			return 0, nil, err
		}
	}
	return 200, sdk.RelayValidateResponse{Data: sdk.RelayAdmission{
		Valid: true, WorkspaceID: c.p.Workspace, Role: c.p.Role, Subject: c.p.InstallID, RuntimeTargetID: target,
	}}, nil
}

func (s *Server) presenceUpsert(c *call) (int, any, error) {
	var req sdk.RelayPresenceUpsertRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	if req.InstanceID == "" {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/instance_id", Message: "is required"})
	}
	for i, e := range append(append([]sdk.RelayPresence(nil), req.Entries...), req.Removed...) {
		if e.WorkspaceID == "" || e.RuntimeTargetID == "" || e.ConnID == "" {
			return 0, nil, invalid(sdk.ErrorDetail{Message: "presence entry " + itoa(int64(i)) + " needs workspace_id, runtime_target_id and conn_id"})
		}
	}
	ttl := time.Duration(req.TTLSeconds) * time.Second
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	ttl = min(max(ttl, 5*time.Second), 5*time.Minute)
	now := s.opts.Now()
	res := sdk.RelayPresenceUpsertResult{Superseded: []sdk.RelayPresence{}, Revoked: []sdk.RelayPresence{}}

	// A detached install's connection is dropped, not advertised.
	var live []sdk.RelayPresence
	for _, e := range req.Entries {
		_, err := s.st.Install(c.ctx(), e.WorkspaceID, e.RuntimeTargetID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			res.Revoked = append(res.Revoked, e)
			req.Removed = append(req.Removed, e)
		case err != nil:
			return 0, nil, err
		default:
			live = append(live, e)
		}
	}

	superseded, accepted, err := s.relay.state.report(c.ctx(), req.InstanceID, live, req.Removed, ttl, now)
	if err != nil {
		return 0, nil, err
	}
	res.Superseded = append(res.Superseded, superseded...)
	res.Accepted = accepted
	return 200, sdk.RelayPresenceUpsertResponse{Data: res}, nil
}

func (s *Server) presenceResolve(c *call) (int, any, error) {
	var req sdk.RelayPresenceResolveRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	if req.WorkspaceID == "" || req.RuntimeTargetID == "" {
		return 0, nil, invalid(sdk.ErrorDetail{Message: "workspace_id and runtime_target_id are required"})
	}
	p, err := s.relay.state.resolve(c.ctx(), req.WorkspaceID, req.RuntimeTargetID, s.opts.Now())
	if err != nil {
		return 0, nil, err
	}
	if p == nil {
		return 200, sdk.RelayPresenceResolveResponse{Data: sdk.RelayPresenceResolveResult{}}, nil
	}
	return 200, sdk.RelayPresenceResolveResponse{Data: sdk.RelayPresenceResolveResult{Found: true, Presence: p}}, nil
}

var busTypes = map[string]bool{"open": true, "data": true, "close": true, "error": true}

func (s *Server) busPublish(c *call) (int, any, error) {
	var req sdk.RelayBusPublishRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	if req.InstanceID == "" {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/instance_id", Message: "is required"})
	}
	for i, m := range req.Messages {
		if m.To == "" || !busTypes[m.Type] {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "/messages/" + itoa(int64(i)), Message: "needs to and a type t of open, data, close or error"})
		}
	}
	for i := range req.Messages {
		req.Messages[i].From = req.InstanceID // the bus, not the sender, says who sent it
		req.Messages[i].Seq = 0
	}
	res, err := s.relay.state.publish(c.ctx(), req.InstanceID, req.Messages, s.opts.Now())
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.RelayBusPublishResponse{Data: res}, nil
}

func (s *Server) busPull(c *call) (int, any, error) {
	var req sdk.RelayBusPullRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	if req.InstanceID == "" {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/instance_id", Message: "is required"})
	}
	wait := min(max(time.Duration(req.WaitMS)*time.Millisecond, 0), maxPullWait)
	n := req.Max
	if n <= 0 || n > maxPull {
		n = maxPull
	}
	out, err := s.relay.state.pull(c.ctx(), req.InstanceID, req.Ack, n, wait)
	if err != nil {
		return 0, nil, err
	}
	if out == nil {
		out = []sdk.RelayBusMessage{}
	}
	return 200, sdk.RelayBusPullResponse{Data: sdk.RelayBusPullResult{Messages: out}}, nil
}
