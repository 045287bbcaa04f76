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
// first start) issues a one-time login link; opening it signs the user in.
// An OIDC provider would implement the same Start/Finish pair.
type LinkProvider struct {
	Store LinkStore
	// BaseURL is where the callback is served.
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

// Issue creates a one-time login link for a user and returns its URL.
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
	return strings.TrimRight(p.BaseURL, "/") + "/api/auth/callback?code=" + url.QueryEscape(code), nil
}

// Start explains how to sign in: links are handed out by an operator, so
// there is nothing to redirect to.
func (p *LinkProvider) Start(http.ResponseWriter, *http.Request) (map[string]any, bool, error) {
	return map[string]any{
		"provider": p.Name(),
		"message":  "sign in by opening a one-time login link; an operator creates one with `reeve server token create` or from the first-start output",
	}, false, nil
}

// Finish consumes the code of the callback request.
func (p *LinkProvider) Finish(ctx context.Context, r *http.Request) (int64, error) {
	code := r.URL.Query().Get("code")
	if !strings.HasPrefix(code, PrefixLogin) {
		return 0, ErrBadLogin
	}
	uid, err := p.Store.ConsumeLoginLink(ctx, Hash(code), p.now())
	if errors.Is(err, store.ErrNotFound) {
		return 0, ErrBadLogin
	}
	return uid, err
}
