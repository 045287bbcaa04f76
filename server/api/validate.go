package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"reeve.dev/reeve/internal/jsonschema"
	"reeve.dev/reeve/server/sdk"
)

// validator holds the compiled request schemas.
type validator struct {
	schemas map[string]*jsonschema.Schema
}

// newValidator compiles every request schema within a document laid out
// like the OpenAPI document, so "#/components/schemas/X" references resolve
// the same way in both.
func newValidator() (*validator, error) {
	comps := map[string]any{}
	for name, s := range requestSchemas() {
		comps[name] = toAny(s)
	}
	for name, s := range responseSchemas() {
		comps[name] = toAny(s)
	}
	root, err := jsonschema.Compile(map[string]any{
		"$schema":    "https://json-schema.org/draft/2020-12/schema",
		"components": map[string]any{"schemas": comps},
	})
	if err != nil {
		return nil, fmt.Errorf("compile schemas: %w", err)
	}
	v := &validator{schemas: map[string]*jsonschema.Schema{}}
	for name := range requestSchemas() {
		sch, err := root.Sub("#/components/schemas/" + name)
		if err != nil {
			return nil, fmt.Errorf("compile schema %s: %w", name, err)
		}
		v.schemas[name] = sch
	}
	return v, nil
}

// validate checks v against the named schema and lists field errors, one
// per failure (each alternative's, for a value that matches none).
func (v *validator) validate(name string, doc any) []sdk.ErrorDetail {
	sch, ok := v.schemas[name]
	if !ok {
		return []sdk.ErrorDetail{{Message: "no schema " + name}}
	}
	var out []sdk.ErrorDetail
	seen := map[sdk.ErrorDetail]bool{}
	add := func(d sdk.ErrorDetail) {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	var walk func(errs []*jsonschema.Error)
	walk = func(errs []*jsonschema.Error) {
		for _, e := range errs {
			field := e.Pointer()
			switch {
			case len(e.Branches) > 0 && !slices.ContainsFunc(e.Branches, func(b []*jsonschema.Error) bool { return len(b) == 0 }):
				for _, b := range e.Branches {
					walk(b)
				}
			case e.Keyword == "required":
				// Point at the missing field rather than its parent.
				for _, p := range e.Names {
					add(sdk.ErrorDetail{Field: field + "/" + p, Message: "is required"})
				}
			default:
				add(sdk.ErrorDetail{Field: field, Message: e.Message})
			}
		}
	}
	walk(sch.Validate(doc))
	sort.SliceStable(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}

// readBody enforces the size limit, the media type and JSON syntax, then
// validates the route's schema. Routes without a documented body ignore
// whatever is sent.
func (s *Server) readBody(c *call) error {
	if c.route.Body == nil || rawBodyRoutes()[c.route.OperationID] {
		return nil
	}
	r := c.r
	data, err := io.ReadAll(http.MaxBytesReader(c.w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, sdk.CodeBodyTooLarge, "the body exceeds the limit of %d bytes", s.opts.MaxBodyBytes)
		}
		return errorf(http.StatusBadRequest, sdk.CodeInvalidJSON, "read body: %v", err)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		if c.route.Body.Required {
			return invalid(sdk.ErrorDetail{Field: "", Message: "a JSON object body is required"})
		}
		c.body = map[string]any{}
		c.rawBody = []byte("{}")
		return nil
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return errorf(http.StatusUnsupportedMediaType, sdk.CodeUnsupportedMedia, "the body must be application/json, got %q", ct)
		}
	}
	doc, err := jsonschema.Decode(data)
	if err != nil {
		return errorf(http.StatusBadRequest, sdk.CodeInvalidJSON, "the body is not valid JSON: %v", err)
	}
	if details := s.val.validate(c.route.Body.Schema, doc); len(details) > 0 {
		return invalid(details...)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		// Every request schema is an object; this is a guard for new ones.
		return invalid(sdk.ErrorDetail{Message: "the body must be a JSON object"})
	}
	c.body = obj
	c.rawBody = data
	return nil
}

// checkQuery validates the documented integer query parameters.
func checkQuery(c *call) error {
	var details []sdk.ErrorDetail
	q := c.r.URL.Query()
	for _, p := range c.route.Query {
		v := q.Get(p.Name)
		if v == "" || p.Type != "integer" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			details = append(details, sdk.ErrorDetail{Field: "query:" + p.Name, Message: "must be an integer"})
			continue
		}
		if n < 0 {
			details = append(details, sdk.ErrorDetail{Field: "query:" + p.Name, Message: "must not be negative"})
		}
	}
	if len(details) > 0 {
		return invalid(details...)
	}
	return nil
}

// queryInt reads an integer query parameter already validated.
func queryInt(c *call, name string, def int64) int64 {
	if v := c.r.URL.Query().Get(name); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return def
}

// toAny round-trips a schema through JSON types: schema maps become
// map[string]any and ints float64, as a decoded JSON document has them.
func toAny(s schema) any {
	var conv func(v any) any
	conv = func(v any) any {
		switch x := v.(type) {
		case schema:
			m := make(map[string]any, len(x))
			for k, e := range x {
				m[k] = conv(e)
			}
			return m
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = conv(e)
			}
			return out
		case int:
			return float64(x)
		default:
			return v
		}
	}
	return conv(s)
}
