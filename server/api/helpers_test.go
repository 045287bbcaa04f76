package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// answer is a raw HTTP answer.
type answer struct {
	Status int
	Body   []byte
	Header http.Header
	JSON   map[string]any
}

func (a answer) errCode() string {
	e, _ := a.JSON["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// checkEnvelope asserts a is an ErrorEnvelope with all four members.
func (a answer) checkEnvelope(t *testing.T, what string) {
	t.Helper()
	var env struct {
		Error *struct {
			Code      *string            `json:"code"`
			Message   *string            `json:"message"`
			Details   *[]sdk.ErrorDetail `json:"details"`
			RequestID *string            `json:"request_id"`
		} `json:"error"`
	}
	if err := json.Unmarshal(a.Body, &env); err != nil || env.Error == nil || env.Error.Code == nil || env.Error.Message == nil || env.Error.Details == nil || env.Error.RequestID == nil || *env.Error.Code == "" || *env.Error.RequestID == "" {
		t.Fatalf("%s: not an ErrorEnvelope (status %d): %s", what, a.Status, a.Body)
	}
	if ct := a.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s: content type %q", what, ct)
	}
}

func do(t testing.TB, s *servertest.Server, method, path, token string, body any, headers ...string) answer {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	a := answer{Status: resp.StatusCode, Body: data, Header: resp.Header}
	_ = json.Unmarshal(data, &a.JSON)
	return a
}

func expect(t *testing.T, a answer, status int, what string) answer {
	t.Helper()
	if a.Status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, a.Status, status, a.Body)
	}
	if status >= 400 {
		a.checkEnvelope(t, what)
	}
	return a
}

func dataOf(a answer) map[string]any {
	d, _ := a.JSON["data"].(map[string]any)
	return d
}
