package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// apiError is an error that knows its status, code and details. Handlers
// return it; anything else becomes a 500 internal_error with no detail.
type apiError struct {
	Status  int
	Code    string
	Message string
	Details []sdk.ErrorDetail
	// Extra members written beside "error" (e.g. the preflight result).
	Extra map[string]any
	// Header values to set (Allow, Retry-After, WWW-Authenticate).
	Header http.Header
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func unauthenticated(msg string) *apiError {
	e := errorf(http.StatusUnauthorized, sdk.CodeUnauthenticated, "%s", msg)
	e.Header = http.Header{"WWW-Authenticate": {`Bearer realm="reeve"`}}
	return e
}

func forbidden(format string, args ...any) *apiError {
	return errorf(http.StatusForbidden, sdk.CodeForbidden, format, args...)
}

func notFound(format string, args ...any) *apiError {
	return errorf(http.StatusNotFound, sdk.CodeNotFound, format, args...)
}

func invalid(details ...sdk.ErrorDetail) *apiError {
	return &apiError{Status: http.StatusUnprocessableEntity, Code: sdk.CodeValidation, Message: "the request is not valid", Details: details}
}

// writeError answers err as an ErrorEnvelope. It is the only way errors
// leave the server, so every status has the same shape.
func writeError(w http.ResponseWriter, requestID string, err error) {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
	case errors.Is(err, store.ErrUnavailable):
		// The database is down or the connection was lost: the request may
		// succeed on a retry (writes were not committed, or are idempotent).
		ae = errorf(http.StatusServiceUnavailable, sdk.CodeUnavailable, "the database is unavailable; retry")
		ae.Header = http.Header{"Retry-After": {"1"}}
	default:
		ae = errorf(http.StatusInternalServerError, sdk.CodeInternal, "internal error")
	}
	for k, vs := range ae.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	details := ae.Details
	if details == nil {
		details = []sdk.ErrorDetail{}
	}
	body := map[string]any{"error": sdk.ErrorBody{Code: ae.Code, Message: ae.Message, Details: details, RequestID: requestID}}
	for k, v := range ae.Extra {
		body[k] = v
	}
	writeJSON(w, ae.Status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	buf, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		buf = []byte(`{"error":{"code":"internal_error","message":"encode answer","details":[],"request_id":""}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(buf, '\n'))
}
