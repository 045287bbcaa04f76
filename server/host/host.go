// Package host assembles the control plane — store, auth and API — into a
// runnable HTTP server. The command line starts the server through this
// package so that it never depends on the API internals.
package host

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"reeve.dev/reeve/internal/atomicfile"
	"reeve.dev/reeve/internal/version"
	"reeve.dev/reeve/server/api"
	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/payments"
	"reeve.dev/reeve/server/relay"
	"reeve.dev/reeve/server/secrets"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/web"
	"reeve.dev/reeve/server/webhooks"
)

// DefaultListen is the listen address of `reeve server`.
const DefaultListen = "127.0.0.1:8080"

// DefaultOwnerEmail is the first owner created on an empty store.
const DefaultOwnerEmail = "owner@localhost"

// Options configure a Host. Zero values select the embedded default: a
// SQLite file in DataDir, the API, relay and app on one origin.
type Options struct {
	Listen string
	// DataDir holds the SQLite file and the master key file; default
	// DefaultDataDir(). It is kept 0700, its files 0600.
	DataDir string
	// MasterKeyFile holds the master key that seals the stored signing
	// keys; default DataDir/master.key, created on first start.
	// REEVE_MASTER_KEY takes precedence (secrets.EnvMasterKey).
	MasterKeyFile string
	// DatabaseURL overrides the store; default sqlite in DataDir.
	DatabaseURL string
	// PublicURL is the origin clients use; default http://<listen addr>.
	PublicURL string
	AppURL    string
	RelayURL  string
	// OwnerEmail names the first owner; default DefaultOwnerEmail.
	OwnerEmail string
	// Out receives the first-start login link (stdout: it is data).
	Out    io.Writer
	Logger *slog.Logger
	// MaxBodyBytes overrides api.DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// CacheTTL is passed to the API (credential cache).
	CacheTTL time.Duration
	// RuntimeRate is passed to the API: each install's requests per
	// second on /api/runtime/* (default 50, burst twice that).
	RuntimeRate float64
	// LeaseTTL is passed to the API: how long a worker's lease lives
	// without a heartbeat (default api.DefaultLeaseTTL).
	LeaseTTL time.Duration
	// RelayTokenTTL is the lifetime of relay JWTs and the access tokens
	// issued with them (0: 10 minutes).
	RelayTokenTTL time.Duration
	// InsightInterval is passed to the API: how often the server runs
	// the insight rules by itself (default hourly, negative never).
	InsightInterval time.Duration
	// NoRelay leaves /ws unserved, for deployments whose relay_url points
	// at separate `reeve relay` processes.
	NoRelay bool
	// Payments is the billing provider; nil: what the environment
	// configures (payments.FromEnv: the hosted API with
	// REEVE_PAYMENTS_API_KEY, else the built-in manual provider).
	Payments payments.Provider
	// Relay tunes the embedded relay (Control and Logger are set here).
	Relay relay.Options
	// Webhooks tunes the outbound webhook dispatcher (targets, retries);
	// WebhookRate the inbound deliveries per minute per workspace and source.
	Webhooks    webhooks.Options
	WebhookRate int
}

// Host is a listening control-plane server.
type Host struct {
	opts    Options
	st      store.Store
	ring    *secrets.Keyring
	ln      net.Listener
	srv     *http.Server
	metrics *metrics
	api     *api.Server
	links   *auth.LinkProvider
	relay   *relay.Relay
	cred    string
	origin  string
	outMu   sync.Mutex
}

// DefaultDataDir is the per-user data directory of the server.
func DefaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "reeve", "server")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "reeve", "server")
	}
	return filepath.Join(os.TempDir(), "reeve-server")
}

// DatabaseURL is the store URL the options select.
func (o Options) databaseURL() (string, error) {
	if o.DatabaseURL != "" {
		return o.DatabaseURL, nil
	}
	return "sqlite:" + filepath.Join(o.dataDir(), "reeve-server.db"), nil
}

func (o Options) dataDir() string {
	if o.DataDir != "" {
		return o.DataDir
	}
	return DefaultDataDir()
}

func (o Options) masterKeyFile() string {
	if o.MasterKeyFile != "" {
		return o.MasterKeyFile
	}
	// Every subcommand finds the same key as the server it serves.
	if f := os.Getenv(secrets.EnvMasterKeyFile); f != "" {
		return f
	}
	return filepath.Join(o.dataDir(), "master.key")
}

// prepareDataDir creates the data directory, or tightens an existing one,
// to 0700 and every file in it to 0600, as the daemon does with its home:
// it holds the database and the master key.
func (o Options) prepareDataDir() error {
	dir := o.dataDir()
	if err := atomicfile.EnsurePrivateDir(dir); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(filepath.Join(dir, e.Name()), fi.Mode().Perm()&0o700); err != nil {
				return fmt.Errorf("data dir: %w", err)
			}
		}
	}
	return nil
}

// OpenStore opens the store the options select.
func OpenStore(ctx context.Context, o Options) (store.Store, error) {
	if err := o.prepareDataDir(); err != nil {
		return nil, err
	}
	u, err := o.databaseURL()
	if err != nil {
		return nil, err
	}
	return store.Open(ctx, u)
}

// Keyring loads the master key the options select, creating the key file
// on first use unless noCreate.
func Keyring(o Options, noCreate bool) (*secrets.Keyring, error) {
	if err := o.prepareDataDir(); err != nil {
		return nil, err
	}
	return secrets.Load(secrets.Options{File: o.masterKeyFile(), NoCreate: noCreate})
}

// New opens the store and the listener; Run serves.
func New(ctx context.Context, opts Options) (*Host, error) {
	if opts.Listen == "" {
		opts.Listen = DefaultListen
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ring, err := Keyring(opts, false)
	if err != nil {
		return nil, err
	}
	st, err := OpenStore(ctx, opts)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("listen on %s: %w", opts.Listen, err)
	}
	h := &Host{opts: opts, st: st, ring: ring, ln: ln}
	if err := h.assemble(ctx); err != nil {
		ln.Close()
		st.Close()
		return nil, err
	}
	return h, nil
}

func (h *Host) assemble(ctx context.Context) error {
	o := h.opts
	h.origin = strings.TrimRight(o.PublicURL, "/")
	if h.origin == "" {
		h.origin = "http://" + h.ln.Addr().String()
	}
	key, err := h.ring.Get(ctx, h.st, RelayJWTSecret, randomKey)
	if err != nil {
		return fmt.Errorf("relay signing key: %w", err)
	}
	signer := &auth.RelaySigner{Key: key, Issuer: h.origin, TTL: o.RelayTokenTTL}
	h.links = &auth.LinkProvider{Store: h.st, BaseURL: h.origin}
	// The pages call the API in process; the API serves the pages for
	// everything outside /api.
	var a *api.Server
	pages, err := web.New(web.Options{
		API:              http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.ServeHTTP(w, r) }),
		RequestLoginLink: h.requestLoginLink,
		Logger:           o.Logger,
		Online:           func(ws, install string) bool { return a != nil && a.Online(ws, install) },
		RelayURL:         o.RelayURL,
	})
	if err != nil {
		return err
	}
	pay := o.Payments
	if pay == nil {
		if pay, err = payments.FromEnv(nil); err != nil {
			return err
		}
	}
	a, err = api.New(api.Options{
		Store: h.st, BaseURL: h.origin, AppURL: o.AppURL, RelayURL: o.RelayURL,
		Signer: signer, Secrets: h.ring, Login: h.links, MaxBodyBytes: o.MaxBodyBytes, CacheTTL: o.CacheTTL, LeaseTTL: o.LeaseTTL, InsightInterval: o.InsightInterval, RuntimeRate: o.RuntimeRate,
		Pages: pages, Logger: o.Logger, Version: version.Version,
		Invitations: h.announceInvitation,
		Webhooks:    o.Webhooks, WebhookRate: o.WebhookRate,
		Evidence: &auth.EvidenceSigner{Store: h.evidenceKeys()},
		Payments: pay,
	})
	if err != nil {
		return err
	}
	h.api = a
	var handler http.Handler
	if h.cred, err = RelayCredential(ctx, h.st, h.ring); err != nil {
		return err
	}
	if !o.NoRelay {
		ro := o.Relay
		ro.Control = &relay.HTTPControl{ServerURL: h.origin, Credential: h.cred, HTTP: &http.Client{Transport: relay.HandlerTransport(a)}}
		ro.Logger = o.Logger
		if h.relay, err = relay.New(ro); err != nil {
			return err
		}
	}
	// /metrics beside the API (and the relay): the muxes set the route
	// pattern each request is counted under.
	h.metrics = newMetrics(h)
	mux := http.NewServeMux()
	if h.relay != nil {
		mux.Handle("/ws", h.relay)
	}
	mux.Handle("GET /metrics", h.metrics)
	mux.Handle("/", a)
	handler = h.metrics.instrument(mux)
	h.srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	return nil
}

// IssueLoginLink issues a one-time login link for an existing user and
// returns the sign-in page URL that uses it.
func (h *Host) IssueLoginLink(ctx context.Context, email string) (string, error) {
	u, err := h.st.UserByEmail(ctx, email)
	if err != nil {
		return "", fmt.Errorf("issue login link for %s: %w", email, err)
	}
	return h.links.Issue(ctx, u.ID)
}

// LoginLinkOptions is an operator's request for a login link (`reeve
// server login-link`).
type LoginLinkOptions struct {
	DataDir, DatabaseURL string
	Email                string
	// AppURL is the origin of the sign-in page; default http://DefaultListen.
	AppURL string
	TTL    time.Duration
}

// LoginLink issues a fresh one-time login link for an existing user on the
// store directly, with or without a running server, so an operator can
// always let a person back in. An unknown email wraps store.ErrNotFound.
func LoginLink(ctx context.Context, o LoginLinkOptions) (string, time.Time, error) {
	st, err := OpenStore(ctx, Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL})
	if err != nil {
		return "", time.Time{}, err
	}
	defer st.Close()
	u, err := st.UserByEmail(ctx, o.Email)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return "", time.Time{}, fmt.Errorf("no user %s: %w", o.Email, err)
		}
		return "", time.Time{}, err
	}
	app := o.AppURL
	if app == "" {
		app = "http://" + DefaultListen
	}
	ttl := o.TTL
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	now := time.Now()
	p := &auth.LinkProvider{Store: st, BaseURL: app, TTL: ttl, Now: func() time.Time { return now }}
	link, err := p.Issue(ctx, u.ID)
	return link, now.Add(ttl).UTC(), err
}

// requestLoginLink is the sign-in page's "send me a link": the embedded
// provider has no mail, so the link goes to the operator's output. An
// unknown email is logged, never revealed to the page.
func (h *Host) requestLoginLink(ctx context.Context, email string) error {
	link, err := h.IssueLoginLink(ctx, email)
	if errors.Is(err, store.ErrNotFound) {
		h.opts.Logger.Info("login link requested for an unknown email", "email", email)
		return nil
	}
	if err != nil {
		return err
	}
	h.outMu.Lock()
	defer h.outMu.Unlock()
	fmt.Fprintf(h.opts.Out, "login link requested for %s (one-time, valid 24h):\n%s\n", email, link)
	return nil
}

// announceInvitation prints a new invitation's accept link on the
// operator's output: the embedded server sends no mail.
func (h *Host) announceInvitation(n api.InvitationNotice) {
	h.outMu.Lock()
	defer h.outMu.Unlock()
	fmt.Fprintf(h.opts.Out, "invitation for %s to workspace %s (%s) as %s (single use, until %s):\n%s\n",
		n.Email, n.WorkspaceName, n.WorkspaceID, n.Role, n.ExpiresAt.Format(time.RFC3339), n.Link)
}

// InviteOptions is an operator's invitation (`reeve server invite`).
type InviteOptions struct {
	DataDir, DatabaseURL string
	Workspace            string
	Email, Role          string
	TTL                  time.Duration
	// AppURL is the origin of the accept page; default http://DefaultListen.
	AppURL string
}

// Invite creates an invitation on the store directly, with or without a
// running server, audited as the operator.
func Invite(ctx context.Context, o InviteOptions) (api.CreatedInvitation, error) {
	st, err := OpenStore(ctx, Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL})
	if err != nil {
		return api.CreatedInvitation{}, err
	}
	defer st.Close()
	if _, err := st.Workspace(ctx, o.Workspace); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return api.CreatedInvitation{}, fmt.Errorf("no workspace %q: %w", o.Workspace, err)
		}
		return api.CreatedInvitation{}, err
	}
	app := o.AppURL
	if app == "" {
		app = "http://" + DefaultListen
	}
	return api.CreateInvitation(ctx, st, api.InvitationOptions{WorkspaceID: o.Workspace, Email: o.Email, Role: o.Role, TTL: o.TTL, InvitedBy: "operator", AppURL: app, Now: time.Now()})
}

// Addr is the bound address (useful with port 0).
func (h *Host) Addr() string { return h.ln.Addr().String() }

// URL is the public origin.
func (h *Host) URL() string { return h.origin }

// Relay is the embedded relay (nil with NoRelay).
func (h *Host) Relay() *relay.Relay { return h.relay }

// RelayServiceCredential is what `reeve relay` presents to this server.
func (h *Host) RelayServiceCredential() string { return h.cred }

// RelayJWTSecret names the stored key that signs relay JWTs.
const RelayJWTSecret = "relay-jwt-hs256"

func randomKey() ([]byte, error) {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	return b, err
}

// RelayCredential returns the relay service credential of a store,
// creating its secret (sealed under the keyring) on first use.
func RelayCredential(ctx context.Context, st store.Store, ring *secrets.Keyring) (string, error) {
	key, err := ring.Get(ctx, st, auth.RelayServiceSecret, randomKey)
	if err != nil {
		return "", fmt.Errorf("relay service secret: %w", err)
	}
	return auth.RelayServiceCredential(key), nil
}

// Store exposes the store to tests and operator commands.
func (h *Host) Store() store.Store { return h.st }

// Bootstrap creates the first owner and workspace on an empty store and
// returns a one-time login link for them; on a store with users it returns
// "".
func (h *Host) Bootstrap(ctx context.Context) (string, error) {
	n, err := h.st.CountUsers(ctx)
	if err != nil {
		return "", err
	}
	if n > 0 {
		return "", nil
	}
	email := h.opts.OwnerEmail
	if email == "" {
		email = DefaultOwnerEmail
	}
	u, _, err := EnsureOwner(ctx, h.st, email)
	if err != nil {
		return "", err
	}
	return h.links.Issue(ctx, u.ID)
}

// EnsureOwner creates the user if needed and, when they belong to no
// workspace, a workspace they own. It reports whether a workspace was made.
func EnsureOwner(ctx context.Context, st store.Store, email string) (store.User, bool, error) {
	u, _, err := st.EnsureUser(ctx, email)
	if err != nil {
		return store.User{}, false, err
	}
	ms, err := st.Memberships(ctx, u.ID)
	if err != nil {
		return store.User{}, false, err
	}
	if len(ms) > 0 {
		return u, false, nil
	}
	if _, err := api.CreateWorkspace(ctx, st, u.ID, "Default workspace", nil, time.Now()); err != nil {
		return store.User{}, false, err
	}
	return u, true, nil
}

// Run bootstraps, prints the first-start login link, and serves until ctx
// ends, then shuts down gracefully.
func (h *Host) Run(ctx context.Context) error {
	link, err := h.Bootstrap(ctx)
	if err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if link != "" {
		h.outMu.Lock()
		fmt.Fprintf(h.opts.Out, "first start: created owner %s; open this one-time login link to sign in (valid 24h; `reeve server login-link --email %s` prints a new one at any time):\n%s\n", h.ownerEmail(), h.ownerEmail(), link)
		h.outMu.Unlock()
	}
	errc := make(chan error, 1)
	go func() { errc <- h.srv.Serve(h.ln) }()
	go h.pruneLoop(ctx)
	// Deliveries in flight finish (each bounded) before Run returns, so
	// Close does not pull the store from under them.
	dispatched := make(chan struct{})
	go func() { h.api.Dispatcher().Run(ctx); close(dispatched) }()
	go h.api.RunSweeper(ctx)         // expired worker leases go back to the queue
	go h.api.RunInsightDetector(ctx) // the insight rules, at start and hourly
	// Replicas of one PostgreSQL database: bus wake-ups and revocations.
	go h.api.RunShared(ctx)
	if h.relay != nil {
		go h.relay.Run(ctx)
		// Hijacked WebSockets are not the HTTP server's to drain.
		h.srv.RegisterOnShutdown(func() { h.relay.Close() })
	}
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	<-dispatched
	return nil
}

func (h *Host) ownerEmail() string {
	if h.opts.OwnerEmail != "" {
		return h.opts.OwnerEmail
	}
	return DefaultOwnerEmail
}

// Close releases the listener and the store.
func (h *Host) Close() error {
	h.ln.Close()
	return h.st.Close()
}

// StoreRelayCredential opens the store the options select and returns its
// relay service credential (`reeve server relay-credential`).
func StoreRelayCredential(ctx context.Context, o Options) (string, error) {
	ring, err := Keyring(o, false)
	if err != nil {
		return "", err
	}
	st, err := OpenStore(ctx, o)
	if err != nil {
		return "", err
	}
	defer st.Close()
	return RelayCredential(ctx, st, ring)
}

// TokenOptions select the store and user of CreateToken.
type TokenOptions struct {
	DataDir     string
	DatabaseURL string
	Email       string
	Name        string
}

// TokenResult is what CreateToken made.
type TokenResult struct {
	Token            string
	TokenID          string
	UserID           int64
	CreatedWorkspace bool
}

// CreateToken is the operator path: it creates the user if needed (owner of
// a new workspace when they have none) and a personal API token, whose
// plaintext only the caller sees.
func CreateToken(ctx context.Context, o TokenOptions) (TokenResult, error) {
	if !strings.Contains(o.Email, "@") {
		return TokenResult{}, fmt.Errorf("create token: %q is not an email address", o.Email)
	}
	st, err := OpenStore(ctx, Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL})
	if err != nil {
		return TokenResult{}, err
	}
	defer st.Close()
	u, made, err := EnsureOwner(ctx, st, o.Email)
	if err != nil {
		return TokenResult{}, err
	}
	name := o.Name
	if name == "" {
		name = "operator"
	}
	plain, t, err := api.MintUserToken(ctx, st, u.ID, store.TokenPersonal, name, 0, time.Now())
	if err != nil {
		return TokenResult{}, err
	}
	return TokenResult{Token: plain, TokenID: t.ID, UserID: u.ID, CreatedWorkspace: made}, nil
}

// pruneLoop enforces audit_retention_days: at start, then hourly.
func (h *Host) pruneLoop(ctx context.Context) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		if _, err := h.api.PruneAudit(ctx); err != nil && ctx.Err() == nil {
			h.opts.Logger.Warn("prune audit", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// evidenceKeys keeps the evidence key set among the store's secrets,
// sealed under the master key.
func (h *Host) evidenceKeys() auth.KeySetStore {
	return sealedKeySet{st: h.st, ring: h.ring, name: auth.EvidenceKeysSecret}
}

type sealedKeySet struct {
	st   store.Store
	ring *secrets.Keyring
	name string
}

func (k sealedKeySet) Load(ctx context.Context, gen func() ([]byte, error)) ([]byte, error) {
	return k.ring.Get(ctx, k.st, k.name, gen)
}

func (k sealedKeySet) Swap(ctx context.Context, old, new []byte) (bool, error) {
	rec, err := k.st.Secret(ctx, k.name, func() ([]byte, error) { return nil, errors.New("no evidence key set") })
	if err != nil {
		return false, err
	}
	cur, err := k.ring.Open(k.name, rec)
	if err != nil {
		return false, err
	}
	if !bytes.Equal(cur, old) {
		return false, nil
	}
	sealed, err := k.ring.Seal(k.name, new)
	if err != nil {
		return false, err
	}
	return k.st.ReplaceSecret(ctx, k.name, rec, sealed)
}

// RotateEvidenceKey makes a new evidence signing key current; the old
// keys stay published so the bundles they signed still verify.
func (h *Host) RotateEvidenceKey(ctx context.Context) (string, error) {
	return (&auth.EvidenceSigner{Store: h.evidenceKeys()}).Rotate(ctx)
}

// Online reports whether a daemon of the workspace's runtime target is
// connected to a live relay instance, as the pages show it.
func (h *Host) Online(workspace, install string) bool { return h.api.Online(workspace, install) }
