package api

import (
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
// Presence and the bus live in this server's memory: they describe live
// connections, which a restart ends anyway. Relay instances that share
// them must talk to the same server process.

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

// relayHub holds presence and the instances' inboxes.
type relayHub struct {
	keyOnce sync.Once
	key     []byte
	keyErr  error

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

func newRelayHub() *relayHub {
	return &relayHub{presence: map[presenceKey]presenceEntry{}, inboxes: map[string]*inbox{}}
}

// inbox returns an instance's inbox, creating it; the caller holds mu.
func (h *relayHub) inbox(id string, now time.Time) *inbox {
	ib := h.inboxes[id]
	if ib == nil {
		ib = &inbox{wake: make(chan struct{}, 1)}
		h.inboxes[id] = ib
	}
	ib.seen = now
	return ib
}

// sweep forgets idle instances and expired presence; the caller holds mu.
func (h *relayHub) sweep(now time.Time) {
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

	h := s.relay
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	h.inbox(req.InstanceID, now)
	for _, e := range req.Removed {
		k := presenceKey{e.WorkspaceID, e.RuntimeTargetID}
		if cur, ok := h.presence[k]; ok && cur.p.InstanceID == req.InstanceID && cur.p.ConnID == e.ConnID {
			delete(h.presence, k)
		}
	}
	for _, e := range live {
		e.InstanceID = req.InstanceID
		k := presenceKey{e.WorkspaceID, e.RuntimeTargetID}
		cur, ok := h.presence[k]
		switch {
		case !ok || now.After(cur.expires) || cur.p.ConnID == e.ConnID:
		case e.ConnectedAt.Before(cur.p.ConnectedAt):
			// An older connection still reporting: a newer one replaced it.
			res.Superseded = append(res.Superseded, e)
			continue
		default:
			// A newer connection replaces the one another instance holds.
			if cur.p.InstanceID != req.InstanceID {
				if ib := h.inboxes[cur.p.InstanceID]; ib != nil && len(ib.msgs) < inboxCap {
					ib.msgs = append(ib.msgs, sdk.RelayBusMessage{To: cur.p.InstanceID, Type: sdk.RelayBusReplaced,
						WorkspaceID: cur.p.WorkspaceID, RuntimeTargetID: cur.p.RuntimeTargetID, ConnID: cur.p.ConnID})
					ib.signal()
				}
			}
		}
		h.presence[k] = presenceEntry{p: e, expires: now.Add(ttl)}
		res.Accepted++
	}
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
	now := s.opts.Now()
	h := s.relay
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.presence[presenceKey{req.WorkspaceID, req.RuntimeTargetID}]
	if !ok || now.After(e.expires) || h.inboxes[e.p.InstanceID] == nil {
		return 200, sdk.RelayPresenceResolveResponse{Data: sdk.RelayPresenceResolveResult{}}, nil
	}
	p := e.p
	return 200, sdk.RelayPresenceResolveResponse{Data: sdk.RelayPresenceResolveResult{Found: true, Presence: &p}}, nil
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
	now := s.opts.Now()
	res := sdk.RelayBusPublishResult{Rejected: []sdk.RelayBusRejection{}}
	h := s.relay
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	h.inbox(req.InstanceID, now)
	for i, m := range req.Messages {
		m.From = req.InstanceID // the bus, not the sender, says who sent it
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
	var timer <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	h := s.relay
	for {
		now := s.opts.Now()
		h.mu.Lock()
		h.sweep(now)
		ib := h.inbox(req.InstanceID, now)
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
			return 200, sdk.RelayBusPullResponse{Data: sdk.RelayBusPullResult{Messages: out}}, nil
		}
		wake := ib.wake
		h.mu.Unlock()
		if timer == nil {
			break
		}
		select {
		case <-wake:
			continue
		case <-timer:
		case <-c.ctx().Done():
		}
		break
	}
	return 200, sdk.RelayBusPullResponse{Data: sdk.RelayBusPullResult{Messages: []sdk.RelayBusMessage{}}}, nil
}
