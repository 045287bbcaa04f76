package sdk

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Bodies of the internal relay routes (spec 4.11): admission, presence and
// the message bus that lets several relay instances route between a daemon
// on one and a client on another. Presence and bus calls carry the relay
// service credential (rvr_), not a relay JWT.

// RelayValidateRequest asks whether the bearer relay JWT admits a
// connection.
type RelayValidateRequest struct {
	WorkspaceID     string `json:"workspace_id,omitempty"`
	RuntimeTargetID string `json:"runtime_target_id,omitempty"`
	Role            string `json:"role,omitempty"`
}

// RelayAdmission is the answer of a successful validation: who connects,
// as what, to which runtime target.
type RelayAdmission struct {
	Valid           bool   `json:"valid"`
	WorkspaceID     string `json:"workspace_id"`
	Role            string `json:"role"`
	Subject         string `json:"subject"`
	RuntimeTargetID string `json:"runtime_target_id,omitempty"`
}

// RelayValidateResponse wraps RelayAdmission.
type RelayValidateResponse struct {
	Data RelayAdmission `json:"data"`
}

// RelayPresence is one daemon connection held by a relay instance.
type RelayPresence struct {
	WorkspaceID     string `json:"workspace_id"`
	RuntimeTargetID string `json:"runtime_target_id"`
	// ConnID names the daemon connection; a newer connection of the same
	// runtime target replaces an older one, wherever each is held.
	ConnID      string    `json:"conn_id"`
	ConnectedAt time.Time `json:"connected_at"`
	InstanceID  string    `json:"instance_id,omitempty"`
}

// RelayPresenceUpsertRequest reports the daemon connections an instance
// holds (Entries) and those it lost (Removed). Entries expire after
// TTLSeconds unless reported again.
type RelayPresenceUpsertRequest struct {
	InstanceID string          `json:"instance_id"`
	Entries    []RelayPresence `json:"entries,omitempty"`
	Removed    []RelayPresence `json:"removed,omitempty"`
	TTLSeconds int             `json:"ttl_seconds,omitempty"`
}

// RelayPresenceUpsertResult lists the reported connections the instance
// must drop: Superseded ones were replaced by a newer connection of the
// same runtime target, Revoked ones belong to a detached install.
type RelayPresenceUpsertResult struct {
	Accepted   int             `json:"accepted"`
	Superseded []RelayPresence `json:"superseded"`
	Revoked    []RelayPresence `json:"revoked"`
}

// RelayPresenceUpsertResponse wraps RelayPresenceUpsertResult.
type RelayPresenceUpsertResponse struct {
	Data RelayPresenceUpsertResult `json:"data"`
}

// RelayPresenceResolveRequest asks which instance holds a runtime target's
// daemon.
type RelayPresenceResolveRequest struct {
	WorkspaceID     string `json:"workspace_id"`
	RuntimeTargetID string `json:"runtime_target_id"`
}

// RelayPresenceResolveResult answers it; Found is false when no live
// instance holds the target.
type RelayPresenceResolveResult struct {
	Found    bool           `json:"found"`
	Presence *RelayPresence `json:"presence"`
}

// RelayPresenceResolveResponse wraps RelayPresenceResolveResult.
type RelayPresenceResolveResponse struct {
	Data RelayPresenceResolveResult `json:"data"`
}

// RelayBusMessage is one relay envelope on its way to another instance,
// with the routing the envelope itself does not carry. Payload is the
// envelope's opaque p, never decoded.
type RelayBusMessage struct {
	To              string `json:"to"`
	From            string `json:"from,omitempty"`
	Type            string `json:"t"`
	Channel         string `json:"ch,omitempty"`
	WorkspaceID     string `json:"workspace_id,omitempty"`
	RuntimeTargetID string `json:"runtime_target_id,omitempty"`
	ConnID          string `json:"conn_id,omitempty"`
	Payload         string `json:"p,omitempty"`
	Reason          string `json:"reason,omitempty"`
	// Seq numbers a pulled message in its instance's inbox; the next
	// pull acknowledges it (RelayBusPullRequest.Ack). 0 when the bus does
	// not number messages (one server's memory).
	Seq int64 `json:"seq,omitempty"`
}

// Bus message types beyond the envelope's open, data, close and error:
// the server tells an instance that its daemon connection was replaced
// elsewhere.
const RelayBusReplaced = "replaced"

// RelayBusPublishRequest publishes messages to their instances' inboxes.
type RelayBusPublishRequest struct {
	InstanceID string            `json:"instance_id"`
	Messages   []RelayBusMessage `json:"messages"`
}

// RelayBusRejection names a message the bus did not accept: its
// destination is unknown (never pulled, or gone) or its inbox is full.
type RelayBusRejection struct {
	Index  int    `json:"index"`
	Reason string `json:"reason"`
}

// RelayBusPublishResult counts accepted messages and lists rejected ones.
type RelayBusPublishResult struct {
	Accepted int                 `json:"accepted"`
	Rejected []RelayBusRejection `json:"rejected"`
}

// RelayBusPublishResponse wraps RelayBusPublishResult.
type RelayBusPublishResponse struct {
	Data RelayBusPublishResult `json:"data"`
}

// RelayBusPullRequest takes up to Max messages from the instance's inbox,
// waiting up to WaitMS for the first. Ack is the highest Seq the instance
// has received: those messages are done, and the others are answered again
// (a pull whose answer was lost loses nothing).
type RelayBusPullRequest struct {
	InstanceID string `json:"instance_id"`
	WaitMS     int    `json:"wait_ms,omitempty"`
	Max        int    `json:"max,omitempty"`
	Ack        int64  `json:"ack,omitempty"`
}

// RelayBusPullResult is what was taken, in publish order.
type RelayBusPullResult struct {
	Messages []RelayBusMessage `json:"messages"`
}

// RelayBusPullResponse wraps RelayBusPullResult.
type RelayBusPullResponse struct {
	Data RelayBusPullResult `json:"data"`
}

// RelayValidate calls POST /api/runtime/internal/relay/validate with the
// client's Token as the relay JWT to check.
func (c *Client) RelayValidate(ctx context.Context, req RelayValidateRequest) (RelayAdmission, error) {
	var r RelayValidateResponse
	_, err := c.Do(ctx, http.MethodPost, "/api/runtime/internal/relay/validate", req, &r)
	return r.Data, err
}

// RelayPresenceUpsert reports presence; Token is the relay service credential.
func (c *Client) RelayPresenceUpsert(ctx context.Context, req RelayPresenceUpsertRequest) (RelayPresenceUpsertResult, error) {
	var r RelayPresenceUpsertResponse
	_, err := c.Do(ctx, http.MethodPost, "/api/runtime/internal/relay/presence/upsert", req, &r)
	return r.Data, err
}

// RelayPresenceResolve finds the instance holding a runtime target.
func (c *Client) RelayPresenceResolve(ctx context.Context, req RelayPresenceResolveRequest) (RelayPresenceResolveResult, error) {
	var r RelayPresenceResolveResponse
	_, err := c.Do(ctx, http.MethodPost, "/api/runtime/internal/relay/presence/resolve", req, &r)
	return r.Data, err
}

// RelayBusPublish publishes messages to other instances.
func (c *Client) RelayBusPublish(ctx context.Context, req RelayBusPublishRequest) (RelayBusPublishResult, error) {
	var r RelayBusPublishResponse
	_, err := c.Do(ctx, http.MethodPost, "/api/runtime/internal/relay/bus/publish", req, &r)
	return r.Data, err
}

// RelayBusPull long-polls the instance's inbox.
func (c *Client) RelayBusPull(ctx context.Context, req RelayBusPullRequest) (RelayBusPullResult, error) {
	var r RelayBusPullResponse
	_, err := c.Do(ctx, http.MethodPost, "/api/runtime/internal/relay/bus/pull", req, &r)
	return r.Data, err
}

// RelayWSURL is the relay upgrade URL of spec 5 rule 3 for a relay base URL
// (http, https, ws or wss) without the token.
func RelayWSURL(relayURL, role, workspaceID, runtimeTargetID string) (string, error) {
	u, err := url.Parse(relayURL)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	}
	u.Path = stripSlash(u.Path) + "/ws"
	q := url.Values{"role": {role}, "workspaceId": {workspaceID}}
	if runtimeTargetID != "" {
		q.Set("runtimeTargetId", runtimeTargetID)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func stripSlash(p string) string {
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}
