package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// bearer returns the bearer credential of r, or "".
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// authenticate resolves the route's credential into c.p: 401 when it is
// missing or not valid for this kind of route.
func (s *Server) authenticate(c *call) error {
	switch c.route.Auth {
	case AuthPublic, AuthWebhook:
		return nil
	}
	tok := bearer(c.r)
	if tok == "" {
		return unauthenticated("a bearer credential is required")
	}
	if err := s.refuseRunnerElsewhere(c, tok); err != nil {
		return err
	}
	var (
		p   auth.Principal
		err error
	)
	switch c.route.Auth {
	case AuthUser:
		p, err = s.userPrincipal(c, tok)
	case AuthDaemon:
		p, err = s.daemonPrincipal(c, tok)
	case AuthRelayService:
		p, err = s.relayServicePrincipal(c, tok)
	case AuthRelay:
		p, err = s.relayPrincipal(c, tok)
	case AuthRunner:
		p, err = s.runnerPrincipal(c, tok)
	}
	if err != nil {
		return err
	}
	c.p = p
	return nil
}

var errBadCredential = unauthenticated("the credential is not valid")

func (s *Server) userPrincipal(c *call, tok string) (auth.Principal, error) {
	if !strings.HasPrefix(tok, auth.PrefixSession) && !strings.HasPrefix(tok, auth.PrefixPersonal) {
		return auth.Principal{}, errBadCredential
	}
	h := auth.Hash(tok)
	now := s.opts.Now()
	gen := s.creds.generation()
	if e, ok := s.creds.get(h, now); ok {
		s.touch(e, now)
		return e.p, nil
	}
	t, err := s.st.TokenByHash(c.ctx(), h)
	if errors.Is(err, store.ErrNotFound) {
		return auth.Principal{}, errBadCredential
	}
	if err != nil {
		return auth.Principal{}, err
	}
	if t.RevokedAt != nil || (t.ExpiresAt != nil && !now.Before(*t.ExpiresAt)) {
		return auth.Principal{}, errBadCredential
	}
	u, err := s.st.User(c.ctx(), t.UserID)
	if err != nil {
		return auth.Principal{}, err
	}
	p := auth.Principal{Kind: auth.KindUser, UserID: u.ID, Email: u.Email, TokenID: t.ID}
	e := s.creds.put(h, p, t.ExpiresAt, now, gen)
	s.touch(e, now)
	return p, nil
}

// touch records last use of a token at most once a minute, so that reads
// do not each cost a write.
func (s *Server) touch(e *credEntry, now time.Time) {
	if e.p.TokenID == "" {
		return
	}
	s.creds.mu.Lock()
	due := now.Sub(e.touched) > time.Minute
	if due {
		e.touched = now
	}
	s.creds.mu.Unlock()
	if due {
		go func(id string) {
			ctx, cancel := contextWithTimeout(5 * time.Second)
			defer cancel()
			if err := s.st.TouchToken(ctx, id, now); err != nil {
				s.log.Warn("touch token", "err", err)
			}
		}(e.p.TokenID)
	}
}

func (s *Server) daemonPrincipal(c *call, tok string) (auth.Principal, error) {
	if !strings.HasPrefix(tok, auth.PrefixInstall) {
		return auth.Principal{}, errBadCredential
	}
	h := auth.Hash(tok)
	now := s.opts.Now()
	gen := s.creds.generation()
	if e, ok := s.creds.get(h, now); ok {
		return e.p, nil
	}
	in, err := s.st.InstallByTokenHash(c.ctx(), h)
	if errors.Is(err, store.ErrNotFound) {
		return auth.Principal{}, errBadCredential
	}
	if err != nil {
		return auth.Principal{}, err
	}
	p := auth.Principal{Kind: auth.KindDaemon, InstallID: in.ID, Workspace: in.WorkspaceID}
	s.creds.put(h, p, nil, now, gen)
	return p, nil
}

func (s *Server) relayPrincipal(c *call, tok string) (auth.Principal, error) {
	if s.opts.Signer == nil {
		return auth.Principal{}, errBadCredential
	}
	cl, err := s.opts.Signer.Verify(tok)
	if err != nil {
		return auth.Principal{}, errBadCredential
	}
	// A daemon's JWT dies with its install (detached or retired), not
	// only at expiry.
	if cl.Role == auth.RelayRoleDaemon {
		ok, err := s.installActive(c, cl.Workspace, cl.Subject)
		if err != nil {
			return auth.Principal{}, err
		}
		if !ok {
			return auth.Principal{}, unauthenticated("the install of this relay token has been detached")
		}
	}
	return auth.Principal{Kind: auth.KindRelay, InstallID: cl.Subject, Workspace: cl.Workspace, Role: cl.Role}, nil
}

// scope resolves the workspace of the request and checks the principal
// may act in it: 404 for an unknown workspace, 403 for a stranger.
func (s *Server) scope(c *call) error {
	var id string
	switch c.route.Scope {
	case ScopeNone:
		return nil
	}
	if c.p.Kind == auth.KindWebhook {
		// A delivery acts only through its ingestion route, which scopes
		// itself by the verified source: it is never a member anywhere.
		return forbidden("a webhook delivery cannot act in a workspace outside its ingestion route")
	}
	switch c.route.Scope {
	case ScopePath:
		id = c.r.PathValue("workspace")
	case ScopeCaller:
		id = c.r.Header.Get(WorkspaceHeader)
		if id == "" {
			switch c.p.Kind {
			case auth.KindDaemon, auth.KindRelay, auth.KindRunner:
				id = c.p.Workspace
			case auth.KindUser:
				def, err := s.defaultWorkspace(c)
				if err != nil {
					return err
				}
				id = def
			}
		}
	}
	if !validULID(id) {
		return errorf(http.StatusNotFound, sdk.CodeWorkspaceNotFound, "workspace %q does not exist", id)
	}
	ws, err := s.workspace(c, id)
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, sdk.CodeWorkspaceNotFound, "workspace %q does not exist", id)
	}
	if err != nil {
		return err
	}
	switch c.p.Kind {
	case auth.KindUser:
		role, err := s.role(c, ws.ID)
		if err != nil {
			// A support operator reaches a workspace's support operations
			// without being a member (supportGate decides what they see).
			if err := s.admitOperator(c, err); err != nil {
				return err
			}
		}
		c.role = role
	case auth.KindDaemon, auth.KindRelay, auth.KindRunner:
		if c.p.Workspace != ws.ID {
			return forbidden("this credential belongs to another workspace")
		}
	}
	c.ws = &ws
	return nil
}

// workspace reads a workspace through a short cache: nearly every request
// needs it, and it changes rarely (updates through this server drop it).
func (s *Server) workspace(c *call, id string) (store.Workspace, error) {
	now := s.opts.Now()
	if s.opts.CacheTTL > 0 {
		s.wsMu.Lock()
		e, ok := s.wsCache[id]
		s.wsMu.Unlock()
		if ok && now.Before(e.until) {
			return e.ws, nil
		}
	}
	ws, err := s.st.Workspace(c.ctx(), id)
	if err != nil || s.opts.CacheTTL <= 0 {
		return ws, err
	}
	s.wsMu.Lock()
	if len(s.wsCache) > 10000 {
		clear(s.wsCache)
	}
	s.wsCache[id] = wsEntry{ws: ws, until: now.Add(s.opts.CacheTTL)}
	s.wsMu.Unlock()
	return ws, nil
}

type wsEntry struct {
	ws    store.Workspace
	until time.Time
}

func (s *Server) forgetWorkspace(id string) {
	s.wsMu.Lock()
	delete(s.wsCache, id)
	s.wsMu.Unlock()
}

// defaultWorkspace is a user's first workspace, the scope of caller-scoped
// routes without the X-Reeve-Workspace header; cached like roles.
func (s *Server) defaultWorkspace(c *call) (string, error) {
	key := "default:" + itoa(c.p.UserID)
	now := s.opts.Now()
	gen := s.creds.generation()
	if e, ok := s.creds.get(key, now); ok {
		return e.p.Workspace, nil
	}
	ms, err := s.st.Memberships(c.ctx(), c.p.UserID)
	if err != nil {
		return "", err
	}
	if len(ms) == 0 {
		return "", forbidden("you are not a member of any workspace")
	}
	s.creds.put(key, auth.Principal{Workspace: ms[0].Workspace.ID}, nil, now, gen)
	return ms[0].Workspace.ID, nil
}

// role returns the caller's role in a workspace; 403 when not a member.
func (s *Server) role(c *call, workspaceID string) (string, error) {
	key := "role:" + workspaceID + ":" + itoa(c.p.UserID)
	now := s.opts.Now()
	gen := s.creds.generation()
	if e, ok := s.creds.get(key, now); ok {
		return e.p.Role, nil
	}
	role, err := s.st.Role(c.ctx(), workspaceID, c.p.UserID)
	if errors.Is(err, store.ErrNotFound) {
		return "", forbidden("you are not a member of this workspace")
	}
	if err != nil {
		return "", err
	}
	s.creds.put(key, auth.Principal{Role: role, Workspace: workspaceID}, nil, now, gen)
	return role, nil
}

func validULID(s string) bool {
	if len(s) != 26 {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789ABCDEFGHJKMNPQRSTVWXYZ", r) {
			return false
		}
	}
	return s[0] <= '7'
}

// credCache remembers resolved credentials and roles for a short time.
//
// With replicas (PostgreSQL), a revocation on any of them must end the
// credential everywhere at once: every drop bumps the shared credential
// generation (broadcast), whose notice makes every replica drop its whole
// cache (RunShared), and the cache is only used while the notices are
// known to arrive (trusted).
type credCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]*credEntry
	// gen counts drops. A lookup notes it before reading the store and
	// caches its answer only if no drop came in between: otherwise a read
	// that raced a revocation would put the revoked credential back.
	gen uint64
	// trusted is false while a replica may miss other replicas'
	// revocations: lookups then go to the store.
	trusted atomic.Bool
	// broadcast tells the other replicas of a drop; nil without them.
	broadcast func()
}

type credEntry struct {
	p       auth.Principal
	until   time.Time
	touched time.Time
}

func newCredCache(ttl time.Duration) *credCache {
	cc := &credCache{ttl: ttl, m: map[string]*credEntry{}}
	cc.trusted.Store(true)
	return cc
}

// shareWith makes the cache one of several replicas': untrusted until
// RunShared's listener is up, and every drop broadcast.
func (cc *credCache) shareWith(sh sharedStore, log *slog.Logger) {
	cc.trusted.Store(false)
	cc.broadcast = func() {
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		if _, err := sh.BumpGeneration(ctx, generationCredentials); err != nil {
			// The others keep what they cached until their TTL: say so.
			log.Error("tell the other replicas of a revocation", "err", err)
		}
	}
}

// setTrusted records whether other replicas' revocations reach this one.
func (cc *credCache) setTrusted(ok bool) {
	cc.trusted.Store(ok)
	if !ok {
		cc.dropAll()
	}
}

// dropAll forgets everything (another replica revoked something).
func (cc *credCache) dropAll() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.gen++
	clear(cc.m)
}

func (cc *credCache) get(key string, now time.Time) (*credEntry, bool) {
	if cc.ttl < 0 || !cc.trusted.Load() {
		return nil, false
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	e, ok := cc.m[key]
	if !ok || !now.Before(e.until) {
		return nil, false
	}
	return e, true
}

// generation is the drop count to pass to put after reading the store.
func (cc *credCache) generation() uint64 {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.gen
}

func (cc *credCache) put(key string, p auth.Principal, expires *time.Time, now time.Time, since uint64) *credEntry {
	e := &credEntry{p: p, until: now.Add(cc.ttl), touched: now}
	if expires != nil && expires.Before(e.until) {
		e.until = *expires
	}
	if cc.ttl < 0 || !cc.trusted.Load() {
		return e
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.gen != since {
		return e // a revocation landed while the caller read the store
	}
	if len(cc.m) > 50000 {
		clear(cc.m) // bounded memory beats a perfect hit rate
	}
	cc.m[key] = e
	return e
}

// drop forgets entries matching fn (after a revocation or role change),
// here and, through the shared generation, on every other replica.
func (cc *credCache) drop(fn func(key string, p auth.Principal) bool) {
	cc.mu.Lock()
	cc.gen++
	for k, e := range cc.m {
		if fn(k, e.p) {
			delete(cc.m, k)
		}
	}
	cc.mu.Unlock()
	if cc.broadcast != nil {
		cc.broadcast()
	}
}

// throttle is a per-install token bucket for /api/runtime/*.
type throttle struct {
	rate, burst float64
	mu          sync.Mutex
	buckets     map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newThrottle(rate, burst float64) *throttle {
	return &throttle{rate: rate, burst: burst, buckets: map[string]*bucket{}}
}

func (t *throttle) allow(key string, now time.Time) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.buckets[key]
	if !ok {
		if len(t.buckets) > 100000 {
			clear(t.buckets)
		}
		b = &bucket{tokens: t.burst, last: now}
		t.buckets[key] = b
	}
	b.tokens = min(t.burst, b.tokens+now.Sub(b.last).Seconds()*t.rate)
	b.last = now
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) / t.rate * float64(time.Second)), false
	}
	b.tokens--
	return 0, true
}

// runtimeThrottle limits each install's requests on /api/runtime/*. With
// replicas (PostgreSQL) the bucket is shared through the database, so N
// replicas do not allow N times the rate: a replica takes tokens from it
// a few at a time (chunk) and spends them locally for up to
// runtimeGrantTTL, so that most requests cost no write. Tokens a replica
// took but did not spend in time are lost, never granted twice: the
// shared limit holds exactly, and a busy install may see slightly less.
type runtimeThrottle struct {
	mem    *throttle // SQLite: the one process's memory
	shared store.Store
	log    *slog.Logger

	rate, burst float64
	mu          sync.Mutex
	grants      map[string]*grant
}

type grant struct {
	tokens float64
	until  time.Time
	// fetch is held while this replica takes tokens for the key from the
	// database, so that requests arriving together wait for one chunk
	// instead of each taking a chunk: otherwise 60 simultaneous requests
	// would take 60 chunks and find the shared bucket empty.
	fetch sync.Mutex
}

const (
	runtimeThrottleName = "runtime-requests"
	runtimeGrantTTL     = time.Second
)

func newRuntimeThrottle(st store.Store, rate, burst float64, log *slog.Logger) *runtimeThrottle {
	t := &runtimeThrottle{rate: rate, burst: burst, log: log}
	if sharedOf(st) != nil {
		t.shared = st
		t.grants = map[string]*grant{}
	} else {
		t.mem = newThrottle(rate, burst)
	}
	return t
}

// chunk is how many tokens a replica takes at once: a twentieth of
// the burst, at least one.
func (t *runtimeThrottle) chunk() float64 { return max(1, float64(int(t.burst/20))) }

// allow takes one token of key's bucket, or reports how long to wait. A
// database that does not answer lets the request through (it will meet
// the same database soon and answer 503 if it must).
func (t *runtimeThrottle) allow(ctx context.Context, key string, now time.Time) (time.Duration, bool) {
	if t.mem != nil {
		return t.mem.allow(key, now)
	}
	g, ok := t.spend(key, now)
	if ok {
		return 0, true
	}
	g.fetch.Lock()
	defer g.fetch.Unlock()
	// Another request may have fetched while this one waited.
	if _, ok := t.spend(key, now); ok {
		return 0, true
	}
	want := t.chunk()
	held, err := t.shared.TakeBucket(ctx, runtimeThrottleName, key, t.rate, t.burst, want, now)
	if err != nil {
		t.log.Warn("runtime throttle", "err", err)
		return 0, true
	}
	got := float64(int(min(held, want)))
	if got < 1 {
		return time.Duration((1 - held) / t.rate * float64(time.Second)), false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !now.Before(g.until) {
		g.tokens = 0 // tokens left from an expired grant are lost
	}
	g.tokens += got - 1
	g.until = now.Add(runtimeGrantTTL)
	return 0, true
}

// spend takes one token of key's live grant on this replica, and returns
// the grant (created when missing) to fetch into when there is none.
func (t *runtimeThrottle) spend(key string, now time.Time) (*grant, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.grants[key]
	if g == nil {
		if len(t.grants) > 100000 {
			clear(t.grants)
		}
		g = &grant{}
		t.grants[key] = g
	}
	if g.tokens >= 1 && now.Before(g.until) {
		g.tokens--
		return g, true
	}
	return g, false
}
