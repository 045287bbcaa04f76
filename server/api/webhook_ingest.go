package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/webhooks"
	"reeve.dev/reeve/server/webhooksig"
)

// Webhook ingestion (docs/integrations.md). A provider cannot hold a user
// token, so a delivery names its workspace in the URL it was registered
// with — ?workspace=<ULID> (or the X-Reeve-Workspace header) — and proves
// itself with the signature of its source's secret. The order is fixed:
// throttle, size limit, signature, JSON, dedupe, store, route. Every
// refusal before the signature passes is 401, whatever the reason, so a
// caller without the secret learns nothing about the workspace.

// DefaultWebhookRate is how many deliveries per minute one source of one
// workspace may post before 429.
const DefaultWebhookRate = 600

// providers says what each inbound source needs; the headers are the ones
// the real providers send.
var providers = []sdk.WebhookProvider{
	{Provider: sdk.ProviderCodeHost, IngestPath: "/api/webhooks/code-host/events", Scheme: "hmac-sha256 of the body, hex, after sha256=",
		SignatureHeader: "X-Hub-Signature-256", DeliveryID: "header X-GitHub-Delivery", EventKinds: []string{"issues", "issue_comment", "pull_request", "ping"},
		Notes: "The event kind is the X-GitHub-Event header. Register the ingest URL with content type application/json and the endpoint's secret."},
	{Provider: sdk.ProviderChat, IngestPath: "/api/webhooks/chat/events", Scheme: "v0=hex(hmac-sha256 of v0:<timestamp>:<body>), 5-minute tolerance",
		SignatureHeader: "X-Slack-Signature", TimestampHeader: "X-Slack-Request-Timestamp", DeliveryID: "body event_id", EventKinds: []string{"message", "app_mention"},
		Notes: "The URL verification challenge is answered after the signature is checked."},
	{Provider: sdk.ProviderTracker, IngestPath: "/api/webhooks/tracker/events", Scheme: "hmac-sha256 of the body, hex; body webhookTimestamp within 5 minutes",
		SignatureHeader: "Linear-Signature", DeliveryID: "header Linear-Delivery", EventKinds: []string{"issue.created", "issue.updated", "issue.removed", "comment.created"}},
	{Provider: sdk.ProviderPaymentsThin, IngestPath: "/api/webhooks/payments-thin/events", Scheme: "t=<unix>,v1=hex(hmac-sha256 of <t>.<body>), 5-minute tolerance",
		SignatureHeader: "Stripe-Signature", DeliveryID: "body id", EventKinds: []string{"any thin event type, e.g. v1.billing.meter.error_report_triggered"},
		Notes: "Thin events carry only a reference; the billing state itself arrives at /api/webhooks/payments/events."},
}

func providerNames() []string {
	out := make([]string, len(providers))
	for i, p := range providers {
		out[i] = p.Provider
	}
	return out
}

func providerByName(name string) (sdk.WebhookProvider, bool) {
	for _, p := range providers {
		if p.Provider == name {
			return p, true
		}
	}
	return sdk.WebhookProvider{}, false
}

// rawBodyRoutes read their own body: a signature covers the bytes as
// sent, and is checked before the JSON is. Made on first use: every command
// of the binary runs package init, and few serve the API.
var rawBodyRoutes = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{paymentsWebhookOp: true}
	for _, p := range providers {
		m[OperationID("POST", p.IngestPath)] = true
	}
	return m
})

func (s *Server) ingestHandlers() map[string]handlerFunc {
	m := map[string]handlerFunc{}
	for _, p := range providers {
		m[OperationID("POST", p.IngestPath)] = s.ingest(p.Provider)
	}
	return m
}

// ingestRoutes are the four ingestion routes of this package; the billing
// webhook (/api/webhooks/payments/events) is not one of them.
func ingestRoutes() []Route {
	var out []Route
	for _, p := range providers {
		out = append(out, placeholder("POST", p.IngestPath, "Webhooks").success(200, 201).errs(413, 429).
			query(qStr("workspace", "The workspace (ULID) whose inbound source verifies the delivery; or the X-Reeve-Workspace header")).
			summary("A "+p.Provider+" delivery, verified with the workspace's inbound source secret ("+p.SignatureHeader+"); 201 new event, 200 replay of a delivery id, 401 bad signature, 413 body over the limit, 422 not JSON, 429 throttled"))
	}
	return out
}

var errBadDelivery = unauthenticated("the delivery is not signed by a configured source of this workspace")

type delivery struct {
	provider string
	ws       string
	body     []byte
	doc      map[string]any
	kind     string
	action   string
	id       string
	subject  sdk.EventSubject
	verif    sdk.Verification
}

func (s *Server) ingest(provider string) handlerFunc {
	return func(c *call) (int, any, error) {
		in, err := s.integrations()
		if err != nil {
			return 0, nil, err
		}
		d := &delivery{provider: provider}
		d.ws = c.r.URL.Query().Get("workspace")
		if d.ws == "" {
			d.ws = c.r.Header.Get(WorkspaceHeader)
		}
		if !validULID(d.ws) {
			return 0, nil, errBadDelivery
		}
		now := c.now()
		window := now.Truncate(time.Minute)
		hits, err := in.ThrottleHit(c.ctx(), d.ws, provider, window)
		if err != nil {
			return 0, nil, err
		}
		if hits > int64(s.webhookRate()) {
			e := errorf(http.StatusTooManyRequests, sdk.CodeRateLimited, "more than %d %s deliveries this minute for this workspace; retry later", s.webhookRate(), provider)
			e.Header = http.Header{"Retry-After": {strconv.Itoa(int(window.Add(time.Minute).Sub(now).Seconds()) + 1)}}
			return 0, nil, e
		}
		d.body, err = io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, s.opts.MaxBodyBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return 0, nil, errorf(http.StatusRequestEntityTooLarge, sdk.CodeBodyTooLarge, "the delivery exceeds the limit of %d bytes", s.opts.MaxBodyBytes)
			}
			return 0, nil, errorf(http.StatusBadRequest, sdk.CodeInvalidJSON, "read body: %v", err)
		}
		src, err := s.st.RecordByKey(c.ctx(), d.ws, store.WebhookEndpointCollection, inboundKey(provider))
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, errBadDelivery
		}
		if err != nil {
			return 0, nil, err
		}
		ep, err := webhooks.Decode(src)
		if err != nil {
			return 0, nil, err
		}
		if ep.Disabled {
			return 0, nil, errBadDelivery
		}
		keys, err := ep.LiveSecrets(s.opts.Secrets, src.ID, now)
		if err != nil {
			return 0, nil, err
		}
		if err := d.verify(c, keys, now); err != nil {
			s.log.Info("webhook refused", "provider", provider, "workspace", d.ws, "err", err)
			return 0, nil, errBadDelivery
		}
		// Signed: from here the sender is the provider, and a body it
		// cannot have meant is its bug, told as 422.
		if err := json.Unmarshal(d.body, &d.doc); err != nil || d.doc == nil {
			return 0, nil, invalid(sdk.ErrorDetail{Message: "the delivery is not a JSON object"})
		}
		if challenge, ok := chatChallenge(provider, d.doc); ok {
			return http.StatusOK, map[string]any{"data": sdk.WebhookIngestResponse{Kind: "url_verification", Challenge: challenge}}, nil
		}
		if err := d.normalize(c.r.Header, now); err != nil {
			return 0, nil, err
		}
		// Verified and identified: what the delivery causes from here is
		// done as the provider's webhook, not as nobody.
		c.p = auth.Principal{Kind: auth.KindWebhook, Workspace: d.ws, Provider: provider, DeliveryID: d.id}
		return s.storeEvent(c, d)
	}
}

func (s *Server) webhookRate() int {
	if s.opts.WebhookRate > 0 {
		return s.opts.WebhookRate
	}
	return DefaultWebhookRate
}

func (d *delivery) verify(c *call, keys [][]byte, now time.Time) error {
	h := c.r.Header
	try := func(check func(key []byte) error) error {
		var last error = webhooksig.ErrMissing
		for i, k := range keys {
			if last = check(k); last == nil {
				d.verif.Secret = "current"
				if i > 0 {
					d.verif.Secret = "previous"
				}
				return nil
			}
			if !errors.Is(last, webhooksig.ErrMismatch) {
				return last // malformed, missing or stale: another key will not help
			}
		}
		return last
	}
	d.verif.Result, d.verif.VerifiedAt = "verified", now
	switch d.provider {
	case sdk.ProviderCodeHost:
		d.verif.Scheme = "code-host sha256 hmac"
		return try(func(k []byte) error { return webhooksig.VerifyCodeHost(k, d.body, h.Get("X-Hub-Signature-256")) })
	case sdk.ProviderChat:
		d.verif.Scheme = "chat v0 timestamped hmac"
		return try(func(k []byte) error {
			return webhooksig.VerifyChat(k, d.body, h.Get("X-Slack-Request-Timestamp"), h.Get("X-Slack-Signature"), now, 0)
		})
	case sdk.ProviderTracker:
		d.verif.Scheme = "tracker sha256 hmac"
		return try(func(k []byte) error { return webhooksig.VerifyTracker(k, d.body, h.Get("Linear-Signature")) })
	case sdk.ProviderPaymentsThin:
		d.verif.Scheme = "payments t,v1 timestamped hmac"
		return try(func(k []byte) error {
			_, err := webhooksig.VerifyPayments(k, d.body, h.Get("Stripe-Signature"), now, 0)
			return err
		})
	}
	return fmt.Errorf("unknown provider %q", d.provider)
}

func chatChallenge(provider string, doc map[string]any) (string, bool) {
	if provider != sdk.ProviderChat || str(doc, "type") != "url_verification" {
		return "", false
	}
	return str(doc, "challenge"), true
}

// str reads a string at a path of nested objects.
func str(m map[string]any, path ...string) string {
	var cur any = m
	for _, p := range path {
		o, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = o[p]
	}
	switch v := cur.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

func sub(m map[string]any, key string) map[string]any {
	o, _ := m[key].(map[string]any)
	return o
}

// labelNames reads labels as the providers send them: a list of objects
// with a name, or of strings.
func labelNames(v any) []string {
	var out []string
	switch l := v.(type) {
	case []any:
		for _, it := range l {
			switch x := it.(type) {
			case string:
				out = append(out, x)
			case map[string]any:
				if n, ok := x["name"].(string); ok {
					out = append(out, n)
				}
			}
		}
	case map[string]any: // the tracker wraps lists: {"nodes": [...]}
		return labelNames(l["nodes"])
	}
	return out
}

var pastTense = map[string]string{"create": "created", "update": "updated", "remove": "removed"}

// normalize finds the delivery id, the normalized kind and the subject
// routing reads. A delivery without an id cannot be deduplicated: 422.
func (d *delivery) normalize(h http.Header, now time.Time) error {
	doc := d.doc
	switch d.provider {
	case sdk.ProviderCodeHost:
		d.id, d.kind, d.action = h.Get("X-GitHub-Delivery"), h.Get("X-GitHub-Event"), str(doc, "action")
		if d.kind == "" {
			return invalid(sdk.ErrorDetail{Field: "header:X-GitHub-Event", Message: "the event kind header is missing"})
		}
		item := sub(doc, "issue")
		if d.kind == "pull_request" {
			item = sub(doc, "pull_request")
		}
		if item != nil {
			d.subject = sdk.EventSubject{Title: str(item, "title"), Body: str(item, "body"), URL: str(item, "html_url"), Labels: labelNames(item["labels"])}
		}
		if d.kind == "issue_comment" {
			d.subject.Body = str(doc, "comment", "body")
			d.subject.URL = str(doc, "comment", "html_url")
		}
		d.subject.Repo = str(doc, "repository", "full_name")
		d.subject.AddedLabel = str(doc, "label", "name")
	case sdk.ProviderChat:
		d.id, d.kind = str(doc, "event_id"), str(doc, "event", "type")
		d.subject = sdk.EventSubject{Body: str(doc, "event", "text"), Repo: str(doc, "event", "channel")}
		if d.kind == "" {
			return invalid(sdk.ErrorDetail{Field: "event.type", Message: "the chat event has no type"})
		}
	case sdk.ProviderTracker:
		d.id, d.action = h.Get("Linear-Delivery"), str(doc, "action")
		typ := strings.ToLower(str(doc, "type"))
		if typ == "" || d.action == "" {
			return invalid(sdk.ErrorDetail{Field: "type", Message: "the tracker event needs type and action"})
		}
		act := d.action
		if p, ok := pastTense[act]; ok {
			act = p
		}
		d.kind = typ + "." + act
		if ts, ok := doc["webhookTimestamp"].(float64); ok {
			if err := webhooksig.CheckFresh(time.UnixMilli(int64(ts)), now, 0); err != nil {
				return unauthenticated("the tracker delivery is stale: " + err.Error())
			}
		}
		data := sub(doc, "data")
		d.subject = sdk.EventSubject{Title: str(data, "title"), Body: str(data, "description"), URL: str(doc, "url"), Labels: labelNames(data["labels"])}
		if d.subject.URL == "" {
			d.subject.URL = str(data, "url")
		}
	case sdk.ProviderPaymentsThin:
		d.id, d.kind = str(doc, "id"), str(doc, "type")
		if d.kind == "" {
			return invalid(sdk.ErrorDetail{Field: "type", Message: "the payments event has no type"})
		}
	}
	if d.id == "" || len(d.id) > 200 {
		return invalid(sdk.ErrorDetail{Field: "delivery_id", Message: "the delivery has no usable id, so it cannot be deduplicated"})
	}
	return nil
}

func (s *Server) storeEvent(c *call, d *delivery) (int, any, error) {
	key := d.provider + ":" + d.id
	if prev, err := s.st.RecordByKey(c.ctx(), d.ws, integrationEventCollection, key); err == nil {
		return http.StatusOK, map[string]any{"data": sdk.WebhookIngestResponse{EventID: prev.ID, Kind: d.kind, Duplicate: true}}, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return 0, nil, err
	}
	now := c.now()
	ev := sdk.IntegrationEvent{Provider: d.provider, Kind: d.kind, Action: d.action, DeliveryID: d.id, Subject: d.subject, Verification: d.verif,
		Payload: d.doc, ReceivedAt: now, WorkspaceID: d.ws}
	ev.Routing.Matched = []sdk.RouteMatch{}
	attrs, err := json.Marshal(ev)
	if err != nil {
		return 0, nil, err
	}
	rec := store.Record{ID: newRecordID(), WorkspaceID: d.ws, Collection: integrationEventCollection, NaturalKey: key, Attributes: attrs,
		CreatedBy: c.p.Actor(), CreatedAt: now, UpdatedAt: now}
	audit := c.audit("integration_event.received", rec.ID, map[string]any{"kind": d.kind, "secret": d.verif.Secret})
	audit.WorkspaceID = d.ws
	if err := s.st.CreateRecord(c.ctx(), &rec, audit); err != nil {
		if errors.Is(err, store.ErrConflict) {
			// A concurrent copy of the same delivery won.
			prev, _ := s.st.RecordByKey(c.ctx(), d.ws, integrationEventCollection, key)
			return http.StatusOK, map[string]any{"data": sdk.WebhookIngestResponse{EventID: prev.ID, Kind: d.kind, Duplicate: true}}, nil
		}
		return 0, nil, err
	}
	ev.ID = rec.ID
	routed, err := s.routeEvent(c, d.ws, rec.ID)
	if err != nil {
		// The event is stored; retry-routing can route it later.
		s.log.Warn("route integration event", "event", rec.ID, "err", err)
	}
	return http.StatusCreated, map[string]any{"data": sdk.WebhookIngestResponse{EventID: rec.ID, Kind: d.kind, Matched: len(routed.Matched)}}, nil
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
