// Package api is the REST surface of the control plane: one route table
// (routes.go) from which come the mux registrations, the workspace aliases,
// request validation, authentication rules and the OpenAPI document.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/payments"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/secrets"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/webhooks"
)

// DefaultMaxBodyBytes is the request body limit: 1 MiB. Larger bodies get
// 413 body_too_large.
const DefaultMaxBodyBytes = 1 << 20

// LoginProvider is the identity provider behind /api/auth/login and
// /api/auth/callback. The embedded default is one-time login links; an OIDC
// provider can implement the same two steps.
type LoginProvider interface {
	// Name identifies the provider in the login answer ("link", "oidc").
	Name() string
	// Start begins a login. A provider that redirects writes the redirect
	// and returns handled=true; otherwise it returns data for the answer.
	Start(w http.ResponseWriter, r *http.Request) (data map[string]any, handled bool, err error)
	// Finish turns the callback request into a user id; an unknown, used
	// or expired code is auth.ErrBadLogin.
	Finish(ctx context.Context, r *http.Request) (userID int64, err error)
}

// Options configure a Server. Store is required; zero values of the rest
// have working defaults.
type Options struct {
	Store store.Store
	// BaseURL is the public origin of the API, e.g. https://cp.example.
	BaseURL string
	// AppURL is the browser app; RelayURL the relay. Both default to BaseURL.
	AppURL   string
	RelayURL string
	// Signer issues relay JWTs; required for the relay-token routes.
	Signer *auth.RelaySigner
	// Evidence signs session evidence exports and publishes its keys at
	// /api/.well-known/jwks.json.
	Evidence *auth.EvidenceSigner
	// Secrets seals the keys the API keeps in the store (the relay service
	// secret, proof keys); required.
	Secrets *secrets.Keyring
	Login   LoginProvider
	// MaxBodyBytes defaults to DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// CacheTTL bounds how long a resolved credential or role is reused
	// before the store is asked again (revocations through this server
	// take effect at once). Default 5s; negative disables the cache.
	CacheTTL time.Duration
	// RuntimeRate is the per-install request rate (per second) on
	// /api/runtime/*; default 50, with a burst of twice that.
	RuntimeRate float64
	// Pages serves everything outside /api (the browser pages, later).
	Pages  http.Handler
	Logger *slog.Logger
	Now    func() time.Time
	// Invitations, when set, is told about each new invitation with its
	// accept link (the operator's console, until the server sends mail).
	Invitations func(InvitationNotice)
	// Payments is the billing provider; default the built-in manual one.
	Payments payments.Provider
	// Version is reported by /api/health.
	Version string
	// Webhooks configures the outbound webhook dispatcher (Store, Secrets
	// and Logger are filled in); run it with Dispatcher().Run.
	Webhooks webhooks.Options
	// WebhookRate is the inbound deliveries per minute allowed per
	// workspace and source; default DefaultWebhookRate.
	WebhookRate int
	// LeaseTTL is how long a worker's lease lives without a heartbeat
	// (docs/workers.md); default DefaultLeaseTTL.
	LeaseTTL time.Duration
	// InsightInterval is how often RunInsightDetector runs the insight
	// rules over every workspace, the first time at start; default
	// DefaultInsightInterval, negative: never (docs/insights.md).
	InsightInterval time.Duration
}

// Server is the control-plane HTTP handler.
type Server struct {
	opts     Options
	st       store.Store
	routes   []Route
	mux      *http.ServeMux
	val      *validator
	doc      []byte
	creds    *credCache
	throttle *runtimeThrottle
	relay    *relayHub
	pairs    *pairGuard
	log      *slog.Logger
	wsMu     sync.Mutex
	wsCache  map[string]wsEntry
	hooks    *webhooks.Dispatcher
	work     *workHub // wakes waiting lease claimers (leases.go)
}

// New builds the server and its route table.
func New(opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, errors.New("api: a store is required")
	}
	if opts.Secrets == nil {
		return nil, errors.New("api: a master keyring (Options.Secrets) is required")
	}
	if opts.BaseURL == "" {
		opts.BaseURL = "http://127.0.0.1:8080"
	}
	opts.BaseURL = strings.TrimRight(opts.BaseURL, "/")
	if opts.AppURL == "" {
		opts.AppURL = opts.BaseURL
	}
	if opts.RelayURL == "" {
		opts.RelayURL = opts.BaseURL
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.CacheTTL == 0 {
		opts.CacheTTL = 5 * time.Second
	}
	if opts.RuntimeRate <= 0 {
		opts.RuntimeRate = 50
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{
		opts:     opts,
		st:       opts.Store,
		log:      opts.Logger,
		creds:    newCredCache(opts.CacheTTL),
		throttle: newRuntimeThrottle(opts.Store, opts.RuntimeRate, 2*opts.RuntimeRate, opts.Logger),
		pairs:    newPairGuard(opts.Store),
		wsCache:  map[string]wsEntry{},
	}
	hooks, err := s.newDispatcher()
	if err != nil {
		return nil, err
	}
	s.hooks = hooks
	s.work = newWorkHub(s)
	s.relay = newRelayHub(s)
	if sh := sharedOf(opts.Store); sh != nil {
		s.creds.shareWith(sh, s.log)
	}

	val, err := newValidator()
	if err != nil {
		return nil, err
	}
	s.val = val
	// Authorized session lists read the access index (sessions.go).
	if err := opts.Store.IndexAccess(context.Background(), "sessions", sessionAccessVersion, sessionPrincipals); err != nil {
		return nil, err
	}
	s.routes = Routes()
	if err := s.bind(); err != nil {
		return nil, err
	}
	doc, err := Document(s.routes)
	if err != nil {
		return nil, err
	}
	s.doc = doc
	s.mux = http.NewServeMux()
	for i := range s.routes {
		r := &s.routes[i]
		s.mux.Handle(r.Method+" "+r.Path, s.wrap(r))
	}
	s.mux.HandleFunc("/", s.fallback)
	return s, nil
}

// Routes returns the served table (spec rows and aliases).
func (s *Server) Routes() []Route { return s.routes }

// OpenAPI returns the served OpenAPI document.
func (s *Server) OpenAPI() []byte { return s.doc }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.opts.Pages != nil && r.URL.Path != "/api" && !strings.HasPrefix(r.URL.Path, "/api/") {
		s.opts.Pages.ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// fallback answers what no route matched: 405 when the path exists with
// other methods, else 404 — always as an ErrorEnvelope, never Go's plain
// text.
func (s *Server) fallback(w http.ResponseWriter, r *http.Request) {
	id := newRequestID()
	w.Header().Set("X-Request-Id", id)
	var allowed []string
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "/" && pattern != "" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		if r.Method == http.MethodOptions {
			w.Header().Set("Allow", strings.Join(append(allowed, "OPTIONS"), ", "))
			w.WriteHeader(http.StatusNoContent)
			return
		}
		e := errorf(http.StatusMethodNotAllowed, sdk.CodeMethodNotAllowed, "%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allowed, ", "))
		e.Header = http.Header{"Allow": {strings.Join(allowed, ", ")}}
		writeError(w, id, e)
		return
	}
	writeError(w, id, errorf(http.StatusNotFound, sdk.CodeRouteNotFound, "no route %s %s", r.Method, r.URL.Path))
}

func newRequestID() string { return "req_" + ulid.Make().String() }

// call is one request on its way through a route.
type call struct {
	s     *Server
	w     http.ResponseWriter
	r     *http.Request
	route *Route
	id    string
	p     auth.Principal
	// ws is the workspace of the request (nil on ScopeNone routes); role is
	// the calling user's role in it.
	ws   *store.Workspace
	role string
	body map[string]any
	// sess is the {agentSession} of a session route, loaded by its gate;
	// sessRole the caller's effective role on it.
	sess     *store.Record
	sessRole string
	// rawBody is the body as received (nil when the route takes none).
	rawBody []byte
	// support is what an operator's approved support access opens here
	// (nil for everyone else); set by supportGate.
	support *supportGrant
	// ident is the caller's identity as access.yaml knows it, read once
	// (identity).
	ident *callerIdentity
}

func (c *call) ctx() context.Context { return c.r.Context() }
func (c *call) now() time.Time       { return c.s.opts.Now().UTC() }

// workspaceID is "" for unscoped routes (webhook ingestion, pairing).
func (c *call) workspaceID() string {
	if c.ws == nil {
		return ""
	}
	return c.ws.ID
}

// handlerFunc answers a call: a status and a JSON body (nil body with 204).
type handlerFunc func(c *call) (int, any, error)

// wrap turns a route into an http.Handler: request id, panic guard,
// throttling, authentication, workspace scope, role, body and query
// validation, then the handler.
func (s *Server) wrap(rt *Route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{s: s, w: w, r: r, route: rt, id: newRequestID()}
		w.Header().Set("X-Request-Id", c.id)
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("panic", "route", rt.key(), "panic", v, "stack", string(debug.Stack()))
				writeError(w, c.id, fmt.Errorf("panic: %v", v))
			}
		}()
		status, body, err := s.serve(c)
		if errors.Is(err, errHandled) {
			return
		}
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				s.log.Error("request failed", "route", rt.key(), "request_id", c.id, "err", err)
			}
			writeError(w, c.id, err)
			return
		}
		if status == http.StatusNoContent || body == nil {
			w.WriteHeader(status)
			return
		}
		writeJSON(w, status, body)
	})
}

func (s *Server) serve(c *call) (int, any, error) {
	if err := s.authenticate(c); err != nil {
		return 0, nil, err
	}
	if c.route.Auth == AuthDaemon {
		if wait, ok := s.throttle.allow(c.ctx(), c.p.InstallID, c.s.opts.Now()); !ok {
			e := errorf(http.StatusTooManyRequests, sdk.CodeRateLimited, "runtime requests are throttled; retry later")
			e.Header = http.Header{"Retry-After": {fmt.Sprint(int(wait.Seconds()) + 1)}}
			return 0, nil, e
		}
	}
	if err := s.scope(c); err != nil {
		return 0, nil, err
	}
	handled, err := s.supportGate(c)
	if err != nil {
		return 0, nil, err
	}
	if !handled && c.route.MinRole != "" && c.p.Kind == auth.KindUser && auth.RoleRank(c.role) < auth.RoleRank(c.route.MinRole) {
		return 0, nil, forbidden("this operation needs the %s role; you are %s", c.route.MinRole, c.role)
	}
	// A session route decides access before reading the body, so a caller
	// without access learns nothing from validation.
	if err := s.gateSession(c); err != nil {
		return 0, nil, err
	}
	if err := s.readBody(c); err != nil {
		return 0, nil, err
	}
	if err := checkQuery(c); err != nil {
		return 0, nil, err
	}
	return c.route.handler(c)
}

// secret returns a key kept in the store, sealed under the master key.
func (s *Server) secret(ctx context.Context, name string, gen func() ([]byte, error)) ([]byte, error) {
	return s.opts.Secrets.Get(ctx, s.st, name, gen)
}
