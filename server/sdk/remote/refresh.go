package remote

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/sdk"
)

// A remote client's access token expires with its relay token (10 minutes
// by default, as little as 10 seconds with reeve server --relay-token-ttl),
// and the daemon closes a channel whose token ran out. Like the web page,
// the client gets a fresh token before then and presents it in a new hello
// on the same channel, so a live channel (and its subscriptions) outlives
// its first token and a role changed on the control plane counts from the
// next refresh.

// accessExpiry reads the exp of an access token (a JWT). It does not
// verify the token: the daemon does; the client only plans its refresh.
func accessExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var c struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(b, &c) != nil || c.Exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(c.Exp, 0), true
}

// refreshAt is when an access token obtained at got and expiring at
// expires is replaced: two thirds into its life, up to a tenth of the life
// earlier at random, and never sooner than a second after it was obtained.
func refreshAt(got, expires time.Time, jitter float64) time.Time {
	life := expires.Sub(got)
	wait := life*2/3 - time.Duration(jitter*float64(life/10))
	return got.Add(max(wait, time.Second))
}

// keepAccessFresh presents a fresh access token on ch before the current
// one expires, until the channel ends. A failure to get one is tried
// again with backoff (1 s doubling to 30 s, and more often as expiry
// nears); if the token runs out anyway the daemon closes the channel and
// the client reconnects with a fresh one. A refusal (ErrSignInAgain: the
// credentials were revoked, or the user is no longer a member) is not
// tried again: it ends the channel and the client with that error. An
// AccessToken source that returns the same token again ends the refreshes.
func (c *Client) keepAccessFresh(ch *channel, opts Options, got time.Time) {
	cur := ch.access
	exp, ok := accessExpiry(cur)
	if !ok || !exp.After(got) {
		return // no access token, not one this client can read, or one already spent
	}
	at := refreshAt(got, exp, rand.Float64())
	backoff := time.Second
	for {
		t := time.NewTimer(time.Until(at))
		select {
		case <-ch.done:
			t.Stop()
			return
		case <-t.C:
		}
		tok, nexp, err := c.freshAccess(ch.ctx, opts)
		if err == nil && tok != cur {
			hello, _ := json.Marshal(wire.Hello{Type: wire.TypeHello, ProtocolVersion: wire.ProtocolVersion, Version: Version, AccessToken: tok})
			if err = ch.WriteFrame(ch.ctx, hello); err != nil {
				return // the channel dropped: the reconnection gets a fresh token
			}
			c.mu.Lock()
			c.refreshes++
			c.mu.Unlock()
			cur, got, exp = tok, time.Now(), nexp
			at, backoff = refreshAt(got, exp, rand.Float64()), time.Second
			continue
		}
		if err == nil {
			return // a source that hands out one fixed token cannot refresh it
		}
		if errors.Is(err, ErrSignInAgain) {
			if opts.Logf != nil {
				opts.Logf("remote: %v", err)
			}
			c.refuse(err)
			ch.fail(err)
			return
		}
		retry := max(time.Second, min(backoff, time.Until(exp)/2))
		backoff = min(2*backoff, maxRefreshBackoff)
		if opts.Logf != nil && ch.ctx.Err() == nil {
			opts.Logf("remote: refresh the access token: %v; trying again in %s", err, retry.Round(time.Millisecond))
		}
		at = time.Now().Add(retry)
	}
}

// maxRefreshBackoff bounds the wait between failed refreshes.
const maxRefreshBackoff = 30 * time.Second

// ErrSignInAgain ends a client whose credentials the control plane
// refused (401 or 403 for its relay or access token: a revoked token, a
// user removed from the workspace): dialling or refreshing again cannot
// cure it, only new credentials can.
var ErrSignInAgain = errors.New("the control plane refused this client's credentials (revoked, or no longer a member of the workspace); sign in again")

// refusedCredentials marks err as ErrSignInAgain when the control plane
// answered it with 401 or 403.
func refusedCredentials(err error) error {
	var ae *sdk.APIError
	if errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden) {
		return fmt.Errorf("%w: %w", ErrSignInAgain, err)
	}
	return err
}

// refuse remembers a refusal, so that no later dial asks again.
func (c *Client) refuse(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refused == nil {
		c.refused = err
	}
}

// freshAccess gets a new access token from the client's token sources.
func (c *Client) freshAccess(ctx context.Context, opts Options) (string, time.Time, error) {
	_, tok, err := tokens(ctx, opts, true)
	if err != nil {
		return "", time.Time{}, err
	}
	exp, ok := accessExpiry(tok)
	if !ok {
		return "", time.Time{}, errors.New("the token source gave no readable access token")
	}
	return tok, exp, nil
}

// tokens gets a relay token and the access token to present from the
// client's token sources, for a dial or (fresh) a refresh, which must not
// be given a cached token. A 401 or 403 is ErrSignInAgain.
func tokens(ctx context.Context, opts Options, fresh bool) (relay, access string, err error) {
	held := &accessHeld{fresh: fresh}
	tctx := context.WithValue(context.WithValue(ctx, targetKey{}, opts.RuntimeTargetID), accessKey{}, held)
	if relay, err = opts.Token(tctx); err != nil {
		return "", "", fmt.Errorf("get a relay token: %w", refusedCredentials(err))
	}
	access = held.token
	if opts.AccessToken != nil {
		if access, err = opts.AccessToken(tctx); err != nil {
			return "", "", fmt.Errorf("get an access token: %w", refusedCredentials(err))
		}
	}
	return relay, access, nil
}

// Refreshes counts the access tokens presented again on live channels.
func (c *Client) Refreshes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refreshes
}
