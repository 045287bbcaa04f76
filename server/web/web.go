// Package web serves the control plane's pages: sign-in (/login) and the
// pairing approval page ({app_url}/pair?code=...). They are plain
// server-rendered HTML with no build step, and they hold no logic of their
// own: every read and decision goes through the REST API in process, as the
// signed-in user, so the pages and the API cannot disagree about who may do
// what.
//
// The browser session is the API's login session token (rvs_) in an
// HttpOnly, SameSite=Lax cookie. State-changing forms are same-origin POSTs
// carrying a CSRF token derived from that session token (and, before
// sign-in, a double-submit cookie); an Origin header from elsewhere is
// refused. Each answers 303 to its page, with the outcome in a sealed,
// show-once flash cookie (flash.go), so a reload never re-submits.
package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"reeve.dev/reeve/server/inproc"
	"reeve.dev/reeve/server/sdk"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Cookie names.
const (
	SessionCookie = "reeve_session"
	loginCSRF     = "reeve_login_csrf"
)

// Options configure the pages.
type Options struct {
	// API is the REST handler the pages call in process. Required.
	API http.Handler
	// RequestLoginLink issues a one-time login link for the user with this
	// email and hands it to the operator (the server's output). It must
	// not reveal whether the user exists: the page never says.
	RequestLoginLink func(ctx context.Context, email string) error
	Logger           *slog.Logger
	Now              func() time.Time
	// Online reports whether a machine (an install) is connected to the
	// relay; the home page shows machines online or offline with it.
	Online func(workspace, install string) bool
	// RelayURL is where page scripts reach the relay when it is not this
	// origin (it joins the CSP's connect-src).
	RelayURL string
}

// Handler serves the pages.
type Handler struct {
	opts  Options
	tmpl  *template.Template
	mux   *http.ServeMux
	links *limiter
	csp   string
}

// New parses the embedded templates.
func New(opts Options) (*Handler, error) {
	if opts.API == nil {
		return nil, errors.New("web: an API handler is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t, err := template.New("").Funcs(template.FuncMap{"groupCode": groupCode}).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("web: parse templates: %w", err)
	}
	h := &Handler{opts: opts, tmpl: t, mux: http.NewServeMux(), links: newLimiter(5, time.Minute)}
	// Scripts and styles only from this origin, never inline; the page's
	// script talks to this origin and the relay, nothing else.
	h.csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src " + connectSrc(opts.RelayURL) +
		"; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	h.mux.HandleFunc("GET /{$}", h.homePage)
	h.mux.HandleFunc("GET /w/{workspace}/m/{install}", h.machinePage)
	h.mux.HandleFunc("GET /w/{workspace}/m/{install}/s/{session}", h.sessionPage)
	h.mux.HandleFunc("POST /app/relay-token", h.relayTokenJSON)
	h.mux.HandleFunc("GET /app/machines", h.machinesJSON)
	h.mux.HandleFunc("GET /w/{workspace}/team", h.teamPage)
	h.mux.HandleFunc("POST /w/{workspace}/team", h.teamAction)
	h.mux.HandleFunc("GET /w/{workspace}/audit", h.auditPage)
	h.mux.HandleFunc("GET /w/{workspace}/export/{kind}", h.exportDownload)
	h.mux.HandleFunc("GET /w/{workspace}/insights", h.insightsPage)
	h.mux.HandleFunc("POST /w/{workspace}/insights", h.insightsAction)
	h.mux.HandleFunc("GET /login", h.loginPage)
	h.mux.HandleFunc("POST /login", h.loginSubmit)
	h.mux.HandleFunc("POST /logout", h.logout)
	h.mux.HandleFunc("GET /pair", h.pairPage)
	h.mux.HandleFunc("POST /pair", h.pairDecide)
	h.mux.HandleFunc("POST /pair/new", h.pairMint)
	h.mux.HandleFunc("GET /invite", h.invitePage)
	h.mux.HandleFunc("POST /invite", h.inviteAccept)
	h.mux.Handle("GET /static/", http.FileServerFS(assets))
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// The pair URL carries the code: keep it out of Referer headers to
	// other sites (same-origin: no-referrer would make browsers send
	// "Origin: null" on our own forms) and out of caches, and keep the
	// pages out of frames.
	hd.Set("Content-Security-Policy", h.csp)
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

// ---- calling the API in process ----

// client is an SDK client that calls the API handler directly, as the
// browser's user and from the browser's address (so the API's throttles
// see the real client).
func (h *Handler) client(r *http.Request, token string) *sdk.Client {
	return &sdk.Client{BaseURL: "http://in-process", Token: token, HTTP: &http.Client{Transport: inproc.Transport(h.opts.API, r.RemoteAddr)}}
}

// ---- sessions and CSRF ----

func (h *Handler) session(r *http.Request) string {
	c, err := r.Cookie(SessionCookie)
	if err != nil || !strings.HasPrefix(c.Value, "rvs_") {
		return ""
	}
	return c.Value
}

func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (h *Handler) setSession(w http.ResponseWriter, r *http.Request, res sdk.LoginResult) {
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: res.Token, Path: "/", Expires: res.ExpiresAt, HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteLaxMode})
}

func clearCookie(w http.ResponseWriter, r *http.Request, name string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteLaxMode})
}

// csrfFor is the form token of a session: only someone who holds the
// (HttpOnly) session token can compute it, and it needs no server state,
// so every replica agrees.
func csrfFor(session string) string {
	sum := sha256.Sum256([]byte("reeve-csrf\x00" + session))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// sameOrigin refuses a POST whose Origin names another site. Browsers send
// Origin on every cross-site POST, so a missing one is a same-site request
// or a non-browser client, which the CSRF token still checks.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

func tokenEqual(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// checkPost verifies origin and CSRF token of a signed-in form.
func (h *Handler) checkPost(w http.ResponseWriter, r *http.Request, session string) bool {
	if !sameOrigin(r) || !tokenEqual(r.PostFormValue("csrf"), csrfFor(session)) {
		h.render(w, r, http.StatusForbidden, "message.html", page{Title: "Request refused", Error: "This form was not sent from this site, or your session changed. Go back, reload the page and try again."})
		return false
	}
	return true
}

func randomToken() string {
	var b [24]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// safeNext keeps redirects after sign-in on this site.
func safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") || strings.ContainsAny(next, "\r\n") {
		return "/"
	}
	return next
}

func (h *Handler) toLogin(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
}

// ---- rendering ----

// page is what every template receives.
type page struct {
	Title    string
	SignedIn bool
	CSRF     string
	Error    string
	Notice   string
	Next     string
	Code     string // login code (login page) or pairing code
	Pairing  *sdk.PairingCode
	// Workspaces where the user may approve (admin or owner).
	Workspaces []sdk.Workspace
	// WorkspaceName names the code's workspace when it has one.
	WorkspaceName string
	Result        string // approved, denied
	Minted        *sdk.PairingCode
	// Form refills a refused form with what the person typed (from the
	// flash), by field name.
	Form map[string]string
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p any) {
	var buf bytes.Buffer
	if err := h.tmpl.ExecuteTemplate(&buf, name, p); err != nil {
		h.opts.Logger.Error("render page", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// groupCode shows ABCDEFGH as ABCD-EFGH, easier to compare by eye.
func groupCode(code string) string {
	if len(code) == 8 {
		return code[:4] + "-" + code[4:]
	}
	return code
}

// ---- a small limiter for login-link requests ----

type limiter struct {
	burst int
	every time.Duration
	mu    sync.Mutex
	m     map[string][]time.Time
}

func newLimiter(burst int, every time.Duration) *limiter {
	return &limiter{burst: burst, every: every, m: map[string][]time.Time{}}
}

// allow admits burst events per burst*every window for a key.
func (l *limiter) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	window := time.Duration(l.burst) * l.every
	kept := l.m[key][:0]
	for _, t := range l.m[key] {
		if now.Sub(t) < window {
			kept = append(kept, t)
		}
	}
	if len(kept) >= l.burst {
		l.m[key] = kept
		return false
	}
	if len(l.m) > 10000 {
		clear(l.m)
	}
	l.m[key] = append(kept, now)
	return true
}

func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
