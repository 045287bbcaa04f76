package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Integration events (docs/integrations.md): each verified inbound
// delivery is a record of this collection, keyed by provider and delivery
// id (the dedupe), holding the payload, how it was verified and what the
// workspace's routes made of it.

const integrationEventCollection = "integration-events"

func integrationEventRoutes() []Route {
	tag := "Integration Events"
	ie := "/api/integration-events"
	return []Route{
		placeholder("GET", ie, tag).query(qInt("after", "Sequence cursor"), qInt("limit", "Page size"), qStr("kind", "Only events of this normalized kind"), qStr("provider", "Only events of this provider")).
			summary("Verified inbound deliveries, oldest first, with their routing"),
		placeholder("POST", ie, tag).role("admin").body("IntegrationEventCreateRequest", true).success(201).errs(409).
			summary("Record an event by hand (a provider without webhooks, a replay from elsewhere); it is routed like a delivery"),
		placeholder("GET", ie+"/{integrationEvent}", tag).errs(404).summary("One event: payload, verification, routing"),
		placeholder("GET", ie+"/{integrationEvent}/audit-packet", tag).errs(404).
			summary("The event, its verification, the routes that matched and what they created, signed like session evidence (keys at /api/.well-known/jwks.json)"),
		placeholder("POST", ie+"/{integrationEvent}/retry-routing", tag).role("admin").errs(404).
			summary("Evaluate the event against the current routes again; a route that already created work is not run twice"),
	}
}

func integrationEventRequestSchemas() map[string]schema {
	return map[string]schema{
		"IntegrationEventCreateRequest": object([]string{"provider", "kind", "delivery_id"}, schema{
			"provider":    enum(sdk.ProviderCodeHost, sdk.ProviderChat, sdk.ProviderTracker, sdk.ProviderPaymentsThin),
			"kind":        schema{"type": "string", "minLength": 1, "maxLength": 100},
			"action":      schema{"type": "string", "maxLength": 100},
			"delivery_id": schema{"type": "string", "minLength": 1, "maxLength": 200},
			"subject": object(nil, schema{
				"title": tString(), "body": tString(), "url": tString(), "repo": tString(), "added_label": tString(),
				"labels": arrayOf(tString()),
			}),
			"payload": tObject(),
		}),
	}
}

func (s *Server) integrationEventHandlers() map[string]handlerFunc {
	return map[string]handlerFunc{
		"getApiIntegrationEvents":                              s.listEvents,
		"postApiIntegrationEvents":                             s.createEvent,
		"getApiIntegrationEventsIntegrationEvent":              s.getEvent,
		"getApiIntegrationEventsIntegrationEventAuditPacket":   s.auditPacket,
		"postApiIntegrationEventsIntegrationEventRetryRouting": s.retryRouting,
	}
}

func decodeEvent(r store.Record) (sdk.IntegrationEvent, error) {
	var ev sdk.IntegrationEvent
	if err := json.Unmarshal(r.Attributes, &ev); err != nil {
		return ev, err
	}
	ev.ID, ev.WorkspaceID = r.ID, r.WorkspaceID
	if ev.Routing.Matched == nil {
		ev.Routing.Matched = []sdk.RouteMatch{}
	}
	return ev, nil
}

func (c *call) event() (store.Record, sdk.IntegrationEvent, error) {
	id := c.r.PathValue("integrationEvent")
	r, err := c.s.st.Record(c.ctx(), c.ws.ID, integrationEventCollection, id)
	if errors.Is(err, store.ErrNotFound) {
		return r, sdk.IntegrationEvent{}, notFound("no integration event %q", id)
	}
	if err != nil {
		return r, sdk.IntegrationEvent{}, err
	}
	ev, err := decodeEvent(r)
	return r, ev, err
}

func (s *Server) listEvents(c *call) (int, any, error) {
	limit := int(queryInt(c, "limit", 100))
	kind, provider := c.r.URL.Query().Get("kind"), c.r.URL.Query().Get("provider")
	recs, err := s.st.Records(c.ctx(), c.ws.ID, integrationEventCollection, store.ListOptions{After: queryInt(c, "after", 0), Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	out := sdk.IntegrationEventCollectionResponse{Data: []sdk.IntegrationEvent{}}
	for _, r := range recs {
		ev, err := decodeEvent(r)
		if err != nil {
			return 0, nil, err
		}
		if (kind != "" && ev.Kind != kind) || (provider != "" && ev.Provider != provider) {
			continue
		}
		out.Data = append(out.Data, ev)
	}
	out.Meta.Count = len(out.Data)
	if limit > 0 && len(recs) == limit {
		out.Meta.NextAfter = recs[len(recs)-1].Seq
	}
	return http.StatusOK, out, nil
}

func (s *Server) getEvent(c *call) (int, any, error) {
	_, ev, err := c.event()
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, sdk.IntegrationEventResponse{Data: ev}, nil
}

func (s *Server) createEvent(c *call) (int, any, error) {
	var ev sdk.IntegrationEvent
	if err := c.decode(&ev); err != nil {
		return 0, nil, err
	}
	now := c.now()
	ev.ReceivedAt, ev.WorkspaceID = now, c.ws.ID
	ev.Verification = sdk.Verification{Scheme: "api", Result: "recorded by " + c.p.Actor(), VerifiedAt: now}
	ev.Routing = sdk.Routing{Matched: []sdk.RouteMatch{}}
	attrs, err := json.Marshal(ev)
	if err != nil {
		return 0, nil, err
	}
	rec := store.Record{ID: newRecordID(), WorkspaceID: c.ws.ID, Collection: integrationEventCollection, NaturalKey: ev.Provider + ":" + ev.DeliveryID,
		Attributes: attrs, CreatedBy: c.p.Actor(), CreatedAt: now, UpdatedAt: now}
	if err := s.st.CreateRecord(c.ctx(), &rec, c.audit("integration_event.create", rec.ID, map[string]any{"kind": ev.Kind})); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "the %s delivery %s is already recorded", ev.Provider, ev.DeliveryID)
		}
		return 0, nil, err
	}
	routed, err := s.routeEvent(c, c.ws.ID, rec.ID)
	if err != nil {
		return 0, nil, err
	}
	ev.ID, ev.Routing = rec.ID, routed
	return http.StatusCreated, sdk.IntegrationEventResponse{Data: ev}, nil
}

func (s *Server) retryRouting(c *call) (int, any, error) {
	r, _, err := c.event()
	if err != nil {
		return 0, nil, err
	}
	if _, err := s.routeEvent(c, c.ws.ID, r.ID); err != nil {
		return 0, nil, err
	}
	_, ev, err := c.event()
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, sdk.IntegrationEventResponse{Data: ev}, nil
}

// auditPacket is the event's evidence: what arrived, how it was verified,
// which routes matched and what they created, signed with the evidence
// key so it can be checked offline like a session export.
func (s *Server) auditPacket(c *call) (int, any, error) {
	if s.opts.Evidence == nil {
		return 0, nil, errorf(http.StatusServiceUnavailable, sdk.CodeUnavailable, "this server has no evidence signing key")
	}
	r, ev, err := c.event()
	if err != nil {
		return 0, nil, err
	}
	created := []map[string]string{}
	for _, m := range ev.Routing.Matched {
		if m.WorkflowRunID != "" || m.Created != "" {
			created = append(created, map[string]string{"kind": m.Created, "id": m.WorkflowRunID, "status": m.Status, "route": m.Route})
		}
	}
	packet := map[string]any{
		"format":       "reeve.integration-event-audit/v1",
		"workspace_id": c.ws.ID,
		"issued_at":    c.now(),
		"event": map[string]any{"id": r.ID, "provider": ev.Provider, "kind": ev.Kind, "action": ev.Action, "delivery_id": ev.DeliveryID,
			"received_at": ev.ReceivedAt, "subject": ev.Subject, "payload": ev.Payload},
		"verification": ev.Verification,
		"routing":      ev.Routing,
		"rules": slices.Collect(func(yield func(string) bool) {
			for _, m := range ev.Routing.Matched {
				if !yield(m.Resource + "@" + m.Version + ":" + m.File + "#" + m.Route) {
					return
				}
			}
		}),
		"created": created,
	}
	payload, err := json.Marshal(packet)
	if err != nil {
		return 0, nil, err
	}
	signed, err := s.opts.Evidence.Sign(c.ctx(), payload)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, sdk.EvidenceEnvelope{Data: signed}, nil
}
