package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"reeve.dev/reeve/server/sdk"
)

// Control is what a relay asks of the control plane: admission of a
// connection, presence of its daemon connections, and the bus to other
// relay instances. HTTPControl speaks the internal relay routes; tests may
// substitute their own.
type Control interface {
	// Validate checks a relay JWT against what the connection asks for; a
	// refusal is an *AdmissionError carrying the HTTP status to answer.
	Validate(ctx context.Context, token string, req sdk.RelayValidateRequest) (sdk.RelayAdmission, error)
	Upsert(ctx context.Context, req sdk.RelayPresenceUpsertRequest) (sdk.RelayPresenceUpsertResult, error)
	Resolve(ctx context.Context, req sdk.RelayPresenceResolveRequest) (sdk.RelayPresenceResolveResult, error)
	Publish(ctx context.Context, req sdk.RelayBusPublishRequest) (sdk.RelayBusPublishResult, error)
	Pull(ctx context.Context, req sdk.RelayBusPullRequest) (sdk.RelayBusPullResult, error)
}

// AdmissionError is a refused upgrade: Status is 401 (missing, forged or
// expired JWT), 403 (wrong workspace, role or runtime target, detached
// install), 422 (a malformed request) or 503 (the control plane is
// unreachable).
type AdmissionError struct {
	Status  int
	Message string
}

func (e *AdmissionError) Error() string {
	return fmt.Sprintf("relay admission: %d %s", e.Status, e.Message)
}

// HTTPControl is Control over the control plane's REST routes.
type HTTPControl struct {
	// ServerURL is the control plane origin.
	ServerURL string
	// Credential is the relay service credential (rvr_...) for presence
	// and bus calls.
	Credential string
	// HTTP defaults to a client with sensible timeouts; long polls set
	// their own deadline through the context.
	HTTP *http.Client
}

var _ Control = (*HTTPControl)(nil)

func (h *HTTPControl) client(token string) *sdk.Client {
	hc := h.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	return &sdk.Client{BaseURL: strings.TrimRight(h.ServerURL, "/"), Token: token, HTTP: hc}
}

var defaultHTTP = &http.Client{Transport: &http.Transport{
	Proxy:               nil,
	MaxIdleConns:        64,
	MaxIdleConnsPerHost: 64,
	IdleConnTimeout:     90 * time.Second,
}}

// Validate calls POST /api/runtime/internal/relay/validate with the JWT as
// the bearer credential.
func (h *HTTPControl) Validate(ctx context.Context, token string, req sdk.RelayValidateRequest) (sdk.RelayAdmission, error) {
	a, err := h.client(token).RelayValidate(ctx, req)
	if err == nil {
		if !a.Valid {
			return a, &AdmissionError{Status: http.StatusForbidden, Message: "the control plane did not admit this connection"}
		}
		return a, nil
	}
	var ae *sdk.APIError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusUnprocessableEntity, http.StatusNotFound:
			st := ae.Status
			if st == http.StatusNotFound {
				st = http.StatusForbidden // an unknown workspace is not one this token may join
			}
			return a, &AdmissionError{Status: st, Message: ae.Body.Message}
		case http.StatusTooManyRequests:
			return a, &AdmissionError{Status: http.StatusTooManyRequests, Message: ae.Body.Message}
		}
	}
	return a, &AdmissionError{Status: http.StatusServiceUnavailable, Message: "the control plane could not validate the token: " + err.Error()}
}

func (h *HTTPControl) Upsert(ctx context.Context, req sdk.RelayPresenceUpsertRequest) (sdk.RelayPresenceUpsertResult, error) {
	return h.client(h.Credential).RelayPresenceUpsert(ctx, req)
}

func (h *HTTPControl) Resolve(ctx context.Context, req sdk.RelayPresenceResolveRequest) (sdk.RelayPresenceResolveResult, error) {
	return h.client(h.Credential).RelayPresenceResolve(ctx, req)
}

func (h *HTTPControl) Publish(ctx context.Context, req sdk.RelayBusPublishRequest) (sdk.RelayBusPublishResult, error) {
	return h.client(h.Credential).RelayBusPublish(ctx, req)
}

func (h *HTTPControl) Pull(ctx context.Context, req sdk.RelayBusPullRequest) (sdk.RelayBusPullResult, error) {
	return h.client(h.Credential).RelayBusPull(ctx, req)
}
