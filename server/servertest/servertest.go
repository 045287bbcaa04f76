// Package servertest starts a real control-plane server for tests: a real
// SQLite file in a temporary directory and real HTTP on 127.0.0.1.
package servertest

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"reeve.dev/reeve/server/api"
	"reeve.dev/reeve/server/host"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/accesstoken"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/webhooks"
)

// Server is a running test server.
type Server struct {
	T       testing.TB
	Host    *host.Host
	URL     string
	DataDir string
	cancel  context.CancelFunc
	done    chan error
}

// Options tune Start; DataDir reuses a directory (to test restarts).
type Options struct {
	DataDir string
	// DatabaseURL selects another database than the SQLite file in
	// DataDir: servers started with one URL (and one DataDir, for the
	// master key) are replicas of one control plane.
	DatabaseURL  string
	MaxBodyBytes int64
	CacheTTL     time.Duration
	// Webhooks and WebhookRate are passed to the host (integration tests).
	Webhooks    webhooks.Options
	WebhookRate int
	// LeaseTTL shortens worker leases for expiry tests.
	LeaseTTL time.Duration
	// InsightInterval: how often the server detects insights by itself
	// (default hourly and at start; negative never).
	InsightInterval time.Duration
	// RuntimeRate is each install's requests per second on /api/runtime/*.
	RuntimeRate float64
	// PublicURL is the origin replicas behind one load balancer share
	// (relay JWTs name it as their issuer); the test still reaches each
	// server at its own address (URL).
	PublicURL string
	// RelayTokenTTL shortens relay JWTs and access tokens (reeve server
	// --relay-token-ttl) for renewal tests.
	RelayTokenTTL time.Duration
}

// Start runs a server until the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	dir := o.DataDir
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "data")
	}
	h, err := host.New(context.Background(), host.Options{Listen: "127.0.0.1:0", DataDir: dir, DatabaseURL: o.DatabaseURL, PublicURL: o.PublicURL, RuntimeRate: o.RuntimeRate, MaxBodyBytes: o.MaxBodyBytes, CacheTTL: o.CacheTTL, LeaseTTL: o.LeaseTTL, InsightInterval: o.InsightInterval, Webhooks: o.Webhooks, WebhookRate: o.WebhookRate, RelayTokenTTL: o.RelayTokenTTL})
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{T: t, Host: h, URL: "http://" + h.Addr(), DataDir: dir, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- h.Run(ctx) }()
	// Run bootstraps before serving; wait until health answers.
	c := s.Client("")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := c.Health(context.Background()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not become healthy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(s.Stop)
	return s
}

// Stop shuts the server down (idempotent).
func (s *Server) Stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	if err := <-s.done; err != nil {
		s.T.Errorf("server run: %v", err)
	}
	if err := s.Host.Close(); err != nil {
		s.T.Errorf("close server: %v", err)
	}
	s.cancel = nil
}

// Store is the server's store.
func (s *Server) Store() store.Store { return s.Host.Store() }

// Client returns an SDK client with the given bearer token.
func (s *Server) Client(token string) *sdk.Client {
	return &sdk.Client{BaseURL: s.URL, Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// User is a test user with a personal API token and their own workspace.
type User struct {
	Email     string
	ID        int64
	Token     string
	Workspace string
	Client    *sdk.Client
}

// NewUser creates a user who owns a fresh workspace.
func (s *Server) NewUser(email string) User {
	s.T.Helper()
	ctx := context.Background()
	u, _, err := host.EnsureOwner(ctx, s.Store(), email)
	if err != nil {
		s.T.Fatalf("new user: %v", err)
	}
	tok, _, err := api.MintUserToken(ctx, s.Store(), u.ID, store.TokenPersonal, "test", 0, time.Now())
	if err != nil {
		s.T.Fatalf("new user token: %v", err)
	}
	ms, err := s.Store().Memberships(ctx, u.ID)
	if err != nil || len(ms) == 0 {
		s.T.Fatalf("new user workspace: %v", err)
	}
	return User{Email: email, ID: u.ID, Token: tok, Workspace: ms[0].Workspace.ID, Client: s.Client(tok)}
}

// AddMember adds a user (created if needed) to a workspace with a role and
// returns them with a token.
func (s *Server) AddMember(workspace, email, role string) User {
	s.T.Helper()
	ctx := context.Background()
	u, _, err := s.Store().EnsureUser(ctx, email)
	if err != nil {
		s.T.Fatalf("add member: %v", err)
	}
	if err := s.Store().AddMember(ctx, workspace, u.ID, role, time.Now()); err != nil {
		s.T.Fatalf("add member: %v", err)
	}
	tok, _, err := api.MintUserToken(ctx, s.Store(), u.ID, store.TokenPersonal, "test", 0, time.Now())
	if err != nil {
		s.T.Fatalf("add member token: %v", err)
	}
	return User{Email: email, ID: u.ID, Token: tok, Workspace: workspace, Client: s.Client(tok)}
}

// AccessClaims mints the user a relay token for an install, as a browser
// or SDK client does before it reaches that daemon, and returns the claims
// the daemon would verify (signature checked against the server's JWKS):
// what tests compare a REST answer with, for the same person.
func (u User) AccessClaims(t testing.TB, ctx context.Context, workspace, install string) *accesstoken.Claims {
	t.Helper()
	var rt sdk.RelayTokenResponse
	if _, err := u.Client.Do(ctx, "POST", "/api/workspaces/"+workspace+"/relay-token", map[string]any{"runtime_target_id": install}, &rt); err != nil {
		t.Fatal(err)
	}
	keys, err := u.Client.JWKS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := accesstoken.Verify(rt.Data.AccessToken, keys, workspace, install, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return claims
}
