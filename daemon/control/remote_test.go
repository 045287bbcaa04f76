package control

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/wire"
)

// remoteFunc is a Remote made of funcs.
type remoteFunc struct {
	unlock func(int) wire.RemoteStatus
	status func() wire.RemoteStatus
}

func (r remoteFunc) Unlock(ttl int) wire.RemoteStatus { return r.unlock(ttl) }
func (r remoteFunc) Status() wire.RemoteStatus        { return r.status() }

func TestRemoteUnlockIsLocalOnly(t *testing.T) {
	var got []int
	until := time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC)
	r := remoteFunc{
		unlock: func(ttl int) wire.RemoteStatus {
			got = append(got, ttl)
			return wire.RemoteStatus{Link: wire.RelayConnected, UnlockedUntil: until}
		},
		status: func() wire.RemoteStatus { return wire.RemoteStatus{Link: wire.RelayConnected, Locked: true} },
	}
	api := newTestAPI(t, Options{Remote: r, AllowedHosts: []string{"devbox.lan"}, AllowedOrigins: []string{"https://app.example"}})
	send := func(method, path, remoteAddr, host string, hdr map[string]string, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.RemoteAddr, req.Host = remoteAddr, host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		return rec
	}
	call := func(remoteAddr, host string, hdr map[string]string, body string) *httptest.ResponseRecorder {
		return send(http.MethodPost, "/api/remote/unlock", remoteAddr, host, hdr, body)
	}

	rec := call("127.0.0.1:50000", "127.0.0.1:7070", nil, `{"ttl_seconds":600}`)
	var st wire.RemoteStatus
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &st) != nil || !st.UnlockedUntil.Equal(until) {
		t.Fatalf("loopback unlock: %d %s", rec.Code, rec.Body)
	}
	if rec := call("[::1]:50000", "localhost:7070", nil, ""); rec.Code != 200 {
		t.Fatalf("IPv6 loopback unlock without a body: %d %s", rec.Code, rec.Body)
	}
	if rec := call("@", "localhost:7070", nil, `{}`); rec.Code != 200 {
		t.Fatalf("unix socket unlock: %d %s", rec.Code, rec.Body)
	}
	if len(got) != 3 || got[0] != 600 || got[1] != 0 || got[2] != 0 {
		t.Fatalf("unlock calls %v", got)
	}

	// A LAN peer, even with an allowed Host, and a web page, even on an
	// allowed origin, are refused.
	if rec := call("192.168.1.20:40000", "devbox.lan", nil, `{}`); rec.Code != 403 || errorCode(t, rec) != wire.CodeForbiddenHost {
		t.Fatalf("LAN unlock: %d %s", rec.Code, rec.Body)
	}
	if rec := call("127.0.0.1:50000", "127.0.0.1:7070", map[string]string{"Origin": "https://app.example"}, `{}`); rec.Code != 403 || errorCode(t, rec) != wire.CodeForbiddenOrigin {
		t.Fatalf("browser unlock: %d %s", rec.Code, rec.Body)
	}
	if rec := call("127.0.0.1:50000", "127.0.0.1:7070", nil, `{"ttl_seconds":-1}`); rec.Code != 422 {
		t.Fatalf("negative ttl: %d", rec.Code)
	}
	if rec := call("127.0.0.1:50000", "127.0.0.1:7070", nil, `{"ttl":5}`); rec.Code != 400 {
		t.Fatalf("unknown field: %d", rec.Code)
	}
	if len(got) != 3 {
		t.Fatalf("a refused request unlocked: %v", got)
	}

	if rec := send(http.MethodGet, "/api/remote", "192.168.1.20:40000", "devbox.lan", nil, ""); rec.Code != 403 {
		t.Fatalf("LAN status: %d", rec.Code)
	}
	if rec := send(http.MethodGet, "/api/remote", "127.0.0.1:50000", "127.0.0.1:7070", nil, ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"locked":true`) {
		t.Fatalf("status: %d %s", rec.Code, rec.Body)
	}
}

func TestNoRemoteRoutesWithoutALink(t *testing.T) {
	api := newTestAPI(t, Options{})
	if rec := do(t, api, http.MethodPost, "/api/remote/unlock", "127.0.0.1:7070", nil, `{}`); rec.Code != 404 {
		t.Fatalf("unlock without a relay link: %d", rec.Code)
	}
}
