package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"reeve.dev/reeve/server/store"
)

// ErrBadLogin is an unknown, used or expired login code.
var ErrBadLogin = errors.New("login code is not valid")

// LinkStore is what the login-link provider needs from the store.
type LinkStore interface {
	CreateLoginLink(ctx context.Context, l store.LoginLink) error
	ConsumeLoginLink(ctx context.Context, hash string, now time.Time) (int64, error)
}

// LinkProvider is the embedded identity provider: an operator (or the
// first start) issues a one-time login link; the sign-in page it opens
// spends the code with a POST. An OIDC provider would implement the same
// Start/Finish pair.
//
// The link is the sign-in page, never the API callback: a GET of either
// never spends a code, so a link scanner or a second click cannot lock the
// person out, and the browser never shows a raw bearer token.
type LinkProvider struct {
	Store LinkStore
	// BaseURL is the origin of the sign-in page (the pages of `reeve
	// server`), which the issued links open.
	BaseURL string
	// TTL of a link; default 24 hours.
	TTL time.Duration
	Now func() time.Time
}

// Name identifies the provider in the login answer.
func (p *LinkProvider) Name() string { return "link" }

func (p *LinkProvider) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Issue creates a one-time login link for a user and returns its URL: the
// sign-in page with the code.
func (p *LinkProvider) Issue(ctx context.Context, userID int64) (string, error) {
	code, err := NewToken(PrefixLogin)
	if err != nil {
		return "", err
	}
	ttl := p.TTL
	if ttl <= 0 {
		ttl = 24 * time.Hour
	}
	now := p.now().UTC()
	if err := p.Store.CreateLoginLink(ctx, store.LoginLink{Hash: Hash(code), UserID: userID, CreatedAt: now, ExpiresAt: now.Add(ttl)}); err != nil {
		return "", fmt.Errorf("issue login link: %w", err)
	}
	return SignInURL(p.BaseURL, code), nil
}

// SignInURL is the sign-in page of the pages at origin, opened with a
// login code.
func SignInURL(origin, code string) string {
	return strings.TrimRight(origin, "/") + "/login?code=" + url.QueryEscape(code)
}

// Start explains how to sign in: links are handed out by an operator, so
// there is nothing to redirect to.
func (p *LinkProvider) Start(http.ResponseWriter, *http.Request) (map[string]any, bool, error) {
	return map[string]any{
		"provider": p.Name(),
		"message":  "sign in by opening a one-time login link; an operator prints one with `reeve server login-link --email EMAIL` (the first start prints one too). API clients exchange the code with POST /api/auth/callback {\"code\"}",
	}, false, nil
}

// Finish consumes the code of the callback request.
func (p *LinkProvider) Finish(ctx context.Context, r *http.Request) (int64, error) {
	return p.Redeem(ctx, r.URL.Query().Get("code"))
}

// Redeem spends a one-time login code and returns its user. It is the
// only way a code is spent, and only a POST reaches it.
func (p *LinkProvider) Redeem(ctx context.Context, code string) (int64, error) {
	if !strings.HasPrefix(code, PrefixLogin) {
		return 0, ErrBadLogin
	}
	uid, err := p.Store.ConsumeLoginLink(ctx, Hash(code), p.now())
	if errors.Is(err, store.ErrNotFound) {
		return 0, ErrBadLogin
	}
	return uid, err
}
