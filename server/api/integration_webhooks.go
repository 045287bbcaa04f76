package api

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/webhooks"
	"reeve.dev/reeve/server/webhooksig"
)

// Integration webhook endpoints (docs/integrations.md). One collection
// holds both directions: an inbound source (a provider posts to
// /api/webhooks/{provider}/events, verified with the endpoint's secret)
// and an outbound receiver (the dispatcher posts reeve's events to its
// URL, signed with Standard Webhooks). Secrets are sealed under the
// master key and shown once.

const iwBase = "/api/integration-webhooks"

// DefaultSecretGrace is how long a rotated-out secret keeps working.
const DefaultSecretGrace = 24 * time.Hour

func integrationWebhookRoutes() []Route {
	tag := "Integration Webhooks"
	ep := iwBase + "/{endpoint}"
	return []Route{
		placeholder("GET", iwBase, tag).query(qInt("after", "Sequence cursor"), qInt("limit", "Page size")).
			summary("The workspace's webhook endpoints, inbound sources and outbound receivers (secrets never shown)"),
		placeholder("POST", iwBase, tag).role("admin").body("IntegrationWebhookCreateRequest", true).success(201).errs(409).
			summary("Create an endpoint: outbound (url, events) or inbound (provider); the answer shows its secret once"),
		placeholder("DELETE", ep, tag).role("admin").noBody().errs(404).summary("Delete an endpoint; its undelivered messages are dead-lettered"),
		placeholder("GET", ep+"/deliveries", tag).query(qInt("after", "Attempt sequence cursor"), qInt("limit", "Page size")).errs(404).
			summary("Every delivery attempt of an outbound endpoint (status, latency, outcome) and its latest messages"),
		placeholder("POST", ep+"/provider-webhook-registration", tag).role("admin").errs(404).
			summary("Record the registration a provider needs for an inbound source (its hook id, events); answers what to register: URL, headers, events"),
		placeholder("POST", ep+"/repair-route-version", tag).role("admin").errs(404).
			summary("Move an outbound endpoint to the current payload version and re-queue its dead-lettered messages"),
		placeholder("POST", ep+"/rotate-secret", tag).role("admin").body("RotateSecretRequest", false).errs(404).
			summary("New secret, shown once; the previous one keeps signing or verifying for grace_seconds (default 86400)"),
		placeholder("POST", ep+"/test-delivery", tag).role("admin").success(201).errs(404, 422).
			summary("Queue a signed webhook.ping to an outbound endpoint; its attempts appear in deliveries"),
		placeholder("GET", iwBase+"/providers", tag).summary("The inbound providers and what each needs: path, signature scheme and headers, delivery id, event kinds"),
	}
}

func integrationRequestSchemas() map[string]schema {
	kinds := make([]string, 0, len(sdk.OutboundEventKinds)+1)
	kinds = append(append(kinds, "*"), sdk.OutboundEventKinds...)
	return map[string]schema{
		"IntegrationWebhookCreateRequest": object(nil, schema{
			"direction":   enum(webhooks.Outbound, webhooks.Inbound),
			"url":         schema{"type": "string", "maxLength": 2000},
			"events":      schema{"type": "array", "items": enum(kinds...), "minItems": 1, "maxItems": 32, "uniqueItems": true},
			"provider":    enum(sdk.ProviderCodeHost, sdk.ProviderChat, sdk.ProviderTracker, sdk.ProviderPaymentsThin),
			"secret":      described(schema{"type": "string", "minLength": 16, "maxLength": 200}, "Inbound: the secret the provider signs with (generated when absent)."),
			"description": schema{"type": "string", "maxLength": 500},
		}),
		"RotateSecretRequest": object(nil, schema{
			"grace_seconds": schema{"type": "integer", "minimum": 0, "maximum": 30 * 86400},
			"secret":        schema{"type": "string", "minLength": 16, "maxLength": 200},
		}),
	}
}

func (s *Server) integrationHandlers() map[string]handlerFunc {
	m := map[string]handlerFunc{
		"getApiIntegrationWebhooks":                                     s.listEndpoints,
		"postApiIntegrationWebhooks":                                    s.createEndpoint,
		"deleteApiIntegrationWebhooksEndpoint":                          s.deleteEndpoint,
		"getApiIntegrationWebhooksEndpointDeliveries":                   s.endpointDeliveries,
		"postApiIntegrationWebhooksEndpointProviderWebhookRegistration": s.registerProvider,
		"postApiIntegrationWebhooksEndpointRepairRouteVersion":          s.repairRouteVersion,
		"postApiIntegrationWebhooksEndpointRotateSecret":                s.rotateSecret,
		"postApiIntegrationWebhooksEndpointTestDelivery":                s.testDelivery,
		"getApiIntegrationWebhooksProviders":                            s.listProviders,
	}
	for k, v := range s.integrationEventHandlers() {
		m[k] = v
	}
	for k, v := range s.ingestHandlers() {
		m[k] = v
	}
	return m
}

func (s *Server) integrations() (store.Integrations, error) {
	if in, ok := s.st.(store.Integrations); ok {
		return in, nil
	}
	return nil, errors.New("api: the store does not keep integration webhooks")
}

func inboundKey(provider string) string { return "inbound:" + provider }

func (s *Server) ingestURL(ws, provider string) string {
	return s.opts.BaseURL + "/api/webhooks/" + provider + "/events?workspace=" + url.QueryEscape(ws)
}

func (s *Server) endpointView(r store.Record, ep webhooks.Endpoint) sdk.IntegrationWebhook {
	v := sdk.IntegrationWebhook{ID: r.ID, WorkspaceID: r.WorkspaceID, Direction: ep.Direction, Provider: ep.Provider, URL: ep.URL, Events: ep.Events,
		Description: ep.Description, Disabled: ep.Disabled, PayloadVersion: ep.PayloadVersion, SecretRotatedAt: ep.RotatedAt,
		RouteVersionRepairedAt: ep.RepairedAt, Registration: ep.Registration, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if ep.Direction == webhooks.Inbound {
		v.IngestURL = s.ingestURL(r.WorkspaceID, ep.Provider)
	}
	if len(ep.Secrets) > 1 {
		v.PreviousSecretExpires = ep.Secrets[1].Expires
	}
	return v
}

func (c *call) endpoint() (store.Record, webhooks.Endpoint, error) {
	id := c.r.PathValue("endpoint")
	r, err := c.s.st.Record(c.ctx(), c.ws.ID, store.WebhookEndpointCollection, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Record{}, webhooks.Endpoint{}, notFound("no webhook endpoint %q", id)
	}
	if err != nil {
		return store.Record{}, webhooks.Endpoint{}, err
	}
	ep, err := webhooks.Decode(r)
	return r, ep, err
}

func (s *Server) listEndpoints(c *call) (int, any, error) {
	limit := int(queryInt(c, "limit", 100))
	recs, err := s.st.Records(c.ctx(), c.ws.ID, store.WebhookEndpointCollection, store.ListOptions{After: queryInt(c, "after", 0), Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	out := sdk.IntegrationWebhookCollectionResponse{Data: []sdk.IntegrationWebhook{}}
	for _, r := range recs {
		ep, err := webhooks.Decode(r)
		if err != nil {
			return 0, nil, err
		}
		out.Data = append(out.Data, s.endpointView(r, ep))
	}
	out.Meta.Count = len(out.Data)
	if limit > 0 && len(recs) == limit {
		out.Meta.NextAfter = recs[len(recs)-1].Seq
	}
	return http.StatusOK, out, nil
}

// newInboundSecret is what reeve gives a provider to sign with when the
// user brings none: 32 random bytes, hex (a payments source gets the
// provider's whsec_ spelling).
func newInboundSecret(provider string) string {
	b := make([]byte, 32)
	rand.Read(b)
	if provider == sdk.ProviderPaymentsThin {
		return "whsec_" + hex.EncodeToString(b)
	}
	return hex.EncodeToString(b)
}

// plainSecret turns a shown secret into the key bytes the scheme uses:
// Standard Webhooks decodes whsec_ base64; the providers' schemes use the
// secret's text as the HMAC key.
func plainSecret(direction, secret string) ([]byte, error) {
	if direction == webhooks.Outbound {
		return webhooksig.ParseStandardSecret(secret)
	}
	return []byte(secret), nil
}

func (s *Server) createEndpoint(c *call) (int, any, error) {
	var req sdk.IntegrationWebhookCreateRequest
	if err := c.decode(&req); err != nil {
		return 0, nil, err
	}
	if req.Direction == "" {
		req.Direction = webhooks.Outbound
	}
	ep := webhooks.Endpoint{Direction: req.Direction, Description: req.Description}
	key := ""
	secret := req.Secret
	switch req.Direction {
	case webhooks.Outbound:
		if req.Provider != "" {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "provider", Message: "an outbound endpoint has no provider; did you mean direction inbound?"})
		}
		if req.URL == "" {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "url", Message: "an outbound endpoint needs a url"})
		}
		if len(req.Events) == 0 {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "events", Message: "name the event kinds to deliver, or [\"*\"]"})
		}
		if _, err := s.hooks.Targets().CheckURL(c.ctx(), req.URL); err != nil {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "url", Message: err.Error()})
		}
		if secret == "" {
			secret = webhooksig.NewStandardSecret()
		} else if _, err := webhooksig.ParseStandardSecret(secret); err != nil || !strings.HasPrefix(secret, "whsec_") {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "secret", Message: "an outbound secret is whsec_<base64>; leave it out to have one generated"})
		}
		ep.URL, ep.Events, ep.PayloadVersion = req.URL, req.Events, webhooks.PayloadVersion
	case webhooks.Inbound:
		if req.Provider == "" {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "provider", Message: "an inbound endpoint names its provider: " + strings.Join(providerNames(), ", ")})
		}
		if req.URL != "" || len(req.Events) > 0 {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "url", Message: "an inbound endpoint has no url or events: the provider posts to its ingest_url"})
		}
		if secret == "" {
			secret = newInboundSecret(req.Provider)
		}
		ep.Provider = req.Provider
		key = inboundKey(req.Provider)
	}
	id := newRecordID()
	plain, err := plainSecret(ep.Direction, secret)
	if err != nil {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "secret", Message: err.Error()})
	}
	now := c.now()
	sealed, err := webhooks.SealSecret(s.opts.Secrets, id, plain, now)
	if err != nil {
		return 0, nil, err
	}
	ep.Secrets = []webhooks.Secret{sealed}
	attrs, err := json.Marshal(ep)
	if err != nil {
		return 0, nil, err
	}
	rec := store.Record{ID: id, WorkspaceID: c.ws.ID, Collection: store.WebhookEndpointCollection, NaturalKey: key, Attributes: attrs, CreatedBy: c.p.Actor(), CreatedAt: now, UpdatedAt: now}
	if err := s.st.CreateRecord(c.ctx(), &rec, c.audit("integration_webhook.create", id, map[string]any{"direction": ep.Direction, "provider": ep.Provider, "url": ep.URL, "events": ep.Events})); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "the workspace already has an inbound %s source; rotate its secret or delete it first", ep.Provider)
		}
		return 0, nil, err
	}
	v := s.endpointView(rec, ep)
	v.Secret = secret
	return http.StatusCreated, sdk.IntegrationWebhookResponse{Data: v}, nil
}

func (s *Server) deleteEndpoint(c *call) (int, any, error) {
	r, ep, err := c.endpoint()
	if err != nil {
		return 0, nil, err
	}
	if err := s.st.DeleteRecord(c.ctx(), c.ws.ID, store.WebhookEndpointCollection, r.ID, c.audit("integration_webhook.delete", r.ID, nil)); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, notFound("no webhook endpoint %q", r.ID)
		}
		return 0, nil, err
	}
	return http.StatusOK, sdk.IntegrationWebhookResponse{Data: s.endpointView(r, ep)}, nil
}

func (s *Server) endpointDeliveries(c *call) (int, any, error) {
	r, _, err := c.endpoint()
	if err != nil {
		return 0, nil, err
	}
	in, err := s.integrations()
	if err != nil {
		return 0, nil, err
	}
	limit := int(queryInt(c, "limit", 100))
	atts, err := in.WebhookAttempts(c.ctx(), c.ws.ID, r.ID, store.ListOptions{After: queryInt(c, "after", 0), Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	msgs, err := in.WebhookMessages(c.ctx(), c.ws.ID, r.ID, 50)
	if err != nil {
		return 0, nil, err
	}
	out := sdk.WebhookDeliveryCollectionResponse{Data: []sdk.WebhookDelivery{}, Messages: []sdk.WebhookMessageState{}}
	for _, a := range atts {
		out.Data = append(out.Data, sdk.WebhookDelivery{Seq: a.Seq, MessageID: a.MessageID, Kind: a.Kind, Attempt: a.Attempt, StatusCode: a.StatusCode,
			LatencyMS: a.Latency.Milliseconds(), Outcome: a.Outcome, Error: a.Error, AttemptedAt: a.AttemptedAt})
	}
	for _, m := range msgs {
		out.Messages = append(out.Messages, sdk.WebhookMessageState{ID: m.ID, Kind: m.Kind, State: m.State, Attempts: m.Attempts, NextAttemptAt: m.NextAttemptAt, LastError: m.LastError, CreatedAt: m.CreatedAt})
	}
	out.Meta.Count = len(out.Data)
	if limit > 0 && len(atts) == limit {
		out.Meta.NextAfter = atts[len(atts)-1].Seq
	}
	return http.StatusOK, out, nil
}

// updateEndpoint changes an endpoint's attributes in one transaction.
func (c *call) updateEndpoint(id, action string, fn func(*webhooks.Endpoint) error) (store.Record, webhooks.Endpoint, error) {
	var ep webhooks.Endpoint
	r, err := c.s.st.UpdateRecordIf(c.ctx(), c.ws.ID, store.WebhookEndpointCollection, id, func(r *store.Record) error {
		var err error
		if ep, err = webhooks.Decode(*r); err != nil {
			return err
		}
		if err := fn(&ep); err != nil {
			return err
		}
		b, err := json.Marshal(ep)
		if err != nil {
			return err
		}
		r.Attributes, r.UpdatedAt = b, c.now()
		return nil
	}, c.audit(action, id, nil))
	if errors.Is(err, store.ErrNotFound) {
		return store.Record{}, webhooks.Endpoint{}, notFound("no webhook endpoint %q", id)
	}
	return r, ep, err
}

func (s *Server) rotateSecret(c *call) (int, any, error) {
	r, cur, err := c.endpoint()
	if err != nil {
		return 0, nil, err
	}
	var req sdk.RotateSecretRequest
	if err := c.decode(&req); err != nil {
		return 0, nil, err
	}
	grace := DefaultSecretGrace
	if _, set := c.body["grace_seconds"]; set {
		grace = time.Duration(req.GraceSeconds) * time.Second
	}
	secret := req.Secret
	switch {
	case secret == "" && cur.Direction == webhooks.Outbound:
		secret = webhooksig.NewStandardSecret()
	case secret == "":
		secret = newInboundSecret(cur.Provider)
	case cur.Direction == webhooks.Outbound && !strings.HasPrefix(secret, "whsec_"):
		return 0, nil, invalid(sdk.ErrorDetail{Field: "secret", Message: "an outbound secret is whsec_<base64>"})
	}
	plain, err := plainSecret(cur.Direction, secret)
	if err != nil {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "secret", Message: err.Error()})
	}
	now := c.now()
	sealed, err := webhooks.SealSecret(s.opts.Secrets, r.ID, plain, now)
	if err != nil {
		return 0, nil, err
	}
	r, ep, err := c.updateEndpoint(r.ID, "integration_webhook.rotate_secret", func(ep *webhooks.Endpoint) error {
		ep.Rotate(sealed, now, grace)
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	v := s.endpointView(r, ep)
	v.Secret = secret
	return http.StatusOK, sdk.IntegrationWebhookResponse{Data: v}, nil
}

func (s *Server) repairRouteVersion(c *call) (int, any, error) {
	r, cur, err := c.endpoint()
	if err != nil {
		return 0, nil, err
	}
	if cur.Direction != webhooks.Outbound {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "endpoint", Message: "only an outbound endpoint has a payload version"})
	}
	from := cur.PayloadVersion
	now := c.now()
	r, ep, err := c.updateEndpoint(r.ID, "integration_webhook.repair_route_version", func(ep *webhooks.Endpoint) error {
		ep.PayloadVersion, ep.RepairedAt = webhooks.PayloadVersion, &now
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	in, err := s.integrations()
	if err != nil {
		return 0, nil, err
	}
	n, err := in.RetryDeadWebhooks(c.ctx(), c.ws.ID, r.ID, now)
	if err != nil {
		return 0, nil, err
	}
	s.hooks.Notify()
	return http.StatusOK, map[string]any{"data": s.endpointView(r, ep), "meta": map[string]any{"from_version": from, "to_version": webhooks.PayloadVersion, "requeued": n}}, nil
}

func (s *Server) testDelivery(c *call) (int, any, error) {
	r, ep, err := c.endpoint()
	if err != nil {
		return 0, nil, err
	}
	if ep.Direction != webhooks.Outbound {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "endpoint", Message: "a test delivery goes to an outbound endpoint; an inbound source receives from its provider"})
	}
	in, err := s.integrations()
	if err != nil {
		return 0, nil, err
	}
	m, err := in.EnqueueWebhook(c.ctx(), c.ws.ID, r.ID, store.OutboundEvent{Kind: sdk.EventPing, Data: map[string]any{"endpoint_id": r.ID, "requested_by": c.p.Actor()}}, c.now())
	if err != nil {
		return 0, nil, err
	}
	s.hooks.Notify()
	return http.StatusCreated, map[string]any{"data": sdk.WebhookMessageState{ID: m.ID, Kind: m.Kind, State: m.State, NextAttemptAt: m.NextAttemptAt, CreatedAt: m.CreatedAt}}, nil
}

func (s *Server) registerProvider(c *call) (int, any, error) {
	r, cur, err := c.endpoint()
	if err != nil {
		return 0, nil, err
	}
	if cur.Direction != webhooks.Inbound {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "endpoint", Message: "only an inbound source is registered with a provider"})
	}
	p, _ := providerByName(cur.Provider)
	now := c.now()
	reg := map[string]any{}
	for k, v := range c.body {
		reg[k] = v
	}
	reg["provider"] = p.Provider
	reg["url"] = s.ingestURL(r.WorkspaceID, p.Provider)
	reg["signature_header"] = p.SignatureHeader
	reg["event_kinds"] = p.EventKinds
	reg["recorded_at"] = now
	reg["recorded_by"] = c.p.Actor()
	r, ep, err := c.updateEndpoint(r.ID, "integration_webhook.provider_registration", func(ep *webhooks.Endpoint) error {
		ep.Registration = reg
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, sdk.IntegrationWebhookResponse{Data: s.endpointView(r, ep)}, nil
}

func (s *Server) listProviders(c *call) (int, any, error) {
	return http.StatusOK, sdk.WebhookProviderCollectionResponse{Data: slices.Clone(providers)}, nil
}

// newDispatcher builds the outbound dispatcher over the server's store;
// the host runs it (Dispatcher().Run).
func (s *Server) newDispatcher() (*webhooks.Dispatcher, error) {
	st, ok := s.st.(webhooks.Store)
	if !ok {
		return nil, errors.New("api: the store does not keep integration webhooks")
	}
	o := s.opts.Webhooks
	o.Store, o.Secrets = st, s.opts.Secrets
	if o.Logger == nil {
		o.Logger = s.log
	}
	if o.UserAgent == "" {
		o.UserAgent = "reeve-webhooks/" + s.opts.Version
	}
	if u, err := url.Parse(s.opts.BaseURL); err == nil && u.Host != "" {
		host := u.Host
		if u.Port() == "" {
			host += map[string]string{"http": ":80", "https": ":443"}[u.Scheme]
		}
		o.Targets.Self = append(o.Targets.Self, host)
	}
	return webhooks.New(o), nil
}

// Dispatcher is the outbound webhook dispatcher; the host runs it.
func (s *Server) Dispatcher() *webhooks.Dispatcher { return s.hooks }

// emit adds an outbound event to the audit entry of the change that causes
// it: the store writes the outbox messages in the change's transaction.
func emit(a store.AuditEntry, kind string, data any) store.AuditEntry {
	a.Emit = append(a.Emit, store.OutboundEvent{Kind: kind, Data: data})
	return a
}
