package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// sessionTTL is the lifetime of a login session token.
const sessionTTL = 30 * 24 * time.Hour

func newRecordID() string { return ulid.Make().String() }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// handlers maps operation ids to their specific handlers; every other
// route is served by the record engine.
func (s *Server) handlers() map[string]handlerFunc {
	m := map[string]handlerFunc{
		"getApiHealth":                s.health,
		"getApiWellKnownDocument":     s.wellKnown,
		"getApiOpenapiJson":           s.openapiDoc,
		"getApiAuthLogin":             s.login,
		"getApiAuthCallback":          s.callback,
		"postApiAuthCallback":         s.redeem,
		"postApiAuthLogout":           s.logout,
		"getApiMeApiTokens":           s.listTokens,
		"postApiMeApiTokens":          s.createToken,
		"deleteApiMeApiTokensTokenId": s.revokeToken,
	}
	for k, v := range s.workspaceHandlers() {
		m[k] = v
	}
	for k, v := range s.runtimeHandlers() {
		m[k] = v
	}
	for k, v := range s.typedHandlers() {
		m[k] = v
	}
	for k, v := range s.moneyHandlers() {
		m[k] = v
	}
	for k, v := range s.relayBusHandlers() {
		m[k] = v
	}
	for k, v := range s.teamResourceHandlers() {
		m[k] = v
	}
	for k, v := range s.contextVaultHandlers() {
		m[k] = v
	}
	for k, v := range s.integrationHandlers() {
		m[k] = v
	}
	for k, v := range s.workflowHandlers() {
		m[k] = v
	}
	for k, v := range s.insightHandlers() { // insights.go, reviewpackets.go
		m[k] = v
	}
	return m
}

// dbPinger is what health asks of a store that can report its database.
type dbPinger interface {
	Ping(ctx context.Context) error
	Engine() string
	SchemaVersion() int
}

// health answers 200 with the database's state, or 503 (an ErrorEnvelope)
// when the database does not answer, so a load balancer takes the replica
// out of rotation.
func (s *Server) health(c *call) (int, any, error) {
	h := sdk.Health{Status: "ok", Version: s.opts.Version}
	if p, ok := s.st.(dbPinger); ok {
		ctx, cancel := context.WithTimeout(c.ctx(), 3*time.Second)
		defer cancel()
		start := time.Now()
		if err := p.Ping(ctx); err != nil {
			s.log.Warn("health: database unavailable", "err", err)
			e := errorf(http.StatusServiceUnavailable, sdk.CodeUnavailable, "the %s database does not answer", p.Engine())
			e.Header = http.Header{"Retry-After": {"1"}}
			return 0, nil, e
		}
		h.Database = &sdk.HealthDatabase{Engine: p.Engine(), Status: "ok", SchemaVersion: p.SchemaVersion(), LatencyMS: float64(time.Since(start).Microseconds()) / 1000}
	}
	return 200, h, nil
}

func (s *Server) discovery() sdk.Discovery {
	return sdk.Discovery{
		APIURL:     s.opts.BaseURL,
		AppURL:     s.opts.AppURL,
		RelayURL:   s.opts.RelayURL,
		OpenAPIURL: s.opts.BaseURL + "/api/openapi.json",
		LoginURL:   s.opts.BaseURL + "/api/auth/login",
		Version:    s.opts.Version,
	}
}

func (s *Server) wellKnown(c *call) (int, any, error) {
	if c.r.PathValue("document") == "jwks.json" {
		return s.jwks(c)
	}
	if c.r.PathValue("document") != "reeve-configuration" {
		return 0, nil, notFound("no well-known document %q; try reeve-configuration", c.r.PathValue("document"))
	}
	return 200, s.discovery(), nil
}

func (s *Server) openapiDoc(c *call) (int, any, error) {
	c.w.Header().Set("Content-Type", "application/json")
	c.w.WriteHeader(200)
	c.w.Write(s.doc)
	return 0, nil, errHandled
}

// errHandled tells wrap the handler already wrote its answer.
var errHandled = errors.New("handled")

func (s *Server) login(c *call) (int, any, error) {
	if s.opts.Login == nil {
		return 0, nil, errorf(http.StatusNotFound, sdk.CodeNotFound, "no login provider is configured")
	}
	data, handled, err := s.opts.Login.Start(c.w, c.r)
	if err != nil {
		return 0, nil, err
	}
	if handled {
		return 0, nil, errHandled
	}
	data["callback_url"] = s.opts.BaseURL + "/api/auth/callback"
	return 200, map[string]any{"data": data}, nil
}

// codeRedeemer is a login provider whose callback carries a one-time code
// (the embedded login links). Its code is spent only by a POST: a GET of
// the callback, which is what a person, a link scanner or a mail client
// prefetching the link does, goes to the sign-in page instead.
type codeRedeemer interface {
	Redeem(ctx context.Context, code string) (int64, error)
}

func (s *Server) callback(c *call) (int, any, error) {
	if s.opts.Login == nil {
		return 0, nil, errorf(http.StatusNotFound, sdk.CodeNotFound, "no login provider is configured")
	}
	if _, ok := s.opts.Login.(codeRedeemer); ok {
		// The code stays in the page's URL and nowhere else: no cache, no
		// Referer.
		h := c.w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Location", auth.SignInURL(s.opts.AppURL, c.r.URL.Query().Get("code")))
		c.w.WriteHeader(http.StatusSeeOther)
		return 0, nil, errHandled
	}
	uid, err := s.opts.Login.Finish(c.ctx(), c.r)
	return s.signIn(c, uid, err)
}

// redeem is POST /api/auth/callback {"code"}: spend a one-time login code
// for a session token (API clients, and the sign-in page in process).
func (s *Server) redeem(c *call) (int, any, error) {
	lr, ok := s.opts.Login.(codeRedeemer)
	if !ok {
		return 0, nil, errorf(http.StatusNotFound, sdk.CodeNotFound, "the login provider has no one-time codes; sign in through GET /api/auth/login")
	}
	var req sdk.LoginRequest
	if err := c.decode(&req); err != nil {
		return 0, nil, err
	}
	uid, err := lr.Redeem(c.ctx(), req.Code)
	return s.signIn(c, uid, err)
}

// signIn answers a finished login with a new session token.
func (s *Server) signIn(c *call, uid int64, err error) (int, any, error) {
	if errors.Is(err, auth.ErrBadLogin) {
		return 0, nil, unauthenticated("the login code is unknown, used or expired")
	}
	if err != nil {
		return 0, nil, err
	}
	u, err := s.st.User(c.ctx(), uid)
	if err != nil {
		return 0, nil, err
	}
	plain, t, err := s.mintUserToken(c.ctx(), uid, store.TokenSession, "login", sessionTTL)
	if err != nil {
		return 0, nil, err
	}
	c.w.Header().Set("Cache-Control", "no-store")
	return 200, sdk.LoginResponse{Data: sdk.LoginResult{Token: plain, TokenType: "bearer", ExpiresAt: *t.ExpiresAt, User: sdk.User{ID: u.ID, Email: u.Email}}}, nil
}

// MintUserToken creates a user token and returns its plaintext, which is
// not kept anywhere. ttl 0 means no expiry.
func MintUserToken(ctx context.Context, st store.Store, userID int64, kind, name string, ttl time.Duration, now time.Time) (string, store.Token, error) {
	prefix := auth.PrefixPersonal
	if kind == store.TokenSession {
		prefix = auth.PrefixSession
	}
	plain, err := auth.NewToken(prefix)
	if err != nil {
		return "", store.Token{}, err
	}
	t := store.Token{ID: newRecordID(), Kind: kind, UserID: userID, Name: name, Hash: auth.Hash(plain), Prefix: auth.DisplayPrefix(plain), CreatedAt: now.UTC()}
	if ttl > 0 {
		exp := now.UTC().Add(ttl)
		t.ExpiresAt = &exp
	}
	if err := st.CreateToken(ctx, t); err != nil {
		return "", store.Token{}, err
	}
	return plain, t, nil
}

func (s *Server) mintUserToken(ctx context.Context, uid int64, kind, name string, ttl time.Duration) (string, store.Token, error) {
	return MintUserToken(ctx, s.st, uid, kind, name, ttl, s.opts.Now())
}

func (s *Server) logout(c *call) (int, any, error) {
	if err := s.st.RevokeToken(c.ctx(), c.p.UserID, c.p.TokenID, c.now()); err != nil && !errors.Is(err, store.ErrNotFound) {
		return 0, nil, err
	}
	s.forgetToken(c.p.TokenID)
	return 200, map[string]any{"data": map[string]any{"revoked": true, "token_id": c.p.TokenID}}, nil
}

func (s *Server) forgetToken(id string) {
	s.creds.drop(func(_ string, p auth.Principal) bool { return p.TokenID == id })
}

func apiToken(t store.Token) sdk.APIToken {
	return sdk.APIToken{ID: t.ID, Name: t.Name, Prefix: t.Prefix, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, LastUsedAt: t.LastUsedAt}
}

func (s *Server) listTokens(c *call) (int, any, error) {
	ts, err := s.st.Tokens(c.ctx(), c.p.UserID, store.TokenPersonal)
	if err != nil {
		return 0, nil, err
	}
	out := sdk.APITokenCollectionResponse{Data: []sdk.APIToken{}}
	now := c.now()
	for _, t := range ts {
		if t.ExpiresAt != nil && !now.Before(*t.ExpiresAt) {
			continue
		}
		out.Data = append(out.Data, apiToken(t))
	}
	out.Meta.Count = len(out.Data)
	return 200, out, nil
}

func (s *Server) createToken(c *call) (int, any, error) {
	name, _ := c.body["name"].(string)
	var ttl time.Duration
	if d, ok := numberOf(c.body["expires_in_days"]); ok {
		ttl = time.Duration(d) * 24 * time.Hour
	}
	plain, t, err := s.mintUserToken(c.ctx(), c.p.UserID, store.TokenPersonal, name, ttl)
	if err != nil {
		return 0, nil, err
	}
	c.w.Header().Set("Cache-Control", "no-store")
	return 201, sdk.APITokenCreatedResponse{Data: sdk.APITokenCreated{APIToken: apiToken(t), Token: plain}}, nil
}

func (s *Server) revokeToken(c *call) (int, any, error) {
	id := c.r.PathValue("tokenId")
	t, err := s.st.Tokens(c.ctx(), c.p.UserID, store.TokenPersonal)
	if err != nil {
		return 0, nil, err
	}
	found := false
	for _, x := range t {
		found = found || x.ID == id
	}
	if !found {
		return 0, nil, notFound("no personal API token %q", id)
	}
	if err := s.st.RevokeToken(c.ctx(), c.p.UserID, id, c.now()); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, notFound("no personal API token %q", id)
		}
		return 0, nil, err
	}
	s.forgetToken(id)
	return 204, nil, nil
}
