package control

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
)

func newTestAPI(t *testing.T, opts Options) *API {
	t.Helper()
	st, err := store.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "reeve.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	opts.Directories = st
	opts.Health = func(context.Context) wire.Health { return wire.Health{Status: "ok"} }
	if opts.BoundPort == "" {
		opts.BoundPort = "7070"
	}
	return New(opts)
}

func do(t *testing.T, h http.Handler, method, target, host string, hdr map[string]string, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func errorCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var eb wire.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil {
		t.Fatalf("error body is not JSON: %q", rec.Body.String())
	}
	return eb.Error.Code
}

func TestHostCheck(t *testing.T) {
	api := newTestAPI(t, Options{AllowedHosts: []string{"devbox.internal", "alias.test:9000"}})
	cases := []struct {
		host string
		want int
	}{
		{"127.0.0.1:7070", 200},
		{"localhost:7070", 200},
		{"[::1]:7070", 200},
		{"127.5.6.7:7070", 200},
		{"devbox.internal:1234", 200}, // allowed host, any port
		{"alias.test:9000", 200},      // allowed host:port
		{"alias.test:9001", 403},
		{"evil.example:7070", 403}, // DNS rebinding: attacker's name resolving to 127.0.0.1
		{"localhost:8080", 403},    // loopback name but another port
		{"localhost", 403},         // implies port 80
		{"127.0.0.1.evil.example:7070", 403},
		{"", 403},
	}
	for _, c := range cases {
		rec := do(t, api, "GET", "/api/directories", c.host, nil, "")
		if rec.Code != c.want {
			t.Errorf("Host %q: got %d, want %d (%s)", c.host, rec.Code, c.want, rec.Body)
			continue
		}
		if c.want == 403 && errorCode(t, rec) != wire.CodeForbiddenHost {
			t.Errorf("Host %q: code %q", c.host, errorCode(t, rec))
		}
	}
	// /health is guarded by the Host check too: rebinding must not even
	// learn that a daemon is there.
	if rec := do(t, api, "GET", "/health", "evil.example:7070", nil, ""); rec.Code != 403 {
		t.Errorf("/health with forged Host: got %d", rec.Code)
	}
}

func TestOriginCheck(t *testing.T) {
	api := newTestAPI(t, Options{AllowedOrigins: []string{"https://app.example"}})
	cases := []struct {
		origin string
		want   int
	}{
		{"", 200}, // not a browser
		{"https://app.example", 200},
		{"https://app.example/", 200},
		{"https://evil.example", 403},
		{"http://127.0.0.1:7070", 403}, // not listed, so refused
		{"null", 403},
	}
	for _, c := range cases {
		hdr := map[string]string{}
		if c.origin != "" {
			hdr["Origin"] = c.origin
		}
		rec := do(t, api, "GET", "/api/directories", "127.0.0.1:7070", hdr, "")
		if rec.Code != c.want {
			t.Errorf("Origin %q: got %d, want %d", c.origin, rec.Code, c.want)
		}
		if c.want == 403 && errorCode(t, rec) != wire.CodeForbiddenOrigin {
			t.Errorf("Origin %q: code %q", c.origin, errorCode(t, rec))
		}
	}
}

func TestTokenAuth(t *testing.T) {
	const token = "rvl_secret-token"
	api := newTestAPI(t, Options{Token: token})
	host := "127.0.0.1:7070"
	cases := []struct {
		name, path, auth string
		want             int
	}{
		{"health needs no token", "/health", "", 200},
		{"missing", "/api/directories", "", 401},
		{"wrong", "/api/directories", "Bearer rvl_other", 401},
		{"prefix of the token", "/api/directories", "Bearer rvl_secret", 401},
		{"wrong scheme", "/api/directories", "Basic " + token, 401},
		{"right", "/api/directories", "Bearer " + token, 200},
		{"right, lowercase scheme", "/api/directories", "bearer " + token, 200},
		{"unknown route still needs a token", "/api/nothing", "", 401},
	}
	for _, c := range cases {
		hdr := map[string]string{}
		if c.auth != "" {
			hdr["Authorization"] = c.auth
		}
		rec := do(t, api, "GET", c.path, host, hdr, "")
		if rec.Code != c.want {
			t.Errorf("%s: got %d, want %d", c.name, rec.Code, c.want)
		}
		if strings.Contains(rec.Body.String(), token) {
			t.Errorf("%s: response echoes the token", c.name)
		}
		if c.want == 401 && rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", c.name)
		}
	}
}

func TestDirectoryRoutes(t *testing.T) {
	api := newTestAPI(t, Options{})
	host := "localhost:7070"
	dir := t.TempDir()
	file := filepath.Join(dir, "file.txt")
	os.WriteFile(file, []byte("x"), 0o600)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}

	rec := do(t, api, "POST", "/api/directories", host, nil, `{"path":"`+dir+`"}`)
	if rec.Code != 201 {
		t.Fatalf("add: %d %s", rec.Code, rec.Body)
	}
	var added wire.AddDirectoryResponse
	json.Unmarshal(rec.Body.Bytes(), &added)
	if !added.Created || added.Directory.ID == "" {
		t.Fatalf("add response: %+v", added)
	}
	// The same directory through a symlink is the same registration.
	rec = do(t, api, "POST", "/api/directories", host, nil, `{"path":"`+link+`"}`)
	if rec.Code != 200 {
		t.Fatalf("re-add via symlink: %d %s", rec.Code, rec.Body)
	}

	bad := []struct{ name, body string }{
		{"relative", `{"path":"some/dir"}`},
		{"missing", `{"path":"` + filepath.Join(dir, "nope") + `"}`},
		{"a file", `{"path":"` + file + `"}`},
		{"empty", `{"path":""}`},
	}
	for _, b := range bad {
		if rec := do(t, api, "POST", "/api/directories", host, nil, b.body); rec.Code != 422 {
			t.Errorf("%s: got %d, want 422", b.name, rec.Code)
		}
	}
	for _, body := range []string{`not json`, `[1]`, `{"path":"/tmp","extra":1}`, `{"path":"/tmp"}{}`} {
		if rec := do(t, api, "POST", "/api/directories", host, nil, body); rec.Code != 400 {
			t.Errorf("body %q: got %d, want 400", body, rec.Code)
		}
	}

	rec = do(t, api, "GET", "/api/directories", host, nil, "")
	var list wire.DirectoryList
	json.Unmarshal(rec.Body.Bytes(), &list)
	if len(list.Directories) != 1 || list.Directories[0].ID != added.Directory.ID {
		t.Fatalf("list: %+v", list)
	}

	if rec := do(t, api, "PUT", "/api/directories", host, nil, ""); rec.Code != 405 || errorCode(t, rec) != wire.CodeMethod {
		t.Errorf("PUT: got %d", rec.Code)
	}
	if rec := do(t, api, "DELETE", "/api/directories/nope", host, nil, ""); rec.Code != 404 {
		t.Errorf("delete unknown: got %d", rec.Code)
	}
	if rec := do(t, api, "DELETE", "/api/directories/"+added.Directory.ID, host, nil, ""); rec.Code != 204 {
		t.Errorf("delete: got %d %s", rec.Code, rec.Body)
	}
	if rec := do(t, api, "GET", "/nowhere", host, nil, ""); rec.Code != 404 || errorCode(t, rec) != wire.CodeNotFound {
		t.Errorf("unknown route: got %d %s", rec.Code, rec.Body)
	}
}

func TestCORSForAllowedOrigins(t *testing.T) {
	api := newTestAPI(t, Options{AllowedOrigins: []string{"https://app.example"}, Token: "rvl_tok"})
	host := "127.0.0.1:7070"
	pre := do(t, api, "OPTIONS", "/api/directories", host, map[string]string{
		"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "authorization",
	}, "")
	if pre.Code != 204 || pre.Header().Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(pre.Header().Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("preflight: %d %v", pre.Code, pre.Header())
	}
	// The real request still needs the token.
	rec := do(t, api, "GET", "/api/directories", host, map[string]string{"Origin": "https://app.example"}, "")
	if rec.Code != 401 {
		t.Fatalf("without token: %d", rec.Code)
	}
	rec = do(t, api, "GET", "/api/directories", host, map[string]string{"Origin": "https://app.example", "Authorization": "Bearer rvl_tok"}, "")
	if rec.Code != 200 || rec.Header().Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("with token: %d %v", rec.Code, rec.Header())
	}
	// A foreign origin's preflight is refused outright.
	rec = do(t, api, "OPTIONS", "/api/directories", host, map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}, "")
	if rec.Code != 403 || rec.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("foreign preflight: %d %v", rec.Code, rec.Header())
	}
}

// Removing a directory whose sessions are active is a conflict that names
// them: its policy still governs them.
func TestRemoveDirectoryInUse(t *testing.T) {
	st, err := store.Open(context.Background(), store.Options{Path: filepath.Join(t.TempDir(), "reeve.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	api := New(Options{Directories: st, BoundPort: "7070", Health: func(context.Context) wire.Health { return wire.Health{Status: "ok"} }})
	d, _, err := st.AddDirectory(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sess, err := st.CreateSession(context.Background(), store.NewSession{DirectoryID: d.ID, Agent: "shell", Status: store.StatusRunning})
	if err != nil {
		t.Fatal(err)
	}
	rec := do(t, api, "DELETE", "/api/directories/"+d.ID, "localhost:7070", nil, "")
	if rec.Code != 409 || errorCode(t, rec) != wire.CodeDirectoryInUse || !strings.Contains(rec.Body.String(), sess.ID) {
		t.Fatalf("delete in use: %d %s", rec.Code, rec.Body)
	}
	if _, err := st.Directory(context.Background(), d.ID); err != nil {
		t.Fatalf("removed anyway: %v", err)
	}
}
